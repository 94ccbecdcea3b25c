"""The solve loop: ``k`` seeded attempts of a solver per turn (paper: k = 4), each on a fork of the turn's
starting state in the sandbox worker, each judged by :func:`~envfactory_assets.synth.refinement.solver.judge.
judge_attempt`."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from envfactory_assets.runtime.errors import EpisodeLost, SandboxError, StateRejected, WorkerCrashed
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.synth.refinement.solver.base import DEFAULT_K, Attempt, Solver, SolverView, ToolCaller
from envfactory_assets.synth.refinement.solver.judge import judge_attempt


def attempt_seed(task_id: str, attempt_index: int) -> int:
    """Stable seed of attempt ``attempt_index`` of task ``task_id`` (no global random stream)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{task_id}/{attempt_index}".encode()).digest()[:8], "big")


def _caller(worker: SandboxWorker, episode: str) -> ToolCaller:
    """A tool caller bound to one episode; a lost episode or non-JSON arguments become error results."""

    def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            return worker.call(episode, name, arguments)
        except EpisodeLost as exc:
            return {"ok": False, "error": {"type": "episode_lost", "message": str(exc)}}
        except TypeError as exc:
            return {"ok": False, "error": {"type": "bad_arguments", "message": str(exc)}}

    return call


def solve_turn(
    worker: SandboxWorker,
    state_before: Mapping[str, Any],
    view: SolverView,
    solver: Solver,
    gold_turn: Mapping[str, Any],
    task_id: str,
    k: int = DEFAULT_K,
) -> dict[str, Any]:
    """Run ``k`` attempts of ``solver`` on forks of ``state_before`` and judge each.

    Args:
        worker: a sandbox worker with the turn's environments loaded.
        state_before: ``{env_id: saved_state}`` at the start of the turn.
        view: what the solver sees (never the gold turn).
        gold_turn: the turn as synthesized (``state_after_hash``, ``calls``): used by the judge only.
        task_id: stable id of the task; attempt ``i`` is seeded by :func:`attempt_seed` ``(task_id, i)``.
        k: number of attempts (paper: 4), at least 1; the ``k`` setting is checked once, by
            :class:`~envfactory_assets.synth.refinement.calibrate.CalibrationConfig`.

    Returns:
        ``{"solver", "k", "attempts": [{"calls", "answer", "final_state_hash", "passed", "verdict"}],
        "passed": int, "accuracy": passed / k}``; an attempt that could not start is a failed attempt.
    """
    records = []
    try:
        base = worker.open_episode(copy.deepcopy(dict(state_before)))
    except (StateRejected, WorkerCrashed) as exc:
        base, problem = None, f"starting state does not load: {exc}"
    for i in range(k):
        if base is None:
            records.append({**Attempt().to_dict(), "passed": False, "verdict": problem})
            continue
        try:
            episode = worker.fork(base)
        except SandboxError as exc:  # the worker restarted: this attempt is lost, later ones reopen
            records.append({**Attempt().to_dict(), "passed": False, "verdict": f"fork failed: {exc}"})
            try:
                base = worker.open_episode(copy.deepcopy(dict(state_before)))
            except (StateRejected, WorkerCrashed):
                base = None
            continue
        try:
            att = solver.attempt(view, _caller(worker, episode), attempt_seed(task_id, i))
            att.final_state_hash = worker.state_hash(episode) if worker.is_open(episode) else ""
        finally:
            worker.close_episode(episode)
        ok, verdict = judge_attempt(att, gold_turn)
        records.append({**att.to_dict(), "passed": ok, "verdict": verdict})
    if base is not None:
        worker.close_episode(base)
    passed = sum(1 for r in records if r["passed"])
    return {"solver": solver.name, "k": k, "attempts": records, "passed": passed, "accuracy": passed / k}
