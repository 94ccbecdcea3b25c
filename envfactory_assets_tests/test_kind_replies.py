"""Replies to transfers, side effects and computed reads, written over trajectories synthesized on the ledger and
messaging fixture documents: each says what happened as a person would (the amount moved and what the rows hold
now, the message sent, the figures), states only what the results say, and a refused transfer says why; and the
default selection prefers the documents that have these kinds. A transfer is asked for as a person asks to move an
amount ("move 33 from bin 'bin_1' to bin 'bin_2'"), and no clarification asks for a value its request states."""

from __future__ import annotations

import copy
import random
import re
from pathlib import Path

import pytest

from envfactory_assets.envgen.stage import select_resources
from envfactory_assets.envgen.tools import openai_tool
from envfactory_assets.quality.conversation_text import clarification_figures, kept_omissions
from envfactory_assets.quality.reply_facts import reply_problems
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets.synth.datasets.rows import replay_check, rl_rows
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig, calibrate_trajectory
from envfactory_assets.synth.refinement.phrasing import _PLANS, describe_call, literal
from envfactory_assets.synth.refinement.replies import write_reply
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver, read_tools
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.trajectories.execution import SynthConfig, ToolIndex, synthesize_trajectory
from envfactory_assets.synth.trajectories.simulated_user import ProgrammaticUser, providable_flags
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


# ----------------------------------------------------------------------------- transfer requests
#: a transfer request as a person says it: the verb, the amount, the row it leaves or reaches
_MOVE = r"\b(?:move|transfer|withdraw|deposit) {amount} (?:from|into) "


@pytest.fixture(scope="module")
def calibrated(envs) -> list[tuple[dict, dict]]:
    """``(raw, calibrated)`` of the passed trajectories of 30 chains over the ledger and messaging documents (half
    the transfers asked for more than the source holds, as in a run with ``refusal_share`` 0.5), refined and
    calibrated conversationally: the programmatic solver may ask, the simulated user answers."""
    graph = fixture_graph(envs)
    flags = providable_flags(graph)
    cfg = CalibrationConfig(k=2, conversational_share=1.0)
    with environment_worker(envs) as worker:
        chains = sample_chains(graph, 30, "kind-queries", SamplerConfig(min_tools=3))
        config = SynthConfig(min_turns=2, refusal_share=0.5)
        raws = [
            {**t, "id": f"raw-{i}", "domains": ["finance"]}
            for i, c in enumerate(chains)
            for t in [synthesize_trajectory(c, graph, envs, worker, config)]
            if t["status"] == "passed"
        ]
        return [
            (raw, calibrate_trajectory(raw, envs, worker, ProgrammaticSolver(ask=True), cfg, ProgrammaticUser(), flags))
            for raw in raws
        ]


def _transfer_calls(envs: dict, turns: list[dict]) -> list[tuple[dict, dict, dict]]:
    return [(turn, c, _tool(envs, c["name"])["transfer"]) for turn, c in _calls(turns, "transfer")]


def test_a_raw_transfer_request_says_the_amount_and_moves_it_from_one_row_to_another(envs, calibrated):
    moves = _transfer_calls(envs, [turn for raw, _ in calibrated for turn in raw["turns"]])
    assert len(moves) >= 10 and {tr["verb"] for _, _, tr in moves} == {"transfer", "withdraw", "deposit"}
    for turn, call, tr in moves:
        query, args = turn["query"], call["arguments"]
        assert "with to" not in query and "with destination" not in query, query
        assert re.search(_MOVE.format(amount=re.escape(literal(args[tr["amount"]]))), query, re.IGNORECASE), query
        thing = tr["thing"]
        source = f"{'into' if tr['verb'] == 'deposit' else 'from'} {thing} {literal(args[f'{thing}_id'])}"
        assert source in query or f"the new {thing}" in query, query
        if tr["destination"]:
            assert f" to {thing} {literal(args[tr['destination']])}" in query or f"to the new {thing}" in query, query


def test_a_refined_transfer_request_keeps_its_amount_and_names_rows_by_reference(envs, calibrated):
    kept = [turn for _, cal in calibrated for turn in cal["turns"]]
    moves = _transfer_calls(envs, kept)
    assert len(moves) >= 10
    for turn, call, tr in moves:
        query = turn["query"]
        assert "with to" not in query and "with destination" not in query, query
        amount = re.escape(literal(call["arguments"][tr["amount"]]))
        assert re.search(_MOVE.format(amount=amount), query, re.IGNORECASE), query
    # a row the user knows by what was done or what it holds is named so, on either side of the move
    assert any(re.search(r"\b(?:from|into|to) (?:the|that|this) ", t["query"]) for t, _, _ in moves)


def test_no_clarification_is_asked_for_a_transfer_value_the_request_states(envs, calibrated):
    # judged by the detector of quality.conversation_text, as the refined trajectories' asset check does
    figures = clarification_figures([{**cal, "id": raw["id"]} for raw, cal in calibrated])
    assert figures["asking_for_given"] == 0 and figures["malformed"] == 0, figures["examples"]
    assert figures["omissions_asked"] == figures["omissions"]
    # a transfer turn leaving nothing out on purpose is solved without a question
    plain = [
        turn
        for turn, _, _ in _transfer_calls(envs, [t for _, cal in calibrated for t in cal["turns"]])
        if not kept_omissions(turn)
    ]
    assert plain and not [t["clarification"] for t in plain if t.get("clarification")]


def test_a_figure_of_one_row_is_asked_for_by_its_own_word_and_solved_with_its_read(envs, calibrated):
    """A computed read of one row (``GET /accounts/{id}/balance``) is asked for as "the balance of account X",
    not as a look-up of the row's details, and the solver answers it with the computed read, not the get."""
    asked = [
        (turn, call)
        for raw, _ in calibrated
        for turn in raw["turns"]
        for before, call in zip([{}, *turn["calls"]], turn["calls"], strict=False)
        if call["kind"] == "computed_read"
        and _tool(envs, call["name"])["computed"]["scope"] == "item"
        and not before.get("error")  # the read after a refused transfer is the agent's own, not asked for
    ]
    assert len(asked) >= 3
    for turn, call in asked:
        word = _tool(envs, call["name"])["computed"]["word"]
        row = re.escape(f"account {literal(call['arguments']['account_id'])}")
        assert re.search(rf"the {word} of (?:{row}|the new account)", turn["query"]), turn["query"]
    # the solver's best tool for each way a person asks for the figure is the computed read
    toolset = read_tools([openai_tool(t) for e in envs.values() for t in e["tools"]])
    for plan in _PLANS["figure"]:
        clause = plan.format(figure="balance", subject="account 'acc_00004'")
        best = max(toolset.scores(clause), key=lambda scored: scored[0])[1]
        assert best.name == "get_account_balance", clause


@pytest.mark.parametrize(
    ("word", "said"),
    [
        ("currentBalance", "current balance"),
        ("Balance", "balance"),
        ("", "balance"),  # no word of its own: the one field it reports
        (None, "balance"),
        (7, "balance"),
        ("bal'ance", "balance"),  # a quote in the request would read as a value to the solver and the gate
        ('"x"', "balance"),
        ("{subject}", "balance"),
        ("v2", "balance"),
        ("b" * 40, "balance"),
    ],
)
def test_a_figure_is_asked_for_by_words_a_person_says(envs, word, said):
    tool = copy.deepcopy(_tool(envs, "get_account_balance"))
    tool["computed"]["word"] = word
    for rng in (None, *(random.Random(seed) for seed in range(5))):
        request = describe_call(tool, "account_id", {"account_id": "acc_1"}, rng=rng)
        assert re.search(rf"\bthe {said} of account 'acc_1'", request), request
    if word != "currentBalance" and word != "Balance":
        # no word of its own and several fields: its figures
        tool["computed"]["fields"] = ["balance", "overdraft"]
        assert "the figures of account 'acc_1'" in describe_call(tool, "account_id", {"account_id": "acc_1"})


@pytest.mark.parametrize("computed", [None, {}, {"scope": "row"}, "item", ["item"]])
def test_a_computed_read_without_a_scope_is_refused_by_name(envs, computed):
    tool = copy.deepcopy(_tool(envs, "get_account_balance"))
    tool["computed"] = computed
    with pytest.raises(ValueError, match="tool 'get_account_balance': a computed read needs computed.scope"):
        describe_call(tool, "account_id", {"account_id": "acc_1"}, rng=random.Random(0))


def test_the_read_after_a_refused_transfer_is_the_agents_own_and_no_request_asks_for_it(calibrated):
    # the user cannot know the transfer will be refused: neither the raw nor the refined request asks for the
    # balance the agent reads afterwards (turns where the user also asks for a balance are left out)
    turns = [turn for _, cal in calibrated for turn in cal["turns"]]
    recovered = [
        t
        for t in turns
        if any(c.get("recovery") for c in t["calls"])
        and not any(c["kind"] == "computed_read" and not c.get("recovery") for c in t["calls"])
    ]
    assert len(recovered) >= 3
    for turn in recovered:
        for query in (turn["query_raw"], turn["query"]):
            assert not re.search(r"\bbalance of\b", query), query


def test_a_request_of_another_kind_reads_as_before(envs):
    """Only transfers are asked for by their amount: a side effect and an update read as they always have, in
    the raw plan and in the person's words."""
    index = ToolIndex(envs)
    cases = {
        ("send_message", "mes_00003", None): [
            "send message 'mes_00003' with channel 'sms', priority 2",
            "I need you to send message 'mes_00003' with channel 'sms' and priority 2",
            "I need you to send message 'mes_00003' with channel set to 'sms', priority 2",
            "could you send message 'mes_00003' with channel 'sms' and priority 2",
        ],
        ("ping_webhook", "web_00001", "the webhook you created earlier"): [
            "ping webhook 'web_00001'",
            "I need you to ping the webhook you created earlier",
            "please ping the webhook you created earlier",
            "ping the webhook you created earlier",
        ],
        ("update_account", "acc_00002", None): [
            "change account 'acc_00002': set owner to 'Ada Lovelace', status to 'open'",
            "edit account 'acc_00002', setting owner to 'Ada Lovelace' and status to 'open'",
            "update account 'acc_00002', changing owner to 'Ada Lovelace' and status to 'open'",
            "change account 'acc_00002' as follows: owner to 'Ada Lovelace' and status to 'open'",
        ],
    }
    more = {
        "send_message": {"channel": "sms", "priority": 2},
        "ping_webhook": {},
        "update_account": {"owner": "Ada Lovelace", "status": "open"},
    }
    for (name, row, reference), expected in cases.items():
        tool = index.tools[name]
        key = index.key_of(tool)
        args = {key: row, **more[name]}
        refs = {key: reference} if reference else {}
        said = [describe_call(tool, key, args)]
        said += [describe_call(tool, key, args, refs, random.Random(seed)) for seed in range(3)]
        assert said == expected


def test_a_timestamp_among_a_rows_figures_is_said_as_the_row_holds_it():
    # Mist's get_org_stats: an org's figures are its session expiry and creation and modification times,
    # which are timestamps, not amounts ("session expiry 1,718,816,040.00" read as money)
    tool = {
        "name": "get_org_stats",
        "description": "Get the stats of one org.",
        "kind": "computed_read",
        "table": "orgs",
        "computed": {"scope": "item"},
        "input_schema": {"type": "object", "properties": {"org_id": {"type": "string"}}, "required": ["org_id"]},
        "output_schema": {"type": "object"},
    }
    out = {"org_id": "org_00017", "session_expiry": 1718816040.0, "created_time": 1707918360.0, "seats": 1204.5}
    call = {"name": "get_org_stats", "arguments": {"org_id": "org_00017"}, "output": out}
    replies = {write_reply([call], {"get_org_stats": tool}, lambda t: "org_id", f"stats/{s}") for s in range(20)}
    for reply in replies:
        assert "1718816040.0" in reply and "1707918360.0" in reply, reply
        assert "1,204.50" in reply and "1,718" not in reply, reply
        assert reply_problems(reply, [call]) == [], reply
