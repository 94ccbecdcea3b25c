"""Deterministic verification of an environment by execution (the gate before any synthesis).

The paper's test agent writes initial states and runs every tool 2-3 ways, then an LLM judges the
result; here every verdict is an assertion on executed behaviour (docs/design.md, "Paper settings"):

- ``static_check``: the code passes the sandbox's static check and imports in the worker;
- ``initial_state``: every ``expect=load`` state loads, every ``expect=reject`` state is rejected;
- ``round_trip``: ``save(load(s)) == s`` for each initial state, and after a sequence of writes;
- ``tool_valid`` / ``output_schema`` / ``semantics``: each tool, on each loadable state, succeeds on valid
  arguments, its output validates against its output schema, and it does what its kind says to the
  state (list/get return the stored rows, and list/count again with a filter the filtered rows; search
  for a substring of a stored value in another case returns exactly the matching rows in the requested
  window; list and search again with a ``limit`` (and search an ``offset``) that cuts the matching rows
  return exactly that window and the total of all matches; count equals the number of matching rows;
  create/update/delete change exactly that row; an action changes exactly its documented field (and time
  stamp) of exactly its row and nothing else of the state; read-only tools leave the state hash unchanged).
  An action that no initial state has a row for is checked on a row put into a state it applies to, and
  fails when no state has a row of its table at all. A relation's add records exactly the new pair (stamped
  with the clock), its remove deletes exactly that pair, both change nothing else; its list returns the
  member rows of exactly the parent's pairs, in pair order, in the requested window (and with a ``limit``
  that cuts them, that window and the total); a delete of a row also deletes exactly the pairs that hold it.
  A relation tool that no loadable state let the gate call fails. A transfer changes exactly the balance field
  of its row (a ``transfer`` of its two rows: the source by minus the amount, the destination by plus it) and
  nothing else, and a ``transfer`` leaves the sum of the field over the table unchanged (conservation); a
  transfer tool that no loadable state let the gate call fails;
  A side-effect action (``send``, ``sync``) leaves every table but the outbox as it was and records exactly
  one outbox row (the next id, its verb, its target table and row, the other arguments given, the clock), which
  it returns; one that no loadable state let the gate call fails;
  A computed read returns the figures the gate derives from the stored rows: over a collection (in its parent's
  scope) the number of rows and each numeric field's sum, of an item its numeric fields;
- ``derived``: a computed read called again on the state with its rows changed (a copy of the last row added
  under a new id; the item's numeric fields moved by one) returns the figures of the changed rows, which differ:
  a read that returns a constant fails;
- ``invariant``: a transfer of more than the source row holds above the field's minimum (0 unless the API
  states another), or a deposit past the field's maximum (without one, past 2**53), fails with
  ``precondition_failed`` and changes nothing (no row goes negative; on refusal neither row changes); a transfer
  to a row that does not exist (``not_found``) or to its own source, an amount of 0 or below and, on a number
  field, an amount finer than the 9 decimals a balance keeps, fail and change nothing (``tool_invalid``);
- ``precondition``: an action on a row already in its target state, in each state the action is refused
  in (a shipped order cannot be cancelled), or without its flag when the flag's default (else off) is the
  action's target, fails with ``precondition_failed`` and changes nothing; an action whose flag's default
  it applies to is also checked on the row without the flag. A relation's add of the pair it just recorded
  fails so too when the add is not idempotent (a POST); an idempotent add (a PUT) of it succeeds, returns the
  stored pair and changes nothing (a ``semantics`` check). An update, delete or action whose spec states a
  precondition (a ToolSpec's ``precondition``: a PaymentIntent can be canceled only in some statuses) succeeds
  on a row it allows and, on that row put into each refused value of the field, fails the same way; a tool
  with a stated precondition that no state has an allowed row for is checked on a row put into an allowed
  value, and fails when no state has a row of its table at all;
- ``tool_invalid``: wrong-typed and unknown-id arguments give a structured error and change nothing (a
  side-effect action records nothing for a target that does not exist, a wrong-typed argument or a
  required one given as null; the totals of one parent's rows refuse a parent not named, or not there where
  the parent is a table); a
  relation's tools answer a parent or member that does not exist, and a remove of a pair that is not there,
  with ``not_found``;
- ``replay``: the same calls on the same initial state give the same outputs and state hash.

All execution happens in a :class:`~envfactory_assets.runtime.sandbox.SandboxWorker` child process
with CPU, memory and per-call time limits.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from envfactory_assets.envgen.mcp_signatures import canonical_output, canonical_tool, real_arguments, schema_types
from envfactory_assets.envgen.tools import (
    KEYED_KINDS,
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    RELATION_KINDS,
    action_applies,
    action_reads,
    precondition_reads,
    tool_applies,
)
from envfactory_assets.envgen.values import ValueFactory
from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.runtime.errors import ErrorType, SandboxError
from envfactory_assets.runtime.sandbox import (
    EnvironmentRejected,
    SandboxLimits,
    SandboxWorker,
    StateRejected,
    WorkerCrashed,
)


@dataclass
class CheckResult:
    """One executed check: ``check`` name, ``tool`` (or None), ``state`` name, verdict and detail."""

    check: str
    passed: bool
    detail: str = ""
    tool: str | None = None
    state: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "tool": self.tool,
            "state": self.state,
            "passed": self.passed,
            "detail": self.detail[:500],
        }


@dataclass
class VerificationReport:
    """All checks of one environment; ``status`` is ``passed`` only if every check passed."""

    env_id: str
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "passed" if self.checks and all(c.passed for c in self.checks) else "failed"

    @property
    def reasons(self) -> list[str]:
        out = []
        for c in self.checks:
            if not c.passed:
                where = "/".join(x for x in (c.state, c.tool) if x)
                out.append(f"{c.check}{'[' + where + ']' if where else ''}: {c.detail}"[:300])
        return out

    def add(
        self, check: str, passed: bool, detail: str = "", tool: str | None = None, state: str | None = None
    ) -> bool:
        self.checks.append(CheckResult(check, passed, detail, tool, state))
        return passed


def _rows(saved: dict[str, Any], table: str) -> list[dict[str, Any]]:
    return saved["tables"][table]


@dataclass(frozen=True)
class ObservedCall:
    """A call the gate made that succeeded, as the semantic checks read it: the environment and the tool (their
    documents), the ``args`` it was given, the ``output`` it returned, and the environment's saved state
    ``before`` and ``after`` it."""

    env: dict[str, Any]
    tool: dict[str, Any]
    args: dict[str, Any]
    output: Any
    before: dict[str, Any]
    after: dict[str, Any]

    @property
    def table(self) -> str:
        """The name of the tool's table."""
        return self.tool["table"]

    @property
    def meta(self) -> dict[str, Any]:
        """The environment's description of the tool's table (``key``, ``fields``, ``foreign_keys``)."""
        return self.env["tables"][self.table]

    def keyed(self, state: dict[str, Any]) -> dict[Any, dict[str, Any]]:
        """The rows of the tool's table on ``state`` (``before`` or ``after``) by their key, in stored order."""
        key = self.meta["key"]
        return {r[key]: r for r in _rows(state, self.table)}

    def elsewhere(self) -> str | None:
        """What the call changed beyond its table, in words (:func:`_also_changed`), or None when nothing."""
        return _also_changed(self.before, self.after, self.table)


def _referenced(env: dict[str, Any], saved: dict[str, Any], table: str, key: str) -> bool:
    """Whether a row of another table refers to ``key`` of ``table`` (a relation's pairs do not keep a row:
    they are deleted with it)."""
    for other, meta in env["tables"].items():
        if meta.get("relation"):
            continue
        for fk, target in meta["foreign_keys"].items():
            if target == table and any(r.get(fk) == key for r in _rows(saved, other)):
                return True
    return False


def _paired(env: dict[str, Any], saved: dict[str, Any], table: str, key: str) -> bool:
    """Whether a pair of a relation holds ``key`` of ``table``."""
    return any(
        target == table and any(r.get(fk) == key for r in _rows(saved, other))
        for other, meta in env["tables"].items()
        if meta.get("relation")
        for fk, target in meta["foreign_keys"].items()
    )


def valid_arguments(
    env: dict[str, Any], tool: dict[str, Any], saved: dict[str, Any], values: ValueFactory
) -> dict[str, Any] | None:
    """Arguments that must succeed for ``tool`` on state ``saved``, or None if the state has no row to use.

    get/update/delete use an existing row (delete: one nothing but a relation's pairs references, one they
    reference where there is one); an action uses a row that is neither in its target state nor in a refused
    one; a tool with a stated precondition uses a row whose field holds none of its refused values; search
    looks for part of a word of a stored row's text in another case (matching is case-insensitive and by
    substring) and skips the first match (so paging is exercised); create fills required fields and
    references existing parent rows; a relation's add uses the first pair of two distinct existing rows that is
    not there yet, its list the first parent with the most members and its remove that parent's last pair.
    """
    if tool["kind"] in RELATION_KINDS:
        return _relation_arguments(env, tool, saved)
    if tool["kind"] == "transfer":
        return _transfer_arguments(env, tool, saved)
    if tool["kind"] == "side_effect":
        return _side_effect_arguments(env, tool, saved, values)
    if tool["kind"] == "computed_read" and tool["computed"]["scope"] == "item":
        rows, key = _rows(saved, tool["table"]), env["tables"][tool["table"]]["key"]
        return {key: rows[-1][key]} if rows else None
    table = tool["table"]
    meta = env["tables"][table]
    rows = _rows(saved, table)
    props = tool["input_schema"]["properties"]
    required = tool["input_schema"].get("required", [])
    kind = tool["kind"]
    if kind in ("list", "count", "search", "computed_read"):
        args: dict[str, Any] = {}
        for name in required:
            if name == "query":
                continue
            target = meta["foreign_keys"].get(name)
            source_rows = _rows(saved, target) if target else rows
            if not source_rows:
                return None
            args[name] = source_rows[0][env["tables"][target]["key"] if target else name]
        if kind == "search":
            scoped = [r for r in rows if all(r.get(k) == v for k, v in args.items())]
            args = {"query": _search_query(_search_words(scoped)), **args}
            # a search without paging parameters (a real MCP signature may have neither) is called without them
            args.update({k: v for k, v in (("offset", 1), ("limit", 5)) if k in props})
        return args
    if tool.get("singleton"):
        candidates = rows
    else:
        candidates = [
            r
            for r in rows
            if (kind != "delete" or not _referenced(env, saved, table, r[meta["key"]]))
            and tool_applies(tool, meta["fields"], r)
        ]
        if kind == "delete":
            # a row that relation pairs hold comes last (the one used): the check sees its pairs go with it
            candidates.sort(key=lambda r: _paired(env, saved, table, r[meta["key"]]))
    if kind in KEYED_KINDS:
        if not candidates:
            return None
        args = {} if tool.get("singleton") else {meta["key"]: candidates[-1][meta["key"]]}
        if kind == "update":
            editable = [p for p in props if p != meta["key"] and p not in meta["foreign_keys"]]
            if not editable:
                return None
            # prefer a field that can take a value different from the current one (a one-value enum cannot)
            for name in editable:
                schema = meta["fields"][name]
                current = candidates[-1].get(name)
                for _ in range(20):
                    new = values.value(name, schema, table)
                    if new != current:
                        break
                args[name] = new
                if new != current:
                    break
        return args
    args = {}
    for name in props:
        target = meta["foreign_keys"].get(name)
        if target:
            parents = _rows(saved, target)
            if not parents:
                if name in required:
                    return None
                continue
            args[name] = parents[0][env["tables"][target]["key"]]
        elif name in required or values.rng.random() < 0.5:
            args[name] = values.value(name, meta["fields"][name], table)
    return args


def relation_ids(
    env: dict[str, Any], tool: dict[str, Any], saved: dict[str, Any]
) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """``(parent ids, member ids, pairs)`` of a relation tool's tables on ``saved``, in stored order."""
    rel = tool["relation"]
    parents = [r[env["tables"][rel["parent"]]["key"]] for r in _rows(saved, rel["parent"])]
    members = [r[env["tables"][rel["member"]]["key"]] for r in _rows(saved, rel["member"])]
    pairs = [(r[rel["parent_field"]], r[rel["member_field"]]) for r in _rows(saved, tool["table"])]
    return parents, members, pairs


def _absent_pair(parents: list[str], members: list[str], pairs: list[tuple[str, str]]) -> tuple[str, str] | None:
    taken = set(pairs)
    return next(((p, m) for p in parents for m in members if p != m and (p, m) not in taken), None)


def _relation_arguments(env: dict[str, Any], tool: dict[str, Any], saved: dict[str, Any]) -> dict[str, Any] | None:
    rel = tool["relation"]
    parents, members, pairs = relation_ids(env, tool, saved)
    held = Counter(p for p, _ in pairs)
    # the parent with the most members: a list that pages, a remove that must leave the other members
    busiest = max(parents, key=lambda p: held[p]) if parents else None
    if tool["kind"] == "relation_list":
        return {rel["parent_field"]: busiest} if parents else None
    pair = next((pm for pm in reversed(pairs) if pm[0] == busiest), None)
    if tool["kind"] == "relation_add":
        pair = _absent_pair(parents, members, pairs)
    return None if pair is None else {rel["parent_field"]: pair[0], rel["member_field"]: pair[1]}


def _relation_members(env: dict[str, Any], tool: dict[str, Any], saved: dict[str, Any], parent: Any) -> list[Any]:
    """The member rows of ``parent``'s pairs on ``saved``, in pair order: what ``relation_list`` returns."""
    rel = tool["relation"]
    key = env["tables"][rel["member"]]["key"]
    members = {r[key]: r for r in _rows(saved, rel["member"])}
    return [
        members.get(r[rel["member_field"]]) for r in _rows(saved, tool["table"]) if r[rel["parent_field"]] == parent
    ]


#: the magnitude no balance may pass (2**53, the largest integer JSON carries exactly: RFC 7493, I-JSON); past it
#: a float balance soon reaches inf and an integer one 64 bits, which no state can save
BALANCE_LIMIT = 2**53


def held(row: dict[str, Any], field: str) -> Any:
    """The balance ``field`` of ``row`` as a transfer reads it: an absent value holds 0."""
    value = row.get(field)
    return 0 if value is None else value


def moved(value: Any, change: Any) -> Any:
    """A balance ``value`` after ``change``, as a transfer stores it: a float rounded to 9 decimals (binary
    fractions would otherwise show: 288.77 - 80.48 is 208.28999999999996)."""
    new = value + change
    return round(new, 9) if isinstance(new, float) else new


def _transfer_room(schema: dict[str, Any], row: dict[str, Any], field: str) -> Any:
    """How much can be taken out of ``row`` before its ``field`` (JSON Schema ``schema``) reaches its minimum, to the
    9 decimals a balance keeps (a transfer refuses an amount of more)."""
    return moved(held(row, field), -schema.get("minimum", 0))


def _transfer_arguments(env: dict[str, Any], tool: dict[str, Any], saved: dict[str, Any]) -> dict[str, Any] | None:
    """Arguments of a transfer tool that must succeed on ``saved``: the row with the most room above the field's
    minimum (the last of them) gives about half of it (an integer field: at least 1), to the first other row that
    can take it under the field's maximum (where none can, the most the roomiest other row takes, in whole units or
    cents); a deposit puts 1 into the last row that can take it. None when no row (or no pair of rows) allows it."""
    tr, table = tool["transfer"], tool["table"]
    meta = env["tables"][table]
    key, field = meta["key"], tr["field"]
    schema = meta["fields"][field]
    rows = _rows(saved, table)
    ceiling = schema.get("maximum")

    def fits(row: dict[str, Any], amount: Any) -> bool:
        return ceiling is None or held(row, field) + amount <= ceiling

    def headroom(row: dict[str, Any]) -> Any:
        return moved(ceiling, -held(row, field))

    if tr["verb"] == "deposit":
        fitting = [r for r in rows if fits(r, 1)]
        return {key: fitting[-1][key], tr["amount"]: 1} if fitting else None
    if not rows:
        return None
    source = max(reversed(rows), key=lambda r: _transfer_room(schema, r, field))
    room = _transfer_room(schema, source, field)
    if schema["type"] == "integer":
        amount: Any = max(1, room // 2)
    else:
        amount = round(room / 2, 2) if room >= 0.02 else room
    if not room > 0 or not amount > 0 or amount > room:
        return None
    args = {key: source[key], tr["amount"]: amount}
    if tr["verb"] == "withdraw":
        return args
    others = [r for r in rows if r[key] != source[key]]
    target = next((r for r in others if fits(r, amount)), None)
    if target is None and others:
        # every other row is too near the maximum for half the source: as much as the roomiest one takes
        target = max(reversed(others), key=headroom)
        amount = headroom(target) if schema["type"] == "integer" else math.floor(headroom(target) * 100) / 100
        if not amount > 0:
            return None
    return None if target is None else {key: source[key], tr["destination"]: target[key], tr["amount"]: amount}


def _side_effect_arguments(
    env: dict[str, Any], tool: dict[str, Any], saved: dict[str, Any], values: ValueFactory
) -> dict[str, Any] | None:
    """Arguments of a side-effect tool that must succeed on ``saved``: the last row of its table as the target,
    and a value for every other argument (so that the record must hold them); None when the table is empty."""
    table = tool["table"]
    rows = _rows(saved, table)
    if not rows:
        return None
    key = env["tables"][table]["key"]
    args = {key: rows[-1][key]}
    for name, schema in tool["side_effect"]["arguments"].items():
        args[name] = values.value(name, schema, table)
    return args


def side_effect_record(
    env: dict[str, Any], tool: dict[str, Any], args: dict[str, Any], before: dict[str, Any]
) -> dict[str, Any]:
    """The outbox row a side-effect tool called with ``args`` on ``before`` must record (and return)."""
    se, table = tool["side_effect"], tool["table"]
    key = env["tables"][table]["key"]
    given = {k: v for k, v in args.items() if k != key and v is not None}
    number = before["meta"]["next_id"]
    return {
        env["tables"][se["outbox"]]["key"]: f"{env['tables'][se['outbox']]['prefix']}_{number:05d}",
        "verb": se["verb"],
        "target_table": table,
        "target_id": args[key],
        "arguments": repr(sorted(given.items())),
        "created_at": before["meta"]["now"],
    }


def _search_words(rows: list[dict[str, Any]]) -> list[str]:
    return [w for r in rows for k, v in r.items() if searchable(k, v) for w in v.split() if len(w) >= 3]


def _search_query(words: list[str]) -> str:
    """A query that only a case-insensitive substring match finds: the inside of the first plain word (ASCII
    letters, where case folding has no surprises) of ``words``, its case swapped; else a word, swapped."""
    for word in words:
        if len(word) >= 4 and word.isascii() and word.isalpha():
            return (word[1:-1] if len(word) >= 5 else word[1:]).swapcase()
    return words[0].swapcase() if words else "zz"


#: distinct words of a table tried for the paging check's query (each is matched against every row)
MAX_PAGING_WORDS = 200


def paged_arguments(
    env: dict[str, Any], tool: dict[str, Any], saved: dict[str, Any], args: dict[str, Any]
) -> dict[str, Any] | None:
    """``args`` of a list, search or relation list tool with a ``limit`` (and, for a tool that takes one, an
    ``offset``) that leaves out some of the rows they match on ``saved``, so that a tool ignoring either returns another
    window; None when the tool takes no ``limit`` or fewer than 2 rows match.

    A search looks for the query (made like :func:`valid_arguments`' one) that matches the most rows; with
    ``n`` matching rows the window is rows 2 to ``n - 1`` (rows 1 only, with an offset of 0, when ``n`` is 2).
    """
    props = tool["input_schema"]["properties"]
    if "limit" not in props or tool["kind"] not in ("list", "search", "relation_list"):
        return None
    table = tool["table"]
    if tool["kind"] == "relation_list":
        matched = _relation_members(env, tool, saved, args[tool["relation"]["parent_field"]])
        paged = dict(args)
    elif tool["kind"] == "list":
        matched = [r for r in _rows(saved, table) if all(r.get(k) == v for k, v in args.items() if k != "limit")]
        paged = dict(args)
    else:
        scope = {k: v for k, v in args.items() if k not in ("query", "limit", "offset")}
        scoped = [r for r in _rows(saved, table) if all(r.get(k) == v for k, v in scope.items())]
        queries = dict.fromkeys(_search_query([w]) for w in dict.fromkeys(_search_words(scoped)))
        found = [(q, matching_rows(scoped, q)) for q in list(queries)[:MAX_PAGING_WORDS]]
        query, matched = max(found, key=lambda f: len(f[1]), default=(args["query"], []))
        paged = {**args, "query": query}
    if len(matched) < 2:
        return None
    offset = 0
    if "offset" in props:
        offset = 1 if len(matched) >= 3 else 0
        paged["offset"] = offset
    else:
        paged.pop("offset", None)  # (the window below starts at the first row: an offset would make it all)
    paged["limit"] = min(len(matched) - offset - 1, props["limit"].get("maximum", LIST_LIMIT_MAX))
    return paged


def _field_values(schema: dict[str, Any]) -> list[Any]:
    """Every value a field may hold when they are few (an enum's values, a flag's two), else none."""
    return list(schema.get("enum") or ([True, False] if schema.get("type") == "boolean" else []))


def filtered_arguments(
    env: dict[str, Any], tool: dict[str, Any], saved: dict[str, Any], args: dict[str, Any]
) -> list[dict[str, Any]]:
    """``args`` of a list or count tool with one optional filter added, once per optional filter that can
    tell the filtered rows from the unfiltered ones on ``saved`` (in schema order; empty when none can): a
    tool that honours only some of its filters fails on the others.

    The value is one that some but not all of the rows ``args`` match hold, else one none of them holds (an
    enum value or a flag's other value): either way a tool that ignores the filter gives another answer.
    """
    table = tool["table"]
    meta = env["tables"][table]
    schema = tool["input_schema"]
    matched = [r for r in _rows(saved, table) if all(r.get(k) == v for k, v in args.items() if k != "limit")]
    out = []
    for name in schema["properties"]:
        if name in args or name == "limit" or name in schema.get("required", []) or name not in meta["fields"]:
            continue
        field_schema = meta["fields"][name]
        held = [r[name] for r in matched if r.get(name) is not None]
        options = list(dict.fromkeys([*held, *_field_values(field_schema)]))
        counts = [(value, sum(1 for r in matched if r.get(name) == value)) for value in options]
        chosen = next((v for v, n in counts if 0 < n < len(matched)), None)
        if chosen is None:
            chosen = next((v for v, n in counts if n != len(matched)), None)
        if chosen is not None:
            out.append({**args, name: chosen})
    return out


def seeded_state(
    env: dict[str, Any], tool: dict[str, Any], saved: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(state, values)``: a copy of ``saved`` whose last row of the tool's table (for a delete, the last one
    nothing references) holds ``values`` (``{field: value}``) in the fields of the action and of the stated
    precondition, values the tool applies to (:func:`~envfactory_assets.envgen.tools.tool_applies`); None when
    there is no such row or no such values. Lets the gate check an action or a stated precondition that no
    initial state has a row for."""
    table = tool["table"]
    meta = env["tables"][table]
    rows = [
        r for r in _rows(saved, table) if tool["kind"] != "delete" or not _referenced(env, saved, table, r[meta["key"]])
    ]
    if not rows:
        return None
    named = [(tool.get(part) or {}).get("field") for part in ("action", "precondition")]
    options = [[(f, v) for v in _field_values(meta["fields"].get(f, {}))] for f in dict.fromkeys(n for n in named if n)]
    row = rows[-1]
    fits = (dict(c) for c in itertools.product(*options) if tool_applies(tool, meta["fields"], {**row, **dict(c)}))
    values = next(fits, None)
    if not values:
        return None
    seeded = copy.deepcopy(saved)
    for stored in seeded["tables"][table]:
        if stored[meta["key"]] == row[meta["key"]]:
            stored.update(values)
    return seeded, values


def searchable(field: str, value: Any) -> bool:
    """Whether a search matches on ``field``: text fields other than identifiers and the creation time."""
    return isinstance(value, str) and field != "created_at" and not field.endswith("_id")


def matching_rows(rows: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The rows a ``search`` for ``text`` returns, in stored order: a case-insensitive substring of one of
    their searchable fields (the generated module's ``_search``; this is the gate's own reference)."""
    needle = text.strip().casefold()
    return [r for r in rows if any(searchable(k, v) and needle in v.casefold() for k, v in r.items())]


def invalid_arguments(tool: dict[str, Any], good: dict[str, Any]) -> dict[str, Any] | None:
    """Arguments that must fail: a missing row id for get/update/delete/action, a negative search offset,
    else a wrong-typed value."""
    props = tool["input_schema"]["properties"]
    if tool["kind"] == "search" and "offset" in props:
        return {**good, "offset": -1}
    if tool["kind"] in KEYED_KINDS and not tool.get("singleton"):
        key = next(iter(props))
        return {**good, key: "no-such-id-00000"}
    for name, schema in props.items():
        if "enum" in schema or schema.get("type") in ("integer", "number", "boolean"):
            return {**good, name: "definitely-not-valid-Ω"}
        if schema.get("type") == "string":
            return {**good, name: 12345}
    return None


def side_effect_invalid_arguments(tool: dict[str, Any], good: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """``(arguments, error type)`` a side-effect tool must refuse, recording nothing: a target row that does not
    exist (``not_found``) and, when it takes other arguments, the first of them with a wrong type and the first
    required one given as null (each ``bad_arguments``)."""
    key = next(iter(tool["input_schema"]["properties"]))
    out = [({**good, key: "no-such-id-00000"}, ErrorType.NOT_FOUND.value)]
    required = [n for n in tool["input_schema"].get("required", []) if n in tool["side_effect"]["arguments"]]
    if required:
        out.append(({**good, required[0]: None}, ErrorType.BAD_ARGUMENTS.value))
    for name, schema in tool["side_effect"]["arguments"].items():
        wrong: Any = 12345 if schema["type"] == "string" and "enum" not in schema else "definitely-not-valid-Ω"
        out.append(({**good, name: wrong}, ErrorType.BAD_ARGUMENTS.value))
        break
    return out


def computed_invalid_arguments(
    env: dict[str, Any], tool: dict[str, Any], good: dict[str, Any]
) -> list[tuple[dict[str, Any], str]]:
    """``(arguments, error type)`` a computed read over the rows of one parent (``good`` names it) must refuse: the
    parent not named (null: ``bad_arguments``) and, where the parent is a table of the environment, one that does
    not exist (``not_found``); its totals are never those of every parent's rows, nor a parent's that is not
    there."""
    name = next(iter(good))
    out = [({**good, name: None}, ErrorType.BAD_ARGUMENTS.value)]
    if name in env["tables"][tool["table"]]["foreign_keys"]:
        out.append(({**good, name: "no-such-id-00000"}, ErrorType.NOT_FOUND.value))
    return out


def relation_invalid_arguments(
    env: dict[str, Any], tool: dict[str, Any], good: dict[str, Any], saved: dict[str, Any]
) -> list[tuple[dict[str, Any], str]]:
    """``(arguments, error type)`` that a relation tool must refuse on ``saved`` with that typed error: a parent
    that does not exist, for add and remove also a member that does not exist, and for remove a pair of two
    existing rows that is not there (each ``not_found``)."""
    rel, missing = tool["relation"], "no-such-id-00000"
    found = ErrorType.NOT_FOUND.value
    out = [({**good, rel["parent_field"]: missing}, found)]
    if tool["kind"] == "relation_list":
        return out
    out.append(({**good, rel["member_field"]: missing}, found))
    absent = _absent_pair(*relation_ids(env, tool, saved))
    if tool["kind"] == "relation_remove" and absent is not None:
        out.append(({rel["parent_field"]: absent[0], rel["member_field"]: absent[1]}, found))
    return out


def _also_changed(before: dict[str, Any], after: dict[str, Any], table: str) -> str | None:
    """What a write to ``table`` changed beyond it (other tables, the meta, the set of tables), in words, or
    None when nothing."""
    touched = [t for t in before["tables"] if t != table and before["tables"][t] != after["tables"].get(t)]
    touched += ["meta"] if before["meta"] != after["meta"] else []
    if touched or set(after["tables"]) != set(before["tables"]):
        return ", ".join(touched) or "the set of tables"
    return None


def _relation_defect(call: ObservedCall) -> str | None:
    """None when a relation tool did what its kind says (:func:`_check_semantics`), else the defect."""
    rel, kind, args, output = call.tool["relation"], call.tool["kind"], call.args, call.output
    pf, mf = rel["parent_field"], rel["member_field"]
    if kind == "relation_list":
        expected = _relation_members(call.env, call.tool, call.before, args[pf])
        limit = args.get("limit", _default_limit(call.tool))
        if output.get("total") != len(expected) or output.get("items") != expected[:limit]:
            return (
                f"list returned {len(output.get('items', []))} of total {output.get('total')}, the "
                f"{rel['parent_thing']} has {len(expected)} (limit {limit})"
            )
        return None
    elsewhere = call.elsewhere()
    if elsewhere:
        return f"{kind} also changed {elsewhere}"
    pair = (args[pf], args[mf])
    pairs_before, pairs_after = _rows(call.before, call.table), _rows(call.after, call.table)
    if kind == "relation_add":
        row = {pf: pair[0], mf: pair[1], "created_at": call.before["meta"]["now"]}
        held = next((r for r in pairs_before if (r[pf], r[mf]) == pair), None)
        if pairs_after != (pairs_before if held else [*pairs_before, row]) or output != (held or row):
            return "add did not record exactly that pair"
        return None
    kept = [r for r in pairs_before if (r[pf], r[mf]) != pair]
    if (
        len(kept) != len(pairs_before) - 1
        or pairs_after != kept
        or output != {pf: pair[0], mf: pair[1], "removed": True}
    ):
        return "remove did not delete exactly that pair"
    return None


def _transfer_defect(call: ObservedCall) -> str | None:
    """None when a transfer tool did what its kind says (:func:`_check_semantics`), else the defect."""
    tr, args = call.tool["transfer"], call.args
    field, verb = tr["field"], tr["verb"]
    amount = args[tr["amount"]]
    rows_before, rows_after = call.keyed(call.before), call.keyed(call.after)
    source = args[call.meta["key"]]
    change = {source: amount if verb == "deposit" else -amount}
    if verb == "transfer":
        change[args[tr["destination"]]] = amount
    expected = {k: {**r, field: moved(held(r, field), change[k])} if k in change else r for k, r in rows_before.items()}
    elsewhere = call.elsewhere()
    if elsewhere:
        return f"{verb} also changed {elsewhere}"
    total_before = sum(held(r, field) for r in rows_before.values())
    total_after = sum(held(r, field) for r in rows_after.values())
    if not math.isclose(total_after, total_before + sum(change.values()), rel_tol=1e-9, abs_tol=1e-9):
        should = "left unchanged" if verb == "transfer" else f"changed by {sum(change.values())}"
        return f"{verb} made the sum of {field} {total_after}, from {total_before}: it must be {should}"
    if list(rows_after) != list(expected) or rows_after != expected:
        return f"{verb} did not change exactly {field} of {' and '.join(change)} by {amount}"
    floor = call.meta["fields"][field].get("minimum")
    if floor is not None and any(held(r, field) < floor for r in rows_after.values()):
        return f"{verb} left a {field} below its minimum {floor}"
    wanted = (
        {"source": expected[source], "destination": expected[args[tr["destination"]]], "amount": amount}
        if verb == "transfer"
        else expected[source]
    )
    if call.output != wanted:
        return f"{verb} returned {call.output}, not the changed rows"
    return None


def transfer_refusals(
    env: dict[str, Any], tool: dict[str, Any], good: dict[str, Any], saved: dict[str, Any]
) -> list[tuple[str, dict[str, Any], str]]:
    """``(check, arguments, error type)`` that a transfer tool must refuse on ``saved`` (where ``good`` succeeds)
    with that typed error, changing nothing: more than the source holds above the field's minimum (a deposit:
    past its maximum, where the field has one, else past :data:`BALANCE_LIMIT`) is an ``invariant`` refusal
    (``precondition_failed``); an amount of 0, one below 0 and, on a number field, one of more than the 9 decimals
    a balance keeps, and for a ``transfer`` a destination that does not exist and the source itself, are
    ``tool_invalid``."""
    tr, table = tool["transfer"], tool["table"]
    meta = env["tables"][table]
    schema = meta["fields"][tr["field"]]
    row = next(r for r in _rows(saved, table) if r[meta["key"]] == good[meta["key"]])
    one = 1 if schema["type"] == "integer" else 0.5
    out: list[tuple[str, dict[str, Any], str]] = []
    refused = ErrorType.PRECONDITION_FAILED.value
    if tr["verb"] != "deposit":
        out.append(("invariant", {**good, tr["amount"]: moved(_transfer_room(schema, row, tr["field"]), one)}, refused))
    elif "maximum" in schema:
        over = moved(moved(schema["maximum"], -held(row, tr["field"])), one)
        out.append(("invariant", {**good, tr["amount"]: over}, refused))
    else:
        out.append(("invariant", {**good, tr["amount"]: 2 * BALANCE_LIMIT}, refused))
    bad = ErrorType.BAD_ARGUMENTS.value
    out += [("tool_invalid", {**good, tr["amount"]: 0}, bad), ("tool_invalid", {**good, tr["amount"]: -one}, bad)]
    if schema["type"] == "number":
        out.append(("tool_invalid", {**good, tr["amount"]: 1e-10}, bad))
    if tr["verb"] == "transfer":
        out.append(("tool_invalid", {**good, tr["destination"]: "no-such-id-00000"}, ErrorType.NOT_FOUND.value))
        out.append(("tool_invalid", {**good, tr["destination"]: good[meta["key"]]}, bad))
    return out


def _check_transfer_refusals(gate: _Gate, good: dict[str, Any], saved: dict[str, Any], base: str) -> None:
    """Each of :func:`transfer_refusals` on a fork of ``base`` (holding ``saved``): the call must fail with its
    typed error and leave the state as it was (a refused transfer changes neither row)."""
    for check, bad, expected in transfer_refusals(gate.env, gate.tool, good, saved):
        result, episode, crash = _call_on_fork(gate.worker, base, gate.tool["name"], bad)
        if crash:
            gate.add(check, False, f"refused call crashed the worker: {crash}")
            return
        unchanged = state_hash(gate.saved(episode)) == state_hash(saved)
        error = (result.get("error") or {}).get("type")
        ok = not result.get("ok") and error == expected and unchanged
        detail = f"{gate.tool['transfer']['verb']} with {bad} gave {error or 'success'}, expected {expected}" + (
            "" if unchanged else " and changed the state"
        )
        gate.add(check, ok, "" if ok else detail)
        gate.worker.close_episode(episode)


def computed_figures(env: dict[str, Any], tool: dict[str, Any], args: dict[str, Any], saved: dict[str, Any]) -> Any:
    """What a computed read called with ``args`` must return on ``saved``: over a collection the number of rows in
    the scope and the sum of each numeric field (absent values count for nothing; a float sum kept to 9 decimals,
    as :func:`moved` keeps a balance), of an item its numeric fields (those it holds); None when the item is not
    there."""
    comp, table = tool["computed"], tool["table"]
    key = env["tables"][table]["key"]
    if comp["scope"] == "item":
        row = next((r for r in _rows(saved, table) if r[key] == args.get(key)), None)
        if row is None:
            return None
        return {key: row[key], **{f: row[f] for f in comp["fields"] if row.get(f) is not None}}
    rows = [r for r in _rows(saved, table) if all(r.get(k) == v for k, v in args.items())]
    out: dict[str, Any] = {"count": len(rows)}
    for f in comp["fields"]:
        out[f"total_{f}"] = moved(sum(r[f] for r in rows if r.get(f) is not None), 0)
    return out


def changed_rows(
    env: dict[str, Any], tool: dict[str, Any], args: dict[str, Any], saved: dict[str, Any]
) -> dict[str, Any] | None:
    """A copy of ``saved`` whose rows under a computed read called with ``args`` changed, so that its figures
    change: over a collection a copy of the last row in scope added under a new id; of an item each numeric field
    moved by one (down when up would pass its maximum; set to its minimum, else 1, where the row lacks it). None
    when there is nothing to change."""
    comp, table = tool["computed"], tool["table"]
    meta = env["tables"][table]
    state = copy.deepcopy(saved)
    rows = state["tables"][table]
    if comp["scope"] == "collection":
        scoped = [r for r in rows if all(r.get(k) == v for k, v in args.items())]
        if not scoped:
            return None
        rows.append({**scoped[-1], meta["key"]: f"{meta['prefix']}_99999"})
        return state
    row = next((r for r in rows if r[meta["key"]] == args[meta["key"]]), None)
    if row is None or not comp["fields"]:
        return None
    for f in comp["fields"]:
        schema = meta["fields"][f]
        if row.get(f) is None:
            row[f] = schema.get("minimum", 1)
            continue
        up = row[f] + 1
        row[f] = up if up <= schema.get("maximum", up) else row[f] - 1
    return state


def _check_derived(gate: _Gate, args: dict[str, Any], first: Any, saved: dict[str, Any]) -> None:
    """A computed read that returned ``first`` on ``saved``, called again on :func:`changed_rows`: it must return
    the changed state's figures (``derived``); no check when there is nothing to change."""
    env, tool = gate.env, gate.tool
    changed = changed_rows(env, tool, args, saved)
    if changed is None:
        return
    try:
        episode = gate.worker.open_episode({env["env_id"]: changed})
    except StateRejected as exc:
        gate.add("derived", False, f"the changed state was rejected: {exc}")
        return
    result = gate.worker.call(episode, tool["name"], args)
    gate.worker.close_episode(episode)
    expected = computed_figures(env, tool, args, changed)
    ok = bool(result.get("ok")) and result.get("output") == expected and expected != first
    detail = f"with the rows changed it returned {result.get('output') or result.get('error')}, not {expected}"
    gate.add("derived", ok, "" if ok else detail)


def _side_effect_defect(call: ObservedCall) -> str | None:
    """None when a side-effect tool did what its kind says (:func:`_check_semantics`), else the defect."""
    se, before, after = call.tool["side_effect"], call.before, call.after
    outbox, verb = se["outbox"], se["verb"]
    touched = [t for t in before["tables"] if t != outbox and before["tables"][t] != after["tables"].get(t)]
    if touched or set(after["tables"]) != set(before["tables"]):
        return f"{verb} changed {', '.join(touched) or 'the set of tables'}: only the outbox may change"
    if after["meta"] != {**before["meta"], "next_id": before["meta"]["next_id"] + 1}:
        return f"{verb} changed the meta other than by taking one id"
    record = side_effect_record(call.env, call.tool, call.args, before)
    if _rows(after, outbox) != [*_rows(before, outbox), record]:
        return f"{verb} did not record exactly one {outbox} row with its target and arguments"
    if call.output != record:
        return f"{verb} returned {call.output}, not the recorded row"
    return None


def _computed_defect(call: ObservedCall) -> str | None:
    """None when a computed read returned the figures of the rows (:func:`computed_figures`), else the defect."""
    expected = computed_figures(call.env, call.tool, call.args, call.before)
    return None if call.output == expected else f"returned {call.output}, the rows give {expected}"


def _singleton_defect(call: ObservedCall) -> str | None:
    """None when a get or update of the one row of a singleton table did what its kind says, else the defect."""
    kind, args, output = call.tool["kind"], call.args, call.output
    (only_before,), rows_after = call.keyed(call.before).values(), call.keyed(call.after)
    (only_after,) = rows_after.values()
    if kind == "get" and output != only_before:
        return "get returned something other than the one stored row"
    if kind == "update" and (
        any(only_after.get(k) != v for k, v in args.items()) or output != only_after or len(rows_after) != 1
    ):
        return "update did not store the new values in the one row"
    return None


def _check_semantics(call: ObservedCall) -> str | None:
    """None when the tool did what its kind says to the state, else a description of the defect."""
    table, kind, args, output = call.table, call.tool["kind"], call.args, call.output
    before, after = call.before, call.after
    unchanged = state_hash(before) == state_hash(after)
    if call.tool["read_only"] and not unchanged:
        return "read-only tool changed the state"
    if kind in RELATION_KINDS:
        return _relation_defect(call)
    special = {"transfer": _transfer_defect, "side_effect": _side_effect_defect, "computed_read": _computed_defect}
    if kind in special:
        return special[kind](call)
    if call.tool.get("singleton"):
        return _singleton_defect(call)
    key = call.meta["key"]
    rows_before, rows_after = call.keyed(before), call.keyed(after)
    if kind in ("list", "count"):
        expected = [r for r in _rows(before, table) if all(r.get(k) == v for k, v in args.items() if k != "limit")]
        if kind == "count":
            if output.get("count") != len(expected):
                return f"count returned {output.get('count')}, state has {len(expected)} matching rows"
            return None
        limit = args.get("limit", _default_limit(call.tool))
        if output.get("total") != len(expected) or output.get("items") != expected[:limit]:
            return (
                f"list returned {len(output.get('items', []))} of total {output.get('total')}, state has "
                f"{len(expected)} (limit {limit})"
            )
    elif kind == "search":
        scope = {k: v for k, v in args.items() if k not in ("query", "limit", "offset")}
        expected = matching_rows(
            [r for r in _rows(before, table) if all(r.get(k) == v for k, v in scope.items())], args["query"]
        )
        start = args.get("offset", 0)
        window = expected[start : start + args.get("limit", _default_limit(call.tool))]
        if output.get("total") != len(expected) or output.get("items") != window:
            return (
                f"search returned {len(output.get('items', []))} of total {output.get('total')}, "
                f"expected {len(window)} of {len(expected)} matching rows"
            )
    elif kind == "action":
        act = call.tool["action"]
        row, previous = rows_after.get(args[key]), rows_before.get(args[key], {})
        expected_row = {**previous, act["field"]: act["value"]}
        if act["stamp"]:
            expected_row[act["stamp"]] = before["meta"]["now"]
        others_same = {k: v for k, v in rows_after.items() if k != args[key]} == {
            k: v for k, v in rows_before.items() if k != args[key]
        }
        if row != expected_row or output != row or not others_same:
            return f"{act['verb']} did not change exactly {act['field']} of that row"
        elsewhere = call.elsewhere()
        if elsewhere:
            return f"{act['verb']} also changed {elsewhere}"
    elif kind == "get":
        if output != rows_before.get(args[key]):
            return "get returned something other than the stored row"
    elif kind == "create":
        new_keys = set(rows_after) - set(rows_before)
        if len(new_keys) != 1 or output.get(key) not in new_keys or rows_after[output[key]] != output:
            return "create did not add exactly the returned row"
        if any(rows_after[output[key]].get(k) != v for k, v in args.items()):
            return "created row does not hold the given arguments"
    elif kind == "update":
        row = rows_after.get(args[key])
        previous = rows_before.get(args[key], {})
        should_change = any(previous.get(k) != v for k, v in args.items())
        if (
            (should_change and unchanged)
            or row is None
            or any(row.get(k) != v for k, v in args.items())
            or output != row
        ):
            return "update did not store the new values"
    elif kind == "delete":
        if args[key] in rows_after or len(rows_after) != len(rows_before) - 1:
            return "delete did not remove exactly that row"
        for other, meta in call.env["tables"].items():
            held = [f for f, target in meta["foreign_keys"].items() if target == table]
            if meta.get("relation") and held:
                kept = [r for r in _rows(before, other) if all(r.get(f) != args[key] for f in held)]
                if _rows(after, other) != kept:
                    return f"delete did not remove exactly the pairs of {other} that hold the row"
    return None


def _default_limit(tool: dict[str, Any]) -> int:
    """How many rows a read without ``limit`` returns: the default its ``limit`` states (a real MCP signature's,
    such as git_log's ten), else the builder's."""
    stated = tool["input_schema"]["properties"].get("limit", {}).get("default")
    return stated if isinstance(stated, int) else LIST_LIMIT_DEFAULT


def _validate(schema: dict[str, Any], value: Any) -> str | None:
    try:
        jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    except jsonschema.ValidationError as exc:
        return f"{exc.message[:200]} at {list(exc.absolute_path)}"
    return None


def _call_on_fork(worker: SandboxWorker, base: str, tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    episode = worker.fork(base)
    try:
        result = worker.call(episode, tool, args)
        return result, episode, ""
    except WorkerCrashed as exc:
        return {"ok": False, "error": {"type": "crash", "message": str(exc)}}, "", str(exc)


def verify_environment(env: dict[str, Any], limits: SandboxLimits | None = None, seed: int = 7) -> VerificationReport:
    """Run every check on ``env`` (docs/design.md Environment) in a fresh sandbox worker.

    Never raises for a defective environment: defects become failed checks. ``seed`` drives the
    argument values used in the checks.
    """
    report = VerificationReport(env["env_id"])
    env_id = env["env_id"]
    real_tools = {t["name"]: t for t in env["tools"] if t.get("mcp_binding")}
    if real_tools:  # the checks run in the builder's argument names; the calls carry the real ones
        env = {**env, "tools": [canonical_tool(t) for t in env["tools"]]}
    with SandboxWorker(limits or SandboxLimits()) as sandbox:
        worker = _RealSignatures(sandbox, env_id, real_tools) if real_tools else sandbox
        try:
            worker.load_environment(env_id, env["source"], origin=env.get("origin", "untrusted"))
        except EnvironmentRejected as exc:
            report.add("static_check", False, "; ".join(exc.violations)[:500])
            return report
        except WorkerCrashed as exc:
            report.add("static_check", False, f"environment module crashed the worker: {exc}")
            return report
        report.add("static_check", True)
        loadable: list[tuple[str, dict[str, Any], str]] = []
        for initial in env["initial_states"]:
            name, expect = initial["name"], initial["expect"]
            try:
                episode = worker.open_episode({env_id: copy.deepcopy(initial["state"])})
            except StateRejected as exc:
                report.add(
                    "initial_state",
                    expect == "reject",
                    "" if expect == "reject" else f"valid state rejected: {exc}",
                    state=name,
                )
                continue
            except WorkerCrashed as exc:
                report.add("initial_state", False, f"worker crashed loading state: {exc}", state=name)
                continue
            if expect == "reject":
                report.add("initial_state", False, "invalid state was accepted", state=name)
                worker.close_episode(episode)
                continue
            report.add("initial_state", True, state=name)
            saved = worker.save(episode)[env_id]
            same = state_hash(saved) == state_hash(initial["state"])
            report.add("round_trip", same, "" if same else "save(load(state)) differs from state", state=name)
            loadable.append((name, initial["state"], episode))

        for name, saved_state, base in loadable:
            values = ValueFactory(seed)
            plan: list[tuple[str, dict[str, Any]]] = []
            for tool in env["tools"]:
                try:
                    _check_tool(_Gate(worker, env, tool, name, report), saved_state, base, values, plan)
                except SandboxError as exc:
                    report.add(_classify(exc), False, str(exc), tool["name"], name)
            if name == "valid":
                try:
                    _check_replay_and_round_trip(worker, env, saved_state, plan, report)
                except SandboxError as exc:
                    report.add(_classify(exc) if "save()" in str(exc) else "replay", False, str(exc), state=name)
        if loadable:
            _report_unchecked(env, report)
    return report


class _RealSignatures:
    """A sandbox worker whose ``call`` takes the builder's argument names for the tools with a real MCP signature
    (:func:`~envfactory_assets.envgen.mcp_signatures.real_arguments`), checks their answer against the real
    output schema (a mismatch is an ``output_schema`` error) and gives it back as one row where a batch answer
    holds one (:func:`~envfactory_assets.envgen.mcp_signatures.canonical_output`); everything else is the
    worker's."""

    def __init__(self, worker: SandboxWorker, env_id: str, real_tools: dict[str, dict[str, Any]]) -> None:
        self._worker, self._env_id, self._real = worker, env_id, real_tools

    def __getattr__(self, name: str) -> Any:
        return getattr(self._worker, name)

    @property
    def real_tools(self) -> dict[str, dict[str, Any]]:
        """The tools whose calls carry real arguments, by name."""
        return self._real

    def call(self, episode: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        real = self._real.get(tool)
        if real is None:
            return self._worker.call(episode, tool, args)
        needs_rows = any(
            p.get("field") and p["role"] in ("key", "keys", "scope") for p in real["mcp_binding"]["params"].values()
        )
        rows = self._worker.save(episode)[self._env_id]["tables"][real["table"]] if needs_rows else None
        result = self._worker.call(episode, tool, real_arguments(real, args, rows))
        if not result.get("ok"):
            return result
        problem = _validate(real["output_schema"], result["output"])
        if problem:
            return {"ok": False, "error": {"type": "output_schema", "message": f"real output schema: {problem}"}}
        return {**result, "output": canonical_output(real, result["output"])}


def _wrong_value(schema: dict[str, Any]) -> Any:
    """A value of a type ``schema`` does not allow (an object, else a number, else text), or None when it allows
    any type."""
    types = set(schema_types(schema))
    if not types:
        return None
    for value, kinds in (
        ({"unexpected": True}, {"object"}),
        (12345, {"integer", "number"}),
        ("not-valid-Ω", {"string"}),
    ):
        if not types & kinds:
            return value
    return None


def real_invalid_arguments(tool: dict[str, Any], good: dict[str, Any]) -> list[dict[str, Any]]:
    """For a tool with a real MCP signature: ``good`` (in the builder's names) with an argument it does not take,
    and with each real parameter the builder's names leave out (``dryRun``, ``page``, ``start_timestamp``) given
    a value of a type its schema does not allow; every one must be refused."""
    binding = tool.get("mcp_binding")
    if not binding:
        return []
    props = (tool.get("real_input_schema") or {}).get("properties") or {}
    out = [{**good, "no_such_argument": 1}]
    for name, param in binding["params"].items():
        if param["role"] in ("context", "page", "after", "before") and isinstance(props.get(name), dict):
            wrong = _wrong_value(props[name])
            if wrong is not None:
                out.append({**good, name: wrong})
    return out


def _report_unchecked(env: dict[str, Any], report: VerificationReport) -> None:
    """A failed check for each action, relation tool, transfer and tool with a stated precondition that no
    loadable state let the gate call: none is ever passed unexecuted."""
    ran = {c.tool for c in report.checks}
    for tool in env["tools"]:
        if tool["name"] in ran:
            continue
        if tool["kind"] == "action" or tool.get("precondition"):
            verb = tool["action"]["verb"] if tool["kind"] == "action" else tool["kind"]
            report.add(
                "semantics",
                False,
                f"no loadable initial state has a row of {tool['table']} to check {verb} on",
                tool["name"],
            )
        elif tool["kind"] in ("transfer", "side_effect", "computed_read"):
            said = (tool.get(tool["kind"]) or {}).get("verb") or tool["kind"].replace("_", " ")
            report.add(
                "semantics",
                False,
                f"no loadable initial state has the rows of {tool['table']} to check {said} on",
                tool["name"],
            )
        elif tool["kind"] in RELATION_KINDS:
            report.add(
                "semantics",
                False,
                f"no loadable initial state has the rows of {tool['table']} to check {tool['kind']} on",
                tool["name"],
            )


def _classify(exc: Exception) -> str:
    """The check a sandbox error during a tool check belongs to: a state that does not survive
    ``save`` then ``load`` (forks go through both) is a round-trip failure."""
    return "round_trip" if "save()" in str(exc) or "load()" in str(exc) else "tool_valid"


@dataclass(frozen=True)
class _Gate:
    """The checks of one tool on one loadable state: the ``worker`` that runs the calls, the environment and the
    tool (their documents), the state's name and the ``report`` each verdict goes to."""

    worker: SandboxWorker
    env: dict[str, Any]
    tool: dict[str, Any]
    state_name: str
    report: VerificationReport

    def add(self, check: str, passed: bool, detail: str = "") -> bool:
        """Record the verdict of ``check`` on this tool and state; returns ``passed``."""
        return self.report.add(check, passed, detail, self.tool["name"], self.state_name)

    def saved(self, episode: str) -> dict[str, Any]:
        """The environment's saved state in ``episode``."""
        return self.worker.save(episode)[self.env["env_id"]]


def _check_tool(
    gate: _Gate,
    saved: dict[str, Any],
    base: str,
    values: ValueFactory,
    plan: list[tuple[str, dict[str, Any]]],
) -> None:
    env, tool = gate.env, gate.tool
    tname = tool["name"]
    args = valid_arguments(env, tool, saved, values)
    if args is None:
        if _needs_seeded_row(env, tool, saved):
            _check_on_seeded_row(gate, saved, values)
        return  # else the state has no row this tool can act on (boundary states may be sparse)
    if not _check_call(gate, args, saved, base):
        return
    plan.append((tname, args))
    if tool["kind"] in ("list", "count"):
        for filtered in filtered_arguments(env, tool, saved, args):
            if _check_call(gate, filtered, saved, base):
                plan.append((tname, filtered))
    paged = paged_arguments(env, tool, saved, args)
    if paged is not None and _check_call(gate, paged, saved, base, "paged: "):
        plan.append((tname, paged))
    if tool["kind"] == "action":
        _check_action_without_flag(gate, args, saved)
    _check_invalid(gate, args, saved, base)


def _check_invalid(gate: _Gate, good: dict[str, Any], saved: dict[str, Any], base: str) -> None:
    """Invalid arguments derived from ``good`` must give an error (a relation tool's: its typed one,
    :func:`relation_invalid_arguments`) and leave the state (``saved``) as it was."""
    env, tool = gate.env, gate.tool
    if tool["kind"] in RELATION_KINDS:
        attempts: list[tuple[dict[str, Any], str | None]] = list(relation_invalid_arguments(env, tool, good, saved))
    elif tool["kind"] == "side_effect":
        attempts = side_effect_invalid_arguments(tool, good)
    else:
        bad = invalid_arguments(tool, good)
        attempts = [] if bad is None else [(bad, None)]
        attempts += [(wrong, "bad_arguments") for wrong in real_invalid_arguments(tool, good)]
        if tool["kind"] == "computed_read" and tool["computed"]["scope"] == "collection" and good:
            attempts += computed_invalid_arguments(env, tool, good)
    for bad, expected in attempts:
        result, episode, crash = _call_on_fork(gate.worker, base, tool["name"], bad)
        if crash:
            gate.add("tool_invalid", False, f"invalid call crashed the worker: {crash}")
            return
        after = gate.saved(episode)
        error = (result.get("error") or {}).get("type")
        ok = not result.get("ok") and expected in (None, error) and state_hash(after) == state_hash(saved)
        detail = f"invalid arguments {bad} were accepted or changed state" + (
            f" (expected {expected}, got {error or 'success'})" if expected else ""
        )
        gate.add("tool_invalid", ok, "" if ok else detail)
        gate.worker.close_episode(episode)


def _check_call(gate: _Gate, args: dict[str, Any], saved: dict[str, Any], base: str, note: str = "") -> bool:
    """Call the tool with valid ``args`` on a fork of ``base`` (holding ``saved``) and check its output, its
    kind's semantics and an action's precondition; True when the call succeeded. ``note`` prefixes details."""
    env, tool = gate.env, gate.tool
    result, episode, crash = _call_on_fork(gate.worker, base, tool["name"], args)
    if not result.get("ok"):
        gate.add("tool_valid", False, f"{note}valid call {args} failed: {result.get('error')}")
        return False
    gate.add("tool_valid", True)
    problem = _validate(tool["output_schema"], result["output"])
    gate.add("output_schema", problem is None, f"{note}{problem}" if problem else "")
    after = gate.saved(episode)
    defect = _check_semantics(ObservedCall(env, tool, args, result["output"], saved, after))
    gate.add("semantics", defect is None, f"{note}{defect} (arguments {args})" if defect else "")
    if (tool["kind"] == "action" or tool.get("precondition")) and defect is None:
        _check_precondition(gate, args, episode, saved, after)
    if tool["kind"] == "relation_add" and defect is None:
        _check_add_again(gate, args, episode, after)
    if tool["kind"] == "transfer" and defect is None:
        _check_transfer_refusals(gate, args, saved, base)
    if tool["kind"] == "computed_read" and defect is None:
        _check_derived(gate, args, result["output"], saved)
    gate.worker.close_episode(episode)
    return True


def _check_add_again(gate: _Gate, args: dict[str, Any], episode: str, after: dict[str, Any]) -> None:
    """A relation's add again on the pair it just recorded (``after``): an idempotent add succeeds, returns the
    stored pair and changes nothing (``semantics``); any other fails with ``precondition_failed`` and changes
    nothing (``precondition``)."""
    tool = gate.tool
    rel = tool["relation"]
    result = gate.worker.call(episode, tool["name"], args)
    unchanged = state_hash(gate.saved(episode)) == state_hash(after)
    if rel["idempotent"]:
        stored = next(
            (
                r
                for r in _rows(after, tool["table"])
                if (r[rel["parent_field"]], r[rel["member_field"]])
                == (args[rel["parent_field"]], args[rel["member_field"]])
            ),
            None,
        )
        ok = bool(result.get("ok")) and result.get("output") == stored and unchanged
        detail = "" if ok else f"the same add again gave {result.get('output') or result.get('error')}"
        gate.add("semantics", ok, detail + ("" if unchanged else " and changed the state"))
        return
    error = result.get("error") or {}
    ok = not result.get("ok") and error.get("type") == ErrorType.PRECONDITION_FAILED.value and unchanged
    detail = "" if ok else f"an add of a pair that is there gave {error or 'success'}"
    gate.add("precondition", ok, detail + ("" if unchanged else " and changed the state"))


def _needs_seeded_row(env: dict[str, Any], tool: dict[str, Any], saved: dict[str, Any]) -> bool:
    """Whether ``tool`` found no row on ``saved`` because of its preconditions: an action, or a tool with a stated
    precondition whose table's rows it applies to none of (an empty table has no row to put into such a state)."""
    if tool["kind"] == "action":
        return True
    if not tool.get("precondition"):
        return False
    fields = env["tables"][tool["table"]]["fields"]
    return not any(tool_applies(tool, fields, r) for r in _rows(saved, tool["table"]))


def _check_on_seeded_row(gate: _Gate, saved: dict[str, Any], values: ValueFactory) -> None:
    """Check an action, or a tool with a stated precondition, that ``saved`` has no row for on a copy whose last
    row of its table is put into a state the tool applies to (no check when the table is empty:
    :func:`_report_unchecked` catches a tool that no state could check)."""
    seeded = seeded_state(gate.env, gate.tool, saved)
    if seeded is None:
        return
    state, changed = seeded
    note = f"on a row put into {', '.join(f'{k}={v!r}' for k, v in changed.items())}: "
    base = _open_prepared(gate, state, note)
    if base is None:
        return
    try:
        state = gate.saved(base)
        args = valid_arguments(gate.env, gate.tool, state, values)
        if args is None:
            gate.add("semantics", False, f"{note}the row is still not one the tool applies to")
        else:
            if _check_call(gate, args, state, base, note):
                _check_invalid(gate, args, state, base)
    finally:
        gate.worker.close_episode(base)


def _open_prepared(gate: _Gate, state: dict[str, Any], note: str) -> str | None:
    """An episode on ``state`` (a copy of a saved state the gate prepared for the tool's check), or None when
    the environment rejects it; the rejection is then a failed ``semantics`` check, prefixed with ``note``."""
    try:
        return gate.worker.open_episode({gate.env["env_id"]: state})
    except StateRejected as exc:
        gate.add("semantics", False, f"{note}the state was rejected: {exc}")
        return None


def _flag_may_be_missing(meta: dict[str, Any], act: dict[str, Any]) -> bool:
    """Whether the field of ``act`` (an action, or a stated precondition) is a boolean flag that a row may leave
    out (it then reads as its default)."""
    return meta["fields"].get(act["field"], {}).get("type") == "boolean" and act["field"] not in meta["required"]


def _check_action_without_flag(gate: _Gate, args: dict[str, Any], saved: dict[str, Any]) -> None:
    """The action on its row (of ``saved``) with the flag left out, when the flag's default (else off) is a
    value the action applies to: it must succeed and set the flag (a tool that takes every missing flag for
    off fails when the default is on). No check when the row already lacks the flag."""
    act, table = gate.tool["action"], gate.tool["table"]
    meta = gate.env["tables"][table]
    if not _flag_may_be_missing(meta, act) or not action_applies(act, meta["fields"], {}):
        return
    state = copy.deepcopy(saved)
    row = next(r for r in state["tables"][table] if r[meta["key"]] == args[meta["key"]])
    if row.pop(act["field"], None) is None:
        return
    note = f"on a row without {act['field']}: "
    base = _open_prepared(gate, state, note)
    if base is None:
        return
    try:
        _check_call(gate, args, gate.saved(base), base, note)
    finally:
        gate.worker.close_episode(base)


def _check_precondition(
    gate: _Gate, args: dict[str, Any], episode: str, saved: dict[str, Any], after: dict[str, Any]
) -> None:
    """After a call that succeeded on ``saved`` (leaving ``after`` in ``episode``), the refusals: an action again
    on the row it just changed, on the row put in each state the action is refused in, and (for an action on a
    boolean flag the row may lack, whose default, else off, is the action's target) on the row without the
    flag; a stated precondition on the row of ``saved`` put into each refused value of its field (and, for a
    flag the row may lack that then reads as refused, without it). Each must fail with ``precondition_failed``
    and leave the state as it was."""
    worker, env_id, tool = gate.worker, gate.env["env_id"], gate.tool
    table = tool["table"]
    meta = gate.env["tables"][table]
    act, stated = tool.get("action"), tool.get("precondition")
    attempts: list[tuple[str, dict[str, Any], str, Any]] = []
    settings: list[tuple[dict[str, Any], str, Any]] = []  # (state to start from, field, value; None: left out)
    if act:
        attempts.append((episode, after, act["field"], act["value"]))
        settings += [(after, act["field"], v) for v in act["blocked"]]
        if _flag_may_be_missing(meta, act) and action_reads(act, meta["fields"], {}) == act["value"]:
            settings.append((after, act["field"], None))
    if stated:
        covered = {(f, v) for _, f, v in settings} | ({(act["field"], act["value"])} if act else set())
        refused = list(stated["refused"])
        if _flag_may_be_missing(meta, stated) and precondition_reads(stated, meta["fields"], {}) in refused:
            refused.append(None)
        settings += [(saved, stated["field"], v) for v in refused if (stated["field"], v) not in covered]
    for base, name, current in settings:
        state = copy.deepcopy(base)
        for row in state["tables"][table]:
            if row[meta["key"]] == args[meta["key"]]:
                if current is None:
                    row.pop(name, None)
                else:
                    row[name] = current
        opened = worker.open_episode({env_id: state})
        attempts.append((opened, worker.save(opened)[env_id], name, current))
    verb = act["verb"] if act else tool["kind"]
    for ep, state, name, current in attempts:
        result = worker.call(ep, tool["name"], args)
        unchanged = state_hash(worker.save(ep)[env_id]) == state_hash(state)
        error = result.get("error") or {}
        ok = not result.get("ok") and error.get("type") == ErrorType.PRECONDITION_FAILED.value and unchanged
        gate.add(
            "precondition",
            ok,
            ""
            if ok
            else f"{verb} on a row with "
            + (f"{name}={current!r}" if current is not None else f"no {name}")
            + f" gave {error or 'success'}"
            + ("" if unchanged else " and changed the state"),
        )
        if ep != episode:
            worker.close_episode(ep)


def _run_plan(
    worker: SandboxWorker, env_id: str, saved: dict[str, Any], plan: list[tuple[str, dict[str, Any]]]
) -> tuple[list[Any], str, dict[str, Any]]:
    episode = worker.open_episode({env_id: copy.deepcopy(saved)})
    outputs = [worker.call(episode, tool, args) for tool, args in plan]
    final = worker.save(episode)[env_id]
    digest = worker.state_hash(episode)
    worker.close_episode(episode)
    return outputs, digest, final


def _check_replay_and_round_trip(
    worker: SandboxWorker,
    env: dict[str, Any],
    saved: dict[str, Any],
    plan: list[tuple[str, dict[str, Any]]],
    report: VerificationReport,
) -> None:
    env_id = env["env_id"]
    try:
        out_a, hash_a, final = _run_plan(worker, env_id, saved, plan)
        out_b, hash_b, _ = _run_plan(worker, env_id, saved, plan)
        # A second process with another hash seed: results must not depend on set order or str hashing.
        other = dataclasses.replace(worker.limits, hash_seed=worker.limits.hash_seed + 1)
        with SandboxWorker(other) as sandbox:
            second = sandbox
            if isinstance(worker, _RealSignatures):
                second = _RealSignatures(sandbox, env_id, worker.real_tools)
            second.load_environment(env_id, env["source"], origin=env.get("origin", "untrusted"))
            out_c, hash_c, _ = _run_plan(second, env_id, saved, plan)
    except (WorkerCrashed, StateRejected, EnvironmentRejected) as exc:
        report.add("replay", False, f"replay failed: {exc}", state="valid")
        return
    same = out_a == out_b == out_c and hash_a == hash_b == hash_c
    report.add(
        "replay",
        same,
        ""
        if same
        else "the same calls on the same state gave different results"
        + (" in another worker process" if hash_a == hash_b else ""),
        state="valid",
    )
    try:
        episode = worker.open_episode({env_id: copy.deepcopy(final)})
    except StateRejected as exc:
        report.add("round_trip", False, f"state after writes does not load back: {exc}", state="after_writes")
        return
    again = worker.save(episode)[env_id]
    worker.close_episode(episode)
    ok = state_hash(again) == state_hash(final)
    report.add("round_trip", ok, "" if ok else "save(load(state)) differs after writes", state="after_writes")
