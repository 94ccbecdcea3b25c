"""The judge of a solve attempt: the goal's final state reached and the facts the user asked for shown.

An attempt passes when its final state equals the gold turn's final state and the facts the user asked to
see occur in its tool results; the per-turn accuracy is ``passing attempts / k``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envfactory_assets.envgen.tools import READ_KINDS
from envfactory_assets.synth.refinement.solver.base import Attempt

PAGINATION_KEYS = frozenset(
    {"total", "limit", "offset", "page", "page_size", "per_page", "next", "cursor", "count", "has_more"}
)


def _leaves(value: Any, out: set[tuple[str, str]], key: str = "") -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if k not in PAGINATION_KEYS:
                _leaves(v, out, k)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, out, key)
    elif key:
        out.add((key, json.dumps(value, sort_keys=True, ensure_ascii=False)))


def answer_facts(turn: Mapping[str, Any]) -> set[tuple[str, str]]:
    """Facts the user asked to see in a turn: ``(field, JSON value)`` leaves of its last call's output when
    that call is a read (``get``/``list``); pagination fields (``total``, ``limit``...) are not facts."""
    facts: set[tuple[str, str]] = set()
    calls = turn.get("calls") or []
    if calls and calls[-1].get("kind") in READ_KINDS:
        _leaves(calls[-1]["output"], facts)
    return facts


def judge_attempt(attempt: Attempt, gold_turn: Mapping[str, Any]) -> tuple[bool, str]:
    """Judge one attempt against the gold turn's goal: ``(passed, reason)``.

    Passes iff the attempt's final state hash equals the gold ``state_after_hash`` and every fact of
    :func:`answer_facts` occurs among the attempt's tool outputs (what its answer can report).
    """
    if attempt.final_state_hash != gold_turn["state_after_hash"]:
        return False, "final state differs from the goal's final state"
    facts = answer_facts(gold_turn)
    if facts:
        got: set[tuple[str, str]] = set()
        for c in attempt.calls:
            _leaves(c.get("output"), got)
        missing = facts - got
        if missing:
            return False, f"answer misses {len(missing)} of {len(facts)} requested facts"
    return True, "final state and requested facts match the goal"
