"""Conversational mode (simulated user, clarification questions) and goal expansion, on the fixture environments."""

from __future__ import annotations

import json

import pytest

from envfactory_assets.llm.openai_backend import OpenAICompatibleBackend
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.quality.conversation_text import clarification_figures
from envfactory_assets.synth.datasets.rows import replay_check, rl_rows, sft_row, tools_of
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig, calibrate_trajectory
from envfactory_assets.synth.refinement.expansion import expand_goal, follow_up_request
from envfactory_assets.synth.refinement.operators import refine_turns
from envfactory_assets.synth.refinement.solver.attempts import solve_turn
from envfactory_assets.synth.refinement.solver.base import SolverView
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver, answered_value
from envfactory_assets.synth.trajectories.conversation import DialogueSolver, omit_user_value, well_formed
from envfactory_assets.synth.trajectories.simulated_user import (
    REFUSAL,
    ModelUser,
    ProgrammaticUser,
    UserContext,
    providable_flags,
)
from envfactory_assets_tests.fixture_environments import (
    passed_trajectories,
)


@pytest.fixture(scope="module")
def flags(graph):
    return providable_flags(graph)


@pytest.fixture(scope="module")
def trajectories(environments, worker, graph) -> list[dict]:
    out = [
        {**traj, "id": f"raw-{i}", "domains": ["ecommerce_retail"]}
        for i, traj in passed_trajectories(environments, graph, worker, 30, "conversation")
    ]
    assert len(out) >= 10
    return out


@pytest.fixture(scope="module")
def conversational(trajectories, environments, worker, flags) -> list[tuple[dict, dict]]:
    """(raw, calibrated) pairs with every turn asked conversationally where a value qualifies."""
    cfg = CalibrationConfig(k=2, conversational_share=1.0)
    return [
        (t, calibrate_trajectory(t, environments, worker, ProgrammaticSolver(ask=True), cfg, ProgrammaticUser(), flags))
        for t in trajectories
    ]


def test_flags_come_from_the_graph_and_identifiers_are_not_user_providable(flags):
    assert any(flags.values())
    assert all(not p.endswith("_id") for params in flags.values() for p in params)


def test_the_simulated_user_never_reveals_a_value_that_is_not_user_providable(trajectories, flags):
    answered = refused = 0
    for traj in trajectories:
        for turn in traj["turns"]:
            context = UserContext(tuple(turn["calls"]), turn["state_before"], flags)
            allowed = context.providable_values()
            for call in turn["calls"]:
                for name, value in call["arguments"].items():
                    reply = ProgrammaticUser().reply(f"Which {name.replace('_', ' ')} should I use?", context)
                    if name in flags.get(call["name"], ()):
                        # the answer states the value so the asker reads it back (a flag as yes or no)
                        schema = {"type": "boolean"} if isinstance(allowed[name], bool) else {}
                        assert answered_value(name, schema, [reply]) in (
                            json.dumps(allowed[name]),
                            f"'{allowed[name]}'",
                        )
                        answered += 1
                    else:
                        secret = value if isinstance(value, str) else json.dumps(value)
                        is_also_allowed = any(secret in json.dumps(v) for v in allowed.values())
                        assert is_also_allowed or secret not in reply
                        refused += reply == REFUSAL
    assert answered and refused  # the fixtures ask for both kinds


def test_a_model_user_sees_only_providable_values_and_a_leaking_reply_is_refused(trajectories, flags):
    turn = next(
        t
        for tr in trajectories
        for t in tr["turns"]
        if any(a.endswith("_id") and isinstance(v, str) for c in t["calls"] for a, v in c["arguments"].items())
        and UserContext(tuple(t["calls"]), {}, flags).providable_values()
    )
    context = UserContext(tuple(turn["calls"]), turn["state_before"], flags)
    secret = next(
        v for c in turn["calls"] for a, v in c["arguments"].items() if a.endswith("_id") and isinstance(v, str)
    )
    name, value = next(iter(context.providable_values().items()))
    with FakeChatServer([f"Sure, it is '{secret}'.", f"The {name} is '{value}'."]) as server:
        user = ModelUser(OpenAICompatibleBackend(server.base_url, "m", max_retries=0))
        leaked = user.reply("What is the identifier?", context)
        fine = user.reply(f"Which {name} should I use?", context)
        sent = json.dumps(server.requests)
    assert leaked == REFUSAL
    assert fine == f"The {name} is '{value}'."
    assert secret not in sent  # the model was never shown the withheld identifier


def test_a_query_without_a_user_value_is_solved_only_by_asking_the_user(trajectories, environments, worker, flags):
    tools = {t["name"]: t for e in environments.values() for t in e["tools"]}
    refined = [refine_turns(tr["turns"], environments)[0] for tr in trajectories]
    traj, turns, t, turn = next(
        (tr, rt, i, o)
        for tr, rt in zip(trajectories, refined, strict=False)
        for i, tu in enumerate(rt)
        if (o := omit_user_value(tu, tools, flags)) is not None
    )
    op = turn["operators"][-1]
    assert op["operator"] == "user_clarification" and op["value"] not in turn["query"]
    assert op["query_before"] == turns[t]["query"] and op["query_after"] == turn["query"]
    assert turn["fallback"] is turns[t] and turn["calls"] == turns[t]["calls"]
    view = SolverView.for_turn(turns[:t], turn["query"], tools_of(environments, traj["env_ids"]))
    silent = solve_turn(worker, turn["state_before"], view, ProgrammaticSolver(), turn, "conv", k=2)
    assert silent["passed"] == 0  # without the value nothing passes
    context = UserContext(tuple(turn["calls"]), turn["state_before"], flags)
    asking = solve_turn(
        worker,
        turn["state_before"],
        view,
        DialogueSolver(ProgrammaticSolver(ask=True), ProgrammaticUser(), context),
        turn,
        "conv",
        k=2,
    )
    assert asking["passed"] == 2
    dialogue = asking["attempts"][0]["dialogue"]
    assert well_formed(dialogue) and op["value"] in dialogue[1]["content"]


def test_conversational_turns_are_solved_and_their_messages_well_formed(conversational, environments, flags):
    kept = [
        (raw, cal, t)
        for raw, cal in conversational
        for t in cal["turns"]
        if any(o["operator"] == "user_clarification" and not o.get("reverted") for o in t["operators"])
    ]
    assert len(kept) >= 3
    for raw, cal, turn in kept:
        op = next(o for o in turn["operators"] if o["operator"] == "user_clarification")
        assert turn["accuracy"] > 0 and op["value"] not in turn["query"]
        assert well_formed(turn["clarification"]) and op["value"] in turn["clarification"][-1]["content"]
        messages = sft_row({**cal, "env_ids": raw["env_ids"]}, environments)["messages"]
        at = next(i for i, m in enumerate(messages) if m["role"] == "user" and m["content"] == turn["query"])
        assert messages[at + 1 : at + 1 + len(turn["clarification"])] == turn["clarification"]
        assert messages[at + 1 + len(turn["clarification"])]["tool_calls"]  # then the calls
    # the user's answers carry only user-providable values, never an identifier or other withheld value
    for _raw, _cal, turn in kept:
        context = UserContext(tuple(turn["calls"]), turn["state_before"], flags)
        answers = " ".join(m["content"] for m in turn["clarification"] if m["role"] == "user")
        assert all(str(v) not in answers for v in context.withheld_values() if len(str(v)) >= 3)
        assert any(f"'{v}'" in answers for v in context.providable_values().values())


def test_clarifications_ask_only_for_values_the_conversation_has_not_given(conversational):
    # judged by the detector of quality.conversation_text, not by the solver that asked
    figures = clarification_figures([{**cal, "id": raw["id"]} for raw, cal in conversational])
    assert figures["questions"] >= 3 and figures["omissions"] >= 3
    assert figures["asking_for_given"] == 0 and figures["malformed"] == 0, figures["examples"]
    assert figures["omissions_asked"] == figures["omissions"]


def test_rl_rows_of_conversational_trajectories_replay_exactly(conversational, environments, worker):
    rows = [
        r
        for raw, cal in conversational
        if cal["status"] == "passed" and any(t.get("clarification") for t in cal["turns"])
        for r in rl_rows({**cal, "env_ids": raw["env_ids"]}, {e: environments[e] for e in raw["env_ids"]})
    ]
    assert rows
    asked = 0
    for row in rows:
        assert row["prompt"][-1]["role"] == "user"
        assert replay_check(row, worker) is None
        if row["prompt"][-2]["role"] == "assistant" and row["prompt"][-2]["content"].endswith("?"):
            asked += 1  # the prompt ends with the user's answer, right before the gold calls
    assert asked


def test_conversational_mode_is_off_by_default(trajectories, environments, worker):
    cal = calibrate_trajectory(
        trajectories[0], environments, worker, ProgrammaticSolver(), CalibrationConfig(k=2, conversational_share=0.0)
    )
    assert not any(t.get("clarification") for t in cal["turns"])
    assert not any(o["operator"] == "user_clarification" for o in cal["operators"])
    with pytest.raises(ValueError, match="simulated user"):
        calibrate_trajectory(
            trajectories[0],
            environments,
            worker,
            ProgrammaticSolver(),
            CalibrationConfig(k=2, conversational_share=0.5),
        )


# ----------------------------------------------------------------------------- goal expansion
def _expandable(trajectories, environments, worker, referenced=False):
    """The first trajectory whose last turn expands (with ``referenced``: to the row its write refers to)."""
    for traj in trajectories:
        refined, _ = refine_turns(traj["turns"], environments)
        offset = sum(len(t["calls"]) for t in refined[:-1])
        new = expand_goal(refined[-1], environments, worker, offset)
        if new is not None and (not referenced or "belongs to" in new["query"]):
            return traj, refined, new
    raise AssertionError("no fixture trajectory ends with a write of a table that has a get tool")


def test_goal_expansion_adds_a_grounded_follow_up_read(trajectories, environments, worker):
    traj, refined, new = _expandable(trajectories, environments, worker)
    last, extra = refined[-1]["calls"][-1], new["calls"][-1]
    assert new["calls"][:-1] == refined[-1]["calls"] and extra["kind"] == "get"
    key = next(iter(extra["arguments"]))
    assert extra["arguments"][key] == last["output"][key] and extra["output"][key] == last["output"][key]
    assert new["state_after_hash"] == refined[-1]["state_after_hash"]  # a read: the goal state is unchanged
    op = new["operators"][-1]
    assert op["operator"] == "goal_expansion" and op["query_before"] == refined[-1]["query"]
    assert op["query_after"] == new["query"] and new["query"].startswith(refined[-1]["query"].rstrip("."))
    assert op["reference"] in new["query"] and op["reference"] in new["query_raw"]


def test_calibration_keeps_a_solvable_expansion_and_its_rl_row_replays(trajectories, environments, worker):
    traj, _, _ = _expandable(trajectories, environments, worker)
    cal = calibrate_trajectory(
        traj, environments, worker, ProgrammaticSolver(), CalibrationConfig(k=2, conversational_share=0.0)
    )
    last = cal["turns"][-1]
    assert any(o["operator"] == "goal_expansion" and not o.get("reverted") for o in last["operators"])
    assert last["calls"][-1]["kind"] == "get" and last["accuracy"] > 0
    for row in rl_rows({**cal, "env_ids": traj["env_ids"]}, environments):
        assert replay_check(row, worker) is None


class _NoFollowUps(ProgrammaticSolver):
    """A solver that stops before any "look up that X" follow-up (it never does a second step)."""

    def attempt(self, view, call_tool, seed):
        query = view.messages[-1]["content"].split(", and after that look up ")[0]
        return super().attempt(
            SolverView(view.messages[:-1] + ({"role": "user", "content": query},), view.tools), call_tool, seed
        )


def test_an_unsolvable_expansion_is_reverted_with_the_reason(trajectories, environments, worker):
    traj, refined, new = _expandable(trajectories, environments, worker, referenced=True)
    assert new["calls"][-1]["name"] != new["calls"][-2]["name"]  # a read of the row the write refers to
    cal = calibrate_trajectory(
        traj, environments, worker, _NoFollowUps(), CalibrationConfig(k=2, conversational_share=0.0)
    )
    last = cal["turns"][-1]
    op = next(o for o in last["operators"] if o["operator"] == "goal_expansion")
    assert op["reverted"] and "unsolvable" in op["reason"]
    assert op["query_after"] == op["query_before"].rstrip(".") + ", and after that " + op["reference"] + "."
    assert op["reference"] == new["operators"][-1]["reference"] == follow_up_request("books", "authors")
    assert last["query"] in (op["query_before"], last["query_raw"]) and op["reference"] not in last["query"]
    assert last["calls"][-1] == traj["turns"][-1]["calls"][-1] and last["accuracy"] > 0  # the follow-up is gone


class _CannotRead(ProgrammaticSolver):
    """A solver that cannot read the given request texts (it makes no call for them), and reads the rest."""

    def __init__(self, unreadable):
        super().__init__()
        self.unreadable = set(unreadable)

    def attempt(self, view, call_tool, seed):
        if view.messages[-1]["content"] in self.unreadable:
            return super().attempt(
                SolverView(view.messages[:-1] + ({"role": "user", "content": ""},), view.tools), call_tool, seed
            )
        return super().attempt(view, call_tool, seed)


def test_a_refined_query_no_attempt_solves_is_drawn_again_before_the_raw_query_comes_back(
    trajectories, environments, worker
):
    from envfactory_assets.synth.refinement.calibrate import REDRAW_SEED, REDRAWS, persona_of

    cfg = CalibrationConfig(k=2, conversational_share=0.0)
    plain = [calibrate_trajectory(t, environments, worker, ProgrammaticSolver(), cfg) for t in trajectories]
    # the first refined turn of a trajectory whose second draw words it differently
    traj, cal, turn = next(
        (t, c, c["turns"][0])
        for t, c in zip(trajectories, plain, strict=False)
        if c["turns"]
        and c["turns"][0]["query"] != c["turns"][0]["query_raw"]
        and "merged_from" not in c["turns"][0]
        and refine_turns(
            t["turns"], environments, seed=t["id"] + REDRAW_SEED, persona=persona_of(t["id"], t["domains"])
        )[0][0]["query"]
        != c["turns"][0]["query"]
    )
    redrawn = calibrate_trajectory(traj, environments, worker, _CannotRead([turn["query"]]), cfg)["turns"][0]
    assert redrawn["query_redrawn_from"] == turn["query"] and redrawn["query"] not in (turn["query"], turn["query_raw"])
    assert redrawn["solve_refined"]["passed"] > 0 and not any(o.get("reverted") for o in redrawn["operators"])
    assert redrawn["calls"] == turn["calls"] and redrawn["state_after_hash"] == turn["state_after_hash"]
    # when the second draw cannot be read either, narrower draws come next; the raw query comes back only when
    # none of them can be read
    persona = persona_of(traj["id"], traj["domains"])
    unreadable, narrower = [turn["query"], redrawn["query"]], 0
    for draw in REDRAWS[1:]:
        narrow = refine_turns(
            traj["turns"],
            environments,
            seed=traj["id"] + draw.seed_suffix,
            persona=persona,
            operators=draw.operators,
            state_references=draw.state_references,
        )[0][0]
        got = calibrate_trajectory(traj, environments, worker, _CannotRead(unreadable), cfg)["turns"][0]
        if narrow["query"] not in (*unreadable, turn["query_raw"]):
            assert got["query"] == narrow["query"] and got["query_redrawn_from"] == turn["query"]
            assert {o["operator"] for o in got["operators"] if not o.get("reverted")} <= draw.operators
            assert all("narrower refinement" in o["reason"] for o in got["operators"] if o.get("reverted"))
            narrower += 1
        unreadable.append(narrow["query"])
    assert narrower >= 1  # the turn has operators besides its implicit references, or references to the state
    both = calibrate_trajectory(traj, environments, worker, _CannotRead(unreadable), cfg)
    first = both["turns"][0]
    assert first["query"] == first["query_raw"] and "query_redrawn_from" not in first
    assert all(o["reverted"] for o in first["operators"]) and both["reverted"] >= 1


class _ReadsOnly(ProgrammaticSolver):
    """A solver (asking the user when a value is missing) that reads only the given request texts."""

    def __init__(self, readable):
        super().__init__(ask=True)
        self.readable = set(readable)

    def attempt(self, view, call_tool, seed):
        if view.messages[-1]["role"] == "user" and view.messages[-1]["content"] not in self.readable:
            view = SolverView(view.messages[:-1] + ({"role": "user", "content": ""},), view.tools)
        return super().attempt(view, call_tool, seed)


def test_a_second_draw_keeps_the_reverted_omission_calibration_recorded_on_the_turn(
    trajectories, environments, worker, flags
):
    from envfactory_assets.synth.refinement.calibrate import REDRAW_SEED, persona_of

    cfg = CalibrationConfig(k=2, conversational_share=1.0)
    checked = 0
    for traj in trajectories:
        persona = persona_of(traj["id"], traj["domains"])
        first, _ = refine_turns(traj["turns"], environments, seed=traj["id"], persona=persona)
        second, _ = refine_turns(traj["turns"], environments, seed=traj["id"] + REDRAW_SEED, persona=persona)
        raw = {t["query"] for t in traj["turns"]}
        # the wording that leaves a value for the user to give is never read: the omission is reverted
        kept = calibrate_trajectory(
            traj, environments, worker, _ReadsOnly(raw | {t["query"] for t in first}), cfg, ProgrammaticUser(), flags
        )
        # ... and the first draw not either: the second draw is kept, on top of that reverted omission
        redrawn = calibrate_trajectory(
            traj, environments, worker, _ReadsOnly(raw | {t["query"] for t in second}), cfg, ProgrammaticUser(), flags
        )
        for a, b in zip(kept["turns"], redrawn["turns"], strict=False):
            omitted = [o for o in a["operators"] if o["operator"] == "user_clarification" and o.get("reverted")]
            if "query_redrawn_from" in b and omitted:
                checked += 1
                assert [o for o in b["operators"] if o["operator"] == "user_clarification"] == omitted
                assert b["calls"] == a["calls"] and b["state_after_hash"] == a["state_after_hash"]
    assert checked >= 3, checked
