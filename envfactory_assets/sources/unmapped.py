"""The operations of an OpenAPI document that the rules do not map, described for a model that writes their tools.

Which operations these are, and why, is :func:`~envfactory_assets.sources.coverage.operation_coverage`'s answer;
an operation left out only by the per-environment cap of resources (``beyond_resource_cap``) is one the rules do
map, so it is not among them. Each description carries what the document says of the operation: method, path,
reason, ``operationId``, summary, description, parameters, request and response schemas, with local ``$ref``s
inlined to a bounded depth and size so that one operation never floods a prompt.
"""

from __future__ import annotations

from typing import Any

from envfactory_assets.sources.coverage import operation_coverage
from envfactory_assets.sources.openapi import SpecError, clean_text, deref

#: Depth of nested schemas kept when ``$ref``s are inlined; deeper ones keep only their type.
MAX_SCHEMA_DEPTH = 4
#: Properties of one object schema kept (the first ones, in document order).
MAX_PROPERTIES = 25
#: Parameters of one operation kept.
MAX_PARAMETERS = 20
#: Schema keywords kept (the others say little about what a tool must do).
SCHEMA_KEYS = (
    "type",
    "format",
    "enum",
    "description",
    "properties",
    "required",
    "items",
    "minimum",
    "maximum",
    "maxLength",
    "default",
    "allOf",
    "oneOf",
    "anyOf",
)


def inline_schema(spec: dict[str, Any], node: Any, depth: int = 0) -> Any:
    """``node`` (a JSON Schema of ``spec``) with its local ``$ref``s resolved, only :data:`SCHEMA_KEYS`, at most
    :data:`MAX_PROPERTIES` properties per object and :data:`MAX_SCHEMA_DEPTH` levels (deeper: only the type);
    a reference that does not resolve becomes ``{"description": "unresolved reference ..."}``."""
    try:
        node = deref(spec, node)
    except SpecError as exc:
        return {"description": f"unresolved reference ({exc})"}
    if isinstance(node, list):
        return [inline_schema(spec, x, depth + 1) for x in node[:MAX_PROPERTIES]]
    if not isinstance(node, dict):
        return node
    if depth >= MAX_SCHEMA_DEPTH:
        return {"type": node["type"]} if isinstance(node.get("type"), str) else {}
    out: dict[str, Any] = {}
    for key in SCHEMA_KEYS:
        if key not in node:
            continue
        value = node[key]
        if key == "description":
            out[key] = clean_text(value, 160)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {str(k): inline_schema(spec, v, depth + 1) for k, v in list(value.items())[:MAX_PROPERTIES]}
        elif key in ("items", "allOf", "oneOf", "anyOf"):
            out[key] = inline_schema(spec, value, depth + 1)
        else:
            out[key] = value
    return out


def _parameters(spec: dict[str, Any], path_item: dict[str, Any], op: dict[str, Any]) -> list[dict[str, Any]]:
    raw = [*(path_item.get("parameters") or []), *(op.get("parameters") or [])]
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for p in raw if isinstance(raw, list) else []:
        try:
            p = deref(spec, p)
        except SpecError:
            continue
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            continue
        out[(p["name"], str(p.get("in")))] = {  # an operation's own parameter replaces its path's
            "name": p["name"],
            "in": p.get("in"),
            "required": bool(p.get("required")),
            "description": clean_text(p.get("description"), 160),
            "schema": inline_schema(spec, p.get("schema") or {k: p[k] for k in ("type", "enum") if k in p}),
        }
    return list(out.values())[:MAX_PARAMETERS]


def _body_schema(spec: dict[str, Any], holder: Any) -> Any:
    """The JSON schema of a request body or response object (the first JSON media type; Swagger 2's own
    ``schema``)."""
    try:
        holder = deref(spec, holder)
    except SpecError:
        return None
    if isinstance(holder, dict) and "schema" in holder and "content" not in holder:
        return inline_schema(spec, holder["schema"])
    content = holder.get("content") if isinstance(holder, dict) else None
    if not isinstance(content, dict):
        return None
    for media, entry in content.items():
        if isinstance(media, str) and "json" in media and isinstance(entry, dict) and "schema" in entry:
            return inline_schema(spec, entry["schema"])
    return None


def _response(spec: dict[str, Any], op: dict[str, Any]) -> Any:
    responses = op.get("responses")
    if not isinstance(responses, dict):
        return None
    for code in sorted((c for c in responses if str(c).startswith("2")), key=str):
        schema = _body_schema(spec, responses[code])
        if schema is not None:
            return schema
    return None


def unmapped_operations(spec: dict[str, Any], max_resources: int | None = None) -> list[dict[str, Any]]:
    """The operations of ``spec`` the rules do not map when at most ``max_resources`` resources are kept, in path
    order, each ``{"method", "path", "reason", "operation_id", "summary", "description", "parameters",
    "request_schema", "response_schema"}`` (``method`` upper case; ``parameters`` as ``{"name", "in",
    "required", "description", "schema"}``; schemas inlined by :func:`inline_schema`, None when absent).

    Raises:
        SpecError: as :func:`~envfactory_assets.sources.resources.extract_resources`.
    """
    out = []
    for cov in operation_coverage(spec, max_resources):
        if cov.kind is not None or cov.reason == "beyond_resource_cap":
            continue
        path_item = spec["paths"][cov.path]
        op = path_item[cov.method] if isinstance(path_item[cov.method], dict) else {}
        out.append(
            {
                "method": cov.method.upper(),
                "path": cov.path,
                "reason": cov.reason,
                "operation_id": op.get("operationId") if isinstance(op.get("operationId"), str) else None,
                "summary": clean_text(op.get("summary"), 200),
                "description": clean_text(op.get("description"), 600),
                "parameters": _parameters(spec, path_item, op),
                "request_schema": _body_schema(spec, op.get("requestBody")),
                "response_schema": _response(spec, op),
            }
        )
    return out
