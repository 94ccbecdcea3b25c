"""Goal expansion (second half of the EnvFactory paper's operator d, "goal merging and expansion").

The last turn of a trajectory whose last call creates or updates a row gets a closely related follow-up
request grounded in the state: when the written row refers to another row (a foreign key, say a book's
author), "and after that look up the author it belongs to and tell me its details"; otherwise "and after that
look up that <thing> and tell me its details". The follow-up is a real ``get`` call, executed on the turn's
final state in the sandbox (its output is what the user asks to see, so the judge checks it: a referenced
row's fields are new facts, while the written row's own fields are mostly in the write's result already);
a read that fails, would change the state, or whose answer the turn's results already hold is not used. Only the
trajectory's last turn is expanded, so the trajectory-wide call indexes of later turns' provenance stay
valid. Calibration re-checks the expanded turn with the same k-attempt solve and reverts it (with the reason)
when no attempt passes.
"""

from __future__ import annotations

import copy
from typing import Any

from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.runtime.sandbox import SandboxError, SandboxWorker
from envfactory_assets.sources.names import spoken_thing
from envfactory_assets.synth.refinement.replies import join_replies, write_reply
from envfactory_assets.synth.refinement.solver.judge import answer_facts
from envfactory_assets.synth.trajectories.execution import ToolIndex


def follow_up_request(table: str, referenced: str | None = None) -> str:
    """The follow-up a user adds about the row just written to ``table``: ``"look up that book and tell me
    its details"``, or about the row it refers to in ``referenced``: ``"look up the author it belongs to and
    tell me its details"``; each table named as a person says one of its rows (:func:`spoken_thing`:
    ``"webhooks_2"`` -> ``"webhook"``), so callers pass the names the tool index says for them
    (:meth:`ToolIndex.spoken_table`)."""
    if referenced:
        return f"look up the {spoken_thing(referenced)} it belongs to and tell me its details"
    return f"look up that {spoken_thing(table)} and tell me its details"


def _getter(environment: dict[str, Any], table: str, key: str) -> dict[str, Any] | None:
    return next(
        (
            t
            for t in environment["tools"]
            if t["table"] == table and t["kind"] == "get" and key in t["input_schema"].get("properties", {})
        ),
        None,
    )


def _options(
    last: dict[str, Any], tool: dict[str, Any], environment: dict[str, Any], spoken: dict[str, str]
) -> list[tuple[Any, ...]]:
    """Follow-up reads of a written row, best first: ``(get tool, arguments, output field, request)``;
    ``spoken``: ``{table: the name a person says for it}`` of the environment (tables not in it keep theirs)."""
    tables = environment["tables"]
    meta = tables[tool["table"]]
    out = []
    for field_name, ref_table in sorted(meta["foreign_keys"].items()):
        ref_key = tables.get(ref_table, {}).get("key")
        getter = _getter(environment, ref_table, ref_key) if ref_key else None
        if getter is not None and last["output"].get(field_name) is not None:
            out.append(
                (
                    getter,
                    {ref_key: last["output"][field_name]},
                    field_name,
                    follow_up_request(spoken.get(tool["table"], tool["table"]), spoken.get(ref_table, ref_table)),
                )
            )
    getter = _getter(environment, tool["table"], meta["key"])
    if getter is not None and last["output"].get(meta["key"]) is not None:
        out.append(
            (
                getter,
                {meta["key"]: last["output"][meta["key"]]},
                meta["key"],
                follow_up_request(spoken.get(tool["table"], tool["table"])),
            )
        )
    return out


def _append(query: str, request: str) -> str:
    return query.rstrip().rstrip(".") + ", and after that " + request + "."


def expand_goal(
    turn: dict[str, Any], environments: dict[str, dict[str, Any]], worker: SandboxWorker, call_offset: int
) -> dict[str, Any] | None:
    """The turn with a follow-up read of the row its last call wrote, or None when it does not qualify.

    Args:
        turn: a refined turn (``calls``, ``query``, ``query_raw``, ``state_after``, ``state_after_hash``).
        environments: the trajectory's environments (tool specs and tables).
        worker: a sandbox worker with those environments loaded; the follow-up runs on a copy of
            ``state_after``.
        call_offset: trajectory-wide index of the turn's first call (provenance refers to those).

    Returns a copy with the ``get`` call appended (provenance: the referenced row's or the written row's
    identifier in the last call's output), both queries extended by :func:`follow_up_request`, intent, target tools and
    assistant
    summary extended, a ``goal_expansion`` operator (query before and after), and ``fallback`` = the turn as
    it was. None when the last call is not a create/update, no get tool reads the referenced or written
    row, or every such read fails, changes the state or asks for nothing the turn's results do not hold.
    """
    index = ToolIndex(environments)
    last = turn["calls"][-1]
    tool = index.tools.get(last["name"])
    if tool is None or last["kind"] not in ("create", "update") or not isinstance(last["output"], dict):
        return None
    known = set().union(*(answer_facts({"calls": [{"kind": "get", "output": c["output"]}]}) for c in turn["calls"]))
    env_id = index.env_of[tool["name"]]
    for option in _options(last, tool, environments[env_id], index.spoken.get(env_id, {})):
        getter, arguments, path, request = option
        result = _read(worker, turn, getter["name"], arguments)
        # a follow-up whose answer the turn's own results already hold asks for nothing new
        if result is not None and not answer_facts({"calls": [{"kind": "get", "output": result}]}) <= known:
            break
    else:
        return None
    call = {
        "node": f"{index.env_of[getter['name']]}.{getter['name']}",
        "name": getter["name"],
        "env_id": index.env_of[getter["name"]],
        "kind": "get",
        "arguments": arguments,
        "provenance": {
            k: {"source": "output", "call": call_offset + len(turn["calls"]) - 1, "path": path} for k in arguments
        },
        "output": result,
    }
    new = copy.deepcopy({k: v for k, v in turn.items() if k != "fallback"})
    new["fallback"] = turn
    new["calls"] = new["calls"] + [call]
    new["query_raw"], new["query"] = _append(turn["query_raw"], request), _append(turn["query"], request)
    new["intent"] = new["intent"] + [{"kind": "get", "table": getter["table"], "env_id": call["env_id"]}]
    new["target_tools"] = new["target_tools"] + [getter["name"]]
    key = next(iter(arguments))
    summary = write_reply([call], index.tools, index.key_of, f"{turn.get('query_raw') or turn['query']}/expansion")
    new["assistant_summary"] = join_replies(turn["assistant_summary"], summary)
    new["operators"] = new.get("operators", []) + [
        {
            "operator": "goal_expansion",
            "turn": turn.get("turn_index"),
            "call": call_offset + len(turn["calls"]),
            "argument": key,
            "value": arguments[key],
            "reference": request,
            "obtainable_from": "state: the row just written",
            "query_before": turn["query"],
            "query_after": new["query"],
        }
    ]
    return new


def _read(worker: SandboxWorker, turn: dict[str, Any], name: str, arguments: dict[str, Any]) -> Any | None:
    """Output of a read on a copy of the turn's final state; None if it fails or changes the state."""
    try:
        episode = worker.open_episode(copy.deepcopy(turn["state_after"]))
    except SandboxError:
        return None
    try:
        result = worker.call(episode, name, arguments)
        unchanged = state_hash(worker.save(episode)) == turn["state_after_hash"]
    except SandboxError:
        return None
    finally:
        try:
            worker.close_episode(episode)
        except SandboxError:
            pass
    return result["output"] if result.get("ok") and unchanged else None
