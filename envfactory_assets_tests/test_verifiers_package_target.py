"""``export-verifiers`` replaces only a package an earlier export wrote: never a user's folder of the same name, never
the project's own template, and an earlier package stays whole until the new one is written."""

from __future__ import annotations

import pytest

from envfactory_assets.exports.verifiers_env_package import TEMPLATE_DIR, write_verifiers_package
from envfactory_assets.serving.tasks import TaskSet


def _tasks(text: str) -> TaskSet:
    row = {
        "id": "t1",
        "split": "train",
        "prompt": [{"role": "user", "content": text}],
        "tools": [],
        "initial_state": {},
        "final_state": {},
    }
    return TaskSet(rows={"t1": row}, environments={})


def test_a_folder_no_export_wrote_is_left_alone(tmp_path):
    mine = tmp_path / "o5" / "envfactory_env" / "mywork.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("my work")
    with pytest.raises(ValueError, match="was not written by export-verifiers"):
        write_verifiers_package(_tasks("hello"), tmp_path / "o5")
    assert mine.read_text() == "my work"
    assert sorted(p.name for p in (tmp_path / "o5").iterdir()) == ["envfactory_env"]


def test_the_template_is_never_an_output(tmp_path):
    before = sorted(p.relative_to(TEMPLATE_DIR) for p in TEMPLATE_DIR.rglob("*.py"))
    with pytest.raises(ValueError, match="package template"):
        write_verifiers_package(_tasks("hello"), TEMPLATE_DIR)
    assert sorted(p.relative_to(TEMPLATE_DIR) for p in TEMPLATE_DIR.rglob("*.py")) == before
    assert not (TEMPLATE_DIR / "envfactory_env" / "envfactory_env").exists()


def test_an_earlier_export_is_replaced_whole(tmp_path):
    first = write_verifiers_package(_tasks("first"), tmp_path)
    second = write_verifiers_package(_tasks("second"), tmp_path)
    assert second == first == tmp_path / "envfactory_env"
    assert "second" in (second / "envfactory_env" / "tasks.jsonl").read_text()
    assert (second / "envfactory_env" / "DATASET_VERSION").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["envfactory_env"]  # no staging folder left


def test_a_tool_name_no_model_api_accepts_is_refused_and_nothing_is_written(tmp_path):
    tasks = _tasks("hello")
    tasks.rows["t1"]["tools"] = b'[{"type": "function", "function": {"name": "send mail", "parameters": {}}}]'
    with pytest.raises(ValueError, match=r"rl row t1: tool name 'send mail' is not a function name"):
        write_verifiers_package(tasks, tmp_path)
    assert list(tmp_path.iterdir()) == []
