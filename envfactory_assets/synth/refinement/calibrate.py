"""Calibrated refinement of one trajectory (EnvFactory paper, QueryGen): refine, then re-check solvability.

Goal merging (operator d) may first join two short consecutive turns into one request. For each turn in
order: the raw query is solved by k attempts
(:func:`envfactory_assets.synth.refinement.solver.attempts.solve_turn`);
a turn nobody solves ends the chain there, except that a raw query the model query writer wrote is first
replaced by the programmatic raw query it rewrote, kept when that one is solved (the model's wording fails, not
the turn). When refinement changed the query, the refined query is solved
the same way; if no attempt passes, the turn is reverted to its raw query and its operators are kept as
``reverted`` with the reason; a merged request that cannot be solved is split back into its two turns.
The conversation each solver sees holds the accepted queries of the earlier
turns with their gold calls and tool results (what a real agent would have seen).

Goal expansion (:mod:`envfactory_assets.synth.refinement.expansion`, the other half of operator d) may add a follow-up
read to the last turn, and the conversational mode (:mod:`envfactory_assets.synth.trajectories.conversation`) may
leave a
user-providable value out of a query for the solver to ask the simulated user for; either change that no
attempt solves is reverted to the turn without it, with the reason.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from envfactory_assets.config_checks import finite_number, number_types, one_of, setting, whole_number
from envfactory_assets.quality.conversation_text import clarification_findings, kept_omissions, omissions_not_asked
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.store.ids import content_id
from envfactory_assets.synth.datasets.rows import tools_of
from envfactory_assets.synth.refinement.calibrate_pool import MAX_WORKERS
from envfactory_assets.synth.refinement.expansion import expand_goal
from envfactory_assets.synth.refinement.model_querygen import DEFAULT_ATTEMPTS, QUERYGEN_CHOICES, ModelRefiner
from envfactory_assets.synth.refinement.operators import REFINEMENT_OPERATORS, merge_goals, refine_turns
from envfactory_assets.synth.refinement.solver.attempts import solve_turn
from envfactory_assets.synth.refinement.solver.base import DEFAULT_K, Solver, SolverView
from envfactory_assets.synth.trajectories.conversation import (
    DialogueSolver,
    chosen_for_conversation,
    first_passing_dialogue,
    omit_user_value,
)
from envfactory_assets.synth.trajectories.real_calls import planning_environments, planning_worker
from envfactory_assets.synth.trajectories.simulated_user import ProvidableFlags, SimulatedUser, UserContext

#: Who asks, per domain (stored with every turn; the refined query takes the persona's register, see
#: :func:`envfactory_assets.synth.refinement.phrasing.shape_for_persona`).
PERSONAS: dict[str, tuple[str, ...]] = {
    "travel_transport": ("a frequent business traveller", "a travel agent"),
    "ecommerce_retail": ("a shop owner", "an online shopper"),
    "finance_payments": ("a small-business accountant", "a finance analyst"),
    "productivity": ("an office manager", "a project coordinator"),
    "communication": ("a community manager", "a support agent"),
    "developer_tools": ("a software engineer", "a DevOps engineer"),
    "knowledge_media_health": ("a librarian", "a clinic administrator"),
}


@dataclass(frozen=True)
class CalibrationConfig:
    """Calibrated refinement settings (each field's help says what it does).

    Raises:
        SettingError: (a ValueError) a setting of the wrong type, out of range or not a known choice, named in
            the message.
    """

    k: int = setting(
        DEFAULT_K, "solve attempts per turn, each on a fork of the turn's starting state (paper: 4); at least 1."
    )
    min_turns: int = setting(2, "fewest solvable turns a refined trajectory keeps; with fewer it fails; at least 1.")
    goal_expansion: bool = setting(
        True, "operator d's expansion of each trajectory's last turn (synth/refinement/expansion.py)."
    )
    # a fifth of turns asked conversationally: the paper's conversational benchmarks gain from such data
    conversational_share: float = setting(
        0.2,
        "share (0..1) of turns whose query leaves out a user-providable value the solver must ask the "
        "simulated user for (synth/trajectories/conversation.py); 0 turns conversational mode off.",
    )
    workers: int = setting(
        0,
        f"processes calibrating trajectories with the programmatic solver (0 = one per core, at most "
        f"{MAX_WORKERS}); the rows are the same for every value.",
    )
    # the programmatic refiner alone is the offline default: no model, the rows every test and run expect
    refiner: str = setting(
        QUERYGEN_CHOICES[0],
        "who rewrites each programmatically refined query: 'programmatic' (no model) or 'model' (the "
        "model_backend resource's model, ModelRefiner, with the programmatic query as its fallback).",
    )
    refiner_attempts: int = setting(
        DEFAULT_ATTEMPTS, "model requests per turn before the programmatic refined query is kept; at least 1."
    )

    def __post_init__(self) -> None:
        # the ranged checks first, so a NaN share is refused naming its range; then the rest's types
        whole_number("calibration", "k", self.k, low=1)
        whole_number("calibration", "min_turns", self.min_turns, low=1)
        whole_number("calibration", "workers", self.workers, low=0, high=MAX_WORKERS)
        finite_number("calibration", "conversational_share", self.conversational_share, low=0.0, high=1.0)
        one_of("calibration", "refiner", self.refiner, QUERYGEN_CHOICES)
        whole_number("calibration", "refiner_attempts", self.refiner_attempts, low=1)
        number_types(self, "calibration")


def persona_of(trajectory_id: str, domains: list[str]) -> str:
    """A stable persona for a trajectory: one of its first domain's :data:`PERSONAS`, chosen by id hash."""
    options = PERSONAS.get(domains[0] if domains else "", ("a user",))
    return options[int(hashlib.sha256(trajectory_id.encode()).hexdigest()[:8], 16) % len(options)]


def _stored(solve: dict[str, Any]) -> dict[str, Any]:
    """A solve record without tool outputs (they are recomputable and large): calls, hashes, verdicts."""
    attempts = [
        {
            "calls": [{k: c[k] for k in ("name", "arguments", "ok")} for c in a["calls"]],
            "final_state_hash": a["final_state_hash"],
            "passed": a["passed"],
            "verdict": a["verdict"],
            **({"dialogue": a["dialogue"]} if a.get("dialogue") else {}),
        }
        for a in solve["attempts"]
    ]
    return {**solve, "attempts": attempts}


def _prepare(
    queue: list[dict[str, Any]],
    raw_id: str,
    envs: dict[str, dict[str, Any]],
    worker: SandboxWorker,
    cfg: CalibrationConfig,
    providable: ProvidableFlags,
) -> list[dict[str, Any]]:
    """Goal expansion of the last turn and conversational omissions (each turn keeps a ``fallback``)."""
    if cfg.goal_expansion and queue:
        offset = sum(len(t["calls"]) for t in queue[:-1])
        queue[-1] = expand_goal(queue[-1], envs, worker, offset) or queue[-1]
    if cfg.conversational_share > 0:
        tools = {t["name"]: t for e in envs.values() for t in e["tools"]}
        for i, turn in enumerate(queue):
            if chosen_for_conversation(f"{raw_id}/{i}", cfg.conversational_share):
                # both wordings of each earlier turn: calibration keeps one of them
                earlier = [t[k] for t in queue[:i] for k in ("query", "query_raw")]
                queue[i] = omit_user_value(turn, tools, providable, earlier) or turn
    return queue


def _solver_for(
    solver: Solver, user: SimulatedUser | None, turn: dict[str, Any], providable: ProvidableFlags
) -> Solver:
    if user is None:
        return solver
    return DialogueSolver(solver, user, UserContext(tuple(turn["calls"]), turn["state_before"], providable))


def _draft_if_solvable(
    turn: dict[str, Any],
    solve_raw: dict[str, Any],
    worker: SandboxWorker,
    kept: list[dict[str, Any]],
    tools: tuple[Any, ...],
    player: Solver,
    task_id: str,
    k: int,
) -> dict[str, Any]:
    """The solve of the turn's programmatic raw query when the model writer's raw query failed the k-attempt
    solve and the programmatic one passes; then the turn keeps the programmatic text as ``query_raw`` (and as
    ``query`` where refinement had left the model's text) and its ``query_writer`` record says so:
    ``outcome`` ``"reverted"``, ``model_query`` (the text no attempt solved) and ``reason``. Otherwise (no
    model-written raw query, or the programmatic one fails too) ``solve_raw`` itself, the turn unchanged.

    ``kept``: the turns kept before this one (the solver's conversation so far); ``tools``: the tool specs.
    """
    record = turn.get("query_writer")
    if not isinstance(record, dict) or record.get("outcome") != "model" or record["draft"] == turn["query_raw"]:
        return solve_raw
    draft = record["draft"]
    solve_draft = solve_turn(
        worker, turn["state_before"], SolverView.for_turn(kept, draft, tools), player, turn, task_id + "/raw-draft", k
    )
    if not solve_draft["passed"]:
        return solve_raw
    model_query = turn["query_raw"]
    turn["query_writer"] = {
        **record,
        "outcome": "reverted",
        "model_query": model_query,
        "reason": f"model-written raw query unsolvable (0/{k}); the programmatic one solved "
        f"({solve_draft['passed']}/{k}) is kept",
    }
    turn["query_raw"] = draft
    if turn["query"] == model_query:
        turn["query"] = draft
    for part in turn.get("merged_from") or []:  # a merged turn names its parts by their raw queries: the drafts now
        if isinstance(part.get("query_writer"), dict):
            part["query_raw"] = part["query_writer"]["draft"]
    return solve_draft


#: The seed suffix of the second draw of the programmatic refinement (:func:`_redrawn_queries`).
REDRAW_SEED = "/redrawn"


@dataclass(frozen=True)
class Redraw:
    """One more draw of the programmatic refinement, tried when the turn's refined query is unsolvable
    (:func:`_redrawn_queries`): ``seed_suffix`` appended to the trajectory id, the ``operators`` that may apply
    and whether rows only the hidden state holds may be named (``state_references``;
    :func:`~envfactory_assets.synth.refinement.operators.refine_turns`)."""

    seed_suffix: str
    operators: frozenset[str] = REFINEMENT_OPERATORS
    state_references: bool = True


#: The draws tried in order before a turn gives its raw query back: other wordings of the same refinement,
#: then the implicit references alone (a filter stated as an adjective, a dropped lookup or an omitted default
#: is what the solver failed on), then only references to rows earlier results showed. Each step keeps more of
#: the turn's refinement than the raw query would: one operator the turn cannot carry should not cost it the
#: others.
REDRAWS = (
    Redraw(REDRAW_SEED),
    Redraw("", frozenset({"implicit_reference"})),
    Redraw("", frozenset({"implicit_reference"}), state_references=False),
)


def _turn_key(turn: dict[str, Any]) -> str:
    """A raw turn's identity across two refinement draws: its raw query and its calls."""
    return json.dumps(
        [turn["query_raw"], [[c["name"], c["arguments"]] for c in turn["calls"]]], sort_keys=True, default=str
    )


def _redrawn_queries(
    raw: dict[str, Any],
    envs: dict[str, dict[str, Any]],
    persona: str,
    first: list[dict[str, Any]],
    draw: Redraw = REDRAWS[0],
) -> dict[str, dict[str, Any]]:
    """The trajectory refined again as ``draw`` says: ``{turn key: {"query", "operators", "first_operators"}}``
    per turn whose second draw differs from the first (:func:`_turn_key`); ``first_operators`` are the first
    draw's, so a caller can tell them from operators calibration added since. ``first`` is the first draw made
    again (same seed, same result; :func:`refine_turns`), because calibration has changed the turns it made in
    place since; the caller makes it once for all draws."""
    second, _ = refine_turns(
        raw["turns"],
        envs,
        seed=raw["id"] + draw.seed_suffix,
        persona=persona,
        operators=draw.operators,
        state_references=draw.state_references,
    )
    return {
        _turn_key(b): {"query": b["query"], "operators": b["operators"], "first_operators": a["operators"]}
        for a, b in zip(first, second, strict=False)
        if a["query"] != b["query"]
    }


def kept_dialogue(
    solve: dict[str, Any], kept: list[dict[str, Any]], turn: dict[str, Any]
) -> list[dict[str, str]] | None:
    """The clarification exchange a kept turn carries: that of the first passing attempt of ``solve`` whose
    questions ask only for values the conversation (the ``kept`` turns and ``turn``'s request) had not given,
    read as a person writes them, and, where the turn's request leaves a value out on purpose (a kept
    ``user_clarification`` operator), ask for it; judged by the refined-trajectory gate's own reader
    (:mod:`envfactory_assets.quality.conversation_text`). None when no passing attempt does: the caller reverts
    the omission, or keeps the first passing attempt's exchange for the gate to report. Attempts differ in how
    they break ties between equally fitting tools, so one may ask for a value another reads in the request."""
    for attempt in solve["attempts"]:
        if not attempt["passed"]:
            continue
        dialogue = list(attempt.get("dialogue") or [])
        if omissions_not_asked({**turn, "clarification": dialogue}):
            continue
        findings = clarification_findings([*kept, {**turn, "clarification": dialogue}]) if dialogue else []
        if not any(f["given"] or f["malformed"] for f in findings if f["turn"] == len(kept)):
            return dialogue
    return None


def calibrate_trajectory(
    raw: dict[str, Any],
    environments: dict[str, dict[str, Any]],
    worker: SandboxWorker,
    solver: Solver,
    config: CalibrationConfig | None = None,
    user: SimulatedUser | None = None,
    providable: ProvidableFlags | None = None,
    refiner: ModelRefiner | None = None,
) -> dict[str, Any]:
    """Refine and calibrate one passed ``raw_trajectories`` row.

    ``refiner`` (needed exactly when ``config.refiner`` is ``model``) rewrites each programmatically refined
    query before goal merging (:meth:`~envfactory_assets.synth.refinement.model_querygen.ModelRefiner.refine`); its
    rewrite is solved and, when unsolvable, reverted like any refinement.

    Conversational mode (``config.conversational_share > 0``) needs ``user`` (the simulated user answering
    the solver's clarification questions) and ``providable`` (the tool graph's user-providable flags); a
    kept conversational turn carries the exchange in ``clarification``. A turn changed by goal expansion or a
    conversational omission that no attempt solves is replaced by its ``fallback`` (the turn before the
    change), the operator kept as ``reverted`` with the reason.

    A turn whose raw query the model query writer wrote (``query_writer`` outcome ``model``) and that no
    attempt solves is solved again with the programmatic raw query (the record's ``draft``); when that passes,
    the turn keeps it and its ``query_writer`` outcome becomes ``reverted`` (:func:`_draft_if_solvable`).

    Returns ``{"turns", "operators", "status", "reasons", "persona", "reverted", "dropped_turns"}``. Each kept
    turn gains ``task_id``, ``persona``, ``query_raw``, ``operators`` (reverted ones marked), ``solve_raw``,
    ``solve_refined`` (None when refinement left the query unchanged or was reverted before solving) and
    ``accuracy`` (pass fraction of the query the turn keeps). ``status`` is ``failed`` when fewer than
    ``min_turns`` turns stay solvable.

    Raises:
        ValueError: conversational mode without ``user`` or ``providable``; ``refiner`` given without
            ``config.refiner == "model"``, or missing with it.
    """
    cfg = config or CalibrationConfig()
    if cfg.conversational_share > 0 and (user is None or providable is None):
        raise ValueError("conversational calibration needs a simulated user and the user-providable flags")
    if (refiner is not None) != (cfg.refiner == "model"):
        raise ValueError(
            f"refiner={cfg.refiner!r} needs {'a model refiner' if refiner is None else 'no model refiner'}"
        )
    flags = providable or {}
    envs = {e: environments[e] for e in raw["env_ids"]}
    # tools with a real MCP signature are planned and solved in their canonical names, executed in the real ones
    worker = planning_worker(worker, envs)
    envs = planning_environments(envs)
    persona = persona_of(raw["id"], raw.get("domains") or [])
    refined, _ = refine_turns(raw["turns"], envs, seed=raw["id"], persona=persona)
    if refiner is not None:
        refined = refiner.refine(refined, envs, persona)
    queue = _prepare(merge_goals(refined, min_turns=cfg.min_turns), raw["id"], envs, worker, cfg, flags)
    tools = tuple(tools_of(envs, raw["env_ids"]))
    kept: list[dict[str, Any]] = []
    reasons: list[str] = []
    reverted = 0
    # made on the first refined query no attempt solves: the first draw once, then each draw as it is needed
    first_draw: list[dict[str, Any]] | None = None
    redraws: dict[Redraw, dict[str, dict[str, Any]]] = {}
    while queue:
        turn = queue.pop(0)
        t = len(kept)
        offset = sum(len(k["calls"]) for k in kept)
        task_id = content_id("task", {"raw": raw["id"], "calls": [offset, offset + len(turn["calls"])]})
        turn.update(task_id=task_id, persona=persona, turn_index=t)
        player = _solver_for(solver, user, turn, flags)
        solve_raw = solve_turn(
            worker,
            turn["state_before"],
            SolverView.for_turn(kept, turn["query_raw"], tools),
            player,
            turn,
            task_id + "/raw",
            cfg.k,
        )
        if not solve_raw["passed"] and "fallback" not in turn:
            solve_raw = _draft_if_solvable(turn, solve_raw, worker, kept, tools, player, task_id, cfg.k)
        solve_ref = None
        if solve_raw["passed"] and turn["query"] != turn["query_raw"]:
            solve_ref = solve_turn(
                worker,
                turn["state_before"],
                SolverView.for_turn(kept, turn["query"], tools),
                player,
                turn,
                task_id + "/refined",
                cfg.k,
            )
        if "fallback" in turn and (not solve_raw["passed"] or not (solve_ref or solve_raw)["passed"]):
            original, change = turn["fallback"], turn["operators"][-1]
            why = f"{change['operator']} unsolvable (0/{cfg.k}); reverted to the turn without it"
            original["operators"] = original["operators"] + [{**change, "reverted": True, "reason": why}]
            queue[:0] = [original]
            reverted += 1
            continue
        fallback = turn.pop("fallback", None)
        if "merged_from" in turn and (not solve_raw["passed"] or not (solve_ref or solve_raw)["passed"]):
            first, second = turn["merged_from"]
            why = f"merged request unsolvable (0/{cfg.k}); split back into its two turns"
            first["operators"] = first["operators"] + [{**turn["operators"][-1], "reverted": True, "reason": why}]
            queue[:0] = [first, second]
            reverted += 1
            continue
        if solve_raw["passed"] == 0:
            reasons.append(f"unsolvable turn: 0/{cfg.k} attempts solved turn {t}'s raw query; the chain ends there")
            break
        turn["solve_raw"], turn["solve_refined"] = _stored(solve_raw), None
        accuracy = solve_raw["accuracy"]
        tried = {turn["query"], turn["query_raw"]}
        for n_draw, draw in enumerate(REDRAWS if refiner is None and "merged_from" not in turn else ()):
            # more draws of the programmatic refinement (other plans, labels and reference wordings; then fewer
            # operators) before giving the raw query back
            if solve_ref is None or solve_ref["passed"]:
                break
            if draw not in redraws:
                if first_draw is None:
                    first_draw, _ = refine_turns(raw["turns"], envs, seed=raw["id"], persona=persona)
                redraws[draw] = _redrawn_queries(raw, envs, persona, first_draw, draw)
            again = redraws[draw].get(_turn_key(turn))
            if again is None or again["query"] in tried:
                continue
            tried.add(again["query"])
            solve_again = solve_turn(
                worker,
                turn["state_before"],
                SolverView.for_turn(kept, again["query"], tools),
                player,
                turn,
                task_id + "/redrawn" + (f"/{n_draw}" if n_draw else ""),
                cfg.k,
            )
            if solve_again["passed"]:
                # what calibration added to the turn (a reverted omission or expansion, with its reason)
                # stays; the first draw's refinement operators give way to this draw's
                added = [o for o in turn["operators"] if o not in again["first_operators"]]
                if draw.operators != REFINEMENT_OPERATORS or not draw.state_references:
                    # a narrower draw: what it left out was applied and undone, and the report says so
                    kept_keys = {(o["operator"], o["call"], o["argument"]) for o in again["operators"]}
                    why = f"refined query unsolvable (0/{cfg.k}); the turn keeps a narrower refinement"
                    added += [
                        {**o, "reverted": True, "reason": why}
                        for o in again["first_operators"]
                        if (o["operator"], o["call"], o["argument"]) not in kept_keys
                    ]
                turn["query_redrawn_from"] = turn["query"]
                turn["query"], turn["operators"], solve_ref = again["query"], again["operators"] + added, solve_again
        if solve_ref is not None:
            turn["solve_refined"] = _stored(solve_ref)
            if solve_ref["passed"] == 0:
                why = f"refined query unsolvable (0/{cfg.k}); reverted to the raw query"
                turn["query_refined_rejected"] = turn["query"]
                turn["query"] = turn["query_raw"]
                turn["operators"] = [{**o, "reverted": True, "reason": why} for o in turn["operators"]]
                reverted += 1
            else:
                accuracy = solve_ref["accuracy"]
        solved = solve_ref if solve_ref and solve_ref["passed"] else solve_raw
        dialogue = kept_dialogue(solved, kept, turn)
        omissions = kept_omissions(turn)
        if dialogue is None and fallback is not None and omissions:
            omission = omissions[-1]
            why = "no passing attempt asked for the value the request left out; reverted to the turn without it"
            fallback["operators"] = fallback["operators"] + [{**omission, "reverted": True, "reason": why}]
            queue[:0] = [fallback]
            reverted += 1
            continue
        if dialogue is None:
            dialogue = first_passing_dialogue(solved)
        if dialogue:
            turn["clarification"] = dialogue
        turn["accuracy"] = accuracy
        if "merged_from" in turn:
            turn["merged_from"] = [m["query_raw"] for m in turn["merged_from"]]
        kept.append(turn)
    status = "passed" if len(kept) >= cfg.min_turns else "failed"
    if status == "failed":
        reasons.append(f"too few solvable turns: {len(kept)} (minimum {cfg.min_turns})")
    return {
        "turns": kept,
        "operators": [o for t in kept for o in t["operators"]],
        "status": status,
        "reasons": reasons,
        "persona": persona,
        "reverted": reverted,
        "dropped_turns": len(raw["turns"]) - sum(len(t.get("merged_from") or [0]) for t in kept),
    }
