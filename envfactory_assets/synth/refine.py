"""Calibrated refinement operators (EnvFactory paper, QueryGen), each recorded per turn:

- ``implicit_reference`` + ``parameter_omission`` (operator a): see below;
- ``action_compression`` (operator b): a lookup the user would not spell out is dropped from the query: a
  ``list`` call with no argument that matters (only pagination) whose rows a later call of the same turn
  names by a label ("the book whose title is 'X'"); the agent must find the row itself;
- ``ambiguity`` and ``implicit_constraint`` (operator c), grounded in the state: a row picked from the hidden
  state that is the newest of its table becomes "my most recent <thing>" (newest = the largest identifier,
  the environments' ids count up); an enum-valued list filter is stated as an adjective ("the 'fiction'
  books") and the agent must find which parameter takes that value from the tool schema.

Solvability of every rewritten query is re-checked by :mod:`envfactory_assets.synth.calibrate`.

Operator a: a literal row identifier in the raw query that an earlier tool result in the conversation already holds is
replaced by a reference a person would use ("the company you just created", "the contact named
'Ada Lovelace'"); the argument's value is omitted from the query. Each replacement is kept only
when the check proves the value is still obtainable: the referenced value occurs in an earlier tool
result of the conversation and the reference picks out exactly one row there.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from envfactory_assets.sources.names import singular
from envfactory_assets.synth.datasets import MASKED_ARGUMENT_NAMES
from envfactory_assets.synth.phrasing import (
    describe_call,
    join_sentences,
    literal,
    words,
)
from envfactory_assets.synth.trajectories import ToolIndex

LABEL_FIELDS = ("name", "title", "subject", "email", "username", "display_name", "full_name", "label")
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def _reference(producer: dict[str, Any], path: str, same_turn: bool, table: str) -> str | None:
    """A phrase naming the row behind ``producer``'s output at ``path``, or None if none is unambiguous."""
    thing = words(singular(table))
    kind = producer["kind"]
    if kind == "create":
        return f"the new {thing}" if same_turn else f"the {thing} you created earlier"
    if kind in ("get", "update"):
        return f"that {thing}"
    if kind == "list" and path.startswith("items["):
        idx = int(path[len("items["):path.index("]")])
        items = producer["output"].get("items", [])
        item = items[idx]
        for field in LABEL_FIELDS:
            value = item.get(field)
            if isinstance(value, str) and 0 < len(value) <= 60 and sum(1 for i in items if i.get(field) == value) == 1:
                return f"the {thing} whose {words(field)} is {literal(value)}"
        if idx < len(ORDINALS):
            return f"the {ORDINALS[idx]} {thing} in that list"
    return None


def _obtainable(value: Any, earlier_results: list[str]) -> bool:
    """True when ``value`` occurs in one of the earlier tool results (given as their JSON texts)."""
    needle = json.dumps(value, ensure_ascii=False)
    return any(needle in text for text in earlier_results)


def _id_order(value: Any) -> tuple[int, str]:
    return len(str(value)), str(value)


def _most_recent_reference(rows: list[dict[str, Any]], key: str, value: Any, table: str) -> str | None:
    """"my most recent <thing>" when ``value`` is the newest (largest) identifier of ``rows``, else None."""
    ids = [r[key] for r in rows if key in r]
    if not ids or max(ids, key=_id_order) != value:
        return None
    return f"my most recent {words(singular(table))}"


def _compressible(calls: list[dict[str, Any]], turn_start: int, refs: list[dict[str, str]]) -> list[int]:
    """Positions (in the turn) of list calls operator b may drop: only pagination arguments, not the turn's
    last call, and every later use of their rows in the turn names the row by a label."""
    out = []
    for i, call in enumerate(calls[:-1]):
        if call["kind"] != "list" or any(a not in MASKED_ARGUMENT_NAMES for a in call["arguments"]):
            continue
        uses = [(j, arg) for j in range(i + 1, len(calls)) for arg, prov in calls[j]["provenance"].items()
                if prov.get("source") == "output" and prov.get("call") == turn_start + i]
        if uses and all(" whose " in refs[j].get(arg, "") for j, arg in uses):
            out.append(i)
    return out


def refine_turns(turns: list[dict[str, Any]], environments: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Apply the refinement operators to every turn (each turn's ``state_before`` grounds operator c).

    Returns ``(refined_turns, operators)``: each refined turn keeps ``query_raw`` and gets a new
    ``query`` and its own ``operators`` list; ``operators`` is the flat list of applications
    (``turn``, ``call``, ``argument``, ``value``, ``reference``, ``obtainable_from``).
    """
    index = ToolIndex(environments)
    flat: list[dict[str, Any]] = [c for t in turns for c in t["calls"]]
    refined: list[dict[str, Any]] = []
    applied: list[dict[str, Any]] = []
    earlier: list[str] = []  # JSON texts of the tool results before the current call
    position = 0
    for t_idx, turn in enumerate(turns):
        turn_start = position
        new_turn = copy.deepcopy(turn)
        new_turn["query_raw"] = turn["query"]
        new_turn["operators"] = []
        parts = []

        turn_refs: list[dict[str, str]] = []
        touched: set[str] = set()  # tables written earlier in this turn: "most recent" would be unclear

        def record(operator: str, argument: str, value: Any, reference: str, source: str,
                   call_pos: int | None = None) -> None:
            op = {"operator": operator, "turn": t_idx, "call": position if call_pos is None else call_pos,
                  "argument": argument, "value": value, "reference": reference, "obtainable_from": source}
            new_turn["operators"].append(op)
            applied.append(op)

        for call in turn["calls"]:
            tool = index.tools[call["name"]]
            refs: dict[str, str] = {}
            for arg, prov in call["provenance"].items():
                if prov.get("source") != "output":
                    continue
                producer = flat[prov["call"]]
                producer_tool = index.tools[producer["name"]]
                table = producer_tool["table"]
                if prov["path"].rsplit(".", 1)[-1] != index.key_of(producer_tool):
                    continue  # only a row's own identifier can be named by describing the row
                phrase = _reference(producer, prov["path"], prov["call"] >= turn_start, table)
                value = call["arguments"][arg]
                if phrase and _obtainable(value, earlier):
                    refs[arg] = phrase
                    record("implicit_reference", arg, value, phrase, producer["name"])
            if "limit" in call["arguments"]:
                refs["limit"] = ""
                record("parameter_omission", "limit", call["arguments"]["limit"], "", "default")
            key = index.key_of(tool)
            if (key not in refs and call["kind"] in ("get", "update", "delete") and tool["table"] not in touched
                    and call["provenance"].get(key, {}).get("source") == "state"):
                rows = turn["state_before"][call["env_id"]]["tables"][tool["table"]]
                phrase = _most_recent_reference(rows, key, call["arguments"][key], tool["table"])
                if phrase:
                    refs[key] = phrase
                    record("ambiguity", key, call["arguments"][key], phrase, "state: newest row of the table")
            adjective = None
            if call["kind"] == "list":
                props = tool["input_schema"]["properties"]
                enum_arg = next((a for a, v in call["arguments"].items()
                                 if a not in refs and isinstance(v, str) and v in props.get(a, {}).get("enum", ())), None)
                if enum_arg:
                    refs[enum_arg], adjective = "", literal(call["arguments"][enum_arg])
                    record("implicit_constraint", enum_arg, call["arguments"][enum_arg],
                           f"{adjective} {words(tool['table'])}", "tool schema enum")
            sentence = describe_call(tool, key, call["arguments"], refs)
            if adjective:
                sentence = sentence.replace(f"show me the {words(tool['table'])}",
                                            f"show me the {adjective} {words(tool['table'])}", 1)
            if call["kind"] not in ("list", "get"):
                touched.add(tool["table"])
            parts.append(sentence)
            turn_refs.append(refs)
            earlier.append(json.dumps(call["output"], ensure_ascii=False))
            position += 1
        dropped = _compressible(turn["calls"], turn_start, turn_refs)
        for i in dropped:
            record("action_compression", "", None, parts[i], "the agent lists the rows itself", turn_start + i)
        new_turn["query"] = join_sentences([p for i, p in enumerate(parts) if i not in dropped])
        refined.append(new_turn)
    return refined, applied


def _join_goals(first: str, second: str) -> str:
    return first.rstrip(".") + ", and after that " + second[0].lower() + second[1:]


def merge_goals(turns: list[dict[str, Any]], max_calls: int = 5, min_turns: int = 2) -> list[dict[str, Any]]:
    """Operator d, goal merging: the first two consecutive refined turns that together make at most
    ``max_calls`` calls (each at most 2) become one turn asking for both goals, if more than ``min_turns``
    turns remain; at most one merge per trajectory.

    The merged turn runs from the first turn's ``state_before`` to the second's ``state_after``, keeps both
    turns' calls, intents and target tools, joins their raw and refined queries, records a ``goal_merging``
    operator, and keeps the two original turns in ``merged_from`` so calibration can split it back.
    """
    if len(turns) <= min_turns:
        return turns
    for i in range(len(turns) - 1):
        a, b = turns[i], turns[i + 1]
        if len(a["calls"]) + len(b["calls"]) > max_calls or max(len(a["calls"]), len(b["calls"])) > 2:
            continue
        merged = {
            **a, "calls": a["calls"] + b["calls"], "intent": a["intent"] + b["intent"],
            "target_tools": a["target_tools"] + b["target_tools"],
            "query_raw": _join_goals(a["query_raw"], b["query_raw"]), "query": _join_goals(a["query"], b["query"]),
            "assistant_summary": f"{a['assistant_summary']} {b['assistant_summary']}",
            "state_after": b["state_after"], "state_after_hash": b["state_after_hash"],
            "merged_from": [a, b],
        }
        merged["operators"] = a["operators"] + b["operators"] + [{
            "operator": "goal_merging", "turn": i, "call": None, "argument": "", "value": None,
            "reference": f"turns {i} and {i + 1} asked as one request", "obtainable_from": "both goals"}]
        out = turns[:i] + [merged] + turns[i + 2:]
        for k, t in enumerate(out):
            t["turn_index"] = k
        return out
    return turns
