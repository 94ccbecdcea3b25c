"""Executing sampled tool chains into multi-turn trajectories (the paper's trajectory synthesis).

Each chain runs on its own episode (a fresh copy of its environments' ``valid`` initial states) in a
sandbox worker. Arguments come from earlier outputs along the chain's producer bindings (graph edges),
from the user (seeded values; filter values taken from the state so searches find something), or,
for inputs no tool in the chain produces, from the hidden state. Turns split as in the paper
(:mod:`envfactory_assets.synth.trajectories.turns`); every turn keeps its query, target tools, calls with argument
provenance, results, and the state (and hash) before and after.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

from envfactory_assets.config_checks import finite_number, number_types, one_of, setting, whole_number
from envfactory_assets.envgen.tools import tool_applies
from envfactory_assets.envgen.values import DEFAULT_NOW, ValueFactory
from envfactory_assets.envgen.verify import matching_rows, searchable
from envfactory_assets.graph.build import ToolGraph
from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.runtime.errors import ErrorType
from envfactory_assets.runtime.sandbox import SandboxWorker, StateRejected, WorkerCrashed
from envfactory_assets.sources.openapi import SCALAR_TYPES, matches_json_type
from envfactory_assets.synth.refinement.model_querygen import DEFAULT_ATTEMPTS, QUERYGEN_CHOICES, ModelQueryWriter
from envfactory_assets.synth.refinement.phrasing import (
    describe_call,
    join_sentences,
    new_value_refs,
    spoken_tables,
    stated_row_fields,
)
from envfactory_assets.synth.refinement.replies import write_reply
from envfactory_assets.synth.sampling.sampler import USER, Chain
from envfactory_assets.synth.trajectories.real_calls import (
    known_row_arguments,
    planning_environments,
    planning_worker,
)
from envfactory_assets.synth.trajectories.turns import split_turns

SYSTEM_PROMPT = (
    "You are a helpful assistant that completes the user's requests by calling the available "
    "tools. Use identifiers from earlier tool results; never invent them."
)


@dataclass(frozen=True)
class SynthConfig:
    """Trajectory synthesis settings (each field's help says what it does).

    Raises:
        SettingError: (a ValueError) a setting of the wrong type, below 1 or not a known choice, named in the
            message.
    """

    min_turns: int = setting(
        2, "fewest turns a trajectory may have; one with fewer is kept with status 'failed'; at least 1."
    )
    max_turn_len: int = setting(5, "most tool calls in one turn; at least 1.")
    # the programmatic writer is the offline default: no model, and the rows every test and run expect
    query_writer: str = setting(
        QUERYGEN_CHOICES[0],
        "who writes each turn's raw query: 'programmatic' (rules, no model) or 'model' (the model_backend "
        "resource's model, ModelQueryWriter, with the programmatic query as its fallback).",
    )
    query_writer_attempts: int = setting(
        DEFAULT_ATTEMPTS, "model requests per turn before the programmatic query is kept; at least 1."
    )
    refusal_share: float = setting(
        0.35,
        "share (0..1) of action calls (cancel) asked of a row the action is refused on (already cancelled, or "
        "shipped), where the state has one, and of transfers and withdrawals asked for more than the source "
        "holds: the call fails with precondition_failed, stays in the turn with its error, and the assistant "
        "reports it (an agent learns to read a typed error); after a refused transfer the agent reads what the "
        "source holds (its balance read, else its get) and says so. Few calls can be refused (only actions and "
        "transfers, on a row with a state that refuses), so the default puts a refused call in about 5-15% of a "
        "default run's turns (the report's per-kind table gives the share).",
    )

    def __post_init__(self) -> None:
        number_types(self, "trajectory")
        whole_number("trajectory", "min_turns", self.min_turns, low=1)
        whole_number("trajectory", "max_turn_len", self.max_turn_len, low=1)
        one_of("trajectory", "query_writer", self.query_writer, QUERYGEN_CHOICES)
        whole_number("trajectory", "query_writer_attempts", self.query_writer_attempts, low=1)
        finite_number("trajectory", "refusal_share", self.refusal_share, low=0.0, high=1.0)


class ToolIndex:
    """Tool specs and table metadata of a set of environments, looked up by tool name."""

    def __init__(self, environments: dict[str, dict[str, Any]]) -> None:
        self.envs = environments
        self.tools: dict[str, dict[str, Any]] = {}
        self.env_of: dict[str, str] = {}
        #: ``{env_id: {table: name a person says}}``
        #: (:func:`~envfactory_assets.synth.refinement.phrasing.spoken_tables`)
        self.spoken: dict[str, dict[str, str]] = {}
        for env_id, env in environments.items():
            self.spoken[env_id] = spoken_tables(env["tools"])
            for tool in env["tools"]:
                # a copy: the environment's own tool specs stay as stored
                self.tools[tool["name"]] = {**tool, "spoken_table": self.spoken[env_id][tool["table"]]}
                self.env_of[tool["name"]] = env_id

    def spoken_table(self, env_id: str, table: str) -> str:
        """The name a person says for ``table`` of ``env_id``, for :func:`~envfactory_assets.synth.refinement.phrasing.
        spoken_thing` (``"buckets"`` for Google Storage's ``b``); the table's own name if unknown."""
        return self.spoken.get(env_id, {}).get(table, table)

    def key_of(self, tool: dict[str, Any]) -> str:
        return self.envs[self.env_of[tool["name"]]]["tables"][tool["table"]]["key"]

    def key_of_name(self, name: str) -> str:
        """The row identifier field of the tool called ``name`` (``KeyError`` if unknown)."""
        return self.key_of(self.tools[name])

    def table_meta(self, tool: dict[str, Any]) -> dict[str, Any]:
        return self.envs[self.env_of[tool["name"]]]["tables"][tool["table"]]

    def listable(self, env_id: str, table: str) -> bool:
        """True when ``env_id`` has a list tool over ``table`` that needs no argument (an agent can look a
        row of it up by what it knows of the row)."""
        return any(
            t["kind"] == "list" and t["table"] == table and not set(t["input_schema"].get("required") or ()) - {"limit"}
            for t in self.envs[env_id]["tools"]
        )

    def list_scope(self, env_id: str, table: str) -> tuple[str, ...] | None:
        """The parent identifiers a list tool over ``table`` needs (``("space_id",)`` for
        ``list_groups(space_id)``), fewest first, when ``table`` has no list tool that needs no argument and
        one needs only identifier fields of the table's rows; None otherwise. A row of such a table can be
        named by what the user knows of it within its parent ("the group whose name is 'RH' in space id
        'spa_1'"), as a person scopes a request to the project or workspace they work in."""
        if self.listable(env_id, table):
            return None
        scopes = [
            tuple(sorted(set(t["input_schema"].get("required") or ()) - {"limit"}))
            for t in self.envs[env_id]["tools"]
            if t["kind"] == "list" and t["table"] == table
        ]
        scopes = [s for s in scopes if s and all(p.endswith("_id") for p in s)]
        return min(scopes, key=lambda s: (len(s), s)) if scopes else None


def tool_name_collisions(environments: list[dict[str, Any]]) -> list[str]:
    """Tool names defined by more than one of ``environments`` (they cannot share an episode)."""
    seen: dict[str, str] = {}
    clashes = []
    for env in environments:
        for tool in env["tools"]:
            if tool["name"] in seen and seen[tool["name"]] != env["env_id"]:
                clashes.append(tool["name"])
            seen[tool["name"]] = env["env_id"]
    return sorted(set(clashes))


def _value_at(output: Any, path: str, rng: random.Random) -> tuple[Any, str] | None:
    """Value at an output path (``"company_id"`` or ``"items[].company_id"``); list items drawn by ``rng``."""
    if "[]." in path:
        array, field = path.split("[].", 1)
        items = [i for i in (output.get(array) or []) if isinstance(i, dict) and field in i]
        if not items:
            return None
        idx = rng.randrange(len(items))
        return items[idx][field], f"{array}[{idx}].{field}"
    if isinstance(output, dict) and path in output:
        return output[path], path
    return None


def _state_rows(saved: dict[str, Any], index: ToolIndex, tool: dict[str, Any]) -> list[dict[str, Any]]:
    return saved[index.env_of[tool["name"]]]["tables"][tool["table"]]


def _hidden_state_value(saved: dict[str, Any], index: ToolIndex, name: str, rng: random.Random) -> Any | None:
    for env_id, env in index.envs.items():
        for table, meta in env["tables"].items():
            if meta["key"] == name and saved[env_id]["tables"][table]:
                return rng.choice(saved[env_id]["tables"][table])[name]
    return None


def _minting_position(history: list[dict[str, Any]], value: Any, index: ToolIndex) -> tuple[int, str] | None:
    """``(position in history, field)`` of the latest ``create`` call whose new row has ``value`` as its own
    identifier (``index.key_of_name``), or None when no call of the episode created it."""
    for i in range(len(history) - 1, -1, -1):
        call = history[i]
        if call["kind"] == "create" and isinstance(call.get("output"), dict):
            key = index.key_of_name(call["name"])
            if key is not None and call["output"].get(key) == value:
                return i, key
    return None


def _drawn_provenance(history: list[dict[str, Any]], value: Any, index: ToolIndex) -> dict[str, Any]:
    """The provenance of an identifier ``value`` drawn from the state: the output of the call that created its row
    (:func:`_minting_position`), since the user knows that row from that call's result; else the state."""
    minted = _minting_position(history, value, index)
    return {"source": "state"} if minted is None else {"source": "output", "call": minted[0], "path": minted[1]}


def resolve_arguments(
    tool: dict[str, Any],
    node: str,
    chain: Chain,
    graph: ToolGraph,
    history: list[dict[str, Any]],
    saved: dict[str, Any],
    index: ToolIndex,
    values: ValueFactory,
    rng: random.Random,
    refused: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Arguments for one call and their provenance. The row from the state of an action, or of a write with a
    stated precondition, is one it applies to, or with ``refused`` one it is refused on (when the state has one).

    Returns ``(arguments, provenance)`` where provenance maps each argument to
    ``{"source": "output", "call": i, "path": ...}``, ``{"source": "user"}`` or ``{"source": "state"}``.
    """
    bindings = chain.producers.get(node, {})
    meta = index.table_meta(tool)
    key = index.key_of(tool)
    props = tool["input_schema"]["properties"]
    required = set(tool["input_schema"].get("required", []))
    args: dict[str, Any] = {}
    prov: dict[str, Any] = {}
    for name in props:
        producer = bindings.get(name)
        if producer is None and name not in required:
            continue
        if producer not in (None, USER):
            found = None
            for i in range(len(history) - 1, -1, -1):
                call = history[i]
                if call["node"] != producer:
                    continue
                edge = graph.graph.edges[producer, node] if graph.graph.has_edge(producer, node) else {"params": []}
                for p in edge["params"]:
                    if p["dst_param"] == name:
                        got = _value_at(call["output"], p["src_param"], rng)
                        if got is not None and _type_ok(got[0], props[name]):
                            found = (got[0], {"source": "output", "call": i, "path": got[1]})
                            break
                if found:
                    break
            if found:
                args[name], prov[name] = found
                continue
        if name == "query" and tool["kind"] == "search":
            # a person searches for a word they remember of a row, so the search finds something
            args[name], prov[name] = _search_text(_state_rows(saved, index, tool), rng), {"source": "user"}
            continue
        if name == key or name in meta["foreign_keys"] or name.endswith("_id"):
            if tool["kind"] == "create" and name not in meta["foreign_keys"] and name not in required:
                continue
            value = _hidden_state_value(saved, index, name, rng)
            if (tool["kind"] == "action" or tool.get("precondition")) and name == key:
                # a state transition is asked of a row it applies to (cancelling a cancelled order fails), and so
                # is a write whose spec states when it applies (only a draft invoice can be deleted)
                rows = _state_rows(saved, index, tool)
                ready = [r[key] for r in rows if tool_applies(tool, meta["fields"], r)]
                refusing = [r[key] for r in rows if r[key] not in ready]
                pool = refusing if refused and refusing else ready
                value = rng.choice(pool) if pool else value
            if value is None:
                if name in required:
                    raise LookupError(f"no value for required identifier {name}")
                continue
            # a row created earlier in the episode is known from that call's result, not from hidden state:
            # the writer then names it ("the new book") instead of quoting an id the user never saw
            args[name], prov[name] = value, _drawn_provenance(history, value, index)
            continue
        if name == "limit":
            args[name], prov[name] = rng.choice([5, 10, 20]), {"source": "user"}
            continue
        if name == "offset" and tool["kind"] == "search":
            # a person pages past results they have seen: skip fewer rows than the search finds
            found = len(matching_rows(_state_rows(saved, index, tool), str(args.get("query", ""))))
            if found > 1:
                args[name], prov[name] = rng.randrange(1, found), {"source": "user"}
            continue
        schema = props[name]
        if tool["kind"] == "list":
            rows = [r for r in _state_rows(saved, index, tool) if name in r]
            if rows:
                args[name], prov[name] = rng.choice(rows)[name], {"source": "user"}
            continue
        # A user sets values by what the field is (its description travels in the schema); dates a user
        # sets ahead (a due date, an expiry) may lie after the clock, other dates lie before it.
        args[name], prov[name] = values.value(name, schema, tool["table"], future=True), {"source": "user"}
    if tool["kind"] == "update" and key in args:
        _make_update_change_only_what_it_names(tool, key, args, prov, saved, index, values)
    if tool["kind"] in ("relation_add", "relation_remove"):
        _pair_from_state(tool, args, prov, history, saved, index, rng)
    if tool["kind"] == "transfer" and key in args:
        _transfer_from_state(tool, key, args, prov, history, saved, index, rng, refused)
    return args, prov


def _transfer_from_state(
    tool: dict[str, Any],
    key: str,
    args: dict[str, Any],
    prov: dict[str, Any],
    history: list[dict[str, Any]],
    saved: dict[str, Any],
    index: ToolIndex,
    rng: random.Random,
    refused: bool = False,
) -> None:
    """A transfer is asked for an amount its source row holds (at most half of what it holds above the field's
    minimum, where it holds any), to another row of the table that a person names (a transfer to a row that
    is not there is no request): the destination is drawn among the other rows, a row an earlier call
    created named from that call. With ``refused`` a withdrawal or transfer asks for more than the source holds
    above the minimum (up to half as much again, at least one unit or cent more), so the call is refused with
    ``precondition_failed``; a deposit, which only a stated maximum refuses, is asked as usual."""
    tr = tool["transfer"]
    meta = index.table_meta(tool)
    schema = meta["fields"][tr["field"]]
    rows = _state_rows(saved, index, tool)
    source = next((r for r in rows if r[meta["key"]] == args[key]), None)
    if tr["destination"]:
        others = [r[meta["key"]] for r in rows if r[meta["key"]] != args[key]]
        if others:
            value = rng.choice(others)
            args[tr["destination"]], prov[tr["destination"]] = value, _drawn_provenance(history, value, index)
    given = (prov.get(tr["amount"]) or {}).get("source") == "output"  # an amount an earlier call gave stays
    if source is None or tr["verb"] == "deposit" or given:
        return
    room = (source.get(tr["field"]) or 0) - schema.get("minimum", 0)
    if refused and room >= 0:
        if schema["type"] == "integer":
            args[tr["amount"]] = room + rng.randint(1, max(room // 2, 1))
        else:
            args[tr["amount"]] = max(round(room + rng.uniform(0.01, max(room / 2, 1.0)), 2), round(room + 0.01, 2))
        prov[tr["amount"]] = {"source": "user"}
        return
    if room >= 2 and schema["type"] == "integer":
        args[tr["amount"]] = rng.randint(1, room // 2)
    elif room >= 0.02 and schema["type"] == "number":
        args[tr["amount"]] = round(rng.uniform(0.01, room / 2), 2)


def _recovery_read(
    call: dict[str, Any], tool: dict[str, Any], index: ToolIndex, worker: SandboxWorker, episode: Any
) -> dict[str, Any] | None:
    """After a refused transfer, the read an agent makes to recover: what the source row holds, by the table's
    computed read of one row (its balance) or else its get, with the refused call's identifier. Returns the
    call (``recovery``: ``{"field"}``, the balance field) or None when the environment has no such read or it
    fails."""
    if tool["kind"] != "transfer":
        return None
    key = index.key_of(tool)
    env_id = index.env_of[tool["name"]]
    readers = [
        t
        for t in index.tools.values()
        if t["table"] == tool["table"]
        and index.env_of[t["name"]] == env_id
        and list(t["input_schema"].get("properties") or {}) == [key]
        and (t["kind"] == "get" or t["kind"] == "computed_read" and t["computed"]["scope"] == "item")
    ]
    readers.sort(key=lambda t: (t["kind"] != "computed_read", t["name"]))
    for reader in readers:
        args = {key: call["arguments"][key]}
        res = worker.call(episode, reader["name"], args)
        if res.get("ok"):
            return {
                "node": f"{env_id}.{reader['name']}",
                "name": reader["name"],
                "env_id": env_id,
                "kind": reader["kind"],
                "arguments": args,
                "provenance": {key: dict(call["provenance"].get(key) or {"source": "user"})},
                "output": res["output"],
                # what the agent looked for: the field the transfer was refused on
                "recovery": {"field": tool["transfer"]["field"]},
            }
    return None


def _pair_from_state(
    tool: dict[str, Any],
    args: dict[str, Any],
    prov: dict[str, Any],
    history: list[dict[str, Any]],
    saved: dict[str, Any],
    index: ToolIndex,
    rng: random.Random,
) -> None:
    """A relation's add asks for a pair that is not there yet, its remove for one that is: the two rows are
    drawn among such pairs, keeping the rows earlier calls' outputs gave where a pair fits them (both, else the
    parent, else the member, else neither: a row given by a call and already paired, or deleted, is no request
    a person would make). Nothing is redrawn when the state has no such pair (the call then fails, and is
    skipped)."""
    rel = tool["relation"]
    pf, mf = rel["parent_field"], rel["member_field"]
    env_id = index.env_of[tool["name"]]
    tables = saved[env_id]["tables"]
    keys = index.envs[env_id]["tables"]
    pairs = [(r[pf], r[mf]) for r in tables[tool["table"]]]
    if tool["kind"] == "relation_remove":
        options = pairs
    else:
        taken = set(pairs)
        parents = [r[keys[rel["parent"]]["key"]] for r in tables[rel["parent"]]]
        members = [r[keys[rel["member"]]["key"]] for r in tables[rel["member"]]]
        options = [(p, m) for p in parents for m in members if p != m and (p, m) not in taken]
    given = {n: args[n] for n in (pf, mf) if n in args and prov.get(n, {}).get("source") == "output"}
    for kept in (given, {k: v for k, v in given.items() if k == pf}, {k: v for k, v in given.items() if k == mf}, {}):
        fitting = [(p, m) for p, m in options if kept.get(pf, p) == p and kept.get(mf, m) == m]
        if fitting:
            options = fitting
            break
    else:
        return
    for name, value in zip((pf, mf), rng.choice(options), strict=True):
        if name in kept:
            continue
        args[name], prov[name] = value, _drawn_provenance(history, value, index)


def refusal_output(error: dict[str, Any]) -> dict[str, str]:
    """The tool result an agent reads for a refused call (``{"error": type, "message": ...}``), in the shape
    :class:`~envfactory_assets.tooluse.task_episode.TaskEpisode` renders errors, so SFT rows show the model
    what its rollouts will show it."""
    return {"error": str(error.get("type", "error")), "message": str(error.get("message", ""))}


def _search_text(rows: list[dict[str, Any]], rng: random.Random) -> str:
    """A word a person remembers (a name, or five letters or more) from a searchable text field of one of ``rows`` (the
    environment's
    search matches such fields), or ``"a"`` when no row has one."""
    found = [w.strip(".,;:!?()\"'") for r in rows for k, v in r.items() if searchable(k, v) for w in v.split()]
    found = [w for w in found if w.isalpha() and (len(w) >= 5 or (len(w) >= 3 and w[0].isupper()))]
    return rng.choice(found) if found else "a"


def _make_update_change_only_what_it_names(
    tool: dict[str, Any],
    key: str,
    args: dict[str, Any],
    prov: dict[str, Any],
    saved: dict[str, Any],
    index: ToolIndex,
    values: ValueFactory,
) -> None:
    """An update names only what changes, and changes something.

    An optional argument equal to the row's current value asks for no change ("set its currency to 'CHF'" of a
    row in CHF; a value bound from an earlier result of the same row copies it back): it is left out. An update
    left with no value that differs from the row's is a no-op task: one field gets a new value.
    """
    row = next((r for r in _state_rows(saved, index, tool) if r.get(key) == args[key]), None)
    if row is None:
        return
    required = set(tool["input_schema"].get("required", []))
    for name in [n for n in args if n != key and n not in required and n in row and row[n] == args[n]]:
        del args[name]
        prov.pop(name, None)
    if any(row.get(k) != v for k, v in args.items() if k != key):
        return
    meta = index.table_meta(tool)
    editable = [p for p in tool["input_schema"]["properties"] if p != key and p not in meta["foreign_keys"]]
    for name in editable:
        for _ in range(10):
            value = values.value(name, tool["input_schema"]["properties"][name], tool["table"], future=True)
            if value != row.get(name):
                args[name], prov[name] = value, {"source": "user"}
                return


def _type_ok(value: Any, schema: dict[str, Any]) -> bool:
    typ = schema.get("type")
    ok = typ not in SCALAR_TYPES or matches_json_type(value, typ)
    return ok and ("enum" not in schema or value in schema["enum"])


def synthesize_trajectory(
    chain: Chain,
    graph: ToolGraph,
    environments: dict[str, dict[str, Any]],
    worker: SandboxWorker,
    config: SynthConfig | None = None,
    writer: ModelQueryWriter | None = None,
    persona: str | None = None,
) -> dict[str, Any]:
    """Execute ``chain`` into a trajectory dict (never raises for a failing chain).

    A tool with a real MCP signature is planned and recorded in its canonical names (the graph's view of it) and
    executed in the real ones (:class:`~envfactory_assets.synth.trajectories.real_calls.PlanningWorker`); the
    dataset rows put its calls in the real names
    (:func:`~envfactory_assets.synth.trajectories.real_calls.real_trajectory`).

    ``writer`` (needed exactly when ``config.query_writer`` is ``model``) rewrites each turn's programmatic raw
    query in the voice of ``persona``; each turn then records the outcome in ``query_writer``
    (:meth:`~envfactory_assets.synth.refinement.model_querygen.ModelQueryWriter.write`).

    Returns ``{"status": "passed"|"failed", "reasons": [...], "turns": [...], "initial_state",
    "final_state", "initial_state_hash", "final_state_hash", "env_ids"}``; each turn holds
    ``query``, ``intent``, ``target_tools``, ``calls`` (name, arguments, provenance, output),
    ``assistant_summary``, ``state_before``/``state_after`` and their hashes.

    Raises:
        ValueError: ``writer`` is given without ``config.query_writer == "model"``, or missing with it.
    """
    config = config or SynthConfig()
    if (writer is not None) != (config.query_writer == "model"):
        raise ValueError(
            f"query_writer={config.query_writer!r} needs "
            f"{'a model query writer' if writer is None else 'no model query writer'}"
        )
    rng = random.Random(chain.seed)
    # tools with a real MCP signature are planned in their canonical names and executed in the real ones
    worker = planning_worker(worker, {e: environments[e] for e in chain.servers})
    environments = planning_environments({e: environments[e] for e in chain.servers})
    index = ToolIndex(environments)
    initial = {
        e: copy.deepcopy(next(s["state"] for s in environments[e]["initial_states"] if s["name"] == "valid"))
        for e in chain.servers
    }
    # The user's values are relative to the episode's clock (the first environment's ``meta.now``).
    values = ValueFactory(chain.seed % (2**31), now=initial[chain.servers[0]]["meta"].get("now", DEFAULT_NOW))
    result: dict[str, Any] = {
        "env_ids": list(chain.servers),
        "status": "failed",
        "reasons": [],
        "turns": [],
        "initial_state": initial,
        "initial_state_hash": state_hash(initial),
    }
    clashes = tool_name_collisions([environments[e] for e in chain.servers])
    if clashes:
        result["reasons"].append(f"tool names shared by several environments: {clashes}")
        return result
    try:
        episode = worker.open_episode(copy.deepcopy(initial))
    except (StateRejected, WorkerCrashed) as exc:
        result["reasons"].append(f"initial state rejected: {exc}")
        return result
    history: list[dict[str, Any]] = []
    turns_plan = split_turns(len(chain.tools), rng, config.max_turn_len, config.min_turns)
    skipped = []
    try:
        for positions in turns_plan:
            before = worker.save(episode)
            calls = []
            for pos in positions:
                node = chain.tools[pos]
                tool = index.tools[node.split(".", 1)[1]]
                refuse = tool["kind"] in ("action", "transfer") and rng.random() < config.refusal_share
                saved = before if not calls else worker.save(episode)
                try:
                    args, prov = resolve_arguments(
                        tool,
                        node,
                        chain,
                        graph,
                        history,
                        saved,
                        index,
                        values,
                        rng,
                        refused=refuse,
                    )
                except LookupError as exc:
                    skipped.append(f"{tool['name']}: {exc}")
                    continue
                res = worker.call(episode, tool["name"], args)
                error = res.get("error") or {}
                refused = not res.get("ok") and error.get("type") == ErrorType.PRECONDITION_FAILED.value
                if not res.get("ok") and not refused:
                    skipped.append(f"{tool['name']}: {error.get('message', 'error')}"[:200])
                    continue
                call = {
                    "node": node,
                    "name": tool["name"],
                    "env_id": index.env_of[tool["name"]],
                    "kind": tool["kind"],
                    "arguments": args,
                    "provenance": prov,
                    # a refused call's result is what the agent reads: the error as the episode renders it
                    "output": res["output"] if not refused else refusal_output(error),
                }
                if refused:
                    call["error"] = error["type"]
                if tool.get("mcp_binding"):
                    # a real parameter read off the named row (a scope, a key by a field) the agent must learn
                    # from an earlier result or the request
                    known = known_row_arguments(tool, args, _state_rows(saved, index, tool), history)
                    if known:
                        call["row_arguments"] = known
                calls.append(call)
                history.append(call)
                recovery = _recovery_read(call, tool, index, worker, episode) if refused else None
                if recovery is not None:
                    calls.append(recovery)
                    history.append(recovery)
            if not calls:
                continue
            after = worker.save(episode)
            start = len(history) - len(calls)
            parts = [
                describe_call(
                    index.tools[c["name"]],
                    index.key_of(index.tools[c["name"]]),
                    c["arguments"],
                    new_value_refs(c, history, start, index.tools, index.key_of_name),
                    stated=stated_row_fields(c),
                )
                for c in calls
                # the agent reads on its own after a refusal: the user did not ask for it
                if not c.get("recovery")
            ]
            # the reply's plans draw from their own seed: the chain's stream stays as it was
            summary = write_reply(calls, index.tools, index.key_of, f"{chain.seed}/{len(result['turns'])}/reply")
            result["turns"].append(
                {
                    "turn_index": len(result["turns"]),
                    "query": join_sentences(parts),
                    "intent": [
                        {"kind": c["kind"], "table": index.tools[c["name"]]["table"], "env_id": c["env_id"]}
                        for c in calls
                    ],
                    "target_tools": [chain.tools[p].split(".", 1)[1] for p in positions],
                    "calls": calls,
                    "assistant_summary": summary,
                    "state_before": before,
                    "state_after": after,
                    "state_before_hash": state_hash(before),
                    "state_after_hash": state_hash(after),
                }
            )
            if writer is not None:
                turn = result["turns"][-1]
                turn["query"], turn["query_writer"] = writer.write(turn, result["turns"][:-1], index.envs, persona)
        final = worker.save(episode)
    except WorkerCrashed as exc:
        result["reasons"].append(f"worker crashed: {exc}")
        return result
    finally:
        try:
            worker.close_episode(episode)
        except Exception:  # the worker may have been restarted; the episode is gone either way
            pass
    result["final_state"] = final
    result["final_state_hash"] = state_hash(final)
    result["skipped_calls"] = skipped
    if len(result["turns"]) < config.min_turns:
        result["reasons"].append(
            f"only {len(result['turns'])} turn(s) executed (minimum {config.min_turns})"
            + (f"; skipped: {skipped[:3]}" if skipped else "")
        )
        return result
    result["status"] = "passed"
    return result


def to_messages(turns: list[dict[str, Any]], query_field: str = "query") -> list[dict[str, Any]]:
    """OpenAI chat messages of a trajectory: system, then per turn the user query, the turn's
    ``clarification`` exchange if any (assistant question, user answer; conversational mode), one assistant
    message with ``tool_calls`` per call followed by its ``tool`` result (or, where the turn has
    ``call_groups``, lists of call indexes, one message per group with all its calls, then their results in
    the same order; see :mod:`envfactory_assets.synth.trajectories.parallel`), and the assistant's closing summary. A
    turn without calls (an abstention turn) is its query and the assistant's reply.

    Tool-call arguments and tool results are JSON strings with UTF-8 kept as is.
    """
    import json

    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    counter = 0
    for turn in turns:
        messages.append({"role": "user", "content": turn[query_field]})
        messages.extend({"role": m["role"], "content": m["content"]} for m in turn.get("clarification") or [])
        for group in turn.get("call_groups") or [[i] for i in range(len(turn["calls"]))]:
            ids = [f"call_{counter + k + 1}" for k in range(len(group))]
            counter += len(group)
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": turn["calls"][i]["name"],
                                "arguments": json.dumps(turn["calls"][i]["arguments"], ensure_ascii=False),
                            },
                        }
                        for call_id, i in zip(ids, group, strict=False)
                    ],
                }
            )
            messages.extend(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": turn["calls"][i]["name"],
                    "content": json.dumps(turn["calls"][i]["output"], ensure_ascii=False),
                }
                for call_id, i in zip(ids, group, strict=False)
            )
        messages.append({"role": "assistant", "content": turn["assistant_summary"]})
    return messages
