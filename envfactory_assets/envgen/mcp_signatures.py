"""An MCP environment's tools with the real server's signatures: its own parameters, types and descriptions.

:mod:`envfactory_assets.sources.mcp_resources` maps a tool list onto tables with CRUD tools; those tools' inputs
are the builder's (``git_log(limit)``). Here each one gets back the input schema its server declares
(``git_log(repo_path, max_count, start_timestamp, end_timestamp)``), every property described by a sentence,
and a *binding*: what each real parameter does to the state-backed implementation underneath, by a role:

- ``key``: names the row (its value is the row's identifier, or, with ``field``, the value of a field the
  rows hold once: ``read_file(path)``, ``get_current_time(timezone)``); ``keys``: an array of those
  (``open_nodes(names)``, ``delete_entities(entityNames)``);
- ``scope``: a field the named row must hold (``get_issue(owner, repo, issue_number)``: a row of another
  repository is not found);
- ``field``: a column written by a create or update, or an equality filter of a read (``git_log(repo_path)``);
- ``rows``: an array of objects, one row each, written by a create (``create_entities(entities)``);
- ``limit``, ``offset``, ``page``: the window of a read (``max_count``, ``per_page``, ``start_index``);
  ``query``: a case-insensitive text match over the rows' text fields; ``after``/``before``: bounds on the rows'
  ``created_at`` (``start_timestamp``/``end_timestamp``);
- ``context``: checked against its schema and otherwise without effect on the state (``dryRun``, ``sort``).

The generated code validates every argument against the real schema (unknown names, missing required ones,
types, enums, bounds, array items, object properties) before it acts. The binding also holds the
``canonical_input`` (the builder's parameter names for the same call) that the verification gate generates
arguments in; :func:`real_arguments` turns those into the real ones and :func:`canonical_output` a batch answer
into the one-row answer the gate checks. A tool none of whose parameters can name the row it reads or writes,
or an update whose parameters set no column, is left out and named with the reason.
"""

from __future__ import annotations

import copy
from typing import Any

from envfactory_assets.envgen.descriptions import parameter_sentence, table_things
from envfactory_assets.envgen.tools import LIST_LIMIT_MAX
from envfactory_assets.sources.names import is_sentence, snake_case

LIMIT_NAMES = frozenset(
    "limit max_count count per_page perpage page_size max_results top_k head max_items size".split()
)
OFFSET_NAMES = frozenset("offset start_index skip start".split())
PAGE_NAMES = frozenset({"page"})
QUERY_NAMES = frozenset("query q search pattern keyword keywords text_query".split())
AFTER_NAMES = frozenset("since after start_timestamp start_time start_date from_date created_after".split())
BEFORE_NAMES = frozenset("until before end_timestamp end_time end_date to_date created_before".split())
#: last words of a parameter that names one row, strongest first
_KEY_WORDS = (("id", "number", "revision", "sha", "ts", "key", "uuid"), ("name", "names"), ("path", "url", "uri"))
_SCALAR = ("string", "integer", "number", "boolean")
READ_KINDS = ("list", "search", "count")


def schema_types(schema: dict[str, Any]) -> list[str]:
    """The JSON types ``schema`` allows by its ``type`` (one or a list) or its ``anyOf``/``oneOf`` members."""
    kind = schema.get("type")
    if isinstance(kind, list):
        return [t for t in kind if isinstance(t, str)]
    if isinstance(kind, str):
        return [kind]
    members = [m for m in schema.get("anyOf") or schema.get("oneOf") or [] if isinstance(m, dict)]
    return [t for m in members for t in schema_types(m)]


def _scalar(schema: dict[str, Any]) -> bool:
    types = [t for t in schema_types(schema) if t != "null"]
    return bool(types) and all(t in _SCALAR for t in types)


def _key_strength(name: str) -> int:
    """3 for a parameter whose last word names an identifier (``issue_number``, ``user_id``, ``revision``), 2 for
    a name, 1 for a path or URL, else 0."""
    last = snake_case(name).split("_")[-1]
    for strength, words in zip((3, 2, 1), _KEY_WORDS, strict=True):
        if last in words:
            return strength
    return 0


def _field_of(name: str, sources: dict[str, str], fields: dict[str, Any]) -> str | None:
    """The table field a real parameter ``name`` sets or reads: by the spec's property name, else its snake_case."""
    if name in sources:
        return sources[name]
    snake = snake_case(name)
    return snake if snake in fields else None


def _item_field(name: str, sources: dict[str, str], fields: dict[str, Any]) -> str | None:
    """The field an array of names (``entityNames``, ``names``) holds one value of per item: ``name``."""
    words = snake_case(name).split("_")
    for start in range(len(words)):
        candidate = "_".join(words[start:])
        for option in (candidate, candidate[:-1] if candidate.endswith("s") else candidate):
            found = _field_of(option, sources, fields)
            if found:
                return found
    return None


def placeholder(schema: dict[str, Any]) -> Any:
    """A value ``schema`` accepts, for a required parameter the gate's canonical arguments leave out: its
    ``default``, ``const``, first ``enum`` value or first ``examples`` item, else the least value of its type."""
    for key in ("default", "const"):
        if key in schema:
            return copy.deepcopy(schema[key])
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("examples"):
        return schema["examples"][0]
    types = [t for t in schema_types(schema) if t != "null"] or ["string"]
    kind = types[0]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + (1 if "exclusiveMinimum" in schema else 0))
        return max(1, int(low)) if kind == "integer" else max(1, low)
    if kind == "boolean":
        return False
    if kind == "array":
        item = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        return [placeholder(item) for _ in range(schema.get("minItems", 0))]
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: placeholder(props.get(k) or {}) for k in schema.get("required") or [] if isinstance(k, str)}
    text = "example"
    return text + "x" * max(0, schema.get("minLength", 0) - len(text))


def describe_schema(schema: dict[str, Any], thing: str) -> int:
    """Give every property of ``schema`` (and of its array items, nested objects and ``anyOf``/``oneOf``
    members) a description of at least a sentence, in place: the server's own where it is one
    (:func:`~envfactory_assets.sources.names.is_sentence`), else one derived from the property's name and schema
    (:func:`~envfactory_assets.envgen.descriptions.parameter_sentence`) with the server's words, when it has any,
    kept in brackets. Returns how many it set."""
    count = 0
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        for name, prop in (node.get("properties") or {}).items():
            if not isinstance(prop, dict):
                continue
            text = str(prop.get("description") or "").strip()
            if not is_sentence(text, (name, name.replace("_", " "))):
                derived = parameter_sentence(snake_case(name) or name, prop, thing)
                prop["description"] = f"{derived[:-1]} ({text.rstrip('.')})." if text else derived
                count += 1
            stack.append(prop)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                stack.append(node[key])
        stack += [m for m in node.get("anyOf") or node.get("oneOf") or [] if isinstance(m, dict)]
    return count


def _limit_schema(real: dict[str, Any]) -> dict[str, Any]:
    """The builder's ``limit`` for a real window parameter: its maximum (at most the builder's) and its default
    (the number of rows a read without it returns) where the server states them."""
    top = real.get("maximum")
    top = min(LIST_LIMIT_MAX, int(top)) if isinstance(top, (int, float)) and not isinstance(top, bool) else None
    schema: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": top or LIST_LIMIT_MAX}
    default = real.get("default")
    if isinstance(default, int) and not isinstance(default, bool) and default >= 1:
        schema["default"] = min(default, LIST_LIMIT_MAX)
    return schema


def _choose_key(real: dict[str, Any], required: list[str], sources: dict[str, str], fields: dict[str, Any]):
    """``(parameter, role, field)`` naming the row of a keyed tool, or None: the required parameter whose last
    word names an identifier best (a field's value before the row's own id at equal strength), else a required
    scalar that is a field; an array of strings the same way (role ``keys``). Optional parameters are looked at
    when no required one names the row (the call then needs it all the same)."""
    options = []
    for name in required or list(real):
        schema = real.get(name)
        if not isinstance(schema, dict):
            continue
        many = "array" in schema_types(schema) and _scalar(schema.get("items") or {})
        if not (many or _scalar(schema)):
            continue
        field = _item_field(name, sources, fields) if many else _field_of(name, sources, fields)
        strength = _key_strength(name) or (0.5 if field else 0)
        if strength:
            options.append((strength, field is not None, name, "keys" if many else "key", field))
    if not options:
        return None if not required else _choose_key(real, [], sources, fields)
    options.sort(key=lambda o: (-o[0], not o[1]))
    _, _, name, role, field = options[0]
    return name, role, field


def bind_tool(
    tool: dict[str, Any], mcp_tool: dict[str, Any], table: dict[str, Any], sources: dict[str, str]
) -> tuple[dict[str, Any] | None, str]:
    """The binding of one env tool (a CRUD ToolSpec of ``table``'s metadata) to the real ``mcp_tool``
    (``{"name", "input_schema", ...}``), or ``(None, why)`` when its parameters cannot do what its kind does.

    ``sources`` maps the spec's property names to the table's field names. The binding is
    ``{"params": {name: {"role", "field"?}}, "canonical_input": JSON Schema, "unique": [field]?, "output":
    "row" | "page" | "batch"}``.
    """
    kind = tool["kind"]
    schema = mcp_tool.get("input_schema") or {}
    real = {k: v for k, v in (schema.get("properties") or {}).items() if isinstance(v, dict)}
    required = [r for r in schema.get("required") or [] if r in real]
    fields, key = table["fields"], table["key"]
    params: dict[str, dict[str, Any]] = {}
    canonical: dict[str, Any] = {}
    canonical_required: list[str] = []
    unique: list[str] = []
    if kind in ("get", "update", "delete"):
        chosen = _choose_key(real, required, sources, fields)
        if chosen is None:
            return None, f"no required parameter of {mcp_tool['name']} names the {table['key']} row it {kind}s"
        name, role, field = chosen
        params[name] = {"role": role, **({"field": field} if field else {})}
        canonical[key] = {"type": "string"}
        canonical_required.append(key)
        if field:
            unique.append(field)
    for name, prop in real.items():
        if name in params:
            continue
        snake = snake_case(name)
        field = _field_of(name, sources, fields)
        number = bool({"integer", "number"} & set(schema_types(prop)))
        if kind in READ_KINDS and number and snake in LIMIT_NAMES and "limit" not in canonical:
            params[name] = {"role": "limit"}
            canonical["limit"] = _limit_schema(prop)
        elif kind in READ_KINDS and number and snake in OFFSET_NAMES and "offset" not in canonical:
            params[name] = {"role": "offset"}
            canonical["offset"] = {"type": "integer", "minimum": 0}
        elif kind in READ_KINDS and number and snake in PAGE_NAMES:
            params[name] = {"role": "page"}
        elif (
            kind in READ_KINDS and "string" in schema_types(prop) and snake in QUERY_NAMES and "query" not in canonical
        ):
            params[name] = {"role": "query"}
            canonical["query"] = {"type": "string", "minLength": 1, "maxLength": 200}
            if name in required:
                canonical_required.append("query")
        elif kind in READ_KINDS and "string" in schema_types(prop) and snake in AFTER_NAMES | BEFORE_NAMES:
            params[name] = {"role": "after" if snake in AFTER_NAMES else "before"}
        elif field and field != key and _scalar(prop):
            in_row = kind in ("get", "delete")
            params[name] = {"role": "scope" if in_row else "field", "field": field}
            if not in_row:
                canonical[field] = copy.deepcopy(fields[field])
                if name in required:
                    canonical_required.append(field)
        elif kind == "create" and "array" in schema_types(prop) and isinstance(prop.get("items"), dict):
            item = prop["items"]
            item_props = {k: v for k, v in (item.get("properties") or {}).items() if isinstance(v, dict)}
            mapped = {k: _field_of(k, sources, fields) for k in item_props}
            mapped = {k: f for k, f in mapped.items() if f and f != key and _scalar(item_props[k])}
            if not mapped or "rows" in {p["role"] for p in params.values()}:
                params[name] = {"role": "context"}
                continue
            params[name] = {"role": "rows", "fields": mapped}
            item_required = item.get("required") or []
            for prop_name, field_name in mapped.items():
                canonical[field_name] = copy.deepcopy(fields[field_name])
                if prop_name in item_required:
                    canonical_required.append(field_name)
        else:
            params[name] = {"role": "context"}
    roles = {p["role"] for p in params.values()}
    if kind == "update" and "field" not in roles:
        return None, f"no parameter of {mcp_tool['name']} sets a field of the {table['key']} row"
    if kind == "create" and not roles & {"field", "rows"}:
        return None, f"no parameter of {mcp_tool['name']} sets a field of the row it creates"
    if kind == "create":
        missing = [f for f in table["required"] if f not in canonical]
        if missing:
            return None, f"{mcp_tool['name']} sets none of the required fields {missing}"
    batch = roles & {"rows", "keys"}
    output = "batch" if batch else ("page" if kind in READ_KINDS else "row")
    return {
        "tool": mcp_tool["name"],
        "params": params,
        "required": required,
        "canonical_input": {
            "type": "object",
            "properties": canonical,
            "required": list(dict.fromkeys(canonical_required)),
            "additionalProperties": False,
        },
        "unique": unique,
        "output": output,
        "row_key": key,
    }, ""


def _batch_schema(row: dict[str, Any], what: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": row, "description": f"The {what}, in the order given."},
            "total": {"type": "integer", "minimum": 0, "description": f"Number of {what}."},
        },
        "required": ["items", "total"],
        "additionalProperties": False,
    }


def real_signature_tools(
    tools: list[dict[str, Any]],
    tables: dict[str, Any],
    tool_list: dict[str, Any],
    sources: dict[str, dict[str, str]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """``(tools, left_out)``: the MCP environment's CRUD ``tools`` with the real signatures of ``tool_list``
    (each tool's ``operation.operation_id`` is its MCP tool's name) and a ``mcp_binding`` (:func:`bind_tool`);
    ``left_out`` names each tool that cannot keep its real signature and why (those tools are dropped).

    A read with a text-match parameter becomes a ``search``. ``sources`` is ``{table: {spec property name:
    field name}}``. Tables gain ``"unique": [field]`` for the fields that name a row.
    """
    by_name = {t["name"]: t for t in tool_list["tools"]}
    things = table_things(tools)
    out: list[dict[str, Any]] = []
    left_out: list[str] = []
    for tool in tools:
        mcp_tool = by_name.get((tool.get("operation") or {}).get("operation_id") or "")
        if mcp_tool is None:
            out.append(tool)
            continue
        binding, why = bind_tool(tool, mcp_tool, tables[tool["table"]], sources.get(tool["table"], {}))
        if binding is None:
            left_out.append(f"{tool['name']}: {why}")
            continue
        new = copy.deepcopy(tool)
        roles = {p["role"] for p in binding["params"].values()}
        if new["kind"] == "list" and "query" in roles:
            new["kind"] = "search"
        binding["kind"] = new["kind"]
        binding["crud_output"] = copy.deepcopy(tool["output_schema"])
        schema = copy.deepcopy(mcp_tool.get("input_schema") or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        thing = things.get(tool["table"], tool["table"])
        table_key = tables[tool["table"]]["key"]
        for name, param in binding["params"].items():
            prop = schema["properties"][name]
            if param["role"] == "key" and not param.get("field") and "string" not in schema_types(prop):
                # this environment's rows are named by string ids (iss_00001); the real server's numbers are not
                prop.pop("type", None)
                prop.pop("anyOf", None)
                prop["type"] = "string"
                prop["description"] = (
                    f"{str(prop.get('description') or '').strip().rstrip('.')}. Here, the {table_key} of the "
                    f"{thing} (a string such as the ids other tools return)."
                ).lstrip(". ")
        describe_schema(schema, thing)
        new["input_schema"] = schema
        new["mcp_binding"] = binding
        if binding["output"] == "batch":
            row = tool["output_schema"]
            what = f"{thing} rows " + ("deleted" if new["kind"] == "delete" else "written or read")
            new["output_schema"] = _batch_schema(row, what)
        for field in binding["unique"]:
            unique = tables[tool["table"]].setdefault("unique", [])
            if field not in unique:
                unique.append(field)
        out.append(new)
    return out, left_out


def real_arguments(tool: dict[str, Any], args: dict[str, Any], rows: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The real arguments of a bound tool for the gate's canonical ``args`` (in the builder's names): the row id
    becomes the key parameter (or the named row's field value), a field its parameter, ``limit``/``offset``/
    ``query`` theirs, fields of a ``rows`` parameter one item; a required parameter the canonical arguments do
    not give gets the named row's value (``scope``) or its schema's placeholder. ``rows`` are the current rows
    of the tool's table (needed where a parameter names a row by a field). Names that are no canonical name are
    passed through unchanged (so that a test can send a real parameter a wrong value)."""
    binding = tool["mcp_binding"]
    canonical = binding["canonical_input"]["properties"]
    real_props = (tool.get("input_schema") or {}).get("properties") or {}
    row_key = binding["row_key"]
    row_id = args.get(row_key) if binding["kind"] in ("get", "update", "delete") else None
    row = next((r for r in rows or [] if r.get(row_key) == row_id), None) if row_id is not None else None
    out: dict[str, Any] = {k: v for k, v in args.items() if k not in canonical}
    for name, param in binding["params"].items():
        role = param["role"]
        if role in ("key", "keys"):
            value = row_id
            if param.get("field"):
                value = row.get(param["field"]) if row else f"no-row-{row_id}"
            out[name] = [value] if role == "keys" else value
        elif role in ("limit", "offset", "query") and role in args:
            out[name] = args[role]
        elif role == "field" and param["field"] in args:
            out[name] = args[param["field"]]
        elif role == "scope" and row is not None and param["field"] in row:
            out[name] = row[param["field"]]
        elif role == "rows":
            item_schema = real_props.get(name, {}).get("items") or {}
            item = {k: args[f] for k, f in param["fields"].items() if f in args}
            for needed in item_schema.get("required") or []:
                if needed not in item:
                    item[needed] = placeholder((item_schema.get("properties") or {}).get(needed) or {})
            out[name] = [item]
        if name not in out and name in binding["required"]:
            out[name] = placeholder(real_props.get(name) or {})
    return out


def row_arguments(tool: dict[str, Any], args: dict[str, Any], rows: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The real parameters of a bound ``tool`` (real or canonical view) whose value :func:`real_arguments` reads
    off the row the canonical ``args`` name: a ``scope`` (``get_issue``'s ``owner``, ``repo``) and a ``key`` or
    ``keys`` by a field (``read_file``'s ``path``, ``open_nodes``' ``names``), as ``{parameter: {"field",
    "value"}}`` (for ``keys`` the named row's one value, not the list). Empty for a tool without a binding, a
    call that names no row, or a row ``rows`` (the table's current rows) does not hold; a field the row lacks is
    left out."""
    binding = tool.get("mcp_binding")
    if not binding or binding["kind"] not in ("get", "update", "delete"):
        return {}
    row_id = args.get(binding["row_key"])
    row = next((r for r in rows or [] if r.get(binding["row_key"]) == row_id), None)
    if row is None:
        return {}
    out = {}
    for name, param in binding["params"].items():
        field = param.get("field")
        if field in row and (param["role"] == "scope" or (param["role"] in ("key", "keys") and field)):
            out[name] = {"field": field, "value": row[field]}
    return out


def canonical_output(tool: dict[str, Any], output: Any) -> Any:
    """A bound tool's answer as the gate checks it: the single row of a batch answer of one row."""
    if tool["mcp_binding"]["output"] == "batch" and isinstance(output, dict) and len(output.get("items") or []) == 1:
        return output["items"][0]
    return output


def canonical_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """The ToolSpec the gate generates arguments for and checks: the real tool with the builder's input (and, for
    a batch, row output) schema; other tools unchanged."""
    binding = tool.get("mcp_binding")
    if not binding:
        return tool
    return {
        **tool,
        "input_schema": binding["canonical_input"],
        "output_schema": binding["crud_output"],
        "real_input_schema": tool["input_schema"],
    }
