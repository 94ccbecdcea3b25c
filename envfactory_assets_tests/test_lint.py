"""The tree is clean under ruff, lint and format, as ``[tool.ruff]`` in pyproject.toml configures it.

ruff is a pinned test dependency; ``python -m ruff`` runs the binary that pip installed with it. ``.gitignore``d
paths (the virtualenv, ``ENVFACTORY_HOME``) are skipped by ruff itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Suppressions in the tree when the linter was adopted; a new one must replace an old one.
NOQA_BUDGET = 37
NOQA = re.compile(r"#\s*noqa\b", re.IGNORECASE)


@pytest.mark.parametrize("command", [("check",), ("format", "--check")], ids=["lint", "format"])
def test_the_tree_is_ruff_clean(command):
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_the_configuration_keeps_the_rule_sets_and_no_file_wide_ignores():
    import tomllib

    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert {"E", "W", "F", "I", "B", "UP"} <= set(ruff["lint"]["select"])
    assert "per-file-ignores" not in ruff["lint"] and "exclude" not in ruff and "extend-exclude" not in ruff
    files = [p for p in ROOT.rglob("*.py") if not ({".venv", ".envfactory"} & set(p.relative_to(ROOT).parts))]
    assert not [p for p in files if re.search(r"#\s*ruff\s*:\s*noqa", p.read_text(encoding="utf-8"))]


def test_suppressions_do_not_grow():
    files = [p for p in ROOT.rglob("*.py") if not ({".venv", ".envfactory"} & set(p.relative_to(ROOT).parts))]
    marks = sum(len(NOQA.findall(p.read_text(encoding="utf-8"))) for p in files)
    assert marks <= NOQA_BUDGET, f"{marks} noqa marks, the budget is {NOQA_BUDGET}"
