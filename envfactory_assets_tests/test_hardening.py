"""Regression tests for defects found by feeding hostile inputs to the newer features.

Each test states the input that used to misbehave and what it did (hang, crash with a raw exception,
silent data change); the inputs are real files or real model-output text, run through the real code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from envfactory_assets.curation import CurationError, load_curation, set_exclusion
from envfactory_assets.sources.resource_kinds import user_folder_rows
from envfactory_assets.sources.safe_yaml import UnsafeYamlError, load_untrusted_yaml
from envfactory_assets.tooluse.tool_calls import parse_tool_calls
from envfactory_assets_tests.fixture_environments import FIXTURES


def _alias_bomb(indent: str = "") -> str:
    """Nine levels of nine aliases: 9**9 (387 million) strings once expanded, 10 lines of YAML."""
    lines = [f"{indent}- &l0 [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 10):
        refs = ", ".join([f"*l{level - 1}"] * 9)
        lines.append(f"{indent}- &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


# --- untrusted YAML -------------------------------------------------------------------------------------


def test_alias_bomb_in_curation_file_is_refused_not_expanded(tmp_path: Path) -> None:
    # used to take about a minute (JSON Schema validation expanded the aliases) and then print the value
    path = tmp_path / "curation.yaml"
    path.write_text("exclusions:\n" + _alias_bomb(" "))
    with pytest.raises(CurationError, match="alias") as info:
        load_curation(path)
    assert str(path) in str(info.value) and len(str(info.value)) < 600


def test_curation_file_with_repeated_key_is_refused(tmp_path: Path) -> None:
    # the second "exclusions" used to replace the first silently
    path = tmp_path / "curation.yaml"
    path.write_text("exclusions:\n - {kind: tool, id: a.b, reason: r}\nexclusions: []\n")
    with pytest.raises(CurationError, match="'exclusions' appears twice"):
        load_curation(path)


def test_unreadable_curation_paths_raise_curation_error(tmp_path: Path) -> None:
    # a folder in place of the file used to raise a bare IsADirectoryError
    folder = tmp_path / "curation.yaml"
    folder.mkdir()
    with pytest.raises(CurationError, match="is a folder"):
        load_curation(folder)
    with pytest.raises(CurationError, match="is a folder"):
        set_exclusion(folder, "tool", "env.tool", "reason")


def test_python_tags_and_invalid_files_leave_the_stored_curation_untouched(tmp_path: Path) -> None:
    path = tmp_path / "curation.yaml"
    path.write_text("exclusions: !!python/object/apply:os.system ['echo pwned']\n")
    before = path.read_bytes()
    with pytest.raises(CurationError, match="not valid YAML"):
        set_exclusion(path, "tool", "env.tool", "reason")
    assert path.read_bytes() == before


def test_untrusted_yaml_keeps_ordinary_anchors_and_merge_keys() -> None:
    text = "base: &b {type: string}\nname: *b\nother:\n  <<: *b\n  format: date\n"
    assert load_untrusted_yaml(text) == {
        "base": {"type": "string"},
        "name": {"type": "string"},
        "other": {"type": "string", "format": "date"},
    }
    assert load_untrusted_yaml("") is None


def test_untrusted_yaml_refuses_recursive_alias_and_oversized_expansion() -> None:
    with pytest.raises(UnsafeYamlError, match="recursive alias"):
        load_untrusted_yaml("a: &a [1, *a]\n")
    with pytest.raises(UnsafeYamlError, match="more than 80 nodes"):
        load_untrusted_yaml(
            "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n", max_nodes=80
        )
    with pytest.raises(yaml.YAMLError):
        load_untrusted_yaml("!!python/name:os.system\n")


def test_alias_bomb_in_user_folder_is_a_rejection_naming_the_file(tmp_path: Path) -> None:
    # a bomb under ``paths`` passes the top-level check of a user document, then reached the scanner
    folder = tmp_path / "user_resources"
    folder.mkdir()
    document = (
        "openapi: 3.0.0\ninfo: {title: Bomb, version: '1'}\npaths:\n  /a:\n    get:\n"
        "      parameters:\n" + _alias_bomb("        ")
    )
    (folder / "bomb.yaml").write_text(document)
    (folder / "bookshop.json").write_bytes((FIXTURES / "bookshop.json").read_bytes())
    accepted, rejected = user_folder_rows(folder)
    assert [r["path"] for r in accepted] == ["bookshop.json"]
    assert [(r["path"], r["reason"]) for r in rejected] == [("bomb.yaml", "unparseable")]
    assert "bomb.yaml" in rejected[0]["detail"] and "alias" in rejected[0]["detail"]


# --- model output -----------------------------------------------------------------------------------------


def test_fenced_output_padded_with_blanks_parses_in_linear_time() -> None:
    # the fence regex backtracked cubically: 2,000 blanks took 7 s, 20,000 did not finish in minutes
    text = "```json\n" + json.dumps({"name": "list_books", "arguments": {}}) + " " * 50_000 + "\n```"
    result = parse_tool_calls(text)
    assert result.calls == [{"name": "list_books", "arguments": {}}]
    degenerate = parse_tool_calls("```json" + " " * 50_000 + "x")
    assert degenerate.calls == [] and degenerate.content.endswith("x")


def test_fence_unwrapping_keeps_its_meaning() -> None:
    call = {"name": "get_book", "arguments": {"book_id": "b1"}}
    for text in (f"```json\n{json.dumps(call)}\n```", f"```{json.dumps(call)}```", f"```json {json.dumps([call])} ```"):
        assert parse_tool_calls(text).calls == [call], text
    assert parse_tool_calls("```python\nprint(1)\n```").calls == []


@pytest.mark.parametrize("number", ["1e999", "-1e400", "1.5e309"])
def test_overflowing_json_numbers_are_malformed_not_infinity(number: str) -> None:
    # ``1e999`` used to decode to float('inf') and reach the environment as an argument
    result = parse_tool_calls(f'<tool_call>{{"name": "set_price", "arguments": {{"price": {number}}}}}</tool_call>')
    assert result.calls == [] and result.format_errors == 1
    whole = parse_tool_calls(f'{{"name": "set_price", "arguments": {{"price": {number}}}}}')
    assert whole.calls == []
    fine = parse_tool_calls('<tool_call>{"name": "set_price", "arguments": {"price": 1e300}}</tool_call>')
    assert fine.calls == [{"name": "set_price", "arguments": {"price": 1e300}}]


# --- exports ----------------------------------------------------------------------------------------------


def test_dataset_card_escapes_licence_text_from_source_documents() -> None:
    from envfactory_assets.exports.stage import dataset_card

    hostile = "MIT | x |\n\n# Injected heading <img src=x onerror=alert(1)>"
    manifest = {
        "version": "exp_1",
        "allow": [],
        "dropped": {"sft": 0, "rl": 0},
        "files": {},
        "licences": [{"name": hostile, "url": "https://example.org/l|x", "sft_rows": 3, "rl_rows": 1}],
    }
    card = dataset_card(manifest)
    row = [line for line in card.splitlines() if "Injected" in line]
    assert len(row) == 1 and row[0].endswith("| 3 | 1 |")  # still one table row of four cells
    assert row[0].count(" | ") == 3 and "<img" not in card and "\n# Injected" not in card


def test_blank_licence_allow_list_entry_is_refused_before_writing(tmp_path: Path) -> None:
    # [""] used to count as an allow-list that matches no licence: every row silently dropped
    from envfactory_assets.exports.stage import build_exports

    with pytest.raises(ValueError, match="allowed_licences has blank"):
        build_exports([], [], {}, tmp_path / "exports", allow=["MIT", "  "])
    assert not (tmp_path / "exports").exists()


# --- BFCL safe executor -----------------------------------------------------------------------------------


def _math_task():
    bfcl = pytest.importorskip("envfactory_assets.evaluation.bfcl")
    pytest.importorskip("bfcl_eval")
    pytest.importorskip("mpmath")
    return bfcl, next(t for t in bfcl.load_tasks() if "MathAPI" in t.involved_classes)


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("power", {"base": 10, "exponent": 10_000_000}),  # took 12 s in one uninterruptible C call
        ("square_root", {"number": 2, "precision": 10_000_000}),
        ("logarithm", {"value": 10, "base": 3, "precision": 10_000_000}),
        ("add", {"a": 10**400, "b": 1}),
        ("mean", {"numbers": [1, 2, 2**60]}),
    ],
)
def test_bfcl_model_call_with_unbounded_cost_is_refused(name: str, arguments: dict) -> None:
    bfcl, task = _math_task()
    episode = bfcl.BFCLEpisode(task)
    text = episode.call(name, arguments)
    assert text.startswith("Error during execution: refused:") and name in text
    assert episode.n_malformed == 1 and episode.model.results == []


def test_bfcl_argument_bounds_admit_every_ground_truth_call() -> None:
    bfcl, _ = _math_task()
    for task in bfcl.load_tasks():
        for turn in task.ground_truth:
            for text in turn:
                name, args, kwargs = bfcl.parse_python_call(text)
                bfcl.check_argument_bounds(name, args, kwargs)  # raises UnsafeCall if a bound were too tight


def test_bfcl_model_calls_never_reach_private_or_builtin_names() -> None:
    bfcl, task = _math_task()
    episode = bfcl.BFCLEpisode(task)
    for name in ("__import__", "eval", "_load_scenario", "__class__", "__init__", "state", "execute", "os.system"):
        assert episode.call(name, {}).startswith("Error during execution: refused: no offered function")
    assert episode.n_malformed == 8
    assert episode.call("add", {"a": 2, "b": 3}) == json.dumps({"result": 5})


# --- GRPO task environment class ---------------------------------------------------------------------------


def _tool(name: str, parameters: object = None, description: object = "d") -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": parameters if parameters is not None else {"type": "object", "properties": {}},
        },
    }


def test_full_width_tool_name_cannot_shadow_reset() -> None:
    # "ｒｅｓｅｔ" is a Python identifier that used to become a second public method next to reset
    from envfactory_assets.tooluse.task_environment import environment_class

    with pytest.raises(ValueError, match="cannot be a public method"):
        environment_class([_tool("ｒｅｓｅｔ")])


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        (_tool("get_book", {"type": "object", "properties": ["book_id"]}), "parameters must be a JSON Schema"),
        (_tool("get_book", "book_id: string"), "parameters must be a JSON Schema"),
        (_tool("get_book", description=5), "description must be text"),
        (_tool("get_book", {"type": "object", "properties": {"self": {"type": "string"}}}), "named 'self'"),
        (_tool("get_book", {"type": "object", "properties": {"ｉｄ": {"type": "string"}}}), "not an ASCII"),
    ],
)
def test_malformed_tool_specs_get_errors_naming_the_tool(tool: dict, message: str) -> None:
    # these used to raise a bare TypeError/AttributeError, or inspect's "duplicate parameter name: 'self'"
    from envfactory_assets.tooluse.task_environment import environment_class

    with pytest.raises(ValueError, match=message) as info:
        environment_class([tool])
    assert "get_book" in str(info.value)


# --- trajectory viewer -------------------------------------------------------------------------------------


def test_viewer_fence_outlasts_any_backtick_run_and_tolerates_missing_status() -> None:
    from envfactory_assets.viewer import render_trajectory

    raw = {
        "id": "traj_1",
        "status": None,
        "turns": [
            {
                "query": "q",
                "calls": [
                    {"name": "note", "env_id": "e", "arguments": {"text": "a ```` b ````` c"}, "output": {"ok": True}}
                ],
            }
        ],
    }
    markdown = render_trajectory(raw)  # status None used to raise TypeError
    fence_lines = [line for line in markdown.splitlines() if line.startswith("`")]
    opening = fence_lines[0].removesuffix("json")
    assert set(opening) == {"`"} and len(opening) == 6  # longer than the 5-tick run inside the value
    assert fence_lines[1] == opening and "- **status**: ?" in markdown


# --- evaluation settings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"n_bfcl": -2},
        {"n_synthetic": -1},
        {"seeds": ()},
        {"max_tool_rounds": 0},
        {"max_tools": -3},
    ],
)
def test_out_of_range_evaluation_settings_are_refused(changes: dict) -> None:
    # n_bfcl: -2 used to run 198 of the 200 BFCL tasks (load_tasks sliced [:-2])
    from envfactory_assets.evaluation.run import EvalSpec

    with pytest.raises(ValueError, match=next(iter(changes))):
        EvalSpec(**changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"temperature": -0.5},
        {"temperature": float("nan")},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"max_new_tokens": 0},
        {"batch_size": -4},
        {"max_prompt_tokens": 0},
    ],
)
def test_out_of_range_sampling_settings_are_refused(changes: dict) -> None:
    from envfactory_assets.evaluation.model_policy import SamplingSpec

    with pytest.raises(ValueError, match=next(iter(changes))):
        SamplingSpec(**changes)


def test_bfcl_task_count_must_not_be_negative() -> None:
    bfcl, _ = _math_task()
    with pytest.raises(ValueError, match="n=-2"):
        bfcl.load_tasks(-2)
    assert len(bfcl.load_tasks(0)) == 0 and len(bfcl.load_tasks(3)) == 3


# --- MCP tool lists ---------------------------------------------------------------------------------------


def test_deeply_nested_tool_list_is_a_rejection_not_a_crash(tmp_path: Path) -> None:
    # 600 levels (inside the JSON parser's limit) used to crash user_folder_rows with orjson's
    # "TypeError: Recursion limit reached", failing the whole source stage for one file
    schema: dict = {"type": "string"}
    for _ in range(300):
        schema = {"type": "object", "properties": {"a": schema}}
    document = {
        "format": "envfactory.mcp_tool_list/1",
        "server": {"name": "notes"},
        "package": {"name": "notes", "version": "1", "license": "MIT"},
        "tools": [{"name": "create_notes", "input_schema": schema}],
    }
    folder = tmp_path / "user_resources"
    folder.mkdir()
    (folder / "deep.json").write_bytes(json.dumps(document).encode())
    (folder / "bookshop.json").write_bytes((FIXTURES / "bookshop.json").read_bytes())
    accepted, rejected = user_folder_rows(folder)
    assert [r["path"] for r in accepted] == ["bookshop.json"]
    assert [(r["path"], r["reason"]) for r in rejected] == [("deep.json", "invalid_tool_list")]
    assert "deep.json" in rejected[0]["detail"] and "nested more than" in rejected[0]["detail"]


def test_tool_list_written_as_yaml_gets_a_clear_rejection(tmp_path: Path) -> None:
    # used to be reported as "not JSON (invalid literal, expected 'true' ...)"
    folder = tmp_path / "user_resources"
    folder.mkdir()
    (folder / "notes.yaml").write_text("format: envfactory.mcp_tool_list/1\ntools: []\n")
    accepted, rejected = user_folder_rows(folder)
    assert accepted == []
    assert [(r["path"], r["reason"]) for r in rejected] == [("notes.yaml", "invalid_tool_list")]
    assert "must be JSON files" in rejected[0]["detail"]


def test_cli_output_into_a_closed_pipe_ends_quietly():
    """``envfactory lineage ... | head`` used to end with a BrokenPipeError traceback."""
    import subprocess
    import sys

    script = (
        "import sys\nfrom envfactory_assets import cli\n"
        "def long_output(args):\n    for i in range(200_000):\n        print('line', i)\n    return 0\n"
        "cli.cmd_status = long_output\nsys.exit(cli.main(['status']))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()  # the reader goes away, as `head` does
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr


def test_a_killed_cli_run_does_not_block_the_next_one_on_the_store_pool(tmp_path):
    """A run whose process died keeps its pool slot; the next `envfactory run` releases it (and only CLI runs)."""
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun

    from envfactory_assets.cli import release_abandoned_runs
    from envfactory_assets.defs.resources import STORE_POOL
    from envfactory_assets.runner.progress_bar import RUN_TAG

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        storage = instance.event_log_storage
        storage.set_concurrency_slots(STORE_POOL, 1)
        killed = DagsterRun(
            job_name="__ephemeral_asset_job__",
            run_id="a" * 36,
            status=dg.DagsterRunStatus.STARTED,
            tags={RUN_TAG: "token"},
        )
        from_ui = DagsterRun(job_name="__ephemeral_asset_job__", run_id="b" * 36, status=dg.DagsterRunStatus.STARTED)
        instance.add_run(killed)
        instance.add_run(from_ui)
        assert storage.claim_concurrency_slot(STORE_POOL, killed.run_id, "checkpoints").is_claimed
        assert not storage.claim_concurrency_slot(STORE_POOL, "c" * 36, "checkpoints").is_claimed  # blocked

        assert release_abandoned_runs(instance) == [killed.run_id]
        assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(from_ui.run_id).status == dg.DagsterRunStatus.STARTED
        assert storage.get_concurrency_info(STORE_POOL).active_slot_count == 0
        assert release_abandoned_runs(instance) == []


def test_cli_reports_a_broken_pipe_that_is_not_its_own_output():
    """A BrokenPipeError from elsewhere (a worker or server subprocess that died) used to end the command
    quietly with status 141 as if the reader of stdout had gone away, hiding the failure."""
    import subprocess
    import sys

    script = (
        "import sys\nfrom envfactory_assets import cli\n"
        "def dead_worker(args):\n    print('started')\n    raise BrokenPipeError(32, 'worker pipe')\n"
        "cli.cmd_status = dead_worker\nsys.exit(cli.main(['status']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode not in (0, 141) and proc.stdout == b"started\n"
    assert b"BrokenPipeError" in proc.stderr and b"worker pipe" in proc.stderr


@pytest.mark.parametrize(
    "spec, changes",
    [
        ("grpo", {"max_steps": 2.5}),
        ("grpo", {"num_generations": "4"}),
        ("grpo", {"temperature": "hot"}),
        ("grpo", {"beta": True}),
        ("sft", {"max_steps": 1.5}),
        ("sft", {"max_length": "1024"}),
        ("sampling", {"prefix_cache_tokens": 0.5}),
        ("sampling", {"batch_size": 2.5}),
        ("sampling", {"temperature": "0.7"}),
    ],
)
def test_settings_of_the_wrong_type_are_refused_naming_the_setting(spec: str, changes: dict) -> None:
    """``max_steps=2.5`` or ``prefix_cache_tokens=0.5`` passed every range check (and failed, or truncated,
    only after a model had loaded); a string gave a bare TypeError from a comparison."""
    from envfactory_assets.evaluation.model_policy import SamplingSpec
    from envfactory_assets.training.grpo import GRPOConfigSpec
    from envfactory_assets.training.sft import SFTConfigSpec

    cls = {"grpo": GRPOConfigSpec, "sft": SFTConfigSpec, "sampling": SamplingSpec}[spec]
    with pytest.raises(ValueError, match=next(iter(changes))):
        cls(**changes)
    assert cls(learning_rate=1) if spec != "sampling" else cls(temperature=1)  # an int where a float is due is fine


def test_repeated_evaluation_seeds_are_refused() -> None:
    """``seeds: [0, 0, 0]`` ran one seed three times: the "at least 3 seeds" spread check passed and every std
    was zero."""
    from envfactory_assets.evaluation.run import EvalSpec

    with pytest.raises(ValueError, match="distinct"):
        EvalSpec(seeds=(0, 0, 0))
    assert EvalSpec(seeds=(2, 0, 1)).seeds == (2, 0, 1)
