"""Replies to transfers, side effects and computed reads, written over trajectories synthesized on the ledger and
messaging fixture documents: each says what happened as a person would (the amount moved and what the rows hold
now, the message sent, the figures), states only what the results say, and a refused transfer says why; and the
default selection prefers the documents that have these kinds."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from envfactory_assets.envgen.stage import select_resources
from envfactory_assets.quality.reply_facts import reply_problems
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets.synth.datasets.rows import replay_check, rl_rows
from envfactory_assets.synth.refinement.replies import write_reply
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.trajectories.execution import SynthConfig, ToolIndex, synthesize_trajectory
from envfactory_assets_tests.fixture_environments import (
    document_environment,
    environment_worker,
    fixture_graph,
)

TRANSFERS = Path(__file__).parent / "fixtures" / "openapi_transfers"
#: words of a lookup's reply that must never describe an outbox record
_LOOKUP_WORDS = ("verb '", "target table", "arguments '", "target id")


def _figure(value: float | int) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


@pytest.fixture(scope="module")
def envs() -> dict[str, dict]:
    built = {}
    for name in ("ledger.json", "messaging.json"):
        env = document_environment(TRANSFERS / name)
        built[env["env_id"]] = env
    return built


@pytest.fixture(scope="module")
def turns(envs) -> list[dict]:
    graph = fixture_graph(envs)
    with environment_worker(envs) as worker:
        chains = sample_chains(graph, 30, "kind-replies", SamplerConfig(min_tools=3))
        trajs = [synthesize_trajectory(c, graph, envs, worker, SynthConfig(min_turns=2)) for c in chains]
    return [turn for t in trajs if t["status"] == "passed" for turn in t["turns"]]


def _tool(envs: dict, name: str) -> dict:
    return next(t for e in envs.values() for t in e["tools"] if t["name"] == name)


def _calls(turns: list[dict], kind: str) -> list[tuple[dict, dict]]:
    return [(turn, c) for turn in turns for c in turn["calls"] if c["kind"] == kind]


def test_every_reply_to_the_new_kinds_states_only_what_the_results_say(turns):
    touched = [t for t in turns if {"transfer", "side_effect", "computed_read"} & {c["kind"] for c in t["calls"]}]
    assert len(touched) >= 10
    for turn in touched:
        assert reply_problems(turn["assistant_summary"], turn["calls"]) == [], turn["assistant_summary"]
        low = turn["assistant_summary"].lower()
        assert not any(w in low for w in _LOOKUP_WORDS), turn["assistant_summary"]


def test_a_transfer_reply_says_the_amount_moved_and_what_the_rows_hold(envs, turns):
    moved = [(t, c) for t, c in _calls(turns, "transfer") if "source" in c["output"]]
    assert moved
    for turn, call in moved:
        tool = _tool(envs, call["name"])
        field = tool["transfer"]["field"]
        reply = turn["assistant_summary"]
        out = call["output"]
        assert _figure(out["amount"]) in reply, reply
        # the rows named as the result names them, and a figure the result gives for one of them
        assert str(out["source"][tool["input_schema"]["required"][0]]) in reply or out["source"].get("label") in reply
        held = {_figure(out["source"][field]), _figure(out["destination"][field])}
        assert any(h in reply for h in held), reply


def test_a_withdrawal_or_deposit_reply_says_what_the_row_holds_now(envs, turns):
    single = [
        (t, c) for t, c in _calls(turns, "transfer") if "error" not in c["output"] and "source" not in c["output"]
    ]
    assert single
    for turn, call in single:
        field = _tool(envs, call["name"])["transfer"]["field"]
        assert _figure(call["output"][field]) in turn["assistant_summary"], turn["assistant_summary"]


def test_a_side_effect_reply_says_what_was_done_for_which_row(envs, turns):
    done = _calls(turns, "side_effect")
    assert {c["output"]["verb"] for _, c in done} == {"send", "ping"}
    for turn, call in done:
        reply = turn["assistant_summary"]
        assert call["output"]["target_id"] in reply
        verb = call["output"]["verb"]
        said = ("sent", "went out") if verb == "send" else ("ping",)
        assert any(w in reply for w in said), reply


def test_a_computed_read_reply_gives_the_figure(envs, turns):
    reads = _calls(turns, "computed_read")
    assert reads
    for turn, call in reads:
        figures = [v for k, v in call["output"].items() if isinstance(v, (int, float))]
        for value in figures:
            assert _figure(value) in turn["assistant_summary"], turn["assistant_summary"]


def test_a_summary_reply_counts_the_rows_and_gives_their_sum(envs):
    ledger = next(e for e in envs.values() if any(t["name"] == "get_stock_summary" for t in e["tools"]))
    state = copy.deepcopy(next(s["state"] for s in ledger["initial_states"] if s["name"] == "valid"))
    with environment_worker(envs) as worker:
        episode = worker.open_episode({ledger["env_id"]: state})
        result = worker.call(episode, "get_stock_summary", {})
    assert result["ok"], result
    out = result["output"]
    call = {"name": "get_stock_summary", "arguments": {}, "output": out}
    index = ToolIndex({ledger["env_id"]: ledger})
    replies = {write_reply([call], index.tools, index.key_of, f"summary/{seed}") for seed in range(30)}
    for reply in replies:
        assert reply_problems(reply, [call]) == [], reply
        assert _figure(out["total_quantity"]) in reply, reply
    said_count = (str(out["count"]), ("no one two three four five six seven eight nine ten".split())[out["count"]])
    assert all(any(f"{n} bin" in r for n in said_count) for r in replies)


def test_a_refused_transfer_reply_says_why_and_that_nothing_moved(envs, turns):
    refused = [(t, c) for t, c in _calls(turns, "transfer") if c["output"].get("error") == "precondition_failed"]
    assert refused
    for turn, call in refused:
        reply = turn["assistant_summary"]
        assert call["output"]["message"] in reply
        assert any(w in reply.lower() for w in ("refused", "nothing moved", "did not go through", "happened")), reply


def test_selection_prefers_documents_with_transfers_side_effects_and_computed_reads():
    accepted, _ = scan_rows(TRANSFERS)
    for row in accepted:
        assert {"transfer", "side_effect", "computed_read"} & set(row["operations_by_kind"])
        crud = {
            k: v for k, v in row["operations_by_kind"].items() if k in ("list", "create", "get", "update", "delete")
        }
        plain = {**row, "resource_key": "plain", "operations_by_kind": crud}
        for order in ([plain, row], [row, plain]):
            assert [r["resource_key"] for r in select_resources(order, 1)] == [row["resource_key"]]


def _synthesized(envs: dict, share: float, n: int = 30) -> list[dict]:
    graph = fixture_graph(envs)
    with environment_worker(envs) as worker:
        chains = sample_chains(graph, n, "recovery", SamplerConfig(min_tools=3))
        config = SynthConfig(min_turns=2, refusal_share=share)
        trajs = [synthesize_trajectory(c, graph, envs, worker, config) for c in chains]
        passed = [{**t, "id": f"raw-{i}", "domains": ["x"]} for i, t in enumerate(trajs) if t["status"] == "passed"]
        for traj in passed:
            for row in rl_rows(traj, envs):
                problem = replay_check(row, worker)
                assert problem is None or problem.startswith("no-op task"), problem
    return passed


def _refused_transfers(trajs: list[dict]) -> list[tuple[dict, int]]:
    return [
        (turn, i)
        for t in trajs
        for turn in t["turns"]
        for i, c in enumerate(turn["calls"])
        if c["kind"] == "transfer" and c.get("error") == "precondition_failed"
    ]


def test_refusal_share_asks_transfers_for_more_than_the_source_holds_and_the_agent_reads_what_it_holds(envs):
    asked = _synthesized(envs, 1.0)
    refused = _refused_transfers(asked)
    assert len(refused) > len(_refused_transfers(_synthesized(envs, 0.0)))
    for turn, i in refused:
        call, recovery = turn["calls"][i], turn["calls"][i + 1]
        assert recovery["recovery"]["field"] and recovery["kind"] in ("get", "computed_read")
        key = next(iter(recovery["arguments"]))
        assert recovery["arguments"][key] == call["arguments"][key]
        # the read finds what the refusal says the source holds: nothing moved
        held = float(re.search(r"holds only (-?[\d.]+);", call["output"]["message"])[1])
        assert (recovery["output"].get(recovery["recovery"]["field"]) or 0) == held
        reply = turn["assistant_summary"]
        assert reply_problems(reply, turn["calls"]) == [], reply
        assert call["output"]["message"] in reply
        figure = recovery["output"].get(recovery["recovery"]["field"])
        assert (_figure(figure) if figure is not None else "no ") in reply.split(call["output"]["message"])[1], reply
    # a read is a recovery only right after a refused transfer
    after = {(id(turn), i + 1) for turn, i in refused}
    for traj in asked:
        for turn in traj["turns"]:
            for j, c in enumerate(turn["calls"]):
                assert bool(c.get("recovery")) == ((id(turn), j) in after)


def test_a_side_effect_reply_names_the_row_as_a_person_says_its_table(envs, turns):
    """A table the builder numbered apart from another of the same name (``instances_4``) is said by its words
    ("instance ins_1"), never "instances 4 ins_1" (the 4 would read as a figure the results lack)."""
    turn, call = _calls(turns, "side_effect")[0]
    index = ToolIndex(envs)
    tools = copy.deepcopy(index.tools)
    tool = tools[call["name"]]
    # the builder's thing of a numbered table is its words ("instances 4" of linode's ``instances_4``)
    tool["side_effect"]["thing"] = tool["table"] + " 4"
    for seed in range(20):
        reply = write_reply([call], tools, index.key_of, f"numbered/{seed}")
        assert reply_problems(reply, [call]) == [], reply
        assert " 4 " not in reply, reply
        assert call["output"]["target_id"] in reply, reply
