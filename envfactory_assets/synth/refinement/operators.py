"""Calibrated refinement operators (EnvFactory paper, QueryGen), each recorded per turn:

- ``implicit_reference`` + ``parameter_omission`` (operator a): see below;
- ``action_compression`` (operator b): a lookup the user would not spell out is dropped from the query: a
  ``list`` call with no argument that matters (only pagination) whose rows a later call of the same turn
  names by a label ("the book whose title is 'X'"); the agent must find the row itself;
- ``ambiguity`` and ``implicit_constraint`` (operator c), grounded in the state: a row picked from the hidden
  state that is the newest of its table becomes "my most recent <thing>" (newest = the largest identifier,
  the environments' ids count up); an enum-valued list filter is stated as an adjective ("the 'fiction'
  books") and the agent must find which parameter takes that value from the tool schema.

Solvability of every rewritten query is re-checked by :mod:`envfactory_assets.synth.refinement.calibrate`.

Operator a: a literal row identifier in the raw query that an earlier tool result in the conversation already holds is
replaced by a reference a person would use ("the company you just created", "the contact named
'Ada Lovelace'"); the argument's value is omitted from the query. Each replacement is kept only
when the check proves the value is still obtainable: the referenced value occurs in an earlier tool
result of the conversation and the reference picks out exactly one row there.
"""

from __future__ import annotations

import copy
import json
import random
import re
from typing import Any

from envfactory_assets.envgen.tools import KEYED_KINDS, READ_KINDS
from envfactory_assets.sources.names import singular
from envfactory_assets.synth.datasets.rows import MASKED_ARGUMENT_NAMES
from envfactory_assets.synth.refinement.phrasing import (
    describe_call,
    join_sentences,
    literal,
    minting_call,
    shape_for_persona,
    spoken_field,
    spoken_table,
    spoken_thing,
    spoken_things,
    stated_row_fields,
    strip_lead,
    strip_register,
    words,
)
from envfactory_assets.synth.refinement.replies import join_replies, write_reply
from envfactory_assets.synth.refinement.report import assigned_identifiers, quotes
from envfactory_assets.synth.trajectories.execution import ToolIndex

LABEL_FIELDS = ("name", "title", "subject", "email", "username", "display_name", "full_name", "label")
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def _describable_fields(row: dict[str, Any], key: str, avoid: tuple[Any, ...]) -> list[str]:
    """Fields of ``row`` a person could describe it by, in the order they would: label fields (name,
    title...), then other short text that is not an identifier or a timestamp, then whole numbers; a value in
    ``avoid`` is left out."""
    others = [
        f
        for f, v in row.items()
        if f not in LABEL_FIELDS
        and f != key
        and not f.endswith("_id")
        and isinstance(v, str)
        and not re.fullmatch(r"[\d\-T:.Z+ ]+", v)
    ]
    numbers = [
        f
        for f, v in row.items()
        if f != key and not f.endswith("_id") and isinstance(v, int) and not isinstance(v, bool)
    ]
    return [
        f
        for f in [*LABEL_FIELDS, *sorted(others), *sorted(numbers)]
        if (
            (isinstance(row.get(f), str) and 0 < len(row[f]) <= 60 and "'" not in row[f])
            or (f in numbers and isinstance(row.get(f), int))
        )
        and not any(row[f] == a and type(row[f]) is type(a) for a in avoid)
    ]


def _describing(
    row: dict[str, Any], rows: list[dict[str, Any]], key: str, avoid: tuple[Any, ...] = ()
) -> tuple[str, Any] | None:
    """A field that picks ``row`` out of ``rows`` by what a person would know of it
    (:func:`_describable_fields`, first unique one), as ``(field, value)``; None if none is unique. A value in
    ``avoid`` (one an earlier call of the turn wrote, so another row may hold it by now) describes nothing."""
    for field in _describable_fields(row, key, avoid):
        if sum(1 for r in rows if r.get(field) == row[field]) == 1:
            return field, row[field]
    return None


def _description(
    row: dict[str, Any], rows: list[dict[str, Any]], key: str, avoid: tuple[Any, ...] = ()
) -> list[tuple[str, Any]] | None:
    """What picks ``row`` out of ``rows``: one field (:func:`_describing`), else the first pair of
    describable fields that no other row shares ("the contact whose name is 'Ada' and whose city is 'Rome'");
    None if neither does."""
    one = _describing(row, rows, key, avoid)
    if one:
        return [one]
    fields = _describable_fields(row, key, avoid)[:6]  # a person names a row by its first few facts
    for i, a in enumerate(fields):
        for b in fields[i + 1 :]:
            if sum(1 for r in rows if r.get(a) == row[a] and r.get(b) == row[b]) == 1:
                return [(a, row[a]), (b, row[b])]
    return None


def whose(description: list[tuple[str, Any]]) -> str:
    """``[("name", "Ada"), ("qr_no", "Q1")]`` -> ``"whose name is 'Ada' and whose QR number is 'Q1'"`` (fields
    by :func:`~envfactory_assets.synth.refinement.phrasing.spoken_field`). A text value in double quotes (an
    ETag, ``'"7f94..."'``) is named without them, as a person quoting it would; the solver's reading of the
    reference (``solver.programmatic._resolve_reference``) matches it either way."""
    return " and ".join(f"whose {spoken_field(f)} is {literal(unquoted(v))}" for f, v in description)


def unquoted(value: Any) -> Any:
    """``value`` without the double quotes around it when it is text wrapped in them (``'"7f94"'`` ->
    ``'7f94'``, as an HTTP ETag is written); any other value (``'W/"0815"'``, ``'"'``, a number) unchanged."""
    if isinstance(value, str) and len(value) > 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _parent_words(index: ToolIndex, env_id: str, param: str) -> str:
    """How a person names the parent row a scope identifier points at: the spoken name of the table whose key
    it is (``b_id`` of Google Storage: ``"bucket"``), else the identifier's own words without ``id``."""
    tables = index.envs[env_id]["tables"]
    table = next((t for t, meta in tables.items() if meta.get("key") == param), None)
    return spoken_thing(index.spoken_table(env_id, table)) if table else spoken_field(param)


#: Places in a list a person points at ("the second invoice in that list"); further down, they would name it.
_ORDINAL_WORDS = ("first", "second", "third")


def _reference(
    producer: dict[str, Any], path: str, same_turn: bool, table: str, rng: random.Random | None = None
) -> str | None:
    """A phrase naming the row behind ``producer``'s output at ``path`` as a person would (by what was just
    done, by recency, by name), or None if none is unambiguous."""
    thing = spoken_thing(table)
    pick = (lambda xs: xs[0]) if rng is None else (lambda xs: xs[rng.randrange(len(xs))])
    kind = producer["kind"]
    if kind == "create":
        if same_turn:
            return pick((f"the new {thing}", f"the {thing} you just created", f"the newly created {thing}"))
        return pick((f"the {thing} you created earlier", f"the {thing} you created a moment ago"))
    if kind in ("get", "update", "action"):
        return pick((f"that {thing}", f"this {thing}", f"the same {thing}"))
    if kind in ("list", "search") and path.startswith("items["):
        idx = int(path[len("items[") : path.index("]")])
        items = producer["output"].get("items", [])
        found = _describing(items[idx], items, path.rsplit(".", 1)[-1])
        if found:
            return f"the {thing} {whose([found])}"
        if idx < len(_ORDINAL_WORDS) and len(items) > 1:
            # no field tells the row apart: a person points at its place in the list they were just shown
            return f"the {_ORDINAL_WORDS[idx]} {thing} in that list"
    return None


def _copied_from_row(
    producer: dict[str, Any],
    prov: dict[str, Any],
    arg: str,
    flat: list[dict[str, Any]],
    position: int,
    table: str,
    same_turn: bool,
    names_a_row: bool,
    rng: random.Random,
) -> str | None:
    """A phrase for an identifier argument ``arg`` whose value a result's row carries in another field, or
    None. From a list's row (``items[1].calendar_id``): "same as the course whose name is 'X'" (or "... the
    second course in that list"). From a looked-up, changed or created row (``legal_entity_id`` of a business
    line), when ``arg`` names a row (the tool's key or a foreign key): "the legal entity of that business
    line". A row named by its place or by "that" is named so only while no later result carries rows with
    that field (the phrase would otherwise point at the later one)."""
    path = prov["path"]
    field = path.rsplit(".", 1)[-1]
    if not arg.endswith("_id"):
        return None
    if producer["kind"] in ("list", "search") and path.startswith("items["):
        row = _reference(producer, path, False, table, rng)
        if row is None or (row.endswith(" in that list") and _carried_between(flat, prov["call"], position, field)):
            return None
        return f"same as {row}"
    # only the row's own field of the argument's name ("legal_entity_id", no nesting): "the legal entity of
    # that business line" must mean the business line's legal_entity_id, not another field it was copied from
    if (
        names_a_row
        and path == arg
        and producer["kind"] in ("get", "update", "create", "action")
        and not _carried_between(flat, prov["call"], position, field)
    ):
        row = _reference(producer, path, same_turn, table, rng)
        return None if row is None else f"the {spoken_thing(arg[:-3])} of {row}"
    return None


def _state_reference(
    rows: list[dict[str, Any]], key: str, value: Any, table: str, writes: list[dict[str, Any]] | None = None
) -> str | None:
    """A row the hidden state holds, named by a field a person knows it by ("the book whose title is
    'Dune'"), or None; the agent finds it by listing the table.

    ``writes``: the arguments of the calls that wrote this table earlier in the turn (``rows`` is the state
    before the turn). A row one of them wrote may no longer look as ``rows`` says, and a value one of them
    wrote may now be another row's too: such a row, or such a description, is not used."""
    writes = writes or []
    written = tuple(v for w in writes for v in w.values() if not isinstance(v, (dict, list)))
    if any(value == v for v in written):
        return None
    row = next((r for r in rows if r.get(key) == value), None)
    found = _description(row, rows, key, written) if row is not None else None
    return f"the {spoken_thing(table)} {whose(found)}" if found else None


def _what_it_wrote(tool: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """The values a write call puts into its table: its arguments, and for an action (``cancel_order``, which
    takes only the row's key) the field and value the action sets (``status``: ``"cancelled"``), so that a
    row described by that value ("the order whose status is 'cancelled'") is not named after another row
    took it too."""
    act = tool.get("action") or {}
    if tool.get("kind") == "action" and act.get("field"):
        return {**arguments, act["field"]: act.get("value")}
    return arguments


def parameter_default(schema: dict[str, Any]) -> Any:
    """A parameter's default: the schema's ``default``, else one stated in its description ("(default 20)")."""
    if "default" in schema:
        return schema["default"]
    m = re.search(r"\(default:? (-?\d+)\)", schema.get("description") or "")
    return int(m.group(1)) if m else None


def _carries(output: Any, key: str) -> bool:
    """True when a tool result holds rows with ``key`` (the row itself or items of a list field)."""
    if not isinstance(output, dict):
        return False
    return key in output or any(
        isinstance(v, list) and any(isinstance(i, dict) and key in i for i in v) for v in output.values()
    )


def _carried_between(flat: list[dict[str, Any]], producer: int, position: int, key: str) -> bool:
    """True when a call after ``producer`` and before ``position`` returned rows with ``key``: "that book" or
    "the second book in that list" would then point at the later result."""
    return any(_carries(flat[i]["output"], key) for i in range(producer + 1, position))


def _obtainable(value: Any, earlier_results: list[str]) -> bool:
    """True when ``value`` occurs in one of the earlier tool results (given as their JSON texts)."""
    needle = json.dumps(value, ensure_ascii=False)
    return any(needle in text for text in earlier_results)


def _id_order(value: Any) -> tuple[int, str]:
    return len(str(value)), str(value)


def _most_recent_reference(rows: list[dict[str, Any]], key: str, value: Any, table: str) -> str | None:
    """ "my most recent <thing>" when ``value`` is the newest (largest) identifier of ``rows``, else None."""
    ids = [r[key] for r in rows if key in r]
    if not ids or max(ids, key=_id_order) != value:
        return None
    return f"my most recent {words(singular(table))}"


def _compressible(
    calls: list[dict[str, Any]], turn_start: int, refs: list[dict[str, str]], index: ToolIndex
) -> list[int]:
    """Positions (in the turn) of list calls operator b may drop: only pagination arguments, each at the
    parameter's default (a value the user stated would be lost with the sentence), not the turn's last call,
    and every later use of their rows in the turn names the row by a label."""
    out = []
    for i, call in enumerate(calls[:-1]):
        props = index.tools[call["name"]]["input_schema"]["properties"]
        if call["kind"] != "list" or any(
            a not in MASKED_ARGUMENT_NAMES or v != parameter_default(props.get(a, {}))
            for a, v in call["arguments"].items()
        ):
            continue
        uses = [
            (j, arg)
            for j in range(i + 1, len(calls))
            for arg, prov in calls[j]["provenance"].items()
            if prov.get("source") == "output" and prov.get("call") == turn_start + i
        ]
        if uses and all(" whose " in refs[j].get(arg, "") for j, arg in uses):
            out.append(i)
    return out


#: The operators :func:`refine_turns` applies (goal merging and expansion and the conversational omission are
#: applied later, to refined turns).
REFINEMENT_OPERATORS = frozenset(
    {"implicit_reference", "parameter_omission", "action_compression", "ambiguity", "implicit_constraint"}
)


def refine_turns(
    turns: list[dict[str, Any]],
    environments: dict[str, dict[str, Any]],
    seed: str = "",
    persona: str | None = None,
    operators: frozenset[str] = REFINEMENT_OPERATORS,
    state_references: bool = True,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Apply the refinement operators to every turn (each turn's ``state_before`` grounds operator c).

    ``operators``: the ones that may apply (a subset of :data:`REFINEMENT_OPERATORS`); ``state_references``:
    whether a row only the hidden state holds may be named by what the user knows of it (an
    ``implicit_reference`` or ``ambiguity`` found by listing the table), or only rows earlier results showed.
    A value a create of the same turn assigns is named by what creates it whatever these say: the user cannot
    know it yet. Calibration uses narrower draws when the full refinement proves unsolvable
    (:func:`~envfactory_assets.synth.refinement.calibrate.calibrate_trajectory`).

    The refined query is written in the person's words
    (:func:`~envfactory_assets.synth.refinement.phrasing.describe_call`
    with a ``random.Random(f"{seed}/{turn}")``: one of several sentence plans, spoken names and values, the
    ``persona``'s register) and the assistant's reply is rewritten to match (varied, from the call results).

    Returns ``(refined_turns, operators)``: each refined turn keeps ``query_raw`` and gets a new
    ``query``, ``assistant_summary`` and its own ``operators`` list; ``operators`` is the flat list of
    applications (``turn``, ``call``, ``argument``, ``value``, ``reference``, ``obtainable_from``).
    """
    unknown = set(operators) - REFINEMENT_OPERATORS
    if unknown:
        raise ValueError(f"refine_turns: unknown operators {sorted(unknown)}; known: {sorted(REFINEMENT_OPERATORS)}")
    referencing = "implicit_reference" in operators
    name_from_state = state_references and (referencing or "ambiguity" in operators)
    index = ToolIndex(environments)
    flat: list[dict[str, Any]] = [c for t in turns for c in t["calls"]]
    refined: list[dict[str, Any]] = []
    applied: list[dict[str, Any]] = []
    earlier: list[str] = []  # JSON texts of the tool results before the current call
    position = 0
    for t_idx, turn in enumerate(turns):
        turn_start = position
        rng = random.Random(f"{seed}/{t_idx}")
        new_turn = copy.deepcopy(turn)
        new_turn["query_raw"] = turn["query"]
        new_turn["operators"] = []
        parts = []

        turn_refs: list[dict[str, str]] = []
        # arguments of the calls that wrote each table earlier in this turn: "most recent" would be unclear,
        # and a row they wrote (or a value they wrote) may no longer pick out the row the state shows
        written: dict[str, list[dict[str, Any]]] = {}

        def record(
            operator: str,
            argument: str,
            value: Any,
            reference: str,
            source: str,
            call_pos: int | None = None,
            t_idx: int = t_idx,
            new_turn: dict[str, Any] = new_turn,
        ) -> None:
            # ``position`` is read when called: the call being rewritten at that moment
            at = position if call_pos is None else call_pos  # noqa: B023
            op = {
                "operator": operator,
                "turn": t_idx,
                "call": at,
                "argument": argument,
                "value": value,
                "reference": reference,
                "obtainable_from": source,
            }
            new_turn["operators"].append(op)
            applied.append(op)

        for call in turn["calls"]:
            if call.get("recovery"):
                # the agent reads on its own after a refusal: the user could not know to ask for it
                parts.append("")
                turn_refs.append({})
                earlier.append(json.dumps(call["output"], ensure_ascii=False))
                position += 1
                continue
            tool = index.tools[call["name"]]
            key = index.key_of(tool)
            meta = index.table_meta(tool)
            refs: dict[str, str] = {}
            for arg, prov in call["provenance"].items():
                if prov.get("source") != "output":
                    continue
                minted = (
                    minting_call(flat, turn_start, prov["call"], call["arguments"][arg], index.key_of_name)
                    if prov["call"] >= turn_start
                    else None
                )
                if minted is not None and minted != prov["call"]:
                    # assigned by a create of this turn, reaching this call through another result (a lookup
                    # of the new row, a row that carries its id): the user names it by what created it
                    phrase = _reference(flat[minted], "", True, spoken_table(index.tools[flat[minted]["name"]]), rng)
                    refs[arg] = phrase
                    record("implicit_reference", arg, call["arguments"][arg], phrase, flat[minted]["name"])
                    continue
                producer = flat[prov["call"]]
                producer_tool = index.tools[producer["name"]]
                table = spoken_table(producer_tool)  # only spoken below: the name a person says
                if not referencing and minted is None:
                    continue  # a value an earlier result holds may be quoted; one not assigned yet never
                if prov["path"].rsplit(".", 1)[-1] != index.key_of(producer_tool):
                    # an identifier copied from a listed row ("calendar id same as the course whose name is
                    # 'X'"): the user points at the row they saw; other fields are values they state
                    names_a_row = arg == key or arg in meta["foreign_keys"]
                    phrase = _copied_from_row(
                        producer, prov, arg, flat, position, table, prov["call"] >= turn_start, names_a_row, rng
                    )
                    if phrase and _obtainable(call["arguments"][arg], earlier):
                        refs[arg] = phrase
                        record("implicit_reference", arg, call["arguments"][arg], phrase, producer["name"])
                    continue
                phrase = _reference(producer, prov["path"], prov["call"] >= turn_start, table, rng)
                value = call["arguments"][arg]
                id_field = prov["path"].rsplit(".", 1)[-1]
                if (
                    producer["kind"] in ("get", "update", "action") or (phrase or "").endswith(" in that list")
                ) and _carried_between(flat, prov["call"], position, id_field):
                    phrase = None  # "that book" would point at a later result: name the row instead (below)
                if phrase and _obtainable(value, earlier):
                    refs[arg] = phrase
                    record("implicit_reference", arg, value, phrase, producer["name"])
            limit_schema = tool["input_schema"]["properties"].get("limit", {})
            if (
                "parameter_omission" in operators
                and "limit" in call["arguments"]
                and "limit" not in tool["input_schema"].get("required", [])
                and call["arguments"]["limit"] == parameter_default(limit_schema)
            ):
                # a person leaves out what the API assumes anyway: the value is the parameter's default, the
                # argument is optional, and the RL row masks it (datasets.MASKED_ARGUMENT_NAMES)
                refs["limit"] = ""
                record("parameter_omission", "limit", call["arguments"]["limit"], "", "the parameter's default")
            for arg, value in call["arguments"].items():
                # an identifier from the hidden state: the user names the row by what they know of it
                ref_table = tool["table"] if arg == key else meta["foreign_keys"].get(arg)
                if (
                    not name_from_state
                    or arg in refs
                    or ref_table is None
                    or (arg == key and call["kind"] not in KEYED_KINDS)
                ):
                    continue
                writes = written.get(ref_table)
                rows = turn["state_before"][call["env_id"]]["tables"].get(ref_table, [])
                ref_key = index.envs[call["env_id"]]["tables"].get(ref_table, {}).get("key", arg)
                scope = () if index.listable(call["env_id"], ref_table) else index.list_scope(call["env_id"], ref_table)
                if scope is None:
                    continue  # described by what the user knows, the row could be found only by listing
                if scope and referencing:
                    # the table is listed per parent: the user names the parent they work in, by its id
                    row = next((r for r in rows if r.get(ref_key) == value), None)
                    if row is None or any(
                        not isinstance(row.get(p), str) or call["arguments"].get(p, row[p]) != row[p] for p in scope
                    ):
                        continue
                    phrase = _state_reference(
                        rows, ref_key, value, index.spoken_table(call["env_id"], ref_table), writes
                    )
                    unsaid = [p for p in scope if p not in call["arguments"]]  # the call's own are stated anyway
                    if phrase:
                        if unsaid:
                            phrase += " in " + " and ".join(
                                f"{_parent_words(index, call['env_id'], p)} {literal(row[p])}" for p in unsaid
                            )
                        refs[arg] = phrase
                        record(
                            "implicit_reference",
                            arg,
                            value,
                            phrase,
                            f"state: the agent lists the table by {', '.join(scope)}",
                        )
                    continue
                from_state = call["provenance"].get(arg, {}).get("source") == "state"
                phrase = (
                    _most_recent_reference(rows, key, value, spoken_table(tool))
                    if arg == key and from_state and not scope and "ambiguity" in operators and writes is None
                    else None
                )
                if phrase:
                    refs[arg] = phrase
                    record("ambiguity", key, value, phrase, "state: newest row of the table")
                    continue
                phrase = (
                    _state_reference(rows, ref_key, value, index.spoken_table(call["env_id"], ref_table), writes)
                    if referencing and not scope
                    else None
                )
                if phrase:
                    refs[arg] = phrase
                    record("implicit_reference", arg, value, phrase, "state: the agent lists the table")
            adjective = None
            if call["kind"] == "list" and "implicit_constraint" in operators:
                props = tool["input_schema"]["properties"]
                enum_arg = next(
                    (
                        a
                        for a, v in call["arguments"].items()
                        if a not in refs and isinstance(v, str) and v in props.get(a, {}).get("enum", ())
                    ),
                    None,
                )
                if enum_arg:
                    refs[enum_arg], adjective = "", literal(call["arguments"][enum_arg])
            # a real signature's field of the named row that no earlier result showed stays stated: the agent
            # has no other way to learn it
            stated = stated_row_fields(call)
            drawn = rng.getstate()
            sentence = describe_call(tool, key, call["arguments"], refs, rng, stated=stated)
            if adjective:
                things = spoken_things(spoken_table(tool))
                sentence, placed = re.subn(rf"\b{re.escape(things)}\b", f"{adjective} {things}", sentence, count=1)
                if placed:
                    record(
                        "implicit_constraint",
                        enum_arg,
                        call["arguments"][enum_arg],
                        f"{adjective} {words(tool['table'])}",
                        "tool schema enum",
                    )
                else:
                    # the drawn plan names the rows in other words ("search accounts"): the filter is stated
                    # as a filter, with the same draw, so the request still asks for the rows the call lists
                    del refs[enum_arg]
                    rng.setstate(drawn)
                    sentence = describe_call(tool, key, call["arguments"], refs, rng, stated=stated)
            if call["kind"] not in READ_KINDS and not call.get("error"):
                # a refused call changed nothing: its rows still look as the state says
                written.setdefault(tool["table"], []).append(_what_it_wrote(tool, call["arguments"]))
            parts.append(sentence)
            turn_refs.append(refs)
            earlier.append(json.dumps(call["output"], ensure_ascii=False))
            position += 1
        dropped = (
            _compressible(turn["calls"], turn_start, turn_refs, index) if "action_compression" in operators else []
        )
        for i in dropped:
            record("action_compression", "", None, parts[i], "the agent lists the rows itself", turn_start + i)
        query = join_sentences([p for i, p in enumerate(parts) if i not in dropped and p], rng)
        new_turn["query"] = shape_for_persona(query, persona, t_idx == 0, rng)
        new_turn["assistant_summary"] = write_reply(turn["calls"], index.tools, index.key_of, f"{seed}/{t_idx}/reply")
        refined.append(new_turn)
    return refined, applied


def _join_goals(first: str, second: str) -> str:
    return strip_register(first).rstrip(".") + ", and after that " + strip_lead(second)


def merge_goals(turns: list[dict[str, Any]], max_calls: int = 5, min_turns: int = 2) -> list[dict[str, Any]]:
    """Operator d, goal merging: the first two consecutive refined turns that together make at most
    ``max_calls`` calls (each at most 2) become one turn asking for both goals, if more than ``min_turns``
    turns remain; at most one merge per trajectory.

    The merged turn runs from the first turn's ``state_before`` to the second's ``state_after``, keeps both
    turns' calls, intents and target tools, joins their raw and refined queries, records a ``goal_merging``
    operator, and keeps the two original turns in ``merged_from`` so calibration can split it back. Where both
    turns carry the model query writer's record (``query_writer``), the merged turn's record joins them (its
    ``draft`` the joined programmatic raw queries), so calibration can fall back to that text too.
    """
    if len(turns) <= min_turns:
        return turns
    for i in range(len(turns) - 1):
        a, b = turns[i], turns[i + 1]
        if len(a["calls"]) + len(b["calls"]) > max_calls or max(len(a["calls"]), len(b["calls"])) > 2:
            continue
        new_ids = assigned_identifiers(a["calls"])
        if any(quotes(b[field], v) for v in new_ids for field in ("query", "query_raw")):
            continue  # the second request quotes what the first creates: asked as one, it would tell the answer
        merged = {
            **a,
            "calls": a["calls"] + b["calls"],
            "intent": a["intent"] + b["intent"],
            "target_tools": a["target_tools"] + b["target_tools"],
            "query_raw": _join_goals(a["query_raw"], b["query_raw"]),
            "query": _join_goals(a["query"], b["query"]),
            "assistant_summary": join_replies(a["assistant_summary"], b["assistant_summary"]),
            "state_after": b["state_after"],
            "state_after_hash": b["state_after_hash"],
            "merged_from": [a, b],
        }
        if isinstance(a.get("query_writer"), dict) and isinstance(b.get("query_writer"), dict):
            # the model writer's record of the joined raw query: its draft is the joined programmatic text
            merged["query_writer"] = {
                "outcome": "model"
                if "model" in (a["query_writer"]["outcome"], b["query_writer"]["outcome"])
                else "fallback",
                "draft": _join_goals(a["query_writer"]["draft"], b["query_writer"]["draft"]),
                "refusals": a["query_writer"]["refusals"] + b["query_writer"]["refusals"],
            }
        merged["operators"] = (
            a["operators"]
            + b["operators"]
            + [
                {
                    "operator": "goal_merging",
                    "turn": i,
                    "call": None,
                    "argument": "",
                    "value": None,
                    "reference": f"turns {i} and {i + 1} asked as one request",
                    "obtainable_from": "both goals",
                }
            ]
        )
        out = turns[:i] + [merged] + turns[i + 2 :]
        for k, t in enumerate(out):
            t["turn_index"] = k
        return out
    return turns
