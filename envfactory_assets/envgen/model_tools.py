"""The model writes the tools of the operations the rules do not map: spec and implementation, gated and revised.

For each unmapped operation of a document (:func:`envfactory_assets.sources.unmapped.unmapped_operations`) a
model (role ``tool_writer``, revisions ``tool_reviser``) gets the environment (tables, tools, an example state,
its module) and the operation (reason, method, path, summary, parameters, schemas), and answers with a ToolSpec
(docs/design.md) in a ``json`` block and the tool's function in a ``python`` block, written against the module
it is appended to. The tool must be one of the kinds the gate has a semantic assertion for, over a table of the
environment, so "verified" keeps meaning that its kind's assertion ran and passed.

Everything the model returns is untrusted: the spec is checked field by field (:func:`read_tool_spec`), the code's
top-level names by syntax alone (:func:`tool_code_problems`: it may define only its tool and helpers named after
it, so it can replace nothing of the module), and then the module with the tool runs through the same gate
(:func:`~envfactory_assets.envgen.verify.verify_environment`, sandboxed) and revision loop
(:func:`~envfactory_assets.envgen.revision.revision_loop`) as model-written modules. A tool that never passes is
reported with its reasons, never dropped or admitted.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import jsonschema

from envfactory_assets.envgen.model_builder import CONTRACT, DEFAULT_MAX_TOKENS, environment_payload, sandbox_rules
from envfactory_assets.envgen.revision import DEFAULT_MAX_REVISIONS, failure_reasons, revision_loop
from envfactory_assets.envgen.tool_names import RESERVED_TOOL_NAMES
from envfactory_assets.envgen.tools import LIST_LIMIT_MAX, READ_KINDS
from envfactory_assets.envgen.verify import VerificationReport, verify_environment
from envfactory_assets.llm.base import ChatBackend
from envfactory_assets.runtime.sandbox import SandboxLimits
from envfactory_assets.sources.names import MAX_TOOL_NAME_CHARS, TOOL_NAME_RE

TOOL_WRITER_ROLE = "tool_writer"
TOOL_REVISER_ROLE = "tool_reviser"
#: Kinds a model-written tool may have: those the gate has a semantic assertion for (docs/design.md).
MODEL_KINDS = ("list", "search", "count", "get", "create", "update", "delete", "action")
#: Keys of the spec a model writes; ``read_only``, ``operation`` and ``written_by`` are set here, not taken.
SPEC_KEYS = frozenset({"name", "description", "kind", "table", "input_schema", "output_schema", "action"})
ACTION_KEYS = frozenset({"verb", "field", "value", "blocked", "stamp"})
#: Largest spec (JSON text) and function (Python text) read from a reply, in characters.
MAX_SPEC_CHARS = 20_000
MAX_CODE_CHARS = 20_000
#: Shortest tool description, in words: a description says what the tool does, not only its name.
MIN_DESCRIPTION_WORDS = 3
MAX_DESCRIPTION_CHARS = 600
_SCALARS = ("string", "integer", "number", "boolean")
#: Keywords that point a schema elsewhere: refused, so validating a model's schema never looks anything up.
REFERENCE_KEYS = frozenset({"$ref", "$dynamicRef", "$recursiveRef", "$id", "$anchor", "$dynamicAnchor"})
_PAGING = {"list": ("limit",), "search": ("query", "limit", "offset")}

TOOL_CONTRACT = """\
You add ONE tool to this environment, for an operation of its API that the rules could not map.

Reply with exactly two fenced blocks:
1. ```json: the tool spec {"name", "description", "kind", "table", "input_schema", "output_schema"} (plus
   "action" for kind "action"): name matches ^[a-z][a-z0-9_]{0,39}$ and is not a tool of the environment;
   description is at least a sentence; kind is one of list, search, count, get, create, update, delete,
   action; table is a table of the environment; input_schema is a JSON Schema object with "properties",
   "required" and "additionalProperties": false; output_schema is the JSON Schema of the output.
2. ```python: the function `def <name>(state, ...)` (first parameter `state`, then the input_schema
   properties as keyword parameters, optional ones defaulting to None). It is appended to the module shown,
   so it may call the module's helpers (`_row`, `_fail`, `_new_id`, `_check_value`, `TABLES`...). At the top
   level it may only define the tool function, helper functions and constants named `_<name>_...`, and
   `import m` statements (no `from ... import`, no class, no decorator, no call outside a function body); it
   must not redefine anything of the module.

Parameters by kind (the verifier calls the tool with values of the table's fields, so parameters are fields):
- get, delete: exactly the table's key field, required.
- action: exactly the key field, required; "action": {"verb": str, "field": a field of the table, "value": the
  value the action sets, "blocked": [values of the field in which the action is refused], "stamp": null or a
  date-time field set to meta.now}. It changes only that field (and the stamp) of that row, returns the new
  row, and raises PreconditionFailed (provided by the sandbox) on a row already holding "value" or a blocked
  value.
- update: the key field (required) and fields of the table; create: fields of the table, every required
  field of the table required; list: `limit` and fields (exact-match filters); count: fields (filters),
  returns {"count": n}; search: `query` (required), `limit`, `offset` and fields (scope), a case-insensitive
  substring match over the row's text fields other than ids and created_at, returns {"items", "total"}.
- Each field parameter has the field's type (and enum).
"""


@dataclass(frozen=True)
class ToolDraft:
    """One reply read: the checked ``spec`` (None when it has a problem), the function's ``code``, the problems of
    each (``spec_problems``, ``code_problems``; empty when none), and the spec as the model wrote it
    (``spec_text``, shown back to the reviser)."""

    spec: dict[str, Any] | None
    code: str
    spec_problems: tuple[str, ...] = ()
    code_problems: tuple[str, ...] = ()
    spec_text: str = ""


def tool_writer_messages(env: dict[str, Any], operation: dict[str, Any]) -> list[dict[str, str]]:
    """Chat messages asking the ``tool_writer`` role for the tool of ``operation`` (an
    :func:`~envfactory_assets.sources.unmapped.unmapped_operations` item) in ``env``."""
    return [{"role": "system", "content": _system_prompt()}, {"role": "user", "content": _task(env, operation)}]


def tool_reviser_messages(
    env: dict[str, Any],
    operation: dict[str, Any],
    reply: str,
    failures: Sequence[dict[str, Any]],
    max_failures: int = 40,
) -> list[dict[str, str]]:
    """Chat messages asking the ``tool_reviser`` role to fix its previous ``reply`` (spec and function) from the
    failed checks (``{"check", "tool", "state", "detail"}``; the first ``max_failures``, with a count of the rest)."""
    shown = [{k: f.get(k) for k in ("check", "tool", "state", "detail")} for f in failures[:max_failures]]
    more = f" (first {len(shown)} of {len(failures)})" if len(failures) > len(shown) else ""
    user = (
        _task(env, operation)
        + "\n\nYour previous reply failed verification. Fix every failure and keep what works.\n\n"
        + f"Failed checks{more}:\n```json\n{json.dumps(shown, indent=1, ensure_ascii=False)}\n```\n\n"
        + f"Previous reply:\n{reply}"
    )
    return [{"role": "system", "content": _system_prompt()}, {"role": "user", "content": user}]


def _system_prompt() -> str:
    return (
        "You write tools of a stateful, executable tool environment for training tool-using agents. Every tool "
        "is verified by execution; follow the contract and the sandbox rules exactly.\n\n"
        + CONTRACT
        + "\n"
        + TOOL_CONTRACT
        + "\n"
        + sandbox_rules()
    )


def _task(env: dict[str, Any], operation: dict[str, Any]) -> str:
    payload = json.dumps(environment_payload(env), indent=1, sort_keys=True, ensure_ascii=False)
    return (
        "Environment:\n```json\n" + payload + "\n```\n\n"
        "Its module (your function is appended to it):\n```python\n" + env["source"] + "```\n\n"
        "The operation to implement (why the rules could not map it: `reason`):\n```json\n"
        + json.dumps(operation, indent=1, ensure_ascii=False)
        + "\n```\n\nReply with the tool spec in a ```json block and the function in a ```python block."
    )


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


def read_reply(env: dict[str, Any], operation: dict[str, Any], reply: str) -> ToolDraft:
    """The :class:`ToolDraft` of a ``tool_writer`` reply (string operations, ``json.loads`` and ``ast.parse``
    only; nothing of it runs here).

    The spec is the first ``json`` block (else the first untagged block opening with ``{``); the code the
    ``python`` block that defines the tool (else the first ``python`` block). Each missing, oversized or
    malformed part is a problem with a message saying what is wrong.
    """
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(reply)]
    spec_text = next((b for t, b in blocks if t == "json"), None)
    if spec_text is None:
        spec_text = next((b for t, b in blocks if t == "" and b.lstrip().startswith("{")), None)
    code_blocks = [b for t, b in blocks if t in ("python", "py", "python3")]
    spec: dict[str, Any] | None = None
    if spec_text is None:
        spec_problems = ["the reply has no ```json block with the tool spec"]
    elif len(spec_text) > MAX_SPEC_CHARS:
        spec_problems = [f"the tool spec is {len(spec_text)} characters long (at most {MAX_SPEC_CHARS})"]
    else:
        try:
            raw = json.loads(spec_text)
        except (ValueError, RecursionError) as exc:
            spec_problems = [f"the tool spec is not valid JSON: {str(exc)[:200]}"]
        else:
            spec, spec_problems = read_tool_spec(raw, env, operation)
    name = spec["name"] if spec else ""
    code = next((b for b in code_blocks if name and re.search(rf"^def {re.escape(name)}\s*\(", b, re.M)), None)
    code = (code if code is not None else (code_blocks[0] if code_blocks else "")).strip("\n") + "\n"
    if not code_blocks:
        code_problems = ["the reply has no ```python block with the tool's function"]
    elif len(code) > MAX_CODE_CHARS:
        code_problems = [f"the function is {len(code)} characters long (at most {MAX_CODE_CHARS})"]
    else:
        code_problems = tool_code_problems(code, name) if name else []
    return ToolDraft(spec, code, tuple(spec_problems), tuple(code_problems), (spec_text or "").strip("\n"))


def read_tool_spec(raw: Any, env: dict[str, Any], operation: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """``(spec, problems)``: the ToolSpec (docs/design.md) of a model's JSON ``raw`` for ``operation`` of ``env``
    (with ``read_only`` from its kind, ``operation`` from the document and ``written_by: "model"``), or None and
    what is wrong: unknown keys, a name that is not a valid, free tool name, a description shorter than a
    sentence, a kind without a gate assertion, a table the environment lacks, input or output schemas that are
    not JSON Schemas, parameters the kind does not take or of another type than their field, an ``action`` that
    names no field or values the field cannot hold."""
    if not isinstance(raw, dict):
        return None, [f"the tool spec must be a JSON object, got {type(raw).__name__}"]
    problems = [f"unknown key {k!r} (allowed: {sorted(SPEC_KEYS)})" for k in sorted(map(str, set(raw) - SPEC_KEYS))]
    name, kind, table = raw.get("name"), raw.get("kind"), raw.get("table")
    taken = {t["name"] for t in env["tools"]}
    if not isinstance(name, str) or not TOOL_NAME_RE.match(name) or len(name) > MAX_TOOL_NAME_CHARS:
        problems.append(f"name {name!r} must be an identifier of letters, digits and _ (at most {MAX_TOOL_NAME_CHARS})")
    elif name.startswith("_") or name in RESERVED_TOOL_NAMES or keyword.iskeyword(name):
        problems.append(f"name {name!r} is reserved (a leading underscore, a builtin, a keyword or {{load, save}})")
    elif name in taken:
        problems.append(f"name {name!r} is already a tool of the environment")
    description = raw.get("description")
    if not isinstance(description, str) or len(description.split()) < MIN_DESCRIPTION_WORDS:
        problems.append(f"description must be a sentence of at least {MIN_DESCRIPTION_WORDS} words")
    elif len(description) > MAX_DESCRIPTION_CHARS:
        problems.append(f"description is {len(description)} characters long (at most {MAX_DESCRIPTION_CHARS})")
    if kind not in MODEL_KINDS:
        problems.append(f"kind {kind!r} must be one of {list(MODEL_KINDS)}")
    # a relation's table of pairs is written only by its own tools (it has no key and no fields of its own)
    row_tables = sorted(t for t, meta in env["tables"].items() if not meta.get("relation"))
    if not isinstance(table, str) or table not in row_tables:
        problems.append(f"table {table!r} must be one of {row_tables}")
    inp, out = raw.get("input_schema"), raw.get("output_schema")
    problems += _schema_problems("input_schema", inp, object_with_properties=True)
    problems += _schema_problems("output_schema", out, object_with_properties=False)
    if problems:
        return None, problems
    meta = env["tables"][table]
    problems += _parameter_problems(kind, meta, inp)
    action = raw.get("action")
    if kind == "action":
        problems += _action_problems(action, meta)
    elif action is not None:
        problems.append(f"only a tool of kind 'action' has an 'action' (this one is {kind!r})")
    if problems:
        return None, problems
    spec: dict[str, Any] = {
        "name": name,
        "description": description.strip(),
        "kind": kind,
        "table": table,
        "read_only": kind in READ_KINDS,
        "input_schema": inp,
        "output_schema": out,
        "operation": {k: operation.get(k) for k in ("method", "path", "operation_id")},
        "written_by": "model",
    }
    if kind == "action":
        thing = table[:-1] if table.endswith("s") else table
        spec["action"] = {**action, "state": state_word(action), "thing": thing.replace("_", " ")}
    return spec, []


def _references(node: Any, depth: int = 0) -> bool:
    """Whether a JSON value holds a ``$ref``-like keyword (or nests too deeply to tell)."""
    if depth > 64:
        return True
    if isinstance(node, dict):
        return any(k in REFERENCE_KEYS or _references(v, depth + 1) for k, v in node.items())
    if isinstance(node, list):
        return any(_references(v, depth + 1) for v in node)
    return False


def state_word(action: dict[str, Any]) -> str:
    """How a reply names the state an action leaves its row in (a ToolSpec action's ``state``): the value in
    words, or for a flag its field's words (``in_stock`` true: "in stock"; false: "not in stock")."""
    value, field = action["value"], str(action["field"]).replace("_", " ")
    if isinstance(value, bool):
        return field if value else f"not {field}"
    return str(value).replace("_", " ")


def _schema_problems(label: str, schema: Any, object_with_properties: bool) -> list[str]:
    if not isinstance(schema, dict):
        return [f"{label} must be a JSON Schema object, got {type(schema).__name__}"]
    if _references(schema):
        return [f"{label} must be self-contained: no {' / '.join(sorted(REFERENCE_KEYS))} (nothing is fetched)"]
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return [f"{label} is not a valid JSON Schema: {exc.message[:200]}"]
    except RecursionError:
        return [f"{label} is nested too deeply"]
    if not object_with_properties:
        return []
    props, required = schema.get("properties"), schema.get("required", [])
    problems = []
    if schema.get("type") != "object" or not isinstance(props, dict):
        problems.append(f'{label} must have "type": "object" and "properties"')
    elif not isinstance(required, list) or not set(required) <= set(props):
        problems.append(f"{label}.required must list properties of {label}")
    if schema.get("additionalProperties") is not False:
        problems.append(f'{label} must have "additionalProperties": false')
    return problems


def _parameter_problems(kind: str, meta: dict[str, Any], inp: dict[str, Any]) -> list[str]:
    """Parameters ``kind`` does not take on a table with ``meta``, or typed unlike their field."""
    props, required = inp["properties"], list(inp.get("required", []))
    key, fields = meta["key"], meta["fields"]
    problems = []
    if kind in ("get", "delete", "action"):
        if set(props) != {key} or required != [key]:
            return [f"a {kind} tool takes exactly the key {key!r}, required"]
        return []
    allowed = set(fields) | set(_PAGING.get(kind, ()))
    if kind == "update":
        allowed.add(key)
        if key not in required:
            problems.append(f"an update tool requires the key {key!r}")
    if kind == "search" and "query" not in required:
        problems.append("a search tool requires 'query'")
    problems += [
        f"{p!r} is not a field of the table (a {kind} tool takes {sorted(allowed)})" for p in props if p not in allowed
    ]
    if kind == "create":
        problems += [
            f"required field {f!r} of the table must be required" for f in meta["required"] if f not in required
        ]
    for name, schema in props.items():
        field = fields.get(name)
        if field is not None and (not isinstance(schema, dict) or schema.get("type") != field.get("type")):
            problems.append(f"parameter {name!r} must have its field's type {field.get('type')!r}")
    limit = props.get("limit")
    if "limit" in props and (
        not isinstance(limit, dict)
        or limit.get("type") != "integer"
        or not 1 <= limit.get("maximum", 0) <= LIST_LIMIT_MAX
    ):
        problems.append(f"'limit' must be an integer with a maximum between 1 and {LIST_LIMIT_MAX}")
    return problems


def _action_problems(action: Any, meta: dict[str, Any]) -> list[str]:
    if not isinstance(action, dict) or set(action) != ACTION_KEYS:
        return [f"'action' must be an object with exactly {sorted(ACTION_KEYS)}"]
    field = meta["fields"].get(action["field"]) if isinstance(action["field"], str) else None
    if not isinstance(action["verb"], str) or not re.fullmatch(r"[a-z][a-z_]{1,30}", action["verb"]):
        return [f"action.verb {action['verb']!r} must be a lower-case word"]
    if field is None or field.get("type") not in _SCALARS:
        return [f"action.field {action['field']!r} must be a scalar field of the table"]
    blocked = action["blocked"]
    if not isinstance(blocked, list):
        return ["action.blocked must be a list of values of the field"]
    problems = [
        f"action value {v!r} is not a value of {action['field']!r} ({field})"
        for v in [action["value"], *blocked]
        if not _holds(field, v)
    ]
    if action["value"] in blocked:
        problems.append(f"action value {action['value']!r} cannot also be a blocked value")
    stamp = action["stamp"]
    if stamp is not None and (
        not isinstance(stamp, str)
        or meta["fields"].get(stamp, {}).get("format") != "date-time"
        or stamp == action["field"]
    ):
        problems.append(f"action.stamp {stamp!r} must be null or another date-time field of the table")
    return problems


def _holds(field: dict[str, Any], value: Any) -> bool:
    typ = field.get("type")
    ok = {
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
    }.get(typ, False)
    return ok and ("enum" not in field or value in field["enum"])


def _runs_code(nodes: Sequence[ast.AST | None]) -> bool:
    """Whether evaluating any of ``nodes`` (expressions Python evaluates when it imports a module: assigned
    values, default values, annotations) could call anything or assign (a call, ``:=``, ``await``, ``yield``)."""
    calls = (ast.Call, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)
    return any(isinstance(n, calls) for node in nodes if node is not None for n in ast.walk(node))


def _evaluated_at_definition(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST | None]:
    """The parts of a ``def`` Python evaluates when it runs the ``def``: defaults and annotations."""
    args = node.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return [*args.defaults, *args.kw_defaults, node.returns, *(a.annotation for a in every if a is not None)]


def tool_code_problems(code: str, name: str) -> list[str]:
    """What is wrong with the top level of a tool's ``code`` for tool ``name`` (syntax only, nothing runs).

    Rules, so that appending the code to a module can change nothing of it and runs nothing on import: it defines
    ``def name(state, ...)`` exactly once; any other function or constant is named ``_name_...``; no class, no
    decorator; an assignment binds plain names; no assigned value, default value or annotation calls anything;
    imports are plain ``import m``. Code that does not parse has no problem here: the gate's static check reports
    it.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    prefix, problems, defined = f"_{name}_", [], 0
    for node in tree.body:
        where = f"line {node.lineno}"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == name:
                defined += 1
                params = node.args.posonlyargs + node.args.args
                if not params or params[0].arg != "state":
                    problems.append(f"{where}: the first parameter of {name} must be named state")
            elif not node.name.startswith(prefix):
                problems.append(f"{where}: {node.name!r} must be named {prefix}... (or be the tool {name!r})")
            if node.decorator_list:
                problems.append(f"{where}: no decorators")
            if _runs_code(_evaluated_at_definition(node)):
                problems.append(f"{where}: default values and annotations of {node.name!r} may not call anything")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]
            if not all(isinstance(n, ast.Name) and n.id.startswith(prefix) for n in names):
                problems.append(f"{where}: a top-level assignment may only bind plain names {prefix}...")
            annotation = node.annotation if isinstance(node, ast.AnnAssign) else None
            if _runs_code([node.value, annotation]):
                problems.append(f"{where}: a top-level value may not call anything (it would run on import)")
        elif isinstance(node, ast.ClassDef):
            problems.append(f"{where}: no classes (a class body runs on import); write functions {prefix}...")
        elif isinstance(node, ast.Import):
            problems += [f"{where}: write `import {a.name}` without `as`" for a in node.names if a.asname]
        elif isinstance(node, ast.ImportFrom):
            problems.append(f"{where}: `from ... import` may rebind the module's names; write `import {node.module}`")
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            problems.append(f"{where}: only imports, definitions and assignments belong at the top level")
    if defined != 1:
        problems.append(f"the code must define the function {name!r} exactly once (found {defined})")
    return problems


def candidate_environment(env: dict[str, Any], draft: ToolDraft) -> dict[str, Any]:
    """``env`` holding only the drafted tool, its module with the tool's function appended, marked as model code
    (what the gate verifies: the module's own functions are verified with the environment)."""
    return {
        **env,
        "tools": [draft.spec],
        "source": env["source"].rstrip("\n") + "\n\n\n" + draft.code,
        "origin": "model",
    }


def judge_tool(env: dict[str, Any], draft: ToolDraft, limits: SandboxLimits | None, seed: int) -> VerificationReport:
    """The gate's report on ``draft``: a failed ``tool_spec`` / ``tool_code`` check per problem (nothing runs), else
    :func:`~envfactory_assets.envgen.verify.verify_environment` of :func:`candidate_environment`; an error of the
    gate itself on the draft is a failed ``gate_error`` check, never a failed environment."""
    report = VerificationReport(env["env_id"])
    tool = draft.spec["name"] if draft.spec else None
    for problem in draft.spec_problems:
        report.add("tool_spec", False, problem, tool)
    for problem in draft.code_problems:
        report.add("tool_code", False, problem, tool)
    if report.checks:
        return report
    try:
        return verify_environment(candidate_environment(env, draft), limits, seed=seed)
    except Exception as exc:  # the gate met something it was not written for: a failed draft, with the reason
        report.add("gate_error", False, f"{type(exc).__name__}: {str(exc)[:300]}", tool)
        return report


def write_tool(
    env: dict[str, Any],
    operation: dict[str, Any],
    backend: ChatBackend,
    max_revisions: int = DEFAULT_MAX_REVISIONS,
    limits: SandboxLimits | None = None,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    seed: int = 7,
) -> dict[str, Any]:
    """Have ``backend`` write the tool of ``operation`` in ``env`` and revise it until the gate passes it.

    Returns:
        ``{"method", "path", "reason", "operation_id", "status": "passed" | "failed", "tool": the ToolSpec or
        None, "code": the function ("" when none), "stop_reason", "reasons", "attempts"}``; ``tool`` and ``code``
        are the passing draft's, else the best draft's; ``reasons`` is empty when passed; ``attempts`` as in
        :class:`~envfactory_assets.envgen.revision.RevisionResult` (``source`` is the function).

    Raises:
        BackendConfigError: the backend is misconfigured. Other backend errors end the loop (``"backend error"``).
    """
    outcome = revision_loop(
        lambda: backend.complete(
            tool_writer_messages(env, operation), role=TOOL_WRITER_ROLE, max_tokens=max_tokens, temperature=0.0
        ),
        lambda draft, failures: backend.complete(
            tool_reviser_messages(env, operation, _as_reply(draft), failures),
            role=TOOL_REVISER_ROLE,
            max_tokens=max_tokens,
            temperature=0.0,
        ),
        lambda text: read_reply(env, operation, text),
        lambda draft: judge_tool(env, draft, limits, seed),
        lambda draft: draft.code,
        max_revisions,
        roles=(TOOL_WRITER_ROLE, TOOL_REVISER_ROLE),
    )
    draft = outcome.draft
    return {
        **{k: operation.get(k) for k in ("method", "path", "reason", "operation_id")},
        "status": "passed" if outcome.passed else "failed",
        "tool": draft.spec if draft else None,
        "code": draft.code if draft else "",
        "stop_reason": outcome.stop_reason,
        "reasons": [] if outcome.passed else failure_reasons(outcome, max_revisions),
        "attempts": outcome.attempts,
    }


def _as_reply(draft: ToolDraft) -> str:
    """A draft written back as the reply it was read from (its spec as the model wrote it), for the reviser."""
    spec = draft.spec_text or "(no spec)"
    return f"```json\n{spec}\n```\n\n```python\n{draft.code}```"


#: Header of the functions model-written tools add to a module.
MODEL_TOOLS_HEADER = "# Tools a model wrote for operations the rules do not map; each passed the gate on its own."


def write_unmapped_tools(
    env: dict[str, Any],
    operations: Sequence[dict[str, Any]],
    backend: ChatBackend,
    max_revisions: int = DEFAULT_MAX_REVISIONS,
    limits: SandboxLimits | None = None,
    *,
    threads: int = 1,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    seed: int = 7,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """:func:`write_tool` for every operation, ``threads`` at once, then the passing tools added to ``env``.

    Returns:
        ``(environment, outcomes)``: a copy of ``env`` whose ``tools`` end with the passing tools and whose
        ``source`` ends with their functions (in operation order), and one :func:`write_tool` dict per operation,
        in order. A passing tool whose name an earlier operation's tool took is not added: its outcome becomes
        ``failed`` (``stop_reason`` ``"name taken"``).

    Raises:
        BackendConfigError: the backend is misconfigured (the first one, in operation order).
    """
    if threads < 1:
        raise ValueError(f"threads={threads} must be >= 1")

    def one(op: dict[str, Any]) -> dict[str, Any]:
        return write_tool(env, op, backend, max_revisions, limits, max_tokens=max_tokens, seed=seed)

    if threads == 1 or len(operations) <= 1:
        outcomes = [one(op) for op in operations]
    else:
        with ThreadPoolExecutor(max_workers=min(threads, len(operations)), thread_name_prefix="tools") as pool:
            futures = [pool.submit(one, op) for op in operations]
            try:
                outcomes = [f.result() for f in futures]
            finally:
                for f in futures:  # after a failure, what has not started does not start
                    f.cancel()
    tools, code, owner = list(env["tools"]), [], {}
    for outcome in outcomes:
        if outcome["status"] != "passed":
            continue
        name = outcome["tool"]["name"]
        if name in owner:
            outcome.update(
                status="failed",
                stop_reason="name taken",
                reasons=[f"name taken: {name!r} is the tool of {owner[name]}, written first"],
            )
            continue
        owner[name] = f"{outcome['method']} {outcome['path']}"
        tools.append(outcome["tool"])
        code.append(outcome["code"])
    if not code:
        return dict(env), outcomes
    source = env["source"].rstrip("\n") + "\n\n\n" + MODEL_TOOLS_HEADER + "\n\n\n" + "\n\n".join(code)
    return {**env, "tools": tools, "source": source}, outcomes


def summarize_outcomes(rows: Iterable[dict[str, Any]], examples: int = 10) -> dict[str, Any]:
    """``{"operations", "passed", "failed", "failed_by_stop_reason": {reason: n}, "attempts", "failed_examples"}``
    of the :func:`write_unmapped_tools` outcomes kept in ``environments`` rows (``revisions["unmapped_operations"]``);
    ``failed_examples``: the first ``examples`` failed operations as ``"env_id METHOD path: first reason"``."""
    outcomes = [
        (row["env_id"], o) for row in rows for o in (row.get("revisions") or {}).get("unmapped_operations") or []
    ]
    failed = [(env_id, o) for env_id, o in outcomes if o["status"] != "passed"]
    return {
        "operations": len(outcomes),
        "passed": len(outcomes) - len(failed),
        "failed": len(failed),
        "failed_by_stop_reason": dict(sorted(Counter(o["stop_reason"] for _, o in failed).items())),
        "attempts": sum(len(o["attempts"]) for _, o in outcomes),
        "failed_examples": [
            f"{env_id} {o['method']} {o['path']}: {(o['reasons'] or [''])[0][:160]}" for env_id, o in failed[:examples]
        ],
    }
