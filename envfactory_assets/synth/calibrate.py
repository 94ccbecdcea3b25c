"""Calibrated refinement of one trajectory (EnvFactory paper, QueryGen): refine, then re-check solvability.

Goal merging (operator d) may first join two short consecutive turns into one request. For each turn in
order: the raw query is solved by k attempts (:func:`envfactory_assets.synth.solve.solve_turn`);
a turn nobody solves ends the chain there. When refinement changed the query, the refined query is solved
the same way; if no attempt passes, the turn is reverted to its raw query and its operators are kept as
``reverted`` with the reason; a merged request that cannot be solved is split back into its two turns.
The conversation each solver sees holds the accepted queries of the earlier
turns with their gold calls and tool results (what a real agent would have seen).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.store.ids import content_id
from envfactory_assets.synth.datasets import tools_of
from envfactory_assets.synth.refine import merge_goals, refine_turns
from envfactory_assets.synth.solve import DEFAULT_K, Solver, SolverView, solve_turn

#: Who asks, per domain (a persona is stored with every turn; the programmatic writer does not vary style).
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
    """``k``: solve attempts per turn (paper: 4); ``min_turns``: fewer kept turns fail the trajectory."""

    k: int = DEFAULT_K
    min_turns: int = 2


def persona_of(trajectory_id: str, domains: list[str]) -> str:
    """A stable persona for a trajectory: one of its first domain's :data:`PERSONAS`, chosen by id hash."""
    options = PERSONAS.get(domains[0] if domains else "", ("a user",))
    return options[int(hashlib.sha256(trajectory_id.encode()).hexdigest()[:8], 16) % len(options)]


def _stored(solve: dict[str, Any]) -> dict[str, Any]:
    """A solve record without tool outputs (they are recomputable and large): calls, hashes, verdicts."""
    attempts = [{"calls": [{k: c[k] for k in ("name", "arguments", "ok")} for c in a["calls"]],
                 "final_state_hash": a["final_state_hash"], "passed": a["passed"], "verdict": a["verdict"]}
                for a in solve["attempts"]]
    return {**solve, "attempts": attempts}


def calibrate_trajectory(raw: dict[str, Any], environments: dict[str, dict[str, Any]], worker: SandboxWorker,
                         solver: Solver, config: CalibrationConfig | None = None) -> dict[str, Any]:
    """Refine and calibrate one passed ``raw_trajectories`` row.

    Returns ``{"turns", "operators", "status", "reasons", "persona", "reverted", "dropped_turns"}``. Each kept
    turn gains ``task_id``, ``persona``, ``query_raw``, ``operators`` (reverted ones marked), ``solve_raw``,
    ``solve_refined`` (None when refinement left the query unchanged or was reverted before solving) and
    ``accuracy`` (pass fraction of the query the turn keeps). ``status`` is ``failed`` when fewer than
    ``min_turns`` turns stay solvable.
    """
    cfg = config or CalibrationConfig()
    envs = {e: environments[e] for e in raw["env_ids"]}
    refined, _ = refine_turns(raw["turns"], envs)
    queue = merge_goals(refined, min_turns=cfg.min_turns)
    tools = tuple(tools_of(envs, raw["env_ids"]))
    persona = persona_of(raw["id"], raw.get("domains") or [])
    kept: list[dict[str, Any]] = []
    reasons: list[str] = []
    reverted = 0
    while queue:
        turn = queue.pop(0)
        t = len(kept)
        offset = sum(len(k["calls"]) for k in kept)
        task_id = content_id("task", {"raw": raw["id"], "calls": [offset, offset + len(turn["calls"])]})
        turn.update(task_id=task_id, persona=persona, turn_index=t)
        solve_raw = solve_turn(worker, turn["state_before"], SolverView.for_turn(kept, turn["query_raw"], tools),
                               solver, turn, task_id + "/raw", cfg.k)
        solve_ref = None
        if solve_raw["passed"] and turn["query"] != turn["query_raw"]:
            solve_ref = solve_turn(worker, turn["state_before"], SolverView.for_turn(kept, turn["query"], tools),
                                   solver, turn, task_id + "/refined", cfg.k)
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
        turn["accuracy"] = accuracy
        if "merged_from" in turn:
            turn["merged_from"] = [m["query_raw"] for m in turn["merged_from"]]
        kept.append(turn)
    status = "passed" if len(kept) >= cfg.min_turns else "failed"
    if status == "failed":
        reasons.append(f"too few solvable turns: {len(kept)} (minimum {cfg.min_turns})")
    return {"turns": kept, "operators": [o for t in kept for o in t["operators"]], "status": status,
            "reasons": reasons, "persona": persona, "reverted": reverted,
            "dropped_turns": len(raw["turns"]) - sum(len(t.get("merged_from") or [0]) for t in kept)}
