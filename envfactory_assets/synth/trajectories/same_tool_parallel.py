"""Turns that call one tool several times in one assistant message (same-tool parallel calls).

The parallel calls of :mod:`envfactory_assets.synth.trajectories.parallel` come from chains, whose
consecutive calls are different tools, so a model trained on them never sees one function called for several
targets at once, which is what a request such as "look up orders 17 and 23" asks for, and what every task of
BFCL v3's ``parallel`` category is (one function, two to four argument sets; Patil et al., *The Berkeley
Function Calling Leaderboard*, 2024). A checkpoint that never saw it writes one call whose JSON repeats the
varying key.

A same-tool parallel turn asks for one read tool over two or three targets taken from the episode's state at
the turn's position:

- a keyed read (``get``): the keys of two or three rows of its table ("look up book 'b1', then 'b2'");
- a filtered read (``list``, ``count``) with a filter field its rows hold: two or three distinct values of
  that field ("count the orders with status 'shipped', and the same for 'pending'"). A search is left out:
  what varies is a filter, never its text, and a search asked for without its text reads "search the
  tickets for  where status is 'open'".

The calls are executed in the sandbox on that state in one message; the turn is kept only when each call
succeeds, the state is unchanged (reads only, so the turn can go anywhere in a trajectory without touching
the states of the turns after it) and replaying the calls in reverse order gives the same outputs
(:func:`~envfactory_assets.synth.trajectories.parallel.order_independent`). The reply reports every call's
result and names the target it was for
(:func:`~envfactory_assets.synth.refinement.replies.write_reply` with ``name_rows``).
"""

from __future__ import annotations

import math
import random
from typing import Any

from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.synth.refinement.phrasing import (
    describe_call,
    row_fields_phrase,
    spoken_value,
    stated_row_fields,
)
from envfactory_assets.synth.refinement.replies import write_reply
from envfactory_assets.synth.trajectories.execution import ToolIndex
from envfactory_assets.synth.trajectories.parallel import order_independent, run_calls
from envfactory_assets.synth.trajectories.real_calls import known_row_arguments

FILTERED_KINDS = ("list", "count")
# arguments that page or cap a read: never the one the targets differ in
_PAGING = frozenset({"limit", "offset", "page", "page_size", "per_page", "cursor", "query"})
# how the request asks for the other targets after describing the first call; {rest} is the spoken values
FOLLOW_ONS = (
    " Do the same for {rest}.",
    " I need the same for {rest} too.",
    " And the same for {rest}, please.",
    " Then do that for {rest} as well.",
    " Please also do it for {rest}.",
)
MIN_TARGETS, MAX_TARGETS = 2, 3


def _rows(state: dict[str, Any], env_id: str, table: str) -> list[dict[str, Any]]:
    rows = ((state.get(env_id) or {}).get("tables") or {}).get(table) or []
    return [r for r in rows if isinstance(r, dict)]


def _sayable(value: Any) -> bool:
    """A value a user can state in a sentence: a short string or a finite number (no bool, no structure).
    A string with a quote, a control character (a tab, a carriage return) or spaces around it is left out:
    the request quotes it, and a person typing it would not give back the exact value the call needs."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    return (
        isinstance(value, str)
        and 0 < len(value) <= 60
        and value.isprintable()
        and value == value.strip()
        and "'" not in value
    )


def _categorical(schema: Any) -> bool:
    """A filter a person names values of: text or an integer, not a measured number or a point in time
    ("price 289.58 and 380.0" or two timestamps are not how anyone asks)."""
    if not isinstance(schema, dict):
        return False
    return schema.get("type") in ("string", "integer") and schema.get("format") not in ("date", "date-time", "time")


def _plans(index: ToolIndex, env_ids: list[str], state: dict[str, Any]) -> list[tuple[dict[str, Any], str, list[Any]]]:
    """``(tool, varying argument, candidate values)`` for every read of ``env_ids`` that takes one argument
    (the varying one) and has at least :data:`MIN_TARGETS` distinct values of it in ``state``."""
    plans = []
    for env_id in env_ids:
        for tool in index.envs[env_id]["tools"]:
            kind = tool.get("kind")
            if tool.get("singleton") or kind not in ("get", *FILTERED_KINDS):
                continue
            props = (tool.get("input_schema") or {}).get("properties") or {}
            required = set((tool.get("input_schema") or {}).get("required") or ())
            key = index.key_of(index.tools[tool["name"]])
            rows = _rows(state, env_id, tool["table"])
            if kind == "get":
                argument: str | None = key
            else:
                # the filter a person would name several values of: the field with the fewest distinct
                # sayable values (a status or a category rather than a timestamp), by name on a tie
                counts = {
                    f: len({r[f] for r in rows if _sayable(r.get(f))})
                    for f, schema in props.items()
                    if f not in _PAGING and f != key and _categorical(schema)
                }
                fields = sorted((n, f) for f, n in counts.items() if n >= MIN_TARGETS)
                argument = fields[0][1] if fields else None
            if argument is None:
                continue
            if argument not in props or required - {argument}:
                continue
            values: list[Any] = []
            for row in rows:
                value = row.get(argument)
                if _sayable(value) and value not in values:
                    values.append(value)
            if len(values) >= MIN_TARGETS:
                plans.append((index.tools[tool["name"]], argument, values))
    return plans


def same_tool_parallel_turn(
    trajectory: dict[str, Any],
    environments: dict[str, dict[str, Any]],
    position: int,
    rng: random.Random,
    worker: SandboxWorker,
) -> dict[str, Any] | None:
    """A turn to insert before ``trajectory["turns"][position]`` (``position == len(turns)``: at the end) that
    calls one read tool of the trajectory's environments for two or three targets in one assistant message,
    or None when no read of them has two targets in the state there, or no drawn one executes cleanly.

    ``worker`` must have the trajectory's environments loaded. The turn has the keys of a synthesized turn
    (``query``, ``intent``, ``target_tools``, ``calls`` with ``name``/``env_id``/``kind``/``arguments``/
    ``provenance`` (every argument ``{"source": "user"}``)/``output``, ``assistant_summary``, equal
    ``state_before``/``state_after`` and hashes), ``call_groups`` = one group of all calls, and
    ``same_tool_parallel``: ``{"tool", "argument", "n"}``.

    Raises:
        ValueError: ``position`` is not a whole number (``int``, not ``bool``) in ``0..len(turns)``.
    """
    turns = trajectory["turns"]
    if not isinstance(position, int) or isinstance(position, bool):
        raise ValueError(f"position must be a whole number of turns, got {position!r}")
    if not 0 <= position <= len(turns):
        raise ValueError(f"position {position} is outside 0..{len(turns)} for a trajectory of {len(turns)} turns")
    if not turns:
        return None
    if position == 0:
        state, digest = turns[0]["state_before"], turns[0]["state_before_hash"]
    else:
        state, digest = turns[position - 1]["state_after"], turns[position - 1]["state_after_hash"]
    env_ids = list(trajectory["env_ids"])
    index = ToolIndex({e: environments[e] for e in env_ids})
    plans = _plans(index, env_ids, state)
    rng.shuffle(plans)
    # a few draws: a plan whose targets do not all read cleanly (a filter a row holds but the tool refuses)
    # gives way to the next
    for tool, argument, values in plans[:3]:
        targets = rng.sample(values, min(len(values), rng.randint(MIN_TARGETS, MAX_TARGETS)))
        calls = [
            {
                "node": f"{index.env_of[tool['name']]}.{tool['name']}",
                "name": tool["name"],
                "env_id": index.env_of[tool["name"]],
                "kind": tool["kind"],
                "arguments": {argument: value},
                "provenance": {argument: {"source": "user"}},
            }
            for value in targets
        ]
        if tool.get("mcp_binding"):
            # a real signature's fields of each named row (get_issue's owner and repo) the request states
            # unless an earlier result showed them
            earlier = [c for t in turns[:position] for c in t["calls"]]
            rows = _rows(state, index.env_of[tool["name"]], tool["table"])
            for call in calls:
                known = known_row_arguments(tool, call["arguments"], rows, earlier)
                if known:
                    call["row_arguments"] = known
        executed = run_calls(calls, state, worker)
        if executed is None or executed[1] != digest:
            continue
        for call, output in zip(calls, executed[0], strict=True):
            call["output"] = output
        turn = {
            "query": _request(tool, index.key_of(tool), argument, calls, rng),
            "intent": [{"kind": tool["kind"], "table": tool["table"], "env_id": c["env_id"]} for c in calls],
            "target_tools": [tool["name"]] * len(calls),
            "calls": calls,
            "call_groups": [list(range(len(calls)))],
            "state_before": state,
            "state_after": state,
            "state_before_hash": digest,
            "state_after_hash": digest,
            "same_tool_parallel": {"tool": tool["name"], "argument": argument, "n": len(calls)},
        }
        if not order_independent(turn, turn["call_groups"], worker):
            continue
        seed = f"{trajectory.get('id', '')}/{position}/same_tool_parallel"
        turn["assistant_summary"] = write_reply(calls, index.tools, index.key_of, seed, name_rows=True)
        return turn
    return None


def _request(tool: dict[str, Any], key: str, argument: str, calls: list[dict[str, Any]], rng: random.Random) -> str:
    """The user's request: the first call described as any synthesized call is
    (:func:`~envfactory_assets.synth.refinement.phrasing.describe_call`), then a follow-on naming the other
    calls' targets in the same spoken form (each with the row's fields a real signature needs stated,
    :func:`~envfactory_assets.synth.refinement.phrasing.stated_row_fields`)."""
    schema = ((tool.get("input_schema") or {}).get("properties") or {}).get(argument)
    first = describe_call(tool, key, calls[0]["arguments"], rng=rng, stated=stated_row_fields(calls[0]))
    spoken = [
        spoken_value(c["arguments"][argument], schema, rng) + row_fields_phrase(stated_row_fields(c), rng)
        for c in calls[1:]
    ]
    rest = spoken[0] if len(spoken) == 1 else ", ".join(spoken[:-1]) + " and " + spoken[-1]
    text = first[:1].upper() + first[1:]
    text = text.rstrip(".?") + ("?" if text.endswith("?") else ".")
    return text + rng.choice(FOLLOW_ONS).format(rest=rest)
