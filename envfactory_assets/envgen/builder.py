"""The programmatic EnvGen builder: one OpenAPI document -> one executable, stateful environment.

It does the work the paper gives its sketch/spec/code/test agents (EnvFactory, arXiv 2605.18703,
section EnvGen) deterministically: resources become tables, operations become CRUD tools with JSON
Schema input/output, the code is rendered from the tool specs, and initial states are seeded from
the schemas (valid, boundary, and one invalid state that loading must reject). A relation between two kept
resources becomes a table of pairs (``{"key": None, "relation": {...}}`` in ``tables``), after the others; an
environment with side-effect actions (``send``, ``sync``) gets an outbox table (``"outbox": True``) last, empty in
its initial states.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import re
from collections.abc import Callable
from typing import Any

from envfactory_assets.envgen.codegen import generate_source
from envfactory_assets.envgen.descriptions import describe_tools
from envfactory_assets.envgen.tools import (
    name_tools,
    outbox_meta,
    outbox_name,
    outbox_row_schema,
    relation_row_schema,
    row_schema,
    side_effect_tool,
    tools_for_relation,
    tools_for_resource,
    with_action_fields,
    with_transfer_fields,
)
from envfactory_assets.envgen.values import DEFAULT_NOW, ValueFactory, boundary_value
from envfactory_assets.sources.openapi import Relation, Resource
from envfactory_assets.sources.resources import extract_resources

MAX_RESOURCES = 4
VALID_ROWS_PER_TABLE = 6
#: members of the first parents of a relation in the ``valid`` state (3 of the first, 2 of the second, 1 of
#: the third): a list of members that pages, parents without members, and pairs not yet made
VALID_MEMBERS_PER_PARENT = (3, 2, 1)
#: the clock of the ``boundary`` initial state (its edge-of-range date-times equal it)
BOUNDARY_NOW = "2025-12-31T23:59:59Z"


class BuildError(ValueError):
    """The document yields no environment; the message says why."""


def stable_seed(*parts: str) -> int:
    """A 32-bit seed from the sha256 of ``parts`` (no global random stream)."""
    return int.from_bytes(hashlib.sha256("\x1f".join(parts).encode()).digest()[:4], "big")


def _foreign_keys(resources: list[Resource]) -> dict[str, dict[str, str]]:
    by_key = {r.key: r for r in resources}
    fks: dict[str, dict[str, str]] = {}
    for r in resources:
        fks[r.name] = {f.name: by_key[f.name].name for f in r.fields if f.name in by_key and by_key[f.name] is not r}
    return fks


def _string_keys(resource: Resource, fks: dict[str, str]) -> Resource:
    """Foreign-key fields hold this environment's string row ids, whatever type the spec gave them."""
    fields = [
        dataclasses.replace(f, schema={"type": "string"}) if f.name in fks or f.name == resource.parent_key else f
        for f in resource.fields
    ]
    return dataclasses.replace(resource, fields=fields)


def _order_by_dependency(resources: list[Resource], fks: dict[str, dict[str, str]]) -> list[Resource]:
    done: list[Resource] = []
    pending = list(resources)
    while pending:
        for r in pending:
            if all(t in {d.name for d in done} or t == r.name for t in fks[r.name].values()):
                done.append(r)
                pending.remove(r)
                break
        else:  # a reference cycle: keep the remaining order
            done.extend(pending)
            break
    return done


def _relations(resources: list[Resource]) -> list[Relation]:
    """The relations of ``resources`` whose member is one of them too, in the resources' order."""
    names = {r.name for r in resources}
    return [rel for r in resources for rel in r.relations if rel.member in names]


def _relation_meta(relation: Relation) -> dict[str, Any]:
    """A relation's ``tables`` entry: no key of its own (a row is its pair), both fields required references."""
    return {
        "key": None,
        "fields": {relation.parent_field: {"type": "string"}, relation.member_field: {"type": "string"}},
        "required": [relation.parent_field, relation.member_field],
        "foreign_keys": {relation.parent_field: relation.parent, relation.member_field: relation.member},
        "relation": {"parent": relation.parent_field, "member": relation.member_field, "role": relation.role},
    }


def _table_meta(resources: list[Resource], fks: dict[str, dict[str, str]]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    prefixes: set[str] = set()
    for r in resources:
        # a prefix takes the name's letters and digits only, so rows read "adc_00025" for "ad_campaign" (not
        # "ad__00025") and "org_mxedge" beside "org" is "orgm" (not "org_")
        letters = re.sub(r"[^a-z0-9]", "", r.singular.lower()) or "row"
        # the first free prefix of the name's letters, 3 long or longer; past the whole name, a number after it
        # (two tables whose names differ only by separators or case would otherwise never end the search)
        candidates = [letters[:n] for n in range(3, len(letters) + 1)] or [letters]
        prefix = next((p for p in candidates if p not in prefixes), "")
        number = 2
        while not prefix or prefix in prefixes:
            prefix, number = f"{letters}{number}", number + 1
        prefixes.add(prefix)
        meta[r.name] = {
            "key": r.key,
            "prefix": prefix,
            "fields": {f.name: f.schema for f in r.fields},
            "required": [f.name for f in r.fields if f.required],
            "foreign_keys": fks[r.name],
        }
        if r.singleton:
            meta[r.name]["singleton"] = True
    for rel in _relations(resources):
        meta[rel.name] = _relation_meta(rel)
    if any(r.side_effects for r in resources):
        prefix = "out"
        while prefix in prefixes:
            prefix = ("outbox" + "x" * 8)[: len(prefix) + 1]
        meta[outbox_name(set(meta))] = outbox_meta(prefix)
    return meta


def _state_schema(
    tables: dict[str, Any], tools: list[dict[str, Any]], relation_rows: dict[str, Any] | None = None
) -> dict[str, Any]:
    rows = {t["table"]: t["output_schema"] for t in tools if t["kind"] in ("get", "create", "update")}
    rows.update({t["table"]: t["output_schema"]["properties"]["items"]["items"] for t in tools if t["kind"] == "list"})
    rows.update(relation_rows or {})
    return {
        "type": "object",
        "required": ["tables", "meta"],
        "additionalProperties": False,
        "properties": {
            "tables": {
                "type": "object",
                "required": sorted(tables),
                "additionalProperties": False,
                "properties": {name: {"type": "array", "items": rows[name]} for name in tables},
            },
            "meta": {
                "type": "object",
                "required": ["now", "seed", "next_id"],
                "properties": {
                    "now": {"type": "string", "format": "date-time"},
                    "seed": {"type": "integer"},
                    "next_id": {"type": "integer", "minimum": 1},
                },
            },
        },
    }


def _seed_rows(
    tables: dict[str, Any],
    order: list[str],
    seed: int,
    rows_per_table: int,
    boundary: bool,
    data_sources: set[str] | None = None,
    descriptions: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    now = BOUNDARY_NOW if boundary else DEFAULT_NOW
    # Seeded rows are history: every timestamp is drawn at or before the state's clock.
    values = ValueFactory(seed, now=now)
    descriptions = descriptions or {}
    state: dict[str, Any] = {"tables": {t: [] for t in tables}, "meta": {"now": now, "seed": seed, "next_id": 1}}
    for table in order:
        meta = tables[table]
        if meta.get("relation"):
            state["tables"][table] = _seed_pairs(tables, table, state, values, boundary)
            continue
        if meta.get("outbox"):
            continue  # nothing has been sent yet
        for _ in range(1 if meta.get("singleton") else rows_per_table):
            number = state["meta"]["next_id"]
            state["meta"]["next_id"] = number + 1
            row: dict[str, Any] = {meta["key"]: f"{meta['prefix']}_{number:05d}"}
            for field, schema in meta["fields"].items():
                target = meta["foreign_keys"].get(field)
                if target is not None:
                    parents = state["tables"][target]
                    if parents:
                        row[field] = values.rng.choice(parents)[tables[target]["key"]]
                    elif field in meta["required"]:
                        row[field] = None  # filled below once the parent exists
                    continue
                if boundary:
                    if field in meta["required"] or "enum" in schema or schema["type"] != "string":
                        row[field] = boundary_value(field, schema)
                else:
                    row[field] = values.value(field, schema, table, descriptions.get(table, {}).get(field, ""))
                if field in meta.get("unique", ()) and field in row:
                    # a field that names a row (read_file(path)) holds each value once: free text gets a suffix,
                    # a repeated enum value or number leaves the row out
                    held = {r.get(field) for r in state["tables"][table]}
                    free_text = isinstance(row[field], str) and "enum" not in schema
                    while free_text and row[field] in held:
                        row[field] = f"{row[field]}-{number}"
                    if row[field] in held:
                        row[field] = None
            row["created_at"] = now if boundary else values.datetime_str("created_at")
            if any(v is None for v in row.values()):
                continue
            state["tables"][table].append(row)
        # identifiers count up as rows are created, so creation times do too: "my most recent <thing>" (the
        # largest identifier) is then the one a person reading the rows' creation times would pick
        rows = state["tables"][table]
        for row, when in zip(rows, sorted(r["created_at"] for r in rows), strict=True):
            row["created_at"] = when
    if data_sources is not None:
        data_sources.update(values.data_sources)
    return state


def _seed_pairs(
    tables: dict[str, Any], table: str, state: dict[str, Any], values: ValueFactory, boundary: bool
) -> list[dict[str, Any]]:
    """Pairs of the relation ``table`` over the rows ``state`` holds already: members drawn without repeats
    for the first parents (:data:`VALID_MEMBERS_PER_PARENT`; one pair in the ``boundary`` state); a row is never
    paired with itself."""
    meta = tables[table]
    rel = meta["relation"]
    parent_table, member_table = meta["foreign_keys"][rel["parent"]], meta["foreign_keys"][rel["member"]]
    parents = [r[tables[parent_table]["key"]] for r in state["tables"][parent_table]]
    members = [r[tables[member_table]["key"]] for r in state["tables"][member_table]]
    rows = []
    for parent, n in zip(parents, (1,) if boundary else VALID_MEMBERS_PER_PARENT, strict=False):
        pool = [m for m in members if m != parent]
        for member in values.rng.sample(pool, min(n, len(pool))):
            when = state["meta"]["now"] if boundary else values.datetime_str("created_at")
            rows.append({rel["parent"]: parent, rel["member"]: member, "created_at": when})
    return rows


def initial_states(
    tables: dict[str, Any],
    order: list[str],
    seed: int,
    data_sources: set[str] | None = None,
    descriptions: dict[str, dict[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Three initial states: ``valid`` (realistic rows), ``boundary`` (one edge-of-range row per table,
    non-ASCII text, optional fields absent), ``invalid`` (a duplicate key and a wrong type: must be rejected).

    ``data_sources`` receives the provenance of packaged entity data used in the valid state;
    ``descriptions`` (``{table: {field: description}}``, from the spec) tells the value generator what a
    field holds where its name does not. Every seeded date and date-time is at or before the state's
    ``meta.now``.
    """
    valid = _seed_rows(
        tables, order, seed, VALID_ROWS_PER_TABLE, boundary=False, data_sources=data_sources, descriptions=descriptions
    )
    boundary = _seed_rows(tables, order, seed + 1, 1, boundary=True)
    invalid = copy.deepcopy(valid)
    first = order[0]
    rows = invalid["tables"][first]
    if rows:
        rows.append(dict(rows[0]))
        typed = next((f for f, s in tables[first]["fields"].items() if f in rows[0] and s["type"] != "string"), None)
        if typed:
            rows[1] = {**rows[1], typed: "not-a-" + tables[first]["fields"][typed]["type"]}
    else:
        invalid["meta"]["next_id"] = "one"
    return [
        {"name": "valid", "expect": "load", "state": valid},
        {"name": "boundary", "expect": "load", "state": boundary},
        {"name": "invalid", "expect": "reject", "state": invalid},
    ]


def build_environment(
    resource_row: dict[str, Any], spec: dict[str, Any], resource_cap: int | None = MAX_RESOURCES
) -> dict[str, Any]:
    """Build the environment of one accepted OpenAPI source resource (a ``source_resources`` row), with at most
    ``resource_cap`` resources as tables (None: every stateful resource of the document).

    Returns the Environment dict of docs/design.md (``env_id``, ``domain``, ``tools``,
    ``state_schema``, ``source``, ``initial_states``, plus ``tables`` and ``provenance``).

    Raises:
        BuildError: when the document has no usable resource (it was accepted from a different
            version, or the resource extraction changed).
    """
    resources = extract_resources(spec, max_resources=resource_cap)
    if not resources:
        raise BuildError(f"{resource_row['resource_key']}: no stateful resource in {resource_row['path']}")
    return build_from_resources(resource_row, resources)


def build_mcp_environment(
    resource_row: dict[str, Any], tool_list: dict[str, Any], resource_cap: int | None = MAX_RESOURCES
) -> dict[str, Any]:
    """Build the environment of one MCP tool-list source resource (``kind = "mcp_tool_list"``), with at most
    ``resource_cap`` tables (None: every table the tool list maps to).

    The tool list is mapped onto resources by :mod:`envfactory_assets.sources.mcp_resources`; the
    tools it could not map are named in the environment's ``provenance``.

    Raises:
        BuildError: when no table with a read tool and fields can be derived from the tool list.
    """
    from envfactory_assets.envgen.mcp_signatures import real_signature_tools
    from envfactory_assets.sources.mcp_resources import McpMappingError, resources_from_tool_list

    try:
        resources, unmapped = resources_from_tool_list(tool_list, resource_cap)
    except McpMappingError as exc:
        raise BuildError(f"{resource_row['resource_key']}: {exc}") from exc
    sources = {r.name: {f.source_name: f.name for f in r.fields} for r in resources}
    left_out: list[str] = []

    def real_signatures(tools: list[dict[str, Any]], tables: dict[str, Any]) -> list[dict[str, Any]]:
        kept, dropped = real_signature_tools(tools, tables, tool_list, sources)
        left_out.extend(dropped)
        if not any(t["kind"] in ("list", "search", "get", "count") for t in kept):
            raise BuildError(f"{resource_row['resource_key']}: no read tool keeps its real signature: {dropped[:3]}")
        return kept

    env = build_from_resources(resource_row, resources, real_signatures)
    if unmapped:
        env["provenance"] += "; MCP tools without a CRUD mapping: " + "; ".join(unmapped)
    if left_out:
        env["provenance"] += "; MCP tools whose real signature cannot be served: " + "; ".join(left_out)
    return env


def _prepared(resources: list[Resource]) -> tuple[list[Resource], dict[str, dict[str, str]]]:
    resources = [with_transfer_fields(with_action_fields(r)) for r in resources]
    fks = _foreign_keys(resources)
    resources = [_string_keys(r, fks[r.name]) for r in resources]
    return _order_by_dependency(resources, fks), fks


def _referenced_things(fks: dict[str, str]) -> dict[str, str]:
    return {f: t[:-1] if t.endswith("s") else t for f, t in fks.items()}


def _tools(resources: list[Resource], fks: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    by_name = {r.name: r for r in resources}
    for r in resources:
        tools.extend(tools_for_resource(r, _referenced_things(fks[r.name])))
    for rel in _relations(resources):
        member = by_name[rel.member]
        tools.extend(
            tools_for_relation(rel, by_name[rel.parent], row_schema(member, _referenced_things(fks[member.name])))
        )
    outbox = _outbox(resources)
    tools.extend(side_effect_tool(r, op, outbox) for r in resources for op in r.side_effects)
    return describe_tools(name_tools(tools))


def _outbox(resources: list[Resource]) -> str:
    """The outbox table's name in the environment of ``resources`` (the same as :func:`_table_meta` gives it)."""
    return outbox_name({r.name for r in resources} | {rel.name for rel in _relations(resources)})


def _relation_rows(resources: list[Resource]) -> dict[str, Any]:
    """``{relation table: JSON Schema of one pair}`` of the relations of ``resources``, and the outbox's row
    schema when they have side-effect actions."""
    by_name = {r.name: r for r in resources}
    rows = {rel.name: relation_row_schema(rel, by_name[rel.parent]) for rel in _relations(resources)}
    if any(r.side_effects for r in resources):
        rows[_outbox(resources)] = outbox_row_schema()
    return rows


def environment_tools(resources: list[Resource]) -> list[dict[str, Any]]:
    """The tool specs :func:`build_from_resources` gives ``resources``, without building code or states (what a
    corpus-wide measure of the tools needs)."""
    return _tools(*_prepared(resources))


def build_from_resources(
    resource_row: dict[str, Any],
    resources: list[Resource],
    adapt: Callable[[list[dict[str, Any]], dict[str, Any]], list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The environment of ``resources`` (tables with their CRUD, search, count and action operations, or
    singletons, and the relations between two of them) for one source resource row.

    ``adapt(tools, tables)``, when given, returns the tools the environment serves in place of the builder's
    (an MCP server's real signatures); it may mark fields of ``tables`` unique. The state schema stays the
    builder's."""
    env_id = resource_row["resource_key"]
    resources, fks = _prepared(resources)
    tools = _tools(resources, fks)
    tables = _table_meta(resources, fks)
    state_schema = _state_schema(tables, tools, _relation_rows(resources))
    if adapt is not None:
        tools = adapt(tools, tables)
    provenance = (
        f"{resource_row.get('title') or env_id} ({resource_row['path']}, "
        f"sha256 {resource_row['sha256'][:12]}, license {resource_row.get('license_name', '?')})"
    )
    source = generate_source(env_id, provenance, tables, tools)
    seed = stable_seed(env_id, resource_row["sha256"])
    data_sources: set[str] = set()
    descriptions = {r.name: {f.name: f.description for f in r.fields if f.description} for r in resources}
    order = [r.name for r in resources] + [rel.name for rel in _relations(resources)]
    order += [t for t, meta in tables.items() if meta.get("outbox")]
    states = initial_states(tables, order, seed, data_sources, descriptions)
    return {
        "env_id": env_id,
        "domain": resource_row["domain"],
        "tables": tables,
        "tools": tools,
        "state_schema": state_schema,
        "source": source,
        "initial_states": states,
        "provenance": provenance,
        "seed_data": sorted(data_sources) + ["faker (generated values)"],
    }
