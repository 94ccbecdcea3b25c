"""Several independent tool calls in one assistant message (parallel calls).

A trajectory's turn executes its calls one after another, and the dataset used to render each call as its
own assistant message. When some consecutive calls of a turn do not depend on each other, a capable
assistant issues them together in one message (as the OpenAI and Hermes/Qwen formats allow: several
``tool_calls`` in one message, then one ``tool`` result per call); a model that never sees this makes one
call where several are asked for.

Two calls are independent here when neither uses the other's output (argument provenance) and executing
them in the other order gives the same outputs and the same final state. The first is read from the
provenance, the second is checked by replaying the turn with each group reversed in a fresh episode
(for two calls that is every order; for more it is the order farthest from the recorded one).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from envfactory_assets.runtime.canonical import canonical_json, state_hash
from envfactory_assets.runtime.sandbox import (
    SandboxWorker,
    StateRejected,
    WorkerCrashed,
)


def _uses_output_of(call: dict[str, Any], producers: set[int]) -> bool:
    return any(
        p.get("source") == "output" and p.get("call") in producers for p in (call.get("provenance") or {}).values()
    )


def candidate_groups(calls: list[dict[str, Any]], offset: int) -> list[list[int]]:
    """Consecutive runs of ``calls`` (indexes within the turn) in which no call uses an output of another.

    ``offset`` is the trajectory-wide index of the turn's first call (argument provenance refers to
    those). Every index appears in exactly one run, in order; a run of one call is sequential.
    """
    groups: list[list[int]] = []
    for i, call in enumerate(calls):
        if groups and not _uses_output_of(call, {offset + j for j in groups[-1]}):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def run_calls(
    calls: list[dict[str, Any]], state: dict[str, Any], worker: SandboxWorker
) -> tuple[list[Any], str] | None:
    """The outputs of ``calls`` (each with ``name`` and ``arguments``) run in order on a fresh episode of
    ``state``, and the final state's hash; None when a call fails, the state does not load or the worker
    crashes (its environments must be loaded in ``worker``)."""
    try:
        episode = worker.open_episode(copy.deepcopy(state))
    except (StateRejected, WorkerCrashed):
        return None
    try:
        outputs = []
        for call in calls:
            res = worker.call(episode, call["name"], call["arguments"])
            if not res.get("ok"):
                return None
            outputs.append(res.get("output"))
        return outputs, state_hash(worker.save(episode))
    except WorkerCrashed:
        return None
    finally:
        # the worker may have been restarted; the episode is gone either way
        with contextlib.suppress(Exception):
            worker.close_episode(episode)


def order_independent(turn: dict[str, Any], groups: list[list[int]], worker: SandboxWorker) -> bool:
    """Whether replaying ``turn`` on its ``state_before`` with every group of ``groups`` reversed gives each
    call its recorded output and ends in the turn's ``state_after`` (its environments must be loaded in
    ``worker``). A state that does not load or a crashed worker counts as not independent."""
    order = [i for g in groups for i in reversed(g)]
    replayed = run_calls([turn["calls"][i] for i in order], turn["state_before"], worker)
    if replayed is None:
        return False
    outputs, digest = replayed
    return digest == turn["state_after_hash"] and all(
        canonical_json(out) == canonical_json(turn["calls"][i]["output"]) for i, out in zip(order, outputs, strict=True)
    )


def parallel_groups(turn: dict[str, Any], offset: int, worker: SandboxWorker) -> list[list[int]] | None:
    """The turn's calls grouped into assistant messages (indexes within the turn), or None when no two
    calls can share a message: the provenance runs of :func:`candidate_groups`, kept only when
    :func:`order_independent` confirms them."""
    groups = candidate_groups(turn["calls"], offset)
    if all(len(g) == 1 for g in groups) or not order_independent(turn, groups, worker):
        return None
    return groups
