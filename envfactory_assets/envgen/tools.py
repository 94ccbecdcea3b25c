"""Tool specs (OpenAI function calling, JSON Schema input and output) from extracted resources.

Semantics follow the HTTP operation: GET on a collection -> ``list``, POST -> ``create``,
GET/PATCH|PUT/DELETE on an item -> ``get``/``update``/``delete``: the method says whether a tool reads or
writes, which is what verification and the sampler need to know.
"""

from __future__ import annotations

import builtins
from typing import Any

from envfactory_assets.sources.names import TOOL_NAME_RE, to_identifier, unique_name
from envfactory_assets.sources.openapi import Resource

LIST_LIMIT_MAX = 100
LIST_LIMIT_DEFAULT = 20
MAX_LIST_FILTERS = 3
KIND_ORDER = ("list", "get", "create", "update", "delete")
# Names a tool function must not shadow inside its environment module.
RESERVED_NAMES = frozenset(dir(builtins)) | {"load", "save", "TABLES"}


def row_schema(resource: Resource, foreign_keys: dict[str, str]) -> dict[str, Any]:
    """JSON Schema of one stored row of ``resource`` (key, scalar fields, ``created_at``)."""
    props: dict[str, Any] = {resource.key: {"type": "string", "description": f"Identifier of the {resource.singular}."}}
    for f in resource.fields:
        prop = dict(f.schema)
        desc = f.description or f.name.replace("_", " ")
        if f.name in foreign_keys:
            desc = f"Identifier of the {foreign_keys[f.name]} this {resource.singular} belongs to."
        prop["description"] = desc
        props[f.name] = prop
    props["created_at"] = {"type": "string", "format": "date-time",
                           "description": f"When the {resource.singular} was created."}
    required = [resource.key] + [f.name for f in resource.fields if f.required] + ["created_at"]
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def _field_props(resource: Resource, row: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {n: row["properties"][n] for n in names}


def _tool_name(resource: Resource, kind: str, taken: set[str]) -> str:
    op = resource.operations[kind]
    fallback = f"{kind}_{resource.name if kind == 'list' else resource.singular}"
    name = to_identifier(op.operation_id or "", fallback=fallback) if op.operation_id else fallback
    if len(name) < 3 or not TOOL_NAME_RE.match(name) or name in RESERVED_NAMES:
        name = fallback
    return unique_name(name, taken)


def tools_for_resource(resource: Resource, foreign_keys: dict[str, str], taken: set[str]) -> list[dict[str, Any]]:
    """ToolSpecs (see docs/design.md) for every operation of ``resource``, in CRUD order.

    ``foreign_keys`` maps field names to the singular of the table they reference (within the
    environment); ``taken`` holds tool names already used and receives the new ones.
    """
    row = row_schema(resource, foreign_keys)
    field_names = [f.name for f in resource.fields]
    required_fields = [f.name for f in resource.fields if f.required]
    key_prop = {"type": "string", "description": f"Identifier of the {resource.singular}."}
    tools: list[dict[str, Any]] = []
    for kind in KIND_ORDER:
        if kind not in resource.operations:
            continue
        op = resource.operations[kind]
        name = _tool_name(resource, kind, taken)
        if kind == "list":
            filters = [f.name for f in resource.fields
                       if f.name == resource.parent_key or "enum" in f.schema or f.schema.get("type") == "boolean"]
            filters = filters[:MAX_LIST_FILTERS]
            props = {"limit": {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT_MAX,
                               "description": f"Maximum number of {resource.name} to return (default {LIST_LIMIT_DEFAULT})."}}
            props.update(_field_props(resource, row, filters))
            inp = {"type": "object", "properties": props,
                   "required": [resource.parent_key] if resource.parent_key else [], "additionalProperties": False}
            out = {"type": "object", "properties": {
                "items": {"type": "array", "items": row},
                "total": {"type": "integer", "minimum": 0, "description": f"Number of matching {resource.name}."}},
                "required": ["items", "total"], "additionalProperties": False}
            default_desc = f"List {resource.name.replace('_', ' ')}, optionally filtered."
        elif kind == "get":
            inp = {"type": "object", "properties": {resource.key: key_prop}, "required": [resource.key],
                   "additionalProperties": False}
            out = row
            default_desc = f"Get one {resource.singular.replace('_', ' ')} by its identifier."
        elif kind == "create":
            inp = {"type": "object", "properties": _field_props(resource, row, field_names),
                   "required": required_fields, "additionalProperties": False}
            out = row
            default_desc = f"Create a {resource.singular.replace('_', ' ')}."
        elif kind == "update":
            editable = [n for n in field_names if n != resource.parent_key]
            props = {resource.key: key_prop, **_field_props(resource, row, editable)}
            inp = {"type": "object", "properties": props, "required": [resource.key], "additionalProperties": False}
            out = row
            default_desc = f"Update fields of a {resource.singular.replace('_', ' ')}."
        else:
            inp = {"type": "object", "properties": {resource.key: key_prop}, "required": [resource.key],
                   "additionalProperties": False}
            out = {"type": "object", "properties": {
                resource.key: key_prop, "deleted": {"type": "boolean"}},
                "required": [resource.key, "deleted"], "additionalProperties": False}
            default_desc = f"Delete a {resource.singular.replace('_', ' ')}."
        tools.append({
            "name": name,
            "description": (op.summary or default_desc)[:300],
            "kind": kind,
            "table": resource.name,
            "read_only": kind in ("list", "get"),
            "input_schema": inp,
            "output_schema": out,
            "operation": {"method": op.method.upper(), "path": op.path, "operation_id": op.operation_id},
        })
    return tools


def openai_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI function-calling form of a ToolSpec."""
    return {"type": "function", "function": {
        "name": spec["name"], "description": spec["description"], "parameters": spec["input_schema"]}}
