"""Calibrated refinement, operator 1: implicit reference and parameter omission (EnvFactory paper).

A literal row identifier in the raw query that an earlier tool result in the conversation already holds is
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
from envfactory_assets.synth.phrasing import describe_call, join_sentences, literal, words
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


def refine_turns(turns: list[dict[str, Any]], environments: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Apply implicit reference + parameter omission to every turn.

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

        def record(operator: str, argument: str, value: Any, reference: str, source: str) -> None:
            op = {"operator": operator, "turn": t_idx, "call": position, "argument": argument, "value": value,
                  "reference": reference, "obtainable_from": source}
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
            parts.append(describe_call(tool, index.key_of(tool), call["arguments"], refs))
            earlier.append(json.dumps(call["output"], ensure_ascii=False))
            position += 1
        new_turn["query"] = join_sentences(parts)
        refined.append(new_turn)
    return refined, applied
