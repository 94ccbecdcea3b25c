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
import shutil
from importlib import resources
from pathlib import Path

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


def write_verifiers_package(tasks: TaskSet, output_dir: Path) -> Path:
    """Write the package for ``tasks`` into ``output_dir/envfactory_env`` (replacing what an earlier export
    wrote there).

    Args:
        tasks: the served task set (:func:`envfactory_assets.serving.tasks.load_task_set`); the server the package
            talks to must serve the same version.
        output_dir: the folder to write into (created when missing).

    Returns:
        The package's folder (``pip install`` it into verifiers' virtualenv).

    Raises:
        ValueError: ``tasks`` has no row.
    """
    if not tasks.rows:
        raise ValueError("no RL row to export: the task set is empty")
    target = Path(output_dir) / PACKAGE_DIR
    if target.exists():
        shutil.rmtree(target)
    template = resources.files("envfactory_assets.exports").joinpath("verifiers_env")
    for name in TEMPLATE_FILES:
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(template.joinpath(name).read_bytes())
    lines = []
    for task_id in sorted(tasks.rows):
        row = tasks.episode_row(task_id)
        split = "held_out" if row.get("split") in ("held_out", "validation") else "train"
        lines.append(json.dumps({"id": task_id, "split": split, "prompt": row["prompt"], "tools": row["tools"]}))
    (target / PACKAGE_DIR / TASKS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (target / PACKAGE_DIR / "DATASET_VERSION").write_text(tasks.version + "\n", encoding="utf-8")
    return target
