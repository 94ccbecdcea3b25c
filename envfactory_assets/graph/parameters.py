"""Tool parameters: extraction from JSON Schemas, embedding text, and the user-providable rule.

A *tool* here is one ToolSpec of an environment (``docs/design.md``) with its environment attached::

    {"env_id": "apideck_com__crm", "domain": "productivity", "name": "get_company",
     "description": "...", "kind": "get", "table": "companies", "read_only": True,
     "input_schema": {JSON Schema object}, "output_schema": {JSON Schema object}}

Parameters (the units the tool graph connects):

- **inputs**: every top-level property of ``input_schema`` (``required`` from the schema's ``required``).
- **outputs**: every top-level *scalar* property of ``output_schema`` (path ``"company_id"``); for an
  array-of-object property, each scalar property of the item object (path ``"items[].company_id"``, name
  ``"company_id"``); for an object property, each scalar property of it (path ``"company.company_id"``; an
  extension for get tools that wrap the row in an object). Arrays of scalars and deeper nesting are not
  outputs.

Embedding text follows the paper (arXiv 2605.18703, tool graph): ``"name (type): description"``.

User-providable (paper: an LLM flags each parameter, "when in doubt, not"; here a deterministic rule with
the same bias, see :func:`is_user_providable`): identifiers are not user-providable (a user does not know
``company_id`` values; some tool must produce them), free text, enums, numbers, dates and booleans are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping

__all__ = [
    "Parameter",
    "SCALAR_TYPES",
    "tool_node_id",
    "schema_type",
    "extract_input_parameters",
    "extract_output_parameters",
    "extract_parameters",
    "is_identifier_name",
    "is_user_providable",
    "normalize_name",
]

#: JSON Schema types treated as scalars.
SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})

Direction = Literal["in", "out"]

_TOOL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$")


@dataclass(frozen=True)
class Parameter:
    """One input or output parameter of one tool.

    Attributes:
        node_id: ``"{env_id}.{tool_name}"`` of the owning tool.
        env_id: environment of the owning tool.
        direction: ``"in"`` (argument) or ``"out"`` (result field).
        name: property name (last path segment), e.g. ``"company_id"``.
        path: location in the schema: ``"company_id"``, ``"items[].company_id"``, ``"company.company_id"``.
        type: JSON Schema type with ``null`` removed (``"string"``, ``"integer"``, ``"number"``, ``"boolean"``,
            ``"array"``, ``"object"``, or ``"any"`` when the schema does not say).
        required: listed in the enclosing object's ``required``.
        description: the schema's ``description`` (or ``title``), stripped; may be empty.
        format: JSON Schema ``format`` (``"uuid"``, ``"date"``, ``"email"``...) or None.
        enum: allowed values as a tuple, or None.
        item_type: for arrays, the item type (``"string"``, ``"object"``...), else None.
        table: the owning tool's ``table`` (used to scope bare ``id`` name matches), or None.
    """

    node_id: str
    env_id: str
    direction: Direction
    name: str
    path: str
    type: str
    required: bool
    description: str = ""
    format: str | None = None
    enum: tuple[Any, ...] | None = None
    item_type: str | None = None
    table: str | None = None

    @property
    def text(self) -> str:
        """Embedding text ``"name (type): description"`` (paper); ``"name (type)"`` without description."""
        head = f"{self.name} ({self.type})"
        return f"{head}: {self.description}" if self.description else head


def tool_node_id(tool: Mapping[str, Any]) -> str:
    """Node id ``"{env_id}.{name}"`` of a tool dict; raises ``ValueError`` on a missing/invalid field."""
    env_id = tool.get("env_id")
    name = tool.get("name")
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"tool {name!r} has no env_id")
    if not isinstance(name, str) or not _TOOL_NAME_RE.match(name):
        raise ValueError(f"tool in {env_id!r} has an invalid name {name!r}")
    return f"{env_id}.{name}"


def schema_type(schema: Mapping[str, Any] | None) -> str:
    """The JSON Schema type of ``schema`` as one string, ``null`` removed.

    ``{"type": ["string", "null"]}`` -> ``"string"``; no ``type`` -> inferred from ``enum`` / ``properties`` /
    ``items`` / the first non-null ``anyOf``/``oneOf`` branch; otherwise ``"any"``.
    """
    if not isinstance(schema, Mapping):
        return "any"
    t = schema.get("type")
    if isinstance(t, list):
        non_null = [x for x in t if x != "null"]
        t = non_null[0] if non_null else "null"
    if isinstance(t, str):
        return t
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            for b in branches:
                bt = schema_type(b)
                if bt not in ("null", "any"):
                    return bt
    if "enum" in schema:
        values = schema["enum"]
        if values and all(isinstance(v, bool) for v in values):
            return "boolean"
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return "number"
        return "string"
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "any"


def _enum(schema: Mapping[str, Any]) -> tuple[Any, ...] | None:
    values = schema.get("enum")
    if values is None and "const" in schema:
        values = [schema["const"]]
    return tuple(values) if isinstance(values, list | tuple) else None


def _description(schema: Mapping[str, Any]) -> str:
    d = schema.get("description") or schema.get("title") or ""
    return " ".join(str(d).split())


def _properties(schema: Any) -> tuple[Mapping[str, Any], frozenset[str]]:
    if not isinstance(schema, Mapping):
        return {}, frozenset()
    props = schema.get("properties") or {}
    if not isinstance(props, Mapping):
        raise ValueError("JSON Schema 'properties' must be an object")
    req = schema.get("required") or []
    return props, frozenset(r for r in req if isinstance(r, str))


def _param(tool: Mapping[str, Any], direction: Direction, name: str, path: str, schema: Any,
           required: bool) -> Parameter:
    schema = schema if isinstance(schema, Mapping) else {}
    t = schema_type(schema)
    items = schema.get("items") if t == "array" else None
    return Parameter(
        node_id=tool_node_id(tool),
        env_id=str(tool["env_id"]),
        direction=direction,
        name=name,
        path=path,
        type=t,
        required=required,
        description=_description(schema),
        format=schema.get("format") if isinstance(schema.get("format"), str) else None,
        enum=_enum(schema),
        item_type=schema_type(items) if isinstance(items, Mapping) else None,
        table=tool.get("table") if isinstance(tool.get("table"), str) else None,
    )


def extract_input_parameters(tool: Mapping[str, Any]) -> list[Parameter]:
    """Top-level properties of ``tool["input_schema"]`` in schema order, with their required flag."""
    props, req = _properties(tool.get("input_schema"))
    return [_param(tool, "in", name, name, s, name in req) for name, s in props.items()]


def extract_output_parameters(tool: Mapping[str, Any]) -> list[Parameter]:
    """Scalar result fields of ``tool["output_schema"]`` in schema order (see module docstring for paths).

    A top-level array-of-object property ``items`` contributes ``items[].<field>`` for each scalar field of
    the item object; a top-level object property ``company`` contributes ``company.<field>``. The
    ``required`` flag of a nested field is the item/object schema's own ``required``.
    """
    props, req = _properties(tool.get("output_schema"))
    out: list[Parameter] = []
    for name, s in props.items():
        t = schema_type(s)
        if t in SCALAR_TYPES:
            out.append(_param(tool, "out", name, name, s, name in req))
        elif t == "array" and isinstance(s, Mapping) and schema_type(s.get("items")) == "object":
            sub_props, sub_req = _properties(s.get("items"))
            for sub, ss in sub_props.items():
                if schema_type(ss) in SCALAR_TYPES:
                    out.append(_param(tool, "out", sub, f"{name}[].{sub}", ss, sub in sub_req))
        elif t == "object":
            sub_props, sub_req = _properties(s)
            for sub, ss in sub_props.items():
                if schema_type(ss) in SCALAR_TYPES:
                    out.append(_param(tool, "out", sub, f"{name}.{sub}", ss, sub in sub_req))
    return out


def extract_parameters(tool: Mapping[str, Any]) -> list[Parameter]:
    """Inputs then outputs of one tool."""
    return extract_input_parameters(tool) + extract_output_parameters(tool)


# Identifier-like names: `id`, `*_id`, `*_ids`, camelCase `*Id`/`*Ids`/`*ID`, uuid/guid/uid.
_ID_NAME_RE = re.compile(r"(^(id|ids|uuid|guid|uid)$)|(_(id|ids|uuid|guid|uid)$)|([a-z0-9](Id|Ids|ID|IDs)$)")
# Opaque server-issued handles that a user cannot know either (pagination cursors, etags, tokens).
_OPAQUE_NAMES = frozenset({
    "cursor", "next_cursor", "page_token", "next_page_token", "pagetoken", "nextpagetoken",
    "continuation_token", "etag", "token", "ref", "handle",
})
_OPAQUE_FORMATS = frozenset({"uuid", "guid", "objectid"})


def normalize_name(name: str) -> str:
    """Case- and separator-insensitive form used for exact name matches: ``companyId`` == ``company_id``."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def is_identifier_name(name: str) -> bool:
    """True for identifier names: ``id``, ``*_id``, ``*_ids``, ``*Id``, ``*Ids``, ``uuid``..."""
    return bool(_ID_NAME_RE.search(name))


_OPAQUE_NORMALIZED = frozenset(normalize_name(n) for n in _OPAQUE_NAMES)


def is_user_providable(param: Parameter) -> bool:
    """Can a user plausibly state this value in a request (no tool call needed to obtain it)?

    Rule (paper: "when in doubt, not"):

    1. identifiers (:func:`is_identifier_name`), opaque handles (cursor, page_token, etag, token...) and
       ``format: uuid`` -> **False**;
    2. ``enum``/``const`` values, ``boolean``, ``integer``, ``number`` -> **True**;
    3. ``string`` (free text, names, emails, dates, ``date-time``...) -> **True**;
    4. ``array`` of scalars (tags, labels) -> **True**;
    5. anything else (objects, arrays of objects, untyped) -> **False**.
    """
    name = param.name
    if is_identifier_name(name) or normalize_name(name) in _OPAQUE_NORMALIZED:
        return False
    if (param.format or "").lower() in _OPAQUE_FORMATS:
        return False
    if param.enum:
        return True
    if param.type in SCALAR_TYPES:
        return True
    if param.type == "array" and param.item_type in SCALAR_TYPES:
        return True
    return False


def iter_tool_parameters(tools: Iterable[Mapping[str, Any]]) -> Iterable[Parameter]:
    """All parameters of all tools, tool by tool (inputs first)."""
    for tool in tools:
        yield from extract_parameters(tool)
