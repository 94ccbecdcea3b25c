"""``envfactory export-verifiers``: the RL rows as an installable ``verifiers`` (0.4.0) environment package.

The package (the files under ``verifiers_env/``, copied, plus ``tasks.jsonl``) is a verifiers taskset plugin:
``vf-eval envfactory-env`` or its ``load_environment()`` builds a ``verifiers.v1`` environment whose dataset is the
RL rows, whose tools run in the project's sandbox and whose reward is the project's. It does not import this
project: verifiers pins ``mcp==2.0.0`` and ``openai<3``, so it lives in a virtualenv of its own, and reaches the
project over HTTP, through a running ``envfactory serve-openenv`` (one episode per rollout; docs/serving.md says
why and which commands a user runs).

``tasks.jsonl`` holds, per served row, only what an agent sees: ``id``, ``split``, ``prompt`` (OpenAI chat
messages), ``tools`` (OpenAI function tools). The gold calls and states stay on the server.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from envfactory_assets.exports.formats import check_tool_names
from envfactory_assets.serving.tasks import TaskSet

PACKAGE_DIR = "envfactory_env"
"""The name of the package's folder under the export directory, and of its Python package."""
TASKS_FILE = "tasks.jsonl"
TEMPLATE_FILES = (
    "pyproject.toml",
    "envfactory_env/__init__.py",
    "envfactory_env/taskset.py",
    "envfactory_env/harness.py",
    "envfactory_env/agent_loop.py",
)
VERSION_FILE = f"{PACKAGE_DIR}/DATASET_VERSION"
"""The file every export writes last, under the package's folder: a folder without it was not written by an
export, and is never replaced."""
TEMPLATE_DIR = Path(__file__).resolve().parent / "verifiers_env"
"""The package's template, shipped with the project; an export never writes into it."""


def _check_replaceable(target: Path) -> None:
    """Refuse to write the package at ``target`` unless it is new or a folder an earlier export wrote."""
    resolved = target.resolve()
    if resolved.is_relative_to(TEMPLATE_DIR) or TEMPLATE_DIR.is_relative_to(resolved):
        raise ValueError(
            f"{target} is the package template of the project ({TEMPLATE_DIR}) or holds it; choose another --output"
        )
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise ValueError(f"{target} exists and is not a folder; it was left as it is; choose another --output")
    if target.exists() and not (target / VERSION_FILE).is_file():
        raise ValueError(
            f"{target} exists and was not written by export-verifiers (it has no {VERSION_FILE}); it was left as "
            "it is: move it away or choose another --output"
        )


def write_verifiers_package(tasks: TaskSet, output_dir: Path) -> Path:
    """Write the package for ``tasks`` into ``output_dir/envfactory_env``, replacing what an earlier export wrote
    there (a folder holding ``envfactory_env/DATASET_VERSION``) and nothing else.

    The package is written in a folder beside the target and renamed into place once complete; the earlier one
    is removed only then.

    Args:
        tasks: the served task set (:func:`envfactory_assets.serving.tasks.load_task_set`); the server the package
            talks to must serve the same version.
        output_dir: the folder to write into (created when missing).

    Returns:
        The package's folder (``pip install`` it into verifiers' virtualenv).

    Raises:
        ValueError: ``tasks`` has no row; ``output_dir/envfactory_env`` exists but is not a folder an export
            wrote (no ``envfactory_env/DATASET_VERSION``), or is or holds the project's package template; a row's
            tool name is not a function name a model API accepts
            (:func:`~envfactory_assets.exports.formats.check_tool_names`; nothing is written).
    """
    if not tasks.rows:
        raise ValueError("no RL row to export: the task set is empty")
    output_dir = Path(output_dir)
    target = output_dir / PACKAGE_DIR
    _check_replaceable(target)
    output_dir.mkdir(parents=True, exist_ok=True)
    # written beside the target and renamed into place: an earlier package stays whole until the new one is
    staging = Path(tempfile.mkdtemp(prefix=f".{PACKAGE_DIR}.new-", dir=output_dir))
    try:
        _write_package(tasks, staging)
        if target.exists():
            _check_replaceable(target)
            old = Path(tempfile.mkdtemp(prefix=f".{PACKAGE_DIR}.old-", dir=output_dir))
            os.replace(target, old / PACKAGE_DIR)
            try:
                os.replace(staging, target)
            except OSError:
                os.replace(old / PACKAGE_DIR, target)  # the earlier package back, whole
                old.rmdir()
                raise
            shutil.rmtree(old)
        else:
            os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return target


def _write_package(tasks: TaskSet, target: Path) -> None:
    template = resources.files("envfactory_assets.exports").joinpath("verifiers_env")
    for name in TEMPLATE_FILES:
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(template.joinpath(name).read_bytes())
    lines = []
    for task_id in sorted(tasks.rows):
        row = tasks.episode_row(task_id)
        check_tool_names(row["tools"], f"rl row {task_id}")
        split = "held_out" if row.get("split") in ("held_out", "validation") else "train"
        lines.append(json.dumps({"id": task_id, "split": split, "prompt": row["prompt"], "tools": row["tools"]}))
    (target / PACKAGE_DIR / TASKS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (target / VERSION_FILE).write_text(tasks.version + "\n", encoding="utf-8")
