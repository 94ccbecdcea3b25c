"""The model-backed code writer: an LLM (role ``code_writer``) writes an environment's module.

The programmatic builder (:func:`envfactory_assets.envgen.builder.build_environment`) stays the
default and the source of everything but the code: the model-backed path keeps its tool specs, tables,
state schema and initial states, so both paths produce the same artifacts and pass the same gate
(:func:`envfactory_assets.envgen.verify.verify_environment`). Only ``source`` differs.

The model's reply is untrusted text: this module only extracts the code from it (string operations);
it is parsed by the static check and executed only inside the sandbox worker, by the verifier.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from typing import Any

from envfactory_assets.llm.base import ChatBackend, Completion
from envfactory_assets.runtime import code_policy

CODE_WRITER_ROLE = "code_writer"
REVISER_ROLE = "reviser"
DEFAULT_MAX_TOKENS = 8192
#: Rows per table of the example state shown to the model.
EXAMPLE_ROWS = 2

CONTRACT = """\
Module contract (the runtime imports the module and calls these functions):

def load(data: dict) -> dict
    Saved state -> in-memory state. Raise ValueError if the data is invalid: not exactly the keys
    "tables" and "meta"; meta.now not a string, meta.seed not an int, meta.next_id not an int >= 1;
    not exactly the environment's tables; a row that is not an object, lacks its key field (a
    non-empty string) or a string "created_at", has an unknown field, a wrong-typed value, a value
    outside its enum/minimum/maximum/maxLength, lacks a required field; a duplicate key in a table;
    a foreign key that references no row of its target table.
def save(state: dict) -> dict
    In-memory state -> saved state, JSON only. save(load(x)) == x exactly (same rows, same row order,
    same meta).
def <tool_name>(state: dict, <required args>, <optional args>=None) -> dict
    One function per tool spec, named exactly like the tool, first parameter named `state`, then the
    input_schema properties as keyword parameters (optional ones default to None). Writes mutate
    `state` in place; rows are immutable values (replace a row, never mutate it in place). Raise
    ValueError for bad arguments (wrong type, not in enum, out of range, missing required, nothing
    to update) and LookupError for a missing row or a foreign key that references no row. A failed
    call must leave the state unchanged. Outputs must validate against the tool's output_schema.

Saved state: {"tables": {table: [row, ...]}, "meta": {"now": ISO-8601 str, "seed": int, "next_id": int}}.
Semantics the verifier checks by execution:
- list: filters are the non-None arguments other than `limit` (exact equality); `limit` defaults to
  20 and must be an int in [1, 100]; returns {"items": [rows in stored order][:limit], "total": number
  of matching rows}. Read-only: the state must not change.
- get: returns the stored row (a copy) for the key argument. Read-only.
- create: new id f"{prefix}_{next_id:05d}" (prefix from the table metadata), then meta.next_id += 1;
  the row holds the key, the given non-None arguments, and "created_at" = meta.now; returns the row.
- update: replaces the row with the given non-None fields applied; returns the new row.
- delete: refuses (ValueError) while rows of another table reference the row; otherwise removes it,
  and the pairs of relation tables that hold it, and returns {<key field>: id, "deleted": True}.
- a relation table (metadata "relation": {"parent", "member"} fields, "key" None) holds pairs: rows of
  exactly the two fields and "created_at", no key, no pair twice. relation_add: LookupError unless both
  rows exist; a new pair gets "created_at" = meta.now and is returned; an existing pair is returned
  unchanged when the tool's relation says "idempotent", else PreconditionFailed. relation_remove:
  LookupError for a missing row or a pair that is not there; returns {parent, member, "removed": True}.
  relation_list: LookupError for a missing parent; {"items": member rows of the parent's pairs in pair
  order[:limit], "total": their number}.
- action (a tool with "action": {"field", "value", "blocked", "stamp"}): sets the row's field to value
  (and the stamp field, when not null, to meta.now) and returns the new row; raises PreconditionFailed
  (provided by the sandbox, no import) when the row already holds value or a blocked value (a boolean
  field the row lacks reads as its schema's default, else False).
- transfer (a tool with "transfer": {"verb", "field", "amount", "destination"}): the `amount` argument
  (of the field's type, > 0, else ValueError) moves through the row's `field` (absent reads 0): verb
  "transfer" from the key row to the `destination` row (ValueError when they are the same, LookupError
  when either is missing), "withdraw" out of the row, "deposit" into it; a float result is rounded to 9
  decimals. A result below the field's minimum or above its maximum raises PreconditionFailed and changes
  nothing (check every row before writing any). Returns {"source", "destination", "amount"} (the two
  new rows) for a transfer, else the new row.
- side_effect (a tool with "side_effect": {"verb", "outbox", "arguments"}): LookupError for a missing
  row, ValueError for an argument that breaks its schema; otherwise the row stays as it is and one row
  is added to the `outbox` table: {<its key>: f"{prefix}_{next_id:05d}" (then meta.next_id += 1),
  "verb", "target_table": the tool's table, "target_id": the key argument, "arguments":
  repr(sorted((name, value) for the non-None arguments other than the key)), "created_at": meta.now},
  which is returned.
- computed_read (a tool with "computed": {"scope", "fields"}; read-only): scope "collection": over the
  rows matching the (scope) arguments, {"count": their number, "total_<field>": the sum of each field's
  non-null values}; scope "item": {<key field>: id, <field>: value for each field the row holds}
  (LookupError for a missing row). Computed from the state at each call.
- a tool with "precondition": {"field", "refused", "stated"} (update, delete or action; "stated" is the
  API's own words) raises PreconditionFailed and changes nothing when the row's field holds a refused
  value (a boolean field the row lacks reads as above).
- Time and ids come only from state["meta"], never from the clock; results must not depend on set
  iteration order or string hashing (the same calls on the same state give the same outputs and
  state in every process).
"""


def sandbox_rules() -> str:
    """The sandbox rules of :mod:`envfactory_assets.runtime.code_policy`, summarized for a prompt (one string)."""
    modules = ", ".join(sorted(code_policy.ALLOWED_MODULES))
    builtins = ", ".join(sorted(code_policy.FORBIDDEN_BUILTINS))
    clock = ", ".join(f".{a}" for a in sorted(code_policy.CLOCK_ATTRIBUTES))
    denied = ", ".join(
        f"{m}.{n}" for m, names in sorted(code_policy.DENIED_MODULE_MEMBERS.items()) for n in sorted(names)
    )
    return f"""\
Sandbox rules (a static check rejects the whole module on any violation; the code then runs in a
restricted namespace inside a worker process with CPU, memory and time limits):
- Imports only from: {modules} (and collections.abc). Nothing else (no os, sys, time, random,
  socket, subprocess, importlib, pathlib, uuid, hashlib...). No relative imports, no `import *`.
- No I/O of any kind (files, network, printing to files, environment variables).
- No clock reads ({clock}) and no randomness: "current time" is state["meta"]["now"], ids come from
  state["meta"]["next_id"].
- Never use: {builtins}.
- getattr/setattr/hasattr/delattr only as direct calls with a constant string attribute name.
- No dunder attributes or names except __name__, __qualname__, __doc__, __init__; no private `_x`
  attributes except on self/cls; no frame/generator introspection; not allowed: {denied}.
- No `global` or `nonlocal` statements; no assigning attributes of imported modules.
- Module-level helper functions and constants are fine (name helpers with a leading underscore so
  they are not exposed as tools). The first parameter of every tool function is named `state`.
"""


def environment_payload(env: dict[str, Any]) -> dict[str, Any]:
    """What a model sees of ``env``: ``env_id``, ``tables``, ``tools`` and the valid initial state trimmed to
    :data:`EXAMPLE_ROWS` rows per table (``example_valid_state``; None when ``env`` has none)."""
    example = None
    for initial in env.get("initial_states", []):
        if initial["name"] == "valid":
            state = initial["state"]
            example = {"tables": {t: rows[:EXAMPLE_ROWS] for t, rows in state["tables"].items()}, "meta": state["meta"]}
    return {"env_id": env["env_id"], "tables": env["tables"], "tools": env["tools"], "example_valid_state": example}


def _system_prompt() -> str:
    return (
        "You write the Python module of a stateful, executable tool environment for training "
        "tool-using agents. The module is verified by execution; follow the contract and the sandbox "
        "rules exactly.\n\n" + CONTRACT + "\n" + sandbox_rules()
    )


def code_writer_messages(env: dict[str, Any]) -> list[dict[str, str]]:
    """Chat messages asking the ``code_writer`` role for ``env``'s module.

    The user message carries, as JSON, the table metadata (``key``, ``prefix``, ``fields`` with JSON
    Schemas, ``required``, ``foreign_keys``), the ToolSpecs (name, kind, table, input/output schemas)
    and a trimmed example of the valid initial state.
    """
    payload = json.dumps(environment_payload(env), indent=1, sort_keys=True, ensure_ascii=False)
    user = (
        "Write the complete module for this environment: load, save, and one function per tool in "
        "`tools`.\n\n```json\n" + payload + "\n```\n\n"
        "Reply with the module in a single ```python fenced block and nothing else."
    )
    return [{"role": "system", "content": _system_prompt()}, {"role": "user", "content": user}]


def reviser_messages(
    env: dict[str, Any], previous_source: str, failures: Sequence[dict[str, Any]], max_failures: int = 40
) -> list[dict[str, str]]:
    """Chat messages asking the ``reviser`` role to fix ``previous_source``.

    Args:
        env: the environment (tables and tools are sent again, as JSON).
        previous_source: the module that failed verification.
        failures: failed checks as ``{"check", "tool", "state", "detail"}`` dicts; the first
            ``max_failures`` are sent, with a count of the rest.
    """
    shown = [{k: f.get(k) for k in ("check", "tool", "state", "detail")} for f in failures[:max_failures]]
    more = len(failures) - len(shown)
    payload = json.dumps(environment_payload(env), indent=1, sort_keys=True, ensure_ascii=False)
    user = (
        "The module below failed verification. Fix every failure and keep what works.\n\n"
        "Environment:\n```json\n" + payload + "\n```\n\n"
        "Failed checks"
        + (f" (first {len(shown)} of {len(failures)})" if more else "")
        + ":\n```json\n"
        + json.dumps(shown, indent=1, ensure_ascii=False)
        + "\n```\n\n"
        "Previous module:\n```python\n" + previous_source + "\n```\n\n"
        "Reply with the complete corrected module in a single ```python fenced block and nothing else."
    )
    return [{"role": "system", "content": _system_prompt()}, {"role": "user", "content": user}]


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


def extract_code(reply: str) -> str:
    """The module source in a model reply (string operations only; nothing is parsed or run).

    Rules: fenced blocks tagged ``python``/``py`` (else untagged ones) are candidates; the first that
    defines ``load`` wins, else the longest. An unclosed fence (a truncated reply) yields everything
    after it. A reply without fences is returned stripped (the static check judges it).
    """
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(reply)]
    tagged = [b for t, b in blocks if t in ("python", "py", "python3")]
    candidates = tagged or [b for t, b in blocks if t == ""]
    if candidates:
        for body in candidates:
            if re.search(r"^def load\s*\(", body, re.M):
                return body.strip("\n") + "\n"
        return max(candidates, key=len).strip("\n") + "\n"
    opened = re.search(r"```[ \t]*(?:python|py|python3)?[ \t]*\n", reply)
    if opened:
        return reply[opened.end() :].strip("\n") + "\n"
    return reply.strip() + "\n"


def with_source(env: dict[str, Any], source: str) -> dict[str, Any]:
    """A deep copy of ``env`` with its ``source`` replaced (every other field unchanged)."""
    out = copy.deepcopy(env)
    out["source"] = source
    return out


def draft_source(
    env: dict[str, Any], backend: ChatBackend, *, max_tokens: int = DEFAULT_MAX_TOKENS
) -> tuple[str, Completion]:
    """Ask ``backend`` (role ``code_writer``) for ``env``'s module.

    Returns:
        ``(source, completion)``: the extracted code and the raw completion (text and token counts).

    Raises:
        envfactory_assets.llm.LLMError: whatever the backend raises (budget, endpoint, config).
    """
    completion = backend.complete(
        code_writer_messages(env), role=CODE_WRITER_ROLE, max_tokens=max_tokens, temperature=0.0
    )
    return extract_code(completion.text), completion


def write_environment(
    env: dict[str, Any], backend: ChatBackend, *, max_tokens: int = DEFAULT_MAX_TOKENS
) -> dict[str, Any]:
    """The Environment dict of the programmatic builder with a model-written ``source``: unverified.

    Use :func:`envfactory_assets.envgen.revision.build_with_revisions` to verify and revise it.
    """
    source, _ = draft_source(env, backend, max_tokens=max_tokens)
    return with_source(env, source)
