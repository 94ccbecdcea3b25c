"""Curation (excluded resources, environments, tools) holds through re-synthesis; trajectories render as
Markdown from the CLI, the ``show_trajectory`` job and ``refined_trajectories``'s metadata."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from envfactory_assets.cli import config_for_selection
from envfactory_assets.cli import main as cli_main
from envfactory_assets.curation import (
    Curation,
    CurationError,
    curation_path,
    filter_environments,
    filter_resources,
    load_curation,
    set_exclusion,
)
from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS, defs
from envfactory_assets.defs.graph.assets import tool_graph
from envfactory_assets.defs.resources import (
    EnvFactoryHome,
    ModelBackend,
    VerificationGate,
)
from envfactory_assets.defs.synth.assets import (
    raw_trajectories,
    refined_trajectories,
    tool_chains,
)
from envfactory_assets.runner.materialize import materialize_pipeline
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets.store.db import Store
from envfactory_assets.viewer import (
    TrajectoryNotFound,
    find_trajectory,
    render_trajectory,
)
from envfactory_assets_tests.config_failures import step_failure
from envfactory_assets_tests.fixture_environments import FIXTURES
from envfactory_assets_tests.tiny_run import THROUGH_REFINEMENT

SELECTION = list(THROUGH_REFINEMENT)
RUN_CONFIG = config_for_selection(
    {
        "ops": {
            "source_resources": {"config": {"corpus_dir": str(FIXTURES), "include_mcp": False, "per_domain": 2}},
            "tool_graph": {"config": {"embedder": "hashing"}},
            "tool_chains": {"config": {"n_chains": 12, "min_tools": 3, "baseline_chains": 4}},
        }
    },
    SELECTION,
)
EXCLUDED_TOOL = "bookshop_example.delete_author"


def _materialize(home: Path, instance) -> list[dg.ExecuteInProcessResult]:
    """The runs ``envfactory run --select`` makes: source_resources, then the rest over every partition."""
    return materialize_pipeline(
        [*ALL_ASSETS, *ALL_CHECKS],
        instance,
        run_config=RUN_CONFIG,
        selection=SELECTION,
        resources={
            "envfactory": EnvFactoryHome(home=str(home)),
            "model_backend": ModelBackend(),
            "verification_gate": VerificationGate(),
        },
    )


def _metadata(results: list[dg.ExecuteInProcessResult], asset: str) -> dict:
    events = [e for r in results for e in r.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return {k: v.value for k, v in events[-1].materialization.metadata.items()}


@pytest.fixture(scope="module")
def curated(tmp_path_factory):
    """A store synthesized up to refined_trajectories twice, with one resource and one tool excluded."""
    home = tmp_path_factory.mktemp("curated_home")
    set_exclusion(curation_path(home), "resource", "helpdesk", "duplicates a benchmark API")
    set_exclusion(curation_path(home), "tool", EXCLUDED_TOOL, "destructive")
    with dg.instance_for_test() as instance:
        first = _materialize(home, instance)
        second = _materialize(home, instance)  # re-synthesis: the exclusions must still hold
    return home, first, second


# --- the curation file -----------------------------------------------------------------------------------
def test_exclusions_round_trip_through_the_file(tmp_path):
    path = tmp_path / "curation.yaml"
    assert len(load_curation(path)) == 0  # no file: nothing excluded
    set_exclusion(path, "environment", "helpdesk", "not wanted")
    set_exclusion(path, "tool", "bookshop_example.delete_book", "destructive")
    loaded = load_curation(path)
    assert loaded.reason("environment", "helpdesk") == "not wanted"
    assert loaded.reason("tool", "bookshop_example.delete_book") == "destructive"
    set_exclusion(path, "environment", "helpdesk", None)
    assert load_curation(path).reason("environment", "helpdesk") is None
    assert len(load_curation(path)) == 1


@pytest.mark.parametrize(
    "text, problem",
    [
        ("exclusions: [{kind: server, id: x, reason: y}]", "exclusions/0/kind"),
        ("exclusions: [{kind: tool, id: x}]", "'reason' is a required property"),
        ("exclusions: [{kind: tool, id: '', reason: y}]", "exclusions/0/id"),
        ("exclude: []", "Additional properties"),
        ("exclusions: [{kind: tool, id: a.b, reason: y}, {kind: tool, id: a.b, reason: z}]", "listed twice"),
        ("exclusions: [unclosed", "not valid YAML"),
    ],
)
def test_a_bad_curation_file_is_rejected_naming_the_file_and_the_problem(tmp_path, text, problem):
    path = tmp_path / "curation.yaml"
    path.write_text(text)
    with pytest.raises(CurationError) as err:
        load_curation(path)
    assert str(path) in str(err.value) and problem in str(err.value)
    with pytest.raises(CurationError):  # an edit never overwrites a file it cannot read
        set_exclusion(path, "tool", "x.y", "z")
    assert path.read_text() == text


def test_filters_drop_excluded_resources_environments_and_tools():
    accepted, _ = scan_rows(FIXTURES)
    curation = Curation({"resource": {"helpdesk": "r"}, "environment": {"calendar_tasks": "e"}, "tool": {}})
    kept, dropped = filter_resources(accepted, curation)
    assert {r["resource_key"] for r in kept} == {"bookshop_example"}
    assert dropped == {"helpdesk": "r", "calendar_tasks": "e"}
    envs = {"a": {"tools": [{"name": "t1"}, {"name": "t2"}]}, "b": {"tools": [{"name": "t3"}]}}
    kept_envs, dropped = filter_environments(
        envs, Curation({"resource": {}, "environment": {}, "tool": {"a.t1": "x", "b.t3": "y"}})
    )
    assert kept_envs == {"a": {"tools": [{"name": "t2"}]}} and envs["a"]["tools"][0]["name"] == "t1"
    assert dropped == {"a.t1": "x", "b.t3": "y", "b": "every tool excluded"}


def test_cli_exclude_include_and_list(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path))
    assert cli_main(["exclude", "tool", "helpdesk.delete_ticket", "--reason", "destructive"]) == 0
    assert cli_main(["curation"]) == 0
    assert "helpdesk.delete_ticket" in capsys.readouterr().out
    assert yaml.safe_load((tmp_path / "curation.yaml").read_text())["exclusions"] == [
        {"kind": "tool", "id": "helpdesk.delete_ticket", "reason": "destructive"}
    ]
    assert cli_main(["include", "tool", "helpdesk.nothing"]) == 2
    assert "is not excluded" in capsys.readouterr().err
    assert cli_main(["include", "tool", "helpdesk.delete_ticket"]) == 0
    assert load_curation(tmp_path / "curation.yaml").excluded["tool"] == {}


# --- exclusions through the pipeline ---------------------------------------------------------------------
def test_exclusions_hold_through_every_resynthesis_and_are_recorded(curated):
    home, first, second = curated
    assert all(r.success for r in first + second)
    store = Store(home / "envfactory.duckdb")
    assert {r["env_id"] for r in store.read("environments")} == {"bookshop_example", "calendar_tasks"}
    nodes = {r["node_id"] for r in store.read("tool_graph_nodes")}
    assert any(n.startswith("bookshop_example.") for n in nodes) and EXCLUDED_TOOL not in nodes
    called = {c["name"] for t in store.read("raw_trajectories") for turn in t["turns"] for c in turn["calls"]}
    assert called and "delete_author" not in called and "helpdesk" not in str(store.read("tool_chains"))
    for result in (first, second):
        assert _metadata(result, "source_resources")["curation_excluded"] == {"helpdesk": "duplicates a benchmark API"}
        assert _metadata(result, "tool_graph")["curation_excluded"] == {EXCLUDED_TOOL: "destructive"}


# --- the trajectory viewer -------------------------------------------------------------------------------
def test_a_refined_trajectory_renders_its_turns_calls_results_and_both_queries(curated):
    home, _, second = curated
    store = Store(home / "envfactory.duckdb")
    refined = next(
        r for r in store.read("refined_trajectories", "status = 'passed'") if any(t["operators"] for t in r["turns"])
    )
    raw, found = find_trajectory(store, refined["id"])
    assert found["id"] == refined["id"] and raw["id"] == refined["raw_trajectory_id"]
    text = render_trajectory(raw, refined)
    turn = next(t for t in refined["turns"] if t["operators"])
    assert turn["query"] in text and turn["query_raw"] in text and turn["query"] != turn["query_raw"]
    assert text.count("### Turn ") == len(refined["turns"])
    for call in turn["calls"]:
        assert f"`{call['name']}`" in text
    assert find_trajectory(store, raw["id"])[1]["id"] == refined["id"]  # a raw id finds its refined version
    with pytest.raises(TrajectoryNotFound):
        find_trajectory(store, "traj_missing")
    with pytest.raises(TrajectoryNotFound, match=rf"the closest stored: {refined['id']}\b"):
        find_trajectory(store, refined["id"][:-1])  # a truncated id: the one it was cut from comes first
    with pytest.raises(TrajectoryNotFound) as unlike:
        find_trajectory(store, "something else entirely")
    assert "closest" not in str(unlike.value)  # nothing alike: no suggestion rather than arbitrary ids
    with pytest.raises(ValueError):
        render_trajectory({**raw, "id": "raw_other"}, refined)
    sample = _metadata(second, "refined_trajectories")["sample_trajectories"]
    assert "envfactory show" in sample and "### Turn 1" in sample


def test_a_goal_merged_turn_shows_the_calls_of_both_raw_turns_under_the_merged_query():
    """Raw and refined turns stopped lining up by position after goal merging: the viewer showed the second
    call under the next turn's query."""

    def call(name, arguments):
        return {"name": name, "env_id": "crm", "arguments": arguments, "output": {"ok": True}}

    raw = {
        "id": "raw_1",
        "env_ids": ["crm"],
        "n_turns": 3,
        "n_calls": 3,
        "status": "passed",
        "turns": [
            {"query": "Show me the contacts.", "calls": [call("list_contacts", {})]},
            {"query": "Delete contact c_2.", "calls": [call("delete_contact", {"contact_id": "c_2"})]},
            {"query": "Create a contact named Ada.", "calls": [call("create_contact", {"name": "Ada"})]},
        ],
    }
    merged = {
        "query": "Show me the contacts, then delete the second one",
        "query_raw": "Show me the contacts, then delete contact c_2.",
        "merged_from": ["Show me the contacts.", "Delete contact c_2."],
        "calls": raw["turns"][0]["calls"] + raw["turns"][1]["calls"],
        "operators": [],
    }
    refined = {
        "id": "ref_1",
        "raw_trajectory_id": "raw_1",
        "status": "passed",
        "turns": [merged, {**raw["turns"][2], "query_raw": raw["turns"][2]["query"]}],
    }
    text = render_trajectory(raw, refined)
    first, second = text.split("### Turn 2")
    assert "### Turn 3" not in text and "- **turns**: 2" in text and "- **turns before refinement**: 3" in text
    assert "`list_contacts`" in first and "`delete_contact`" in first and "Merged from the raw turns" in first
    assert "`create_contact`" in second and "`delete_contact`" not in second


def test_show_cli_and_the_show_trajectory_job_render_any_trajectory(curated, monkeypatch, capsys):
    home, _, _ = curated
    monkeypatch.setenv("ENVFACTORY_HOME", str(home))
    refined = Store(home / "envfactory.duckdb").read("refined_trajectories", "status = 'passed'")[-1]
    assert cli_main(["show", refined["id"]]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"## Trajectory {refined['id']}") and refined["turns"][0]["query"] in out
    assert cli_main(["show", "nope"]) == 2 and "no raw or refined trajectory" in capsys.readouterr().err
    job = defs.get_job_def("show_trajectory")
    config = {"ops": {"render_trajectory_markdown": {"config": {"trajectory_id": refined["id"]}}}}
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(run_config=config, instance=instance)
        observed = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert result.success and len(observed) == 1
    observation = observed[0].event_specific_data.asset_observation
    assert observation.asset_key.to_user_string() == "refined_trajectories"
    assert observation.metadata["rendering"].value == out.rstrip("\n")


def test_cli_refuses_unknown_ids_with_the_nearest_ones_and_lists_servable_environments(curated, monkeypatch, capsys):
    home, _, _ = curated
    monkeypatch.setenv("ENVFACTORY_HOME", str(home))
    before = (home / "curation.yaml").read_text()
    assert cli_main(["exclude", "environment", "bookshop_exampel", "--reason", "typo"]) == 2
    err = capsys.readouterr().err
    assert "unknown environment 'bookshop_exampel'" in err and "nearest: bookshop_example" in err
    assert cli_main(["exclude", "environment", "no_such_env", "--reason", "x"]) == 2
    assert "unknown environment 'no_such_env'" in capsys.readouterr().err
    assert cli_main(["exclude", "tool", "bookshop_example.delete_autor", "--reason", "x"]) == 2
    assert "nearest: bookshop_example.delete_author" in capsys.readouterr().err
    assert cli_main(["exclude", "tool", "x.nonexistent", "--reason", "x"]) == 2
    assert "unknown tool 'x.nonexistent'" in capsys.readouterr().err
    assert (home / "curation.yaml").read_text() == before  # nothing written by a refused exclusion

    assert cli_main(["environments", "--tools"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("bookshop_example ") and "calendar_tasks " in out
    assert f"{EXCLUDED_TOOL}  (excluded: destructive)" in out  # listed, marked as curation removes it
    assert cli_main(["environments", "--json"]) == 0
    assert [e["env_id"] for e in json.loads(capsys.readouterr().out)] == ["bookshop_example", "calendar_tasks"]
    assert cli_main(["serve-env", "calendar_task"]) == 2
    err = capsys.readouterr().err
    assert "nearest verified environments: calendar_tasks" in err and "envfactory environments" in err


def test_an_exclusion_made_after_the_tool_graph_reaches_no_later_stage(curated, tmp_path):
    """``envfactory exclude`` after tool_graph ran, then a downstream stage alone: tool_chains refuses the
    outdated graph (it sampled the excluded tool before, or failed on a KeyError for an excluded environment),
    and the trajectory stages leave out stored rows that call the excluded tool."""
    source, _, _ = curated
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(source / "envfactory.duckdb", home / "envfactory.duckdb")
    shutil.copy(curation_path(source), curation_path(home))
    store = Store(home / "envfactory.duckdb")
    called = [
        f"{c['env_id']}.{c['name']}"
        for t in store.read("refined_trajectories")
        for turn in t["turns"]
        for c in turn["calls"]
    ]
    tool = max(set(called), key=called.count)  # the tool most stored trajectories call
    set_exclusion(curation_path(home), "tool", tool, "excluded after the graph was built")
    chains_before = store.read("tool_chains")

    ok, message = step_failure(tool_chains, {"n_chains": 12, "min_tools": 3, "baseline_chains": 4}, home)
    assert not ok
    assert "tool_graph has 1 tools that curation.yaml now excludes" in message and tool in message, message
    assert "re-materialize tool_graph first" in message
    assert store.read("tool_chains") == chains_before

    for asset, table in ((raw_trajectories, "raw_trajectories"), (refined_trajectories, "refined_trajectories")):
        ok, message = step_failure(asset, {}, home)
        assert ok, message
        rows = store.read(table)
        assert rows and not any(
            f"{c['env_id']}.{c['name']}" == tool for t in rows for turn in t["turns"] for c in turn["calls"]
        ), table


def test_a_curation_file_that_excludes_every_environment_keeps_the_graph_and_says_so(curated, tmp_path):
    source, _, _ = curated
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(source / "envfactory.duckdb", home / "envfactory.duckdb")
    shutil.copy(curation_path(source), curation_path(home))
    for env_id in ("bookshop_example", "calendar_tasks"):
        set_exclusion(curation_path(home), "environment", env_id, "everything out")
    store = Store(home / "envfactory.duckdb")
    before = store.read("tool_graph_nodes")
    ok, message = step_failure(tool_graph, {"embedder": "hashing"}, home)
    assert not ok
    assert "curation.yaml excludes every passed environment" in message and "bookshop_example" in message, message
    assert store.read("tool_graph_nodes") == before
