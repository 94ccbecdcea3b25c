"""Tool specs (OpenAI function calling, JSON Schema input and output) from extracted resources.

Semantics follow the HTTP operation: GET on a collection -> ``list``, POST -> ``create``,
GET/PATCH|PUT/DELETE on an item -> ``get``/``update``/``delete``; ``search`` (text match with
``limit``/``offset`` paging) and ``count`` read a collection; ``action`` is a state transition on one row
with a precondition (``cancel``); a singleton's tools are ``get``/``update`` without a key. A relation between
two tables (users who are members of groups) has ``relation_add`` and ``relation_remove`` of one pair and
``relation_list`` of a parent row's members (the member rows, paged by ``limit``). The kind says whether a tool
reads or writes, which is what verification and the sampler need to know. A ``transfer`` moves an amount
through one numeric field of its table's rows (the *balance*: :mod:`envfactory_assets.sources.transfers`): from
one row to another (``transfer``: both rows change or neither), out of a row (``withdraw``) or into it
(``deposit``); a call that would take the field below its ``minimum`` (or above its ``maximum``) fails with
``precondition_failed`` and changes nothing, and an amount that is not greater than 0 is bad arguments. A
``side_effect`` (``send``, ``sync``: :mod:`envfactory_assets.sources.side_effects`) leaves its row as it is and
records one row in the environment's outbox table (:func:`outbox_meta`): the verb, the target and the arguments.
A ``computed_read`` derives figures from the rows: over a collection (``GET /orders/total``) the number of rows and
the sum of each numeric field (``total_<field>``), of an item (``GET /accounts/{id}/balance``) its numeric fields.

An update, delete or action whose description states when it applies (Stripe: "A PaymentIntent object can be
canceled when it is in one of these statuses: ...") carries that as ``precondition``: ``{"field", "refused",
"stated"}``, the values of one field of the row that refuse the call
(:mod:`envfactory_assets.sources.preconditions`); the call then fails with ``precondition_failed`` like an
action on a row already in its target state.
"""

from __future__ import annotations

import dataclasses
import itertools
import keyword
from typing import Any

from envfactory_assets.envgen.tool_names import tool_names
from envfactory_assets.runtime.code_policy import FORBIDDEN_BUILTINS, REFLECTIVE_BUILTINS
from envfactory_assets.sources.actions import VERBS, ActionTarget, action_target
from envfactory_assets.sources.names import plural, singular
from envfactory_assets.sources.openapi import FieldSpec, Operation, Relation, Resource
from envfactory_assets.sources.side_effects import OUTBOX_FIELDS
from envfactory_assets.sources.transfers import balance_field

LIST_LIMIT_MAX = 100
LIST_LIMIT_DEFAULT = 20
MAX_LIST_FILTERS = 3
KIND_ORDER = ("list", "search", "count", "get", "create", "update", "delete")
#: the kinds of a relation's tools, in the order they are built
RELATION_KINDS = ("relation_list", "relation_add", "relation_remove")
#: kinds beyond CRUD: actions, searches, counts, relations, transfers, side effects and computed reads (the
#: selection ranks documents by them; the report gives their share of the tools)
BEYOND_CRUD = (
    "action",
    "search",
    "count",
    "relation_add",
    "relation_remove",
    "relation_list",
    "transfer",
    "side_effect",
    "computed_read",
)
#: kinds that never change the state
READ_KINDS = frozenset({"list", "search", "count", "get", "relation_list", "computed_read"})
#: kinds whose tool names one row by its identifier (a singleton's get and update name none)
KEYED_KINDS = frozenset({"get", "update", "delete", "action", "transfer", "side_effect"})


def tool_spec(
    kind: str,
    table: str,
    op: Operation,
    default: str,
    input_schema: dict[str, Any],
    output_schema: dict[str, Any],
    **part: Any,
) -> dict[str, Any]:
    """A tool's spec as the builder writes it, still unnamed (:func:`name_tools` names it): of ``kind`` on
    ``table``, described by the operation's summary, else by ``default`` (300 characters at most), read-only when
    its kind is one of :data:`READ_KINDS`, and ending in its kind's own ``part`` (``transfer=``, ``relation=``...)."""
    return {
        "name": "",
        "description": (op.summary or default)[:300],
        "kind": kind,
        "table": table,
        "read_only": kind in READ_KINDS,
        "input_schema": input_schema,
        "output_schema": output_schema,
        "operation": {"method": op.method.upper(), "path": op.path, "operation_id": op.operation_id},
        **part,
    }


def _limit_prop(things: str) -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": 1,
        "maximum": LIST_LIMIT_MAX,
        "description": f"Maximum number of {things} to return (default {LIST_LIMIT_DEFAULT}).",
    }


def _page(row: dict[str, Any], total: str) -> dict[str, Any]:
    """The output schema of a read of many rows: ``items`` of ``row``, and their ``total`` (described so)."""
    return {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": row},
            "total": {"type": "integer", "minimum": 0, "description": total},
        },
        "required": ["items", "total"],
        "additionalProperties": False,
    }


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
    props["created_at"] = {
        "type": "string",
        "format": "date-time",
        "description": f"When the {resource.singular} was created.",
    }
    required = [resource.key] + [f.name for f in resource.fields if f.required] + ["created_at"]
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def _field_props(resource: Resource, row: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {n: row["properties"][n] for n in names}


def action_targets(resource: Resource) -> dict[str, ActionTarget]:
    """The field each action of ``resource`` writes, by verb
    (:func:`~envfactory_assets.sources.actions.action_target`)."""
    fields = {f.name: f.schema for f in resource.fields}
    targets: dict[str, ActionTarget] = {}
    for op in resource.actions:
        target = action_target(op.verb or "", fields)
        if target.synthesized:
            fields[target.field] = {"type": "boolean"}
        targets[op.verb or ""] = target
    return targets


def with_action_fields(resource: Resource) -> Resource:
    """``resource`` with the boolean flag fields its actions write and its schema lacks (``archived`` for an
    ``archive`` action): the state an action changes must be a column of the row."""
    present = {f.name for f in resource.fields}
    added = []
    for verb, target in action_targets(resource).items():
        if target.synthesized and target.field not in present:
            present.add(target.field)
            added.append(
                FieldSpec(
                    target.field,
                    target.field,
                    {"type": "boolean"},
                    f"Whether the {resource.singular.replace('_', ' ')} is {VERBS[verb].flag}.",
                    False,
                )
            )
    return dataclasses.replace(resource, fields=[*resource.fields, *added]) if added else resource


def with_transfer_fields(resource: Resource) -> Resource:
    """``resource`` with the balance field its transfers move an amount through
    (:func:`~envfactory_assets.sources.transfers.balance_field`): added where its schema lacks one, given
    ``minimum`` 0 where it states no minimum; unchanged when it has no transfer."""
    if not resource.transfers:
        return resource
    name, schema, synthesized = balance_field({f.name: f.schema for f in resource.fields})
    if synthesized:
        thing = resource.singular.replace("_", " ")
        added = FieldSpec(name, name, schema, f"The balance of the {thing}: amounts moved in and out of it.", False)
        return dataclasses.replace(resource, fields=[*resource.fields, added])
    fields = [dataclasses.replace(f, schema=schema) if f.name == name else f for f in resource.fields]
    return dataclasses.replace(resource, fields=fields)


def _parameter(name: str | None, taken: set[str], fallback: str) -> str:
    """``name`` as a tool parameter when it is a usable identifier not in ``taken``, else ``fallback``."""
    ok = (
        bool(name)
        and name.isidentifier()
        and not keyword.iskeyword(name)
        and name not in taken | FORBIDDEN_BUILTINS | REFLECTIVE_BUILTINS | {"state"}
    )
    return name if ok and name else fallback


def transfer_tool(resource: Resource, op: Operation, row: dict[str, Any]) -> dict[str, Any]:
    """The ToolSpec (unnamed: :func:`name_tools`) of the transfer ``op`` of ``resource`` (which holds its balance
    field already: :func:`with_transfer_fields`); ``row`` is the JSON Schema of one row. Its ``transfer`` holds
    what its code and the gate need: ``verb`` (``transfer``, ``withdraw``, ``deposit``), the balance ``field``, the
    ``amount`` and ``destination`` parameters (None for a withdrawal or deposit) and ``thing``."""
    shape = op.transfer
    if shape is None:
        raise ValueError(f"operation {op.method} {op.path} is no transfer")
    fields = {f.name: f.schema for f in resource.fields}
    field_name, schema, _ = balance_field(fields)
    thing = resource.singular.replace("_", " ")
    key_prop = {"type": "string", "description": f"Identifier of the {thing} the amount moves from."}
    amount = _parameter(shape.amount, {resource.key}, "amount")
    amount_prop: dict[str, Any] = {"type": schema["type"]}
    if schema["type"] == "integer":
        amount_prop["minimum"] = 1
    else:
        amount_prop["exclusiveMinimum"] = 0
    said = field_name.replace("_", " ")
    props: dict[str, Any] = {resource.key: key_prop}
    destination = None
    if shape.verb == "transfer":
        destination = _parameter(shape.destination, {resource.key, amount}, f"to_{resource.key}")
        props[destination] = {"type": "string", "description": f"Identifier of the {thing} the amount moves to."}
        amount_prop["description"] = f"How much {said} to move (greater than 0)."
        out: dict[str, Any] = {
            "type": "object",
            "properties": {
                "source": {**row, "description": f"The {thing} the amount left."},
                "destination": {**row, "description": f"The {thing} the amount reached."},
                "amount": {**amount_prop, "description": "The amount moved."},
            },
            "required": ["source", "destination", "amount"],
            "additionalProperties": False,
        }
        default = f"Move {said} from one {thing} to another."
    else:
        key_prop["description"] = f"Identifier of the {thing}."
        direction = "out of" if shape.verb == "withdraw" else "into"
        amount_prop["description"] = f"How much {said} to move {direction} the {thing} (greater than 0)."
        out = row
        default = f"{shape.verb.capitalize()} {said} {'from' if shape.verb == 'withdraw' else 'to'} a {thing}."
    props[amount] = amount_prop
    inp = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    shaped = {"verb": shape.verb, "field": field_name, "amount": amount, "destination": destination, "thing": thing}
    return tool_spec("transfer", resource.name, op, default, inp, out, transfer=shaped)


#: the outbox table's name, unless a resource of the environment has it
OUTBOX_NAMES = ("outbox", "outbox_records", "call_outbox")


def outbox_name(taken: set[str]) -> str:
    """The name of the outbox table of an environment whose other tables are ``taken``: the first of
    :data:`OUTBOX_NAMES` free, else ``outbox_2``, ``outbox_3``... (a document may hold all of them)."""
    names = itertools.chain(OUTBOX_NAMES, (f"outbox_{i}" for i in itertools.count(2)))
    return next(n for n in names if n not in taken)


def outbox_meta(prefix: str) -> dict[str, Any]:
    """The ``tables`` entry of an outbox table whose ids start with ``prefix``: a key ``outbox_id`` and the
    string fields of :data:`~envfactory_assets.sources.side_effects.OUTBOX_FIELDS`, all required."""
    return {
        "key": "outbox_id",
        "prefix": prefix,
        "fields": {f: {"type": "string"} for f in OUTBOX_FIELDS},
        "required": list(OUTBOX_FIELDS),
        "foreign_keys": {},
        "outbox": True,
    }


def outbox_row_schema() -> dict[str, Any]:
    """JSON Schema of one outbox row, as a side-effect tool returns it."""
    words = {
        "verb": "What was done (the verb of the call: send, sync...).",
        "target_table": "The table of the row the call was for.",
        "target_id": "Identifier of the row the call was for.",
        "arguments": "The call's other arguments, as the sorted (name, value) pairs given.",
    }
    props: dict[str, Any] = {"outbox_id": {"type": "string", "description": "Identifier of the record."}}
    props.update({f: {"type": "string", "description": words[f]} for f in OUTBOX_FIELDS})
    props["created_at"] = {"type": "string", "format": "date-time", "description": "When the call was made."}
    return {
        "type": "object",
        "properties": props,
        "required": ["outbox_id", *OUTBOX_FIELDS, "created_at"],
        "additionalProperties": False,
    }


#: JSON Schema keywords of a side-effect argument that its code checks
_ARGUMENT_KEYWORDS = ("type", "format", "enum", "minimum", "maximum", "maxLength")


def side_effect_tool(resource: Resource, op: Operation, outbox: str) -> dict[str, Any]:
    """The ToolSpec (unnamed: :func:`name_tools`) of the side-effect action ``op`` of ``resource``, recording in
    the table ``outbox``. Its ``side_effect`` holds ``verb``, ``outbox``, ``thing`` and ``arguments`` (``{name:
    JSON schema}`` of the arguments beside the row's key, which the record holds)."""
    thing = resource.singular.replace("_", " ")
    props: dict[str, Any] = {
        resource.key: {"type": "string", "description": f"Identifier of the {thing} to {op.verb}."}
    }
    arguments: dict[str, Any] = {}
    required = [resource.key]
    for f in op.arguments:
        name = _parameter(f.name, set(props), "")
        if not name:
            continue
        arguments[name] = {k: f.schema[k] for k in _ARGUMENT_KEYWORDS if k in f.schema}
        props[name] = {**arguments[name], "description": f.description or f.name.replace("_", " ")}
        if f.required:
            required.append(name)
    return tool_spec(
        "side_effect",
        resource.name,
        op,
        f"{(op.verb or '').capitalize()} a {thing}.",
        {"type": "object", "properties": props, "required": required, "additionalProperties": False},
        outbox_row_schema(),
        side_effect={"verb": op.verb, "outbox": outbox, "thing": thing, "arguments": arguments},
    )


def figure_fields(resource: Resource) -> list[str]:
    """The fields a computed read of ``resource`` sums or reports: its integer and number fields that are no
    enum."""
    return [f.name for f in resource.fields if f.schema.get("type") in ("integer", "number") and "enum" not in f.schema]


def computed_read_tool(resource: Resource, op: Operation, row: dict[str, Any]) -> dict[str, Any]:
    """The ToolSpec (unnamed: :func:`name_tools`) of the computed read ``op`` of ``resource`` (``row``: the JSON
    Schema of one row). Its ``computed`` holds ``scope`` (``collection`` or ``item``), ``fields`` (the numeric fields
    it sums or reports) and ``word`` (the path's last word: ``total``, ``balance``)."""
    thing, things = resource.singular.replace("_", " "), resource.name.replace("_", " ")
    fields = figure_fields(resource)
    segments = [s for s in op.path.split("/") if s]
    item = len(segments) >= 2 and segments[-2].startswith("{")
    if item:
        key_prop = {"type": "string", "description": f"Identifier of the {thing}."}
        inp = {"properties": {resource.key: key_prop}, "required": [resource.key]}
        props = {resource.key: key_prop, **{f: row["properties"][f] for f in fields}}
        out = {"type": "object", "properties": props, "required": [resource.key], "additionalProperties": False}
        default = f"Get the figures of a {thing}."
    else:
        scope = [resource.parent_key] if resource.parent_key else []
        inp = {"properties": {s: row["properties"][s] for s in scope}, "required": scope}
        props = {"count": {"type": "integer", "minimum": 0, "description": f"Number of {things}."}}
        for f in fields:
            said = f.replace("_", " ")
            props[f"total_{f}"] = {"type": row["properties"][f]["type"], "description": f"Sum of {said}."}
        out = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
        default = f"Get the totals of the {things}."
    computed = {"scope": "item" if item else "collection", "fields": fields, "word": op.verb or "total"}
    inp_schema = {"type": "object", **inp, "additionalProperties": False}
    return tool_spec("computed_read", resource.name, op, default, inp_schema, out, computed=computed)


def tools_for_resource(resource: Resource, foreign_keys: dict[str, str]) -> list[dict[str, Any]]:
    """ToolSpecs (see docs/design.md) for every operation of ``resource``: the kinds of :data:`KIND_ORDER`,
    then one ``action`` tool per verb, named by :func:`~envfactory_assets.envgen.tool_names.tool_names` among
    themselves (an environment of several resources names all its tools together: :func:`name_tools`).

    ``foreign_keys`` maps field names to the singular of the table they reference (within the
    environment). ``resource`` must already hold its action fields (:func:`with_action_fields`).
    """
    row = row_schema(resource, foreign_keys)
    # what a caller gives: a server-set field is kept in the row and its reads, never in a create or update
    field_names = [f.name for f in resource.fields if not f.read_only]
    required_fields = [f.name for f in resource.fields if f.required]
    key_prop = {"type": "string", "description": f"Identifier of the {resource.singular}."}
    thing, things = resource.singular.replace("_", " "), resource.name.replace("_", " ")
    filters = [
        f.name
        for f in resource.fields
        if f.name == resource.parent_key or "enum" in f.schema or f.schema.get("type") == "boolean"
    ]
    filters = filters[:MAX_LIST_FILTERS]
    scope = [resource.parent_key] if resource.parent_key else []
    limit_prop = _limit_prop(things)
    page = _page(row, f"Number of matching {things}.")
    tools: list[dict[str, Any]] = []

    def add(
        kind: str, op: Operation, inp: dict[str, Any], out: dict[str, Any], default_desc: str, **extra: Any
    ) -> None:
        tools.append(tool_spec(kind, resource.name, op, default_desc, inp, out, **extra))

    ops = resource.operations
    fields = {f.name: f.schema for f in resource.fields}
    targets = action_targets(resource)
    for kind in KIND_ORDER:
        if kind not in ops:
            continue
        op = ops[kind]
        stated = precondition_spec(op, fields)
        if kind == "list":
            props = {"limit": limit_prop, **_field_props(resource, row, filters)}
            inp = {"type": "object", "properties": props, "required": scope, "additionalProperties": False}
            add(kind, op, inp, page, f"List {things}, optionally filtered.")
        elif kind == "search":
            props = {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 200,
                    "description": f"Text to look for in the {things}' text fields (case-insensitive).",
                },
                **_field_props(resource, row, scope),
                "limit": limit_prop,
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Number of matching rows to skip (default 0).",
                },
            }
            inp = {"type": "object", "properties": props, "required": ["query", *scope], "additionalProperties": False}
            add(kind, op, inp, page, f"Search {things} by text.")
        elif kind == "count":
            inp = {
                "type": "object",
                "properties": _field_props(resource, row, filters),
                "required": scope,
                "additionalProperties": False,
            }
            out = {
                "type": "object",
                "properties": {
                    "count": {"type": "integer", "minimum": 0, "description": f"Number of matching {things}."}
                },
                "required": ["count"],
                "additionalProperties": False,
            }
            add(kind, op, inp, out, f"Count {things}, optionally filtered.")
        elif kind == "get":
            if resource.singleton:
                inp = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
                add(kind, op, inp, row, f"Get the {thing}.", singleton=True)
            else:
                inp = {
                    "type": "object",
                    "properties": {resource.key: key_prop},
                    "required": [resource.key],
                    "additionalProperties": False,
                }
                add(kind, op, inp, row, f"Get one {thing} by its identifier.")
        elif kind == "create":
            inp = {
                "type": "object",
                "properties": _field_props(resource, row, field_names),
                "required": required_fields,
                "additionalProperties": False,
            }
            add(kind, op, inp, row, f"Create a {thing}.")
        elif kind == "update":
            editable = [n for n in field_names if n != resource.parent_key]
            if resource.singleton:
                inp = {
                    "type": "object",
                    "properties": _field_props(resource, row, editable),
                    "required": [],
                    "additionalProperties": False,
                }
                add(kind, op, inp, row, f"Update the {thing}.", singleton=True)
            else:
                props = {resource.key: key_prop, **_field_props(resource, row, editable)}
                inp = {"type": "object", "properties": props, "required": [resource.key], "additionalProperties": False}
                add(kind, op, inp, row, f"Update fields of a {thing}.", **stated)
        else:
            inp = {
                "type": "object",
                "properties": {resource.key: key_prop},
                "required": [resource.key],
                "additionalProperties": False,
            }
            out = {
                "type": "object",
                "properties": {
                    resource.key: key_prop,
                    "deleted": {"type": "boolean", "description": f"Whether the {thing} was deleted."},
                },
                "required": [resource.key, "deleted"],
                "additionalProperties": False,
            }
            add(kind, op, inp, out, f"Delete a {thing}.", **stated)
    for op in resource.actions:
        target = targets[op.verb or ""]
        stated = precondition_spec(op, fields, target)
        inp = {
            "type": "object",
            "properties": {resource.key: key_prop},
            "required": [resource.key],
            "additionalProperties": False,
        }
        add(
            "action",
            op,
            inp,
            row,
            f"{(op.verb or '').capitalize()} a {thing}.",
            action={
                "verb": target.verb,
                "field": target.field,
                "value": target.value,
                "blocked": list(target.blocked),
                "stamp": target.stamp,
                "state": VERBS[target.verb].state_word,
                "thing": thing,
            },
            **stated,
        )
    tools += [transfer_tool(resource, op, row) for op in resource.transfers]
    tools += [computed_read_tool(resource, op, row) for op in resource.computed]
    return name_tools(tools)


def relation_row_schema(relation: Relation, parent_resource: Resource) -> dict[str, Any]:
    """JSON Schema of one stored pair of ``relation`` (whose parent is ``parent_resource``), as ``relation_add``
    returns it."""
    parent, member = parent_resource.singular.replace("_", " "), singular(relation.member).replace("_", " ")
    return {
        "type": "object",
        "properties": {
            relation.parent_field: {"type": "string", "description": f"Identifier of the {parent}."},
            relation.member_field: {"type": "string", "description": f"Identifier of the {member}."},
            "created_at": {
                "type": "string",
                "format": "date-time",
                "description": f"When the {member} became a {relation.role.replace('_', ' ')} of the {parent}.",
            },
        },
        "required": [relation.parent_field, relation.member_field, "created_at"],
        "additionalProperties": False,
    }


def tools_for_relation(relation: Relation, parent: Resource, member_row: dict[str, Any]) -> list[dict[str, Any]]:
    """ToolSpecs of ``relation``'s operations, in :data:`RELATION_KINDS` order (unnamed: :func:`name_tools`).

    ``parent`` is the resource whose rows hold the members; ``member_row`` the JSON Schema of one member row
    (:func:`row_schema` of the member resource), which ``relation_list`` returns. Each tool's ``relation``
    holds what its code and the gate need: the two tables (``parent``, ``member``) and fields (``parent_field``,
    ``member_field``), ``idempotent`` (an add of a pair that is there already succeeds and changes nothing; else
    it fails with ``precondition_failed``) and words (``parent_thing``, ``member_thing``, ``role``).
    """
    parent_thing = parent.singular.replace("_", " ")
    member_thing = singular(relation.member).replace("_", " ")
    role = relation.role.replace("_", " ")
    roles = plural(relation.role).replace("_", " ")
    parent_prop = {"type": "string", "description": f"Identifier of the {parent_thing}."}
    info = {
        "parent": relation.parent,
        "member": relation.member,
        "parent_field": relation.parent_field,
        "member_field": relation.member_field,
        "idempotent": relation.idempotent_add,
        "parent_thing": parent_thing,
        "member_thing": member_thing,
        "role": role,
    }
    pair_out = relation_row_schema(relation, parent)
    tools: list[dict[str, Any]] = []
    for kind in RELATION_KINDS:
        op = relation.operations.get(kind)
        if op is None:
            continue
        if kind == "relation_list":
            props: dict[str, Any] = {relation.parent_field: parent_prop, "limit": _limit_prop(roles)}
            out = _page(member_row, f"Number of {roles} of the {parent_thing}.")
            default = f"List the {roles} of a {parent_thing}."
        else:
            adding = kind == "relation_add"
            doing = f"to add as a {role}" if adding else f"to remove from the {parent_thing}'s {roles}"
            props = {
                relation.parent_field: parent_prop,
                relation.member_field: {"type": "string", "description": f"Identifier of the {member_thing} {doing}."},
            }
            if adding:
                out = pair_out
                default = f"Add a {member_thing} to a {parent_thing} as a {role}."
            else:
                out = {
                    "type": "object",
                    "properties": {
                        relation.parent_field: parent_prop,
                        relation.member_field: props[relation.member_field],
                        "removed": {
                            "type": "boolean",
                            "description": f"Whether the {member_thing} was removed from the {parent_thing}.",
                        },
                    },
                    "required": [relation.parent_field, relation.member_field, "removed"],
                    "additionalProperties": False,
                }
                default = f"Remove a {role} from a {parent_thing}."
        required = [relation.parent_field] + ([relation.member_field] if kind != "relation_list" else [])
        inp = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
        tools.append(tool_spec(kind, relation.name, op, default, inp, out, relation=info))
    return tools


def precondition_spec(
    op: Operation, fields: dict[str, dict[str, Any]], target: ActionTarget | None = None
) -> dict[str, Any]:
    """``{"precondition": {...}}`` for the ToolSpec of ``op`` when its spec states one on a field of the row
    (``fields``: ``{name: JSON schema}``), else ``{}``. An action's (``target``) is dropped when no value of the
    field would let the action run: a reading that refuses every row is a misreading."""
    pre = op.precondition
    if pre is None or pre.field not in fields:
        return {}
    spec = pre.as_dict()
    if target is not None:
        action = {"field": target.field, "value": target.value, "blocked": list(target.blocked)}
        values = fields[pre.field].get("enum") or [True, False]
        if not any(tool_applies({"action": action, "precondition": spec}, fields, {pre.field: v}) for v in values):
            return {}
    return {"precondition": spec}


def name_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` (one environment's ToolSpecs) with readable names unique among them, set in place
    (:func:`~envfactory_assets.envgen.tool_names.tool_names`).

    Raises:
        ToolNameError: two tools nothing in their operations tells apart.
    """
    for tool, name in zip(tools, tool_names(tools), strict=True):
        tool["name"] = name
    return tools


def action_reads(action: dict[str, Any], fields: dict[str, Any], row: dict[str, Any]) -> Any:
    """The value of the field ``action`` (a ToolSpec's ``action``) writes, as the action reads it on ``row`` of a
    table with ``fields`` (``{name: JSON schema}``): an absent boolean flag holds its schema's ``default``, else
    is off (``False``), so unarchiving a row that was never archived is refused like unarchiving an unarchived
    one, and enabling a row whose flag defaults to true is refused like enabling an enabled one."""
    value = row.get(action["field"])
    schema = fields.get(action["field"], {})
    if value is None and schema.get("type") == "boolean":
        return schema.get("default", False)
    return value


def action_applies(action: dict[str, Any], fields: dict[str, Any], row: dict[str, Any]) -> bool:
    """Whether ``action`` may run on ``row``: the row is neither in its target state nor in a refused one."""
    current = action_reads(action, fields, row)
    return current != action["value"] and current not in action["blocked"]


def precondition_reads(precondition: dict[str, Any], fields: dict[str, Any], row: dict[str, Any]) -> Any:
    """The value of a stated precondition's field on ``row``, read as an action reads its flag
    (:func:`action_reads`: an absent boolean holds its default, else off)."""
    return action_reads(precondition, fields, row)


def tool_applies(tool: dict[str, Any], fields: dict[str, Any], row: dict[str, Any]) -> bool:
    """Whether ``tool`` (a ToolSpec, or any dict with its ``action`` and ``precondition``) may run on ``row`` of a
    table with ``fields``: an action's own precondition (:func:`action_applies`) and the stated one, whose field
    must not hold a refused value (an enum field the row leaves out refuses nothing)."""
    if "action" in tool and not action_applies(tool["action"], fields, row):
        return False
    stated = tool.get("precondition")
    return stated is None or precondition_reads(stated, fields, row) not in stated["refused"]


def openai_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI function-calling form of a ToolSpec."""
    return {
        "type": "function",
        "function": {"name": spec["name"], "description": spec["description"], "parameters": spec["input_schema"]},
    }
