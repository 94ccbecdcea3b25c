"""The model-backed query writer and refiner (roles ``query_writer`` and ``refiner``) against the scripted local
OpenAI-compatible server, on the fixture trajectories: a valid reply is used and its operator recorded, a reply
that leaks an identifier, names a tool or is no JSON is refused and the programmatic text kept, an unsolvable
rewrite is reverted by calibration, and with every reply refused the rows equal the programmatic ones."""

from __future__ import annotations

import copy
import json
import re

import pytest

from envfactory_assets.config_checks import SettingError
from envfactory_assets.llm.openai_backend import OpenAICompatibleBackend
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig, calibrate_trajectory
from envfactory_assets.synth.refinement.model_querygen import ModelQueryWriter, ModelRefiner, ReplyRefused, parse_reply
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.trajectories.execution import SynthConfig, synthesize_trajectory
from envfactory_assets_tests.fixture_environments import passed_trajectories

CONFIG = CalibrationConfig(k=2, conversational_share=0.0, refiner="model")
PROGRAMMATIC = CalibrationConfig(k=2, conversational_share=0.0)


@pytest.fixture(scope="module")
def trajectories(environments, graph, worker) -> list[dict]:
    out = [
        {**t, "id": f"raw-{i}", "domains": ["ecommerce_retail"]}
        for i, t in passed_trajectories(environments, graph, worker, 12, "querygen")
    ]
    assert len(out) >= 3
    return out[:4]


def _given(body: dict) -> dict:
    """The request the role was first given (retries append to the conversation, the first message stays)."""
    return json.loads(body["messages"][1]["content"])


def _created_id(given: dict) -> str | None:
    """An identifier a create call of the turn assigned (only its result shows it), or None."""
    for call in given["calls"]:
        if call["tool"].startswith("create_"):
            return next((v for k, v in call["result"].items() if k.endswith("_id")), None)
    return None


def _refine(trajectories, environments, worker, responder, config=CONFIG):
    with FakeChatServer(responder=responder) as server:
        refiner = ModelRefiner(OpenAICompatibleBackend(server.base_url, "m", max_retries=0))
        return [
            calibrate_trajectory(t, environments, worker, ProgrammaticSolver(), config, refiner=refiner)
            for t in trajectories
        ]


def _without_records(value, key: str):
    """``value`` (calibration results or trajectories) with every turn's ``key`` record dropped."""
    out = copy.deepcopy(value)
    for item in out if isinstance(out, list) else [out]:
        for turn in item["turns"]:
            turn.pop(key, None)
    return out


def test_a_valid_rewrite_is_used_and_its_operator_recorded(trajectories, environments, worker):
    def polite(body):
        return json.dumps(
            {"operator": "implicit_reference", "query": _given(body)["request"] + " Many thanks in advance."}
        )

    cals = _refine(trajectories, environments, worker, polite)
    turns = [t for c in cals for t in c["turns"]]
    assert turns and all(
        t["refiner"] == {"outcome": "model", "operator": "implicit_reference", "refusals": []} for t in turns
    )
    for t in turns:
        assert t["query"].endswith(" Many thanks in advance.") and t["solve_refined"]["passed"] > 0
        ops = [o for o in t["operators"] if o["obtainable_from"] == "model refiner"]
        assert len(ops) == (2 if "merged_from" in t else 1) and not any(o.get("reverted") for o in ops)
        if "merged_from" not in t:  # a merged turn joins the two rewritten queries (goal merging runs after)
            assert ops[0]["query_before"] + " Many thanks in advance." == ops[0]["query_after"] == t["query"]


def test_a_reply_leaking_an_identifier_only_a_result_shows_is_refused_and_the_fallback_kept(
    trajectories, environments, worker
):
    leaked = []

    def leaky(body):
        given = _given(body)
        created = _created_id(given)
        if created and created not in given["request"]:
            leaked.append(created)
            return json.dumps({"operator": "ambiguity", "query": f"{given['request']} It is {created}."})
        return json.dumps({"operator": "ambiguity", "query": given["request"]})

    cals = _refine(trajectories, environments, worker, leaky)
    programmatic = calibrate_trajectory(trajectories[0], environments, worker, ProgrammaticSolver(), PROGRAMMATIC)
    assert leaked, "no fixture turn creates a row: the test shows nothing"
    fell_back = [t for c in cals for t in c["turns"] if t["refiner"]["outcome"] == "fallback"]
    assert fell_back
    for t in fell_back:
        # every attempt was refused, naming the value; the query stays the programmatic one, no operator added
        assert len(t["refiner"]["refusals"]) == CONFIG.refiner_attempts
        assert all("cannot know" in r["reason"] for r in t["refiner"]["refusals"])
        assert not any(v in t["query"] for v in leaked)
        assert all(o["obtainable_from"] != "model refiner" for o in t["operators"])
    assert [t["query"] for t in _without_records(cals[0], "refiner")["turns"]] == [
        t["query"] for t in programmatic["turns"]
    ]


def test_a_refused_reply_is_asked_again_and_the_retry_used(trajectories, environments, worker):
    def tool_name_first(body):
        given = _given(body)
        if len(body["messages"]) == 2:  # the first try names the tool; the retry (with the reason) does not
            return json.dumps({"operator": "action_compression", "query": f"Call {given['calls'][0]['tool']} now."})
        assert "names a tool" in body["messages"][-1]["content"]
        return json.dumps({"operator": "action_compression", "query": given["request"] + " Many thanks in advance."})

    turn = _refine(trajectories[:1], environments, worker, tool_name_first)[0]["turns"][0]
    assert turn["refiner"]["outcome"] == "model" and len(turn["refiner"]["refusals"]) == 1
    op = next(o for o in turn["operators"] if o["obtainable_from"] == "model refiner")
    assert op["operator"] == "action_compression" and op["refusals"] == 1


def test_an_unsolvable_rewrite_is_reverted_by_calibration(trajectories, environments, worker):
    def vague(body):
        return json.dumps({"operator": "ambiguity", "query": "Do what I usually do."})

    cal = _refine(trajectories[:1], environments, worker, vague)[0]
    turn = cal["turns"][0]
    assert turn["refiner"]["outcome"] == "model" and turn["query_refined_rejected"] == "Do what I usually do."
    assert turn["query"] == turn["query_raw"] and turn["solve_refined"]["passed"] == 0
    model_op = next(o for o in turn["operators"] if o["obtainable_from"] == "model refiner")
    assert model_op["reverted"] and "unsolvable" in model_op["reason"]


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("Sure! Here is the request.", "not one JSON object"),
        ('{"operator": "rephrasing", "query": "List the books."}', "is not one of"),
        ('{"operator": "ambiguity", "query": "  "}', "empty"),
        ('{"operator": "ambiguity"}', 'no "query"'),
    ],
)
def test_malformed_replies_are_refused(reply, reason):
    with pytest.raises(ReplyRefused, match=reason):
        from envfactory_assets.synth.refinement.model_querygen import REFINER_OPERATORS, TurnKnowledge, check_query

        check_query(parse_reply(reply, REFINER_OPERATORS)[1], TurnKnowledge((), frozenset(), frozenset()))
    assert parse_reply('```json\n{"operator": "ambiguity", "query": "Hi."}\n```', ("ambiguity",)) == (
        "ambiguity",
        "Hi.",
    )


def test_with_every_reply_refused_the_rows_are_the_programmatic_rows(trajectories, environments, worker):
    cals = _refine(trajectories, environments, worker, lambda body: "not json at all")
    assert all(
        t["refiner"]["outcome"] == "fallback" and len(t["refiner"]["refusals"]) == CONFIG.refiner_attempts
        for c in cals
        for t in c["turns"]
    )
    programmatic = [
        calibrate_trajectory(t, environments, worker, ProgrammaticSolver(), PROGRAMMATIC) for t in trajectories
    ]
    assert json.dumps(_without_records(cals, "refiner"), sort_keys=True) == json.dumps(programmatic, sort_keys=True)


def _first_passed_chain(environments, graph, worker):
    for chain in sample_chains(graph, 12, "querygen", SamplerConfig(min_tools=3)):
        traj = synthesize_trajectory(chain, graph, environments, worker, SynthConfig(min_turns=2))
        if traj["status"] == "passed" and any(
            _created_id({"calls": [{"tool": c["name"], "result": c["output"]} for c in t["calls"]]})
            for t in traj["turns"]
        ):
            return chain, traj
    raise AssertionError("no passed fixture chain creates a row")


def test_the_query_writer_writes_raw_queries_and_refuses_leaks(environments, graph, worker):
    chain, programmatic = _first_passed_chain(environments, graph, worker)
    config = SynthConfig(min_turns=2, query_writer="model")

    def writer(body):
        given = _given(body)
        created = _created_id(given)
        assert body["messages"][0]["content"].count("a shop owner") == 1  # the persona's voice
        if created:
            return json.dumps({"query": f"{given['draft']} Its id will be {created}."})
        return json.dumps({"query": "As a shop owner: " + given["draft"]})

    with FakeChatServer(responder=writer) as server:
        model = ModelQueryWriter(OpenAICompatibleBackend(server.base_url, "m", max_retries=0))
        traj = synthesize_trajectory(chain, graph, environments, worker, config, model, "a shop owner")
    outcomes = {t["query_writer"]["outcome"] for t in traj["turns"]}
    for turn, before in zip(traj["turns"], programmatic["turns"], strict=False):
        record = turn["query_writer"]
        assert record["draft"] == before["query"]
        if record["outcome"] == "model":
            assert turn["query"] == "As a shop owner: " + before["query"] and not record["refusals"]
        else:  # leaked the created id on every attempt: the programmatic raw query stays
            assert turn["query"] == before["query"] and len(record["refusals"]) == config.query_writer_attempts
    assert "fallback" in outcomes
    # with every reply refused, the trajectory is the programmatic one
    with FakeChatServer(responder=lambda body: "{oops") as server:
        model = ModelQueryWriter(OpenAICompatibleBackend(server.base_url, "m", max_retries=0))
        refused = synthesize_trajectory(chain, graph, environments, worker, config, model, "a shop owner")
    assert json.dumps(_without_records(refused, "query_writer"), sort_keys=True) == json.dumps(
        programmatic, sort_keys=True
    )


def test_the_roles_are_configured_in_the_specs_and_the_dagster_configs():
    import dagster as dg

    from envfactory_assets.defs.synth.assets import RefineConfig, TrajectoryConfig, model_role_backend

    with pytest.raises(SettingError, match=r"^calibration setting refiner='llm': expected one of 'programmatic', "):
        CalibrationConfig(refiner="llm")
    with pytest.raises(SettingError, match=r"^trajectory setting query_writer_attempts=0: "):
        SynthConfig(query_writer_attempts=0)
    with pytest.raises(SettingError, match=r"^refined_trajectories setting refiner='gpt': "):
        RefineConfig(refiner="gpt").check_settings()
    assert RefineConfig(refiner="model").check_settings().refiner == "model"
    assert TrajectoryConfig(query_writer="model").check_settings()[1].query_writer == "model"
    with pytest.raises(dg.Failure, match="refiner='model' needs a model"):
        model_role_backend("refined_trajectories", "refiner", "model", None)
    assert model_role_backend("refined_trajectories", "refiner", "programmatic", object()) is None
    with pytest.raises(ValueError, match="needs a model refiner"):
        calibrate_trajectory({"env_ids": [], "id": "x", "turns": []}, {}, None, ProgrammaticSolver(), CONFIG)


def _drop_first_quoted_value(draft: str) -> str:
    """The draft with its first quoted value ('...') replaced by "it": a request that no longer states a value
    the calls need."""
    return re.sub(r"'[^']+'", "it", draft, count=1)


def test_an_unsolvable_model_raw_query_falls_back_to_the_programmatic_one(environments, graph, worker):
    chains = sample_chains(graph, 12, "querygen", SamplerConfig(min_tools=3))
    config = SynthConfig(min_turns=2, query_writer="model")

    def dropping(body):
        return json.dumps({"query": _drop_first_quoted_value(_given(body)["draft"])})

    with FakeChatServer(responder=dropping) as server:
        model = ModelQueryWriter(OpenAICompatibleBackend(server.base_url, "m", max_retries=0))
        pairs = [
            (
                synthesize_trajectory(c, graph, environments, worker, SynthConfig(min_turns=2)),
                synthesize_trajectory(c, graph, environments, worker, config, model, "a shop owner"),
            )
            for c in chains
        ]
    pairs = [
        (
            {**p, "id": f"raw-{i}", "domains": ["ecommerce_retail"]},
            {**m, "id": f"raw-{i}", "domains": ["ecommerce_retail"]},
        )
        for i, (p, m) in enumerate(pairs)
        if p["status"] == "passed"
    ][:4]
    changed = [t for _, m in pairs for t in m["turns"] if t["query"] != t["query_writer"]["draft"]]
    assert changed and all(t["query_writer"]["outcome"] == "model" for t in changed)

    reverted, compared = 0, 0
    for programmatic, written in pairs:
        expected = calibrate_trajectory(programmatic, environments, worker, ProgrammaticSolver(), PROGRAMMATIC)
        got = calibrate_trajectory(written, environments, worker, ProgrammaticSolver(), PROGRAMMATIC)
        kept_model_text = False
        for turn in got["turns"]:
            record = turn["query_writer"]
            if record["outcome"] == "reverted":  # the model's text failed every attempt, the draft passed
                reverted += 1
                assert turn["query_raw"] == record["draft"] and record["model_query"] != record["draft"]
                # a value dropped (a merged turn's record joins both turns' texts, each with its value dropped)
                assert record["model_query"].count("'") < record["draft"].count("'")
                assert "unsolvable" in record["reason"] and turn["solve_raw"]["passed"] > 0
            else:  # the model's text was solved (the value was not needed, or stated again later) or is the draft
                assert record["outcome"] == "model" and turn["solve_raw"]["passed"] > 0
                kept_model_text |= turn["query_raw"] != record["draft"]
        if not kept_model_text:
            # every unsolvable text reverted: the chain goes on as the programmatic one, same turns and solves
            compared += 1
            assert json.dumps(_without_records(got, "query_writer"), sort_keys=True) == json.dumps(
                expected, sort_keys=True
            )
    assert reverted and compared
