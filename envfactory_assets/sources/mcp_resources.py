"""An MCP tool list mapped onto the builder's resources (tables with CRUD operations).

The programmatic builder turns :class:`~envfactory_assets.sources.openapi.Resource` objects into
tables, tools and code; this module produces those objects from a real MCP server's tool list, so
the same builder and the same verification gate serve both resource kinds.

The mapping reads each tool's name and schemas:

- verb (first word of the name, after a prefix every tool shares such as ``git_``) -> CRUD kind,
  e.g. ``create``/``add``/``write`` -> create, ``list``/``read_graph``/``search`` -> list,
  ``get``/``open``/``read`` -> get, ``update``/``edit``/``move`` -> update, ``delete``/``remove`` -> delete;
- noun -> table: the rest of the name (``create_entities`` -> ``entities``), else the name of the
  tool's array argument (``git_add(files=[...])`` -> ``files``), else a small lexicon of verbs that
  name their object (``git_log``/``git_commit``/``git_show`` -> ``commits``); a read whose noun is not
  a table (``read_graph``, ``open_nodes``) reads the tables its output schema returns as arrays;
- fields: the scalar properties of the create tool's row (the items of its array argument, or its
  own arguments), else of the rows a read tool returns (``get_current_time`` -> ``timezone``,
  ``datetime``, ``is_dst``: the current time is a stored field of the state, never the clock).

A tool that maps to no kind, or to a kind its table already has, is kept in ``unmapped`` with why.
Tables may be read-only (a server with only reads gets seeded rows to read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envfactory_assets.sources.names import singular, snake_case, to_identifier, unique_name
from envfactory_assets.sources.openapi import FieldSpec, Operation, Resource, clean_text, extract_fields
from envfactory_assets.sources.unmapped import inline_schema

MAX_TABLES = 4

VERB_KIND = {
    **dict.fromkeys(("create", "add", "insert", "new", "write", "make", "register", "post"), "create"),
    **dict.fromkeys(("list", "search", "find", "query", "browse"), "list"),
    **dict.fromkeys(("get", "open", "read", "fetch", "show", "describe", "view"), "get"),
    **dict.fromkeys(("update", "edit", "set", "rename", "move", "modify", "patch"), "update"),
    **dict.fromkeys(("delete", "remove", "drop", "destroy"), "delete"),
}
# Verbs that name their own object (git's vocabulary): verb -> (kind, table).
VERB_OBJECT = {
    "commit": ("create", "commits"),
    "log": ("list", "commits"),
    "show": ("get", "commits"),
    "branch": ("list", "branches"),
    "status": ("list", "files"),
}
# A read of the whole store ("read_graph") lists every table its output returns.
WHOLE_STORE_NOUNS = ("graph", "all", "everything", "store", "state")
_PAGING_ARGS = {"limit", "offset", "cursor", "page", "page_size", "max_count", "query", "context_lines"}


class McpMappingError(ValueError):
    """A tool list that yields no table with a read tool and fields; the message says why."""


@dataclass
class _Mapped:
    tool: dict[str, Any]
    kind: str
    nouns: list[str]  # candidate tables, best first
    whole_store: bool = False  # a read of every table its output returns (``read_graph``)


def plural(word: str) -> str:
    """Crude English plural of a snake_case noun (``"directory"`` -> ``"directories"``)."""
    if word.endswith("y") and len(word) > 2 and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("s", "x", "ch", "sh")):
        return word if word.endswith("s") and singular(word) != word else word + "es"
    return word + "s"


def _common_prefix(names: list[str]) -> str:
    firsts = {n.split("_", 1)[0] for n in names}
    if len(names) > 1 and len(firsts) == 1 and all("_" in n for n in names):
        return firsts.pop() + "_"
    return ""


def _array_args(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    return [(k, v) for k, v in props.items() if isinstance(v, dict) and v.get("type") == "array"]


def _output_tables(tool: dict[str, Any]) -> list[str]:
    out = tool.get("output_schema") or {}
    return [snake_case(k) for k, _ in _array_args(out)]


def _classify(tool: dict[str, Any], prefix: str) -> _Mapped | None:
    words = snake_case(tool["name"][len(prefix) :] if tool["name"].startswith(prefix) else tool["name"]).split("_")
    verb, rest = words[0], [w for w in words[1:] if w]
    if "with" in rest:
        rest = rest[: rest.index("with")]
    if verb in VERB_OBJECT and not rest:
        kind, table = VERB_OBJECT[verb]
        return _Mapped(tool, kind, [table])
    if verb == "read" and rest and rest[-1] in WHOLE_STORE_NOUNS:
        return _Mapped(tool, "list", _output_tables(tool), whole_store=True)
    kind = VERB_KIND.get(verb)
    if kind is None:
        return None
    nouns = []
    if rest:
        noun = "_".join(rest)
        nouns.append(noun if singular(noun) != noun else plural(noun))
        if len(rest) > 1:  # read_text_file -> text_files, then files
            nouns.append(rest[-1] if singular(rest[-1]) != rest[-1] else plural(rest[-1]))
    nouns += [snake_case(name) for name, _ in _array_args(tool["input_schema"])]
    nouns += _output_tables(tool)
    return _Mapped(tool, kind, [n for n in nouns if n])


def _row_schema_source(tool: dict[str, Any], kind: str) -> tuple[dict[str, Any], Any]:
    """``(document for $ref lookups, object schema of one row)`` a tool writes or reads."""
    schema = tool["input_schema"] if kind == "create" else (tool.get("output_schema") or tool["input_schema"])
    arrays = [
        (k, v)
        for k, v in _array_args(schema)
        if isinstance(v.get("items"), dict) and (v["items"].get("properties") or "$ref" in v["items"])
    ]
    if arrays:
        return schema, arrays[0][1]["items"]
    if kind != "create" and not _scalar_names(schema):
        schema = tool["input_schema"]
    return schema, schema


def _scalar_names(schema: dict[str, Any]) -> list[str]:
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    return [
        k
        for k, v in props.items()
        if isinstance(v, dict) and v.get("type") in ("string", "integer", "number", "boolean")
    ]


def _fields(tool: dict[str, Any], kind: str, key: str) -> list[FieldSpec]:
    document, row = _row_schema_source(tool, kind)
    fields = extract_fields(document, row, key)
    return [f for f in fields if f.name not in _PAGING_ARGS]


def resources_from_tool_list(
    document: dict[str, Any], max_tables: int | None = MAX_TABLES
) -> tuple[list[Resource], list[str]]:
    """Map a validated MCP tool-list document to ``(resources, unmapped)``.

    ``resources`` are tables (most tools first, at most ``max_tables``; None keeps every table), each with at most
    one tool per CRUD kind whose ``operation_id`` is the MCP tool's own name; ``unmapped`` lists
    ``"tool_name: why"`` for every tool left out.

    Raises:
        McpMappingError: when no table ends up with a read tool (list or get) and at least one field.
    """
    tools = sorted(document["tools"], key=lambda t: t["name"])
    prefix = _common_prefix([t["name"] for t in tools])
    mapped: list[_Mapped] = []
    unmapped: list[str] = []
    for tool in tools:
        m = _classify(tool, prefix)
        if m is None or not m.nouns:
            unmapped.append(f"{tool['name']}: no CRUD verb or object in its name and schemas")
        else:
            mapped.append(m)
    # Tables are the nouns that create tools write, then the nouns of the other tools.
    # A read names its table by a synonym (open_nodes) or returns a written table (entities): prefer the latter.
    written = {m.nouns[0] for m in mapped if m.kind == "create"}
    for m in mapped:
        if m.kind != "create" and not m.whole_store:
            m.nouns.sort(key=lambda n: n not in written)
    tables: list[str] = []
    for m in sorted(mapped, key=lambda m: m.kind != "create"):
        if m.nouns[0] not in tables:
            tables.append(m.nouns[0])
    ops: dict[str, dict[str, Operation]] = {t: {} for t in tables}
    row_tools: dict[str, tuple[dict[str, Any], str]] = {}
    for m in mapped:
        targets = [n for n in m.nouns if n in ops]
        placed = False
        for table in targets if m.whole_store else targets[:1]:
            if m.kind in ops[table]:
                continue
            ops[table][m.kind] = Operation(
                m.kind, "mcp", m.tool["name"], m.tool["name"], clean_text(m.tool.get("description", ""), 200)
            )
            if m.kind == "create" or table not in row_tools:
                row_tools[table] = (m.tool, m.kind)
            placed = True
        if not placed:
            unmapped.append(f"{m.tool['name']}: its table {targets[0]} already has a {m.kind} tool")
    resources: list[Resource] = []
    taken: set[str] = set()
    for table in tables:
        if not ({"list", "get"} & set(ops[table])) or table not in row_tools:
            unmapped += [f"{op.operation_id}: table {table} has no read tool" for op in ops[table].values()]
            continue
        name = unique_name(to_identifier(table, fallback="items", max_len=40), taken)
        key = f"{singular(name)}_id"
        fields = _fields(*row_tools[table], key)
        if not fields:
            unmapped += [f"{op.operation_id}: table {table} has no scalar field" for op in ops[table].values()]
            continue
        resources.append(Resource(name, key, f"mcp:{table}", fields, ops[table]))
    resources.sort(key=lambda r: (-len(r.operations), r.name))
    if not resources:
        raise McpMappingError(
            f"no table with a read tool and scalar fields among {len(tools)} tools: " + "; ".join(unmapped[:5])
        )
    if max_tables is None:
        return resources, unmapped
    for extra in resources[max_tables:]:
        unmapped += [
            f"{op.operation_id}: table {extra.name} beyond the first {max_tables}" for op in extra.operations.values()
        ]
    return resources[:max_tables], unmapped


#: Why a tool is unmapped (the start of its ``unmapped`` entry) -> the reason the coverage of OpenAPI documents
#: gives the like case (:mod:`envfactory_assets.sources.coverage`); a tool of a table beyond the cap is mapped.
_UNMAPPED_REASONS = (
    ("no CRUD verb", "no_crud_mapping"),
    ("its table", "not_modelled"),
    ("table", "no_stateful_collection"),
)


def unmapped_tool_operations(document: dict[str, Any], max_tables: int | None = MAX_TABLES) -> list[dict[str, Any]]:
    """The tools of a validated MCP tool list that :func:`resources_from_tool_list` leaves out (not those of a
    table beyond ``max_tables``: the mapping does map them), in its order, each described like an item of
    :func:`~envfactory_assets.sources.unmapped.unmapped_operations`: ``method`` ``"MCP"``, ``path`` and
    ``operation_id`` the tool's name, ``reason`` (``no_crud_mapping``, ``not_modelled`` or
    ``no_stateful_collection``) with the mapping's own words in ``detail``, its description, its arguments as
    ``parameters`` (``"in": "arguments"``), and its output schema as ``response_schema``. Empty when the tool list
    yields no environment.
    """
    try:
        _, unmapped = resources_from_tool_list(document, max_tables)
    except McpMappingError:
        return []
    tools = {t["name"]: t for t in document["tools"]}
    out = []
    for entry in unmapped:
        name, _, why = entry.partition(": ")
        tool = tools.get(name)
        if tool is None or " beyond the first " in why:
            continue
        schema = tool.get("input_schema") if isinstance(tool.get("input_schema"), dict) else {}
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        out.append(
            {
                "method": "MCP",
                "path": name,
                "reason": next((code for start, code in _UNMAPPED_REASONS if why.startswith(start)), "not_modelled"),
                "detail": why,
                "operation_id": name,
                "summary": clean_text(tool.get("description"), 200),
                "description": clean_text(tool.get("description"), 600),
                "parameters": [
                    {
                        "name": arg,
                        "in": "arguments",
                        "required": arg in required,
                        "description": clean_text(
                            arg_schema.get("description") if isinstance(arg_schema, dict) else ""
                        ),
                        "schema": inline_schema({}, arg_schema),
                    }
                    for arg, arg_schema in props.items()
                ],
                "request_schema": None,
                "response_schema": (
                    inline_schema({}, tool["output_schema"]) if isinstance(tool.get("output_schema"), dict) else None
                ),
            }
        )
    return out
