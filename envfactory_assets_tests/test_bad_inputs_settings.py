"""Bad settings and bad input are refused before any work: stage settings out of range, results that would
replace passed rows with none, a partial run whose upstream was never made, and malformed or oversized
JSON-RPC sent to ``serve-env``."""

from __future__ import annotations

import json
import math
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from envfactory_assets.defs.envgen.assets import environments, verified_environments
from envfactory_assets.defs.graph.assets import tool_graph
from envfactory_assets.defs.resources import EnvFactoryHome, VerificationGate
from envfactory_assets.defs.sources.assets import source_resources
from envfactory_assets.defs.synth.assets import datasets, raw_trajectories, refined_trajectories, tool_chains
from envfactory_assets.envgen.stage import as_environment, environment_row, verification_row
from envfactory_assets.graph.build import build_tool_graph, tools_from_environments
from envfactory_assets.graph.embeddings import HashingEmbedder
from envfactory_assets.settings import store_path
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets.store.db import Store
from envfactory_assets.store.schema import columns
from envfactory_assets.synth.sampling.sampler import SamplerConfig
from envfactory_assets.synth.stage import chain_rows, raw_trajectory_rows
from envfactory_assets.synth.trajectories.execution import SynthConfig
from envfactory_assets_tests.config_failures import step_failure
from envfactory_assets_tests.fixture_environments import FIXTURES

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "bookshop_example"
NAN = float("nan")


@pytest.fixture(scope="module")
def synth_home(tmp_path_factory) -> Path:
    """A home whose store holds real rows for the bookshop fixture: source, built environment, passed
    verification, topology chains sampled on its tool graph, and the raw trajectories executed from them."""
    home = tmp_path_factory.mktemp("synth_home")
    corpus = home / "corpus"
    corpus.mkdir()
    shutil.copy(FIXTURES / "bookshop.json", corpus / "bookshop.json")
    accepted, _ = scan_rows(corpus)
    env_row = environment_row(accepted[0])
    verified = verification_row(env_row)
    assert verified["status"] == "passed", verified["reasons"]
    envs = {ENV_ID: as_environment(env_row)}
    graph = build_tool_graph(tools_from_environments(envs.values()), HashingEmbedder())
    chains = chain_rows(graph, envs, {ENV_ID: verified["id"]}, 4, "bad-inputs", "topology", SamplerConfig(min_tools=2))
    passed_chains = [c for c in chains if c["status"] == "passed"]
    raw = raw_trajectory_rows(passed_chains, graph, envs, SynthConfig(min_turns=1))
    assert passed_chains and any(r["status"] == "passed" for r in raw)
    store = Store(store_path(home))
    store.replace_current("source_resources", accepted)
    store.replace_current("environments", [env_row])
    store.replace_current("verified_environments", [verified])
    store.replace_current("tool_chains", chains)
    store.replace_current("raw_trajectories", raw)
    return home


def home_copy(synth_home: Path, tmp_path: Path) -> Path:
    """A fresh home holding a copy of ``synth_home``'s store (each test may change its copy)."""
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(store_path(synth_home), store_path(home))
    return home


def current(home: Path, table: str) -> list[dict[str, Any]]:
    return Store(store_path(home)).read(table)


# --- 1. every stage setting is checked before any work -------------------------------------------------
CORPUS = str(FIXTURES)
BAD_SETTINGS = [
    (source_resources, {"corpus_dir": CORPUS, "per_domain": -3}, ["per_domain=-3", ">= 0"]),
    (source_resources, {"corpus_dir": CORPUS, "max_bytes": -1}, ["max_bytes=-1", ">= 1"]),
    (source_resources, {"corpus_dir": CORPUS, "domains": []}, ["domains=[]", "non-empty list"]),
    (source_resources, {"corpus_dir": CORPUS, "domains": ["finance"]}, ["unknown domains ['finance']", "productivity"]),
    (
        source_resources,
        {"corpus_dir": CORPUS, "include": [ENV_ID], "exclude": [ENV_ID]},
        ["include and exclude", ENV_ID],
    ),
    (source_resources, {"corpus_dir": "/no/such/corpus"}, ["corpus_dir='/no/such/corpus'", "existing folder"]),
    (environments, {"max_resources": -1}, ["max_resources=-1", ">= 0"]),
    (verified_environments, {"memory_mb": 1}, ["memory_mb=1", ">= 128", "30-60 MiB"]),
    (verified_environments, {"call_timeout_s": NAN}, ["call_timeout_s=nan", "finite number > 0"]),
    (verified_environments, {"max_workers": 0}, ["max_workers=0", ">= 1"]),
    (tool_graph, {"embedder": "bogus"}, ["embedder='bogus'", "'minilm', 'hashing'"]),
    (tool_graph, {"threshold": NAN}, ["threshold=nan", "[-1, 1]"]),
    (tool_graph, {"edge_refiner": "oracle"}, ["edge_refiner='oracle'", "'programmatic', 'model'"]),
    (tool_graph, {"picture_nodes": 0}, ["picture_nodes=0", "[1, 200]"]),
    (tool_chains, {"n_chains": 0}, ["n_chains=0", ">= 1"]),
    (tool_chains, {"baseline_chains": -1}, ["baseline_chains=-1", ">= 0"]),
    (tool_chains, {"p_skip_optional": NAN}, ["p_skip_optional=nan", "[0, 1]"]),
    (tool_chains, {"min_tools": 20}, ["min_tools=20", "[1, 15]"]),
    (tool_chains, {"sampler": "bfs"}, ["sampler='bfs'", "'topology', 'random_walk'"]),
    (raw_trajectories, {"min_turns": 0}, ["min_turns=0", ">= 1"]),
    (raw_trajectories, {"max_turn_len": 0}, ["max_turn_len=0", ">= 1"]),
    (raw_trajectories, {"refusal_share": 1.5}, ["refusal_share=1.5", "[0, 1]"]),
    (refined_trajectories, {"k": 0}, ["k=0", ">= 1"]),
    (refined_trajectories, {"conversational_share": NAN}, ["conversational_share=nan", "[0, 1]"]),
    (refined_trajectories, {"workers": 10**6}, ["workers=1000000", "[0, 64]"]),
    (datasets, {"sft_share": 1.5}, ["sft_share=1.5", "[0, 1]"]),
    (datasets, {"abstention_share": 0.8}, ["abstention_share=0.8", "[0, 0.5]"]),
]


def _case_id(asset: Any, settings: dict[str, Any]) -> str:
    names = [k for k in settings if not (k == "corpus_dir" and settings[k] == CORPUS)] or ["corpus_dir"]
    return f"{asset.node_def.name}-{'-'.join(names)}"


@pytest.mark.parametrize("asset, settings, expected", BAD_SETTINGS, ids=[_case_id(a, s) for a, s, _ in BAD_SETTINGS])
def test_a_bad_setting_fails_the_step_naming_it_before_any_work(asset, settings, expected, tmp_path):
    ok, message = step_failure(asset, settings, tmp_path, partitions=[ENV_ID])
    assert not ok
    assert f"{asset.node_def.name} setting" in message, message
    for text in expected:
        assert text in message, message
    assert len(message.strip().splitlines()) == 1, message
    assert not store_path(tmp_path).exists()  # refused before the store was opened


@pytest.mark.parametrize("floor", [5.0, NAN, -0.1])
def test_a_pass_rate_floor_no_run_can_meet_is_refused_before_verifying(floor, synth_home, tmp_path):
    home = home_copy(synth_home, tmp_path)
    before = current(home, "verified_environments")
    ok, message = step_failure(
        verified_environments,
        {},
        home,
        partitions=[ENV_ID],
        resources={"verification_gate": VerificationGate(min_pass_rate=floor)},
    )
    assert not ok
    shown = "nan" if math.isnan(floor) else str(floor)
    assert f"verification_gate setting min_pass_rate={shown}: expected a finite number in [0, 1]" in message
    assert current(home, "verified_environments") == before


@pytest.mark.parametrize(
    "asset, table", [(raw_trajectories, "raw_trajectories"), (refined_trajectories, "refined_trajectories")]
)
def test_min_turns_no_stored_input_can_reach_is_refused(asset, table, synth_home, tmp_path):
    """A chain of n tools makes at most n turns (and refinement never adds one): min_turns: 100 would only
    fail every trajectory, so it is refused, naming the largest value the stored inputs allow."""
    home = home_copy(synth_home, tmp_path)
    before = current(home, table)
    ok, message = step_failure(asset, {"min_turns": 100}, home)
    if asset is raw_trajectories:
        longest = max(c["n_tools"] for c in current(home, "tool_chains") if c["status"] == "passed")
    else:
        longest = max(r["n_turns"] for r in current(home, "raw_trajectories") if r["status"] == "passed")
    assert not ok
    assert f"{table} setting min_turns=100: expected a whole number in [1, {longest}]" in message, message
    assert current(home, table) == before


# --- 2. a result without passed rows does not silently replace one with them ---------------------------
def test_verification_that_fails_everything_does_not_supersede_passed_rows(synth_home, tmp_path):
    """A call timeout far too short for any environment to load fails every environment; the stored
    passed verification stays current unless the run says it accepts that result."""
    home = home_copy(synth_home, tmp_path)
    before = current(home, "verified_environments")
    assert [r["status"] for r in before] == ["passed"]
    ok, message = step_failure(verified_environments, {"call_timeout_s": 0.001}, home, partitions=[ENV_ID])
    assert not ok
    assert "refusing to write verified_environments" in message and "1 failed" in message, message
    assert "supersede the 1 passed rows" in message
    assert "resources.envfactory.config.allow_empty: true" in message
    assert current(home, "verified_environments") == before

    ok, message = step_failure(
        verified_environments,
        {"call_timeout_s": 0.001},
        home,
        partitions=[ENV_ID],
        resources={"envfactory": EnvFactoryHome(home=str(home), allow_empty=True, allow_regression=True)},
    )
    assert ok, message
    assert [r["status"] for r in current(home, "verified_environments")] == ["failed"]


def test_a_selection_that_leaves_no_input_does_not_empty_the_trajectories(synth_home, tmp_path):
    """Only topology chains are stored: executing random_walk chains gives no trajectory at all."""
    home = home_copy(synth_home, tmp_path)
    before = current(home, "raw_trajectories")
    ok, message = step_failure(raw_trajectories, {"sampler": "random_walk"}, home)
    assert not ok
    assert "refusing to write raw_trajectories: the new result is empty" in message, message
    assert current(home, "raw_trajectories") == before


def test_source_settings_that_select_no_environment_keep_the_partitions(tmp_path):
    """per_domain 0 without MCP servers selects nothing: the run stops instead of dropping every partition."""
    ok, message = step_failure(
        source_resources, {"corpus_dir": CORPUS, "per_domain": 0, "include_mcp": False}, tmp_path, partitions=[ENV_ID]
    )
    assert not ok
    assert "select no environment" in message and "drop all 1 environment partitions" in message, message
    assert "allow_empty: true" in message
    assert not store_path(tmp_path).exists()


def _rows(table: str, n: int, **values: Any) -> list[dict[str, Any]]:
    return [
        {**{c: None for c in columns(table)}, "id": f"{table}_{i}", "refined_trajectory_id": "ref", **values}
        for i in range(n)
    ]


def test_a_write_of_several_tables_is_refused_whole_before_any_is_written(tmp_path):
    from envfactory_assets.store.db import EmptyResultRefused

    store = Store(tmp_path / "store.duckdb", refuse_empty=True, override_hint="allow_empty: true")
    store.replace_current_tables({"sft_dataset": _rows("sft_dataset", 2), "rl_dataset": _rows("rl_dataset", 3)})
    with pytest.raises(
        EmptyResultRefused,
        match=r"refusing to write rl_dataset: the new result is empty, .* "
        r"supersede the 3 rows .* set allow_empty: true",
    ):
        store.replace_current_tables({"sft_dataset": _rows("sft_dataset", 1, n_turns=9), "rl_dataset": []})
    assert [r["id"] for r in store.read("sft_dataset")] == ["sft_dataset_0", "sft_dataset_1"]
    assert len(store.read("rl_dataset")) == 3
    # an empty table stays writable where nothing passed is at stake, and with the guard off
    assert store.replace_current("rejected_resources", []) == {"inserted": 0, "kept": 0, "superseded": 0}
    assert Store(store.path).replace_current("rl_dataset", [])["superseded"] == 3


def test_a_changed_input_that_fails_is_recorded_but_the_same_input_failing_is_refused(tmp_path):
    """One environment whose document was edited and no longer verifies is a real change (recorded); the
    same environment failing under new settings is what a bad setting does (refused)."""
    from envfactory_assets.store.db import EmptyResultRefused

    store = Store(tmp_path / "store.duckdb", refuse_empty=True, override_hint="allow_empty: true")
    scope = "env_id = 'bookshop'"
    row = {**{c: None for c in columns("verified_environments")}, "env_id": "bookshop", "domain": "commerce"}
    store.replace_current(
        "verified_environments", [{**row, "id": "ver_1", "environment_id": "env_old", "status": "passed"}], scope
    )
    with pytest.raises(EmptyResultRefused, match="supersede the 1 passed rows"):
        store.replace_current(
            "verified_environments", [{**row, "id": "ver_2", "environment_id": "env_old", "status": "failed"}], scope
        )
    assert [r["id"] for r in store.read("verified_environments")] == ["ver_1"]
    store.replace_current(
        "verified_environments", [{**row, "id": "ver_3", "environment_id": "env_edited", "status": "failed"}], scope
    )
    assert [r["id"] for r in store.read("verified_environments")] == ["ver_3"]


def test_a_partial_regression_is_refused_before_any_passed_row_is_superseded(tmp_path):
    """Two of three unchanged environments going from passed to failed, while one still passes, is refused
    with the count, their names and the settings note; a changed input failing is recorded; the override
    accepts the regression."""
    from envfactory_assets.store.db import RegressionRefused

    store = Store(
        tmp_path / "store.duckdb", refuse_empty=True, refuse_regression=True, regression_hint="allow_regression: true"
    )
    blank = {c: None for c in columns("verified_environments")}

    def row(env_id: str, status: str, version: str = "") -> dict[str, Any]:
        return {
            **blank,
            "id": f"ver_{env_id}{version}_{status}",
            "env_id": env_id,
            "domain": "commerce",
            "environment_id": f"env_{env_id}{version}",
            "status": status,
        }

    store.replace_current("verified_environments", [row(e, "passed") for e in ("a", "b", "c")])
    with pytest.raises(RegressionRefused) as refused:
        store.replace_current(
            "verified_environments",
            [row("a", "passed"), row("b", "failed"), row("c", "failed")],
            settings_note="call_timeout_s=0.03 (default 5.0)",
        )
    message = str(refused.value)
    assert "2 of the 3 passed items" in message and "b, c" in message, message
    assert "call_timeout_s=0.03 (default 5.0)" in message and "allow_regression: true" in message
    assert sorted(r["status"] for r in store.read("verified_environments", "NOT superseded")) == ["passed"] * 3
    store.replace_current(
        "verified_environments", [row("a", "passed"), row("b", "failed", "_edited"), row("c", "passed")]
    )  # b's input changed: recorded
    assert {r["env_id"]: r["status"] for r in store.read("verified_environments", "NOT superseded")} == {
        "a": "passed",
        "b": "failed",
        "c": "passed",
    }
    accepting = Store(tmp_path / "store.duckdb", refuse_empty=True)
    accepting.replace_current(
        "verified_environments", [row("a", "passed"), row("b", "failed", "_edited"), row("c", "failed")]
    )
    assert {r["env_id"]: r["status"] for r in accepting.read("verified_environments", "NOT superseded")}[
        "c"
    ] == "failed"


def test_verification_regression_names_the_setting_and_allow_regression_accepts_it(synth_home, tmp_path):
    home = home_copy(synth_home, tmp_path)
    before = current(home, "verified_environments")
    permissive = EnvFactoryHome(home=str(home), allow_empty=True)
    ok, message = step_failure(
        verified_environments,
        {"call_timeout_s": 0.001},
        home,
        partitions=[ENV_ID],
        resources={"envfactory": permissive},
    )
    assert not ok
    assert "1 of the 1 passed items whose input (environment_id) is unchanged" in message, message
    assert "call_timeout_s=0.001 (default 5.0)" in message and "allow_regression: true" in message
    assert current(home, "verified_environments") == before
    ok, message = step_failure(
        verified_environments,
        {"call_timeout_s": 0.001},
        home,
        partitions=[ENV_ID],
        resources={"envfactory": EnvFactoryHome(home=str(home), allow_empty=True, allow_regression=True)},
    )
    assert ok, message
    assert [r["status"] for r in current(home, "verified_environments")] == ["failed"]


# --- 3. a partial run whose upstream was never materialized ---------------------------------------------
def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


def test_selecting_one_asset_of_a_shared_step_without_its_upstream_says_what_to_run(tmp_path, monkeypatch, capsys):
    from envfactory_assets.cli import main as cli_main

    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))  # restored after the test
    assert cli_main(["run", "--select", "sft_dataset"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = _error_lines(err)
    assert "refined_trajectories" in line and "never materialized" in line, line
    assert 'envfactory run --select "*refined_trajectories"' in line


def test_selecting_one_asset_of_a_shared_step_runs_the_whole_step(tmp_path, monkeypatch, capsys):
    """sft_dataset shares its step with rl_dataset: selecting it alone runs that step and says so. (Both
    come out empty here, so their blocking checks fail the run; the step itself ran.)"""
    from envfactory_assets.cli import main as cli_main
    from envfactory_assets.cli import prepare_dagster_home

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("ENVFACTORY_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))  # restored after the test
    with Store(store_path(home)).connect():
        pass  # an empty store: the upstream stages ran and kept nothing
    prepare_dagster_home(home)
    with dg.DagsterInstance.get() as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization("refined_trajectories"))
    cli_main(["run", "--select", "sft_dataset"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and not _error_lines(err), err
    assert "note: also materializing rl_dataset" in err
    assert "failed checks: ['rl_dataset:" in out, out
    with dg.DagsterInstance.get() as instance:
        for key in ("sft_dataset", "rl_dataset"):
            assert instance.get_latest_materialization_event(dg.AssetKey(key)) is not None, key


def test_a_failed_run_names_the_command_that_builds_what_it_left(tmp_path, monkeypatch, capsys):
    """A run whose verification refuses a setting, after the sources and the environments were built, ends by
    naming the re-run of only what it left, with the user's config file."""
    from envfactory_assets.cli import main as cli_main

    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))  # restored after the test
    config = tmp_path / "my run.yaml"
    config.write_text(
        json.dumps(
            {
                "ops": {
                    "source_resources": {
                        "config": {"corpus_dir": str(FIXTURES), "include_mcp": False, "per_domain": 1}
                    },
                    "verified_environments": {"config": {"call_timeout_s": -1}},
                }
            }
        )
    )
    selection = "source_resources,environments,verified_environments,tool_graph"
    assert cli_main(["run", "--select", selection, "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (hint,) = [line for line in err.splitlines() if "build the rest with" in line]
    assert hint.endswith(f"envfactory run --select \"verified_environments,tool_graph\" --config '{config}'"), hint


# --- 4. serve-env answers malformed and oversized JSON-RPC ------------------------------------------------
class RawClient:
    """``envfactory serve-env`` as a subprocess, spoken to line by line, every read with a timeout."""

    def __init__(self, home: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "envfactory_assets.cli", "serve-env", ENV_ID, *extra],
            env={**os.environ, "ENVFACTORY_HOME": str(home)},
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._buffer = b""

    def send(self, message: Any) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float = 60.0) -> tuple[dict[str, Any], int]:
        """The next reply and its size in bytes; fails the test if none comes within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                pytest.fail(f"no reply within {timeout} s (the server left the client waiting)")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                pytest.fail(f"the server closed stdout: {self.proc.stderr.read().decode()[-2000:]}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line), len(line)

    def request(self, request_id: int, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return self.receive()

    def initialize(self) -> None:
        reply, _ = self.request(
            0,
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "0"}},
        )
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, request_id: int, tool: str, arguments: Any) -> tuple[dict[str, Any], int]:
        return self.request(request_id, "tools/call", {"name": tool, "arguments": arguments})

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def client(synth_home):
    raw = RawClient(synth_home)
    yield raw
    raw.close()


def _tool_error(reply: dict[str, Any]) -> dict[str, Any]:
    result = reply["result"]
    assert result["isError"] is True, result
    return json.loads(result["content"][0]["text"])["error"]


@pytest.mark.parametrize(
    "line, code, request_id",
    [
        (b"{not json", -32700, None),
        (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list"', -32700, None),  # cut off
        (b'{"jsonrpc": "2.0", "id": 7}', -32600, 7),
        (b'{"jsonrpc": "1.0", "id": "a", "method": "tools/list"}', -32600, "a"),
        (b'{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', -32600, None),
        (b'{"jsonrpc": "2.0", "id": null, "method": "tools/list"}', -32600, None),  # MCP ids are never null
        (b"[]", -32600, None),
        (b'[{"jsonrpc": "2.0", "id": 3, "method": "tools/list"}]', -32600, None),
        (b'"just a string"', -32600, None),
        (b"\xff\xfe not utf-8", -32700, None),
    ],
)
def test_malformed_json_rpc_gets_an_error_reply_and_the_session_goes_on(client, line, code, request_id):
    client.initialize()
    client.send(line)
    reply, _ = client.receive(timeout=20)
    assert reply["jsonrpc"] == "2.0" and reply["id"] == request_id, reply
    assert reply["error"]["code"] == code, reply
    listed, _ = client.request(1, "tools/list", {})
    assert "list_authors" in [t["name"] for t in listed["result"]["tools"]]


def test_a_huge_argument_is_refused_before_running_and_not_echoed(client):
    client.initialize()
    before, _ = client.call(1, "list_authors", {"limit": 100})
    reply, size = client.call(2, "create_author", {"name": "x" * 20_000_000})
    error = _tool_error(reply)
    assert error["type"] == "too_large" and "1000000 bytes per call" in error["message"], error
    assert size < 2_000
    after, _ = client.call(3, "list_authors", {"limit": 100})
    assert after["result"]["structuredContent"] == before["result"]["structuredContent"]  # the call did not run


def test_echoed_client_text_in_errors_is_clipped(client):
    client.initialize()
    reply, size = client.call(1, "list_authors", {"limit": "9" * 900_000})  # under the cap, wrong type
    error = _tool_error(reply)
    assert error["type"] == "bad_arguments" and "characters in all" in error["message"], error
    assert size < 2_000
    reply, size = client.call(2, "t" * 500_000, {})
    assert reply["error"]["code"] == -32602 and "Unknown tool" in reply["error"]["message"]
    assert size < 2_000


def test_the_argument_cap_is_a_setting(synth_home):
    raw = RawClient(synth_home, "--max-argument-bytes", "200")
    try:
        raw.initialize()
        reply, _ = raw.call(1, "create_author", {"name": "y" * 300})
        assert _tool_error(reply)["type"] == "too_large"
        reply, _ = raw.call(2, "create_author", {"name": "Ada"})
        assert reply["result"]["structuredContent"]["name"] == "Ada"
    finally:
        raw.close()


def test_a_line_over_the_message_limit_is_refused_unread(client):
    client.initialize()
    client.send(
        b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "create_author", '
        b'"arguments": {"name": "' + b"z" * (33 * 1024 * 1024) + b'"}}}'
    )
    reply, _ = client.receive()
    assert reply["id"] is None and reply["error"]["code"] == -32600
    assert "limit of 33554432 bytes" in reply["error"]["message"]
    listed, _ = client.request(6, "tools/list", {})
    assert listed["id"] == 6 and "result" in listed


def _peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def test_deep_and_amplifying_lines_are_refused_and_the_server_answers_on(client):
    client.initialize()
    inner = "[" + ",".join(["[]"] * 1000) + "]"
    amplifying = (
        '{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"items": ['
        + ",".join([inner] * 10_000)
        + "]}}"
    ).encode()  # 30 MB that would decode to > 600 MiB
    for line, limit in ((b"[" * 1100, "max_depth"), (b"[" * 100_000, "max_depth"), (amplifying, "max_decoded_bytes")):
        client.send(line)
        reply, size = client.receive(timeout=30)
        assert reply["id"] is None and reply["error"]["code"] == -32600 and limit in reply["error"]["message"], reply
        assert size < 2_000
        listed, _ = client.request(9, "tools/list", {})
        assert "list_authors" in [t["name"] for t in listed["result"]["tools"]]
    assert client.proc.poll() is None
    assert _peak_rss_mib(client.proc.pid) < 1024  # the line itself and its copies, never its decoded objects


def test_serve_env_refuses_a_nonsense_argument_cap(synth_home):
    proc = subprocess.run(
        [sys.executable, "-m", "envfactory_assets.cli", "serve-env", ENV_ID, "--max-argument-bytes", "0"],
        env={**os.environ, "ENVFACTORY_HOME": str(synth_home)},
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--max-argument-bytes 0: expected a whole number >= 1" in proc.stderr
