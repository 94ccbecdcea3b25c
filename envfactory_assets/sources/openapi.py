"""Reading OpenAPI 3 documents and finding the stateful resources they describe.

A *resource* is a collection path (``/companies``) with read operations (GET on the collection or on
``/companies/{id}``), usually create (POST), and an object schema with scalar fields, or a *singleton*
(``GET/PUT /settings``, ``/me``): one object read and updated in place. A collection without create is
*read-only* (a catalogue, rows made outside the API): its table is seeded and read, updated or acted on; its list's
rows may sit in an envelope (:func:`listed_rows`), and an item path without a collection path is placed by
:func:`_place_lone_items` (a read-only table of its own, or the collection its operation ids or its word name).
Resources are what the programmatic builder turns into tables and tools. Besides CRUD a resource keeps the
operations the rules can implement over its rows: actions on an item (``POST /orders/{id}/cancel``, see
:mod:`envfactory_assets.sources.actions`), a search (``GET /orders/search?q=``) and a count
(``GET /orders/count``), transfers of an amount between its rows (``POST /accounts/{id}/transfers``, see
:mod:`envfactory_assets.sources.transfers`) and side-effect actions that leave a record (``POST
/messages/{id}/send``, see :mod:`envfactory_assets.sources.side_effects`). Collections nested at any depth
(``/users/{id}/repos/{id}/issues``) belong to their nearest parent. A sub-collection of another resource's rows
(``/groups/{group_id}/members/{user_id}``) is a *relation* between two resources, kept on its parent (see
:mod:`envfactory_assets.sources.relations`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from envfactory_assets.runtime.code_policy import FORBIDDEN_BUILTINS, REFLECTIVE_BUILTINS
from envfactory_assets.sources.actions import action_verb, split_action_path
from envfactory_assets.sources.names import (
    is_sentence,
    plural,
    singular,
    snake_case,
    speakable,
    to_identifier,
    unique_name,
)
from envfactory_assets.sources.preconditions import MAX_TEXT_CHARS, StatedPrecondition, stated_precondition
from envfactory_assets.sources.rpc_paths import rpc_operation_name
from envfactory_assets.sources.side_effects import side_effect_verb
from envfactory_assets.sources.transfers import TransferShape, transfer_shape, transfer_verb

SCALAR_TYPES = ("string", "integer", "number", "boolean")
MAX_FIELDS = 8
KNOWN_FORMATS = ("date", "date-time", "email", "uri", "uuid")
# Shortest value of each format the value generator writes (a shorter maxLength drops the format).
MIN_FORMAT_LENGTH = {"date": 10, "date-time": 20, "email": 24, "uri": 24, "uuid": 36}
# Bounds beyond int64 are dropped: they mean "unbounded" and break 64-bit stores.
MAX_ABS_BOUND = 2**53
MAX_REF_DEPTH = 12
#: collections nested deeper than this many path parameters are not used
MAX_NESTING = 3
#: last path segments of a collection's search and count reads
SEARCH_SEGMENTS = ("search", "find", "query")
COUNT_SEGMENTS = ("count",)
#: last path segments of a computed read: of a collection, figures over its rows (``GET /orders/total``); of an
#: item, the row's own figures (``GET /accounts/{id}/balance``)
COMPUTED_SEGMENTS = ("total", "totals", "summary", "stats", "statistics", "aggregate", "aggregates", "balance")
#: last path segments that name one object of the caller's account (read and updated in place)
SINGLETON_SEGMENTS = (
    "settings",
    "setting",
    "me",
    "account",
    "profile",
    "config",
    "configuration",
    "preferences",
    "user",
    "organization",
    "org",
    "company",
    "workspace",
    "billing",
    "subscription",
    "status",
    "info",
    "limits",
    "quota",
    "options",
)
_PARAM_SEGMENT = re.compile(r"^\{[^}]+\}$")
HTTP_METHODS = ("get", "put", "post", "delete", "patch")
_WRAPPER_KEYS = ("data", "result", "results", "items", "item", "records", "record", "resource")


class SpecError(ValueError):
    """An OpenAPI document that cannot be used, with the reason in the message."""


@dataclass(frozen=True)
class FieldSpec:
    """One scalar column of a resource table.

    ``schema`` is a JSON Schema fragment (type, and where the spec gives them format, enum,
    minimum/maximum, maxLength); ``source_name`` is the property name in the spec. ``read_only``: the server
    sets the field (:func:`output_only`), so rows hold it but no create or update takes it.
    """

    name: str
    source_name: str
    schema: dict[str, Any]
    description: str
    required: bool
    read_only: bool = False


@dataclass
class Operation:
    """One HTTP operation of a resource, classified as list/get/create/update/delete/search/count, or
    ``action`` with its ``verb`` (``"cancel"``), or ``transfer`` with its ``transfer`` shape (what its request
    names), or ``side_effect`` with its ``verb`` and the scalar ``arguments`` its request body takes, or one of
    a :class:`Relation`'s ``relation_list``, ``relation_add`` and ``relation_remove``.

    ``text``: the operation's summary and description as the spec writes them (for the rules that read prose);
    ``precondition``: what they state about the rows an update, delete or action applies to
    (:func:`~envfactory_assets.sources.preconditions.stated_precondition`), else None."""

    kind: str
    method: str
    path: str
    operation_id: str | None
    summary: str
    verb: str | None = None
    text: str = field(default="", repr=False)
    precondition: StatedPrecondition | None = None
    transfer: TransferShape | None = None
    arguments: tuple[FieldSpec, ...] = ()


@dataclass
class Relation:
    """Pairs of rows of two resources of one document: ``parent`` rows hold ``member`` rows
    (``/groups/{group_id}/members/{user_id}``: users are members of groups), with no fields of their own.

    ``name`` is its table (``group_members``); rows are ``{parent_field, member_field, created_at}``, one per
    pair. ``operations`` holds up to one ``relation_add`` (PUT or POST on the member item path),
    ``relation_remove`` (DELETE on it) and ``relation_list`` (GET on the sub-collection: the member rows);
    ``idempotent_add`` is True when the add is a PUT (adding a pair again changes nothing and succeeds).
    ``role`` is the sub-collection's word for a member (``member``, ``watcher``).
    """

    name: str
    parent: str
    member: str
    parent_field: str
    member_field: str
    path: str
    role: str
    operations: dict[str, Operation] = field(default_factory=dict)
    idempotent_add: bool = False


@dataclass
class Resource:
    """A stateful resource: a table with a key field, scalar fields and CRUD operations.

    ``parent`` is the singular name of the enclosing resource for nested paths
    (``/companies/{company_id}/contacts``); its key becomes a required foreign-key field.
    """

    name: str
    key: str
    collection_path: str
    fields: list[FieldSpec]
    operations: dict[str, Operation] = field(default_factory=dict)
    parent_key: str | None = None
    #: action operations on an item, one per verb, in path order
    actions: list[Operation] = field(default_factory=list)
    #: True for one object of the caller's account (``/settings``): its table holds exactly one row
    singleton: bool = False
    #: True for a collection without create: its rows come from the seeded state only
    read_only: bool = False
    #: relations whose parent this resource is (:class:`Relation`), in path order
    relations: list[Relation] = field(default_factory=list)
    #: transfer operations of an amount between or out of its rows, one per verb, in path order
    transfers: list[Operation] = field(default_factory=list)
    #: side-effect actions (``send``, ``sync``...) on an item, one per verb, in path order
    side_effects: list[Operation] = field(default_factory=list)
    #: computed reads: at most one over the collection's rows (``GET /orders/total``) and one of an item's figures
    #: (``GET /accounts/{id}/balance``), their ``verb`` the path's last word
    computed: list[Operation] = field(default_factory=list)

    @property
    def singular(self) -> str:
        return singular(self.name)

    @property
    def is_stateful(self) -> bool:
        """True when the resource's rows can be read from the state (the selection rule): a collection with
        a list or get (and, unless read-only, create), or a singleton with a get; and scalar fields."""
        ops = self.operations
        if self.singleton:
            return "get" in ops and bool(self.fields)
        readable = "list" in ops or "get" in ops
        return (self.read_only or "create" in ops) and readable and bool(self.fields)

    @property
    def n_operations(self) -> int:
        """The operations of the document this resource implements."""
        return (
            len(self.operations) + len(self.actions) + len(self.transfers) + len(self.side_effects) + len(self.computed)
        )


def resolve_ref(spec: dict[str, Any], ref: str) -> Any:
    """Return the object a local JSON pointer (``#/components/schemas/Pet``) points to.

    Raises:
        SpecError: for remote references or pointers that do not resolve.
    """
    if not isinstance(ref, str) or not ref.startswith("#/"):
        raise SpecError(f"unsupported $ref {ref!r} (only local references are resolved)")
    node: Any = spec
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise SpecError(f"$ref {ref!r} does not resolve")
    return node


def deref(spec: dict[str, Any], node: Any, depth: int = 0) -> Any:
    """Follow ``$ref`` chains at the top of ``node`` (not recursively into children)."""
    while isinstance(node, dict) and "$ref" in node:
        if depth > MAX_REF_DEPTH:
            raise SpecError("reference chain too deep (cycle?)")
        node = resolve_ref(spec, node["$ref"])
        depth += 1
    return node


def object_schema(spec: dict[str, Any], schema: Any, depth: int = 0) -> dict[str, Any] | None:
    """Flatten ``schema`` into ``{"properties": {...}, "required": [...]}`` or None if not an object.

    Merges ``allOf`` members, takes the first object of ``oneOf``/``anyOf``, and unwraps envelope
    objects such as ``{"data": {...}}`` or ``{"data": [...]}`` whose one interesting property holds
    the resource.
    """
    if depth > MAX_REF_DEPTH:
        return None
    schema = deref(spec, schema)
    if not isinstance(schema, dict):
        return None
    if schema.get("type") == "array" or "items" in schema and "properties" not in schema:
        return object_schema(spec, schema.get("items"), depth + 1)
    properties: dict[str, Any] = {}
    required: list[str] = []
    all_of = schema.get("allOf")
    for member in all_of if isinstance(all_of, list) else []:
        sub = object_schema(spec, member, depth + 1)
        if sub:
            properties.update(sub["properties"])
            required.extend(sub["required"])
    for alt_key in ("oneOf", "anyOf"):
        if not properties and isinstance(schema.get(alt_key), list):
            for member in schema[alt_key]:
                sub = object_schema(spec, member, depth + 1)
                if sub:
                    properties.update(sub["properties"])
                    break
    raw_props = schema.get("properties")
    if isinstance(raw_props, dict):
        properties.update(raw_props)
    if isinstance(schema.get("required"), list):
        required.extend(r for r in schema["required"] if isinstance(r, str))
    if not properties:
        return None
    resolved = {k: deref(spec, v) for k, v in properties.items() if isinstance(k, str)}
    wrapped = [k for k in resolved if k in _WRAPPER_KEYS and isinstance(resolved[k], dict)]
    scalars = [k for k, v in resolved.items() if isinstance(v, dict) and v.get("type") in SCALAR_TYPES]
    if wrapped and len(scalars) <= 2:
        inner = object_schema(spec, resolved[wrapped[0]], depth + 1)
        if inner:
            return inner
    return {"properties": resolved, "required": sorted(set(required))}


def _scalar_field_schema(prop: dict[str, Any]) -> dict[str, Any] | None:
    typ = prop.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t in SCALAR_TYPES), None)
    if typ not in SCALAR_TYPES:
        return None
    out: dict[str, Any] = {"type": typ}
    if typ == "string" and prop.get("format") in KNOWN_FORMATS:
        out["format"] = prop["format"]
    if typ == "boolean" and isinstance(prop.get("default"), bool):
        # what a row without the flag holds: an action on the flag reads it (envgen.tools.action_reads)
        out["default"] = prop["default"]
    enum = prop.get("enum")
    if isinstance(enum, list):
        values = [
            v for v in enum if isinstance(v, (str, int, float, bool)) and not isinstance(v, bool) or typ == "boolean"
        ]
        values = [v for v in values if v is not None and v != ""]
        if values and all(matches_json_type(v, typ) for v in values):
            out["enum"] = list(dict.fromkeys(values))[:20]
    for bound in ("minimum", "maximum"):
        value = prop.get(bound)
        if (
            typ in ("integer", "number")
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
            and abs(value) <= MAX_ABS_BOUND
            and value == value
        ):
            if typ == "integer":  # round fractional bounds inward
                value = math.ceil(value) if bound == "minimum" else math.floor(value)
            out[bound] = value
    if typ == "string" and isinstance(prop.get("maxLength"), int) and 0 < prop["maxLength"] <= MAX_ABS_BOUND:
        out["maxLength"] = prop["maxLength"]
    if "minimum" in out and "maximum" in out and out["minimum"] > out["maximum"]:
        out.pop("minimum"), out.pop("maximum")
    if "enum" in out:  # enum values must themselves satisfy the other keywords
        out["enum"] = [v for v in out["enum"] if _within(v, out)]
        if not out["enum"]:
            del out["enum"]
    if out.get("format") and out.get("maxLength", 10**9) < MIN_FORMAT_LENGTH[out["format"]]:
        del out["format"]  # no value of this format fits the length limit
    examples = _spec_examples(prop, out)
    if examples and "enum" not in out:
        out["examples"] = examples  # what the API's authors say a value looks like: the value generator's first choice
    return out


def _spec_examples(prop: dict[str, Any], schema: dict[str, Any]) -> list[Any]:
    """Up to 5 values from ``example``, ``examples`` (a list) and ``default`` that are of the schema's type,
    within its bounds and short (strings of at most 120 characters)."""
    raw = (
        ([prop["example"]] if "example" in prop else [])
        + (list(prop["examples"]) if isinstance(prop.get("examples"), list) else [])
        + ([prop["default"]] if "default" in prop else [])
    )
    typ = schema["type"]
    kept = [
        v
        for v in raw
        if isinstance(v, (str, int, float))
        and matches_json_type(v, typ)
        and _within(v, schema)
        and (not isinstance(v, str) or 0 < len(v.strip()) <= 120)
        and v == v
    ]
    return list(dict.fromkeys(kept))[:5]


def _within(value: Any, schema: dict[str, Any]) -> bool:
    if isinstance(value, str):
        return len(value) <= schema.get("maxLength", len(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return schema.get("minimum", value) <= value <= schema.get("maximum", value)
    return True


def matches_json_type(value: Any, typ: str) -> bool:
    """True when ``value`` is a JSON ``typ`` (``string``, ``integer``, ``number``, ``boolean``); bools
    are not numbers."""
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, bool)


_PREFERRED_FIELDS = ("name", "title", "status", "email", "type", "description", "amount", "date")
_OUTPUT_ONLY_TEXT = re.compile(r"^\W*output[ -]only\b", re.IGNORECASE)
#: fields a server always fills itself, whatever the document says of them (Google's URL of the resource,
#: Stripe's flag of the mode the request was made in)
_SERVER_SET_NAMES = ("self_link", "livemode")
#: the words of a record's own creation or modification time (``created``, ``timeCreated``, ``update_time``)
_RECORD_TIME_WORDS = frozenset({"created", "create", "creation", "updated", "update", "modified", "modification"})
_TIME_WORDS = frozenset({"time", "at", "on", "date", "timestamp"})
_RECORD_TIME_EXTRA = _TIME_WORDS | {"last"}
#: a description that says a field is the record's own creation or modification time ("Time at which the
#: object was created", "The creation time of the bucket", "The modification time of the bucket")
_RECORD_TIME_TEXT = re.compile(
    r"^\W*(?:the\s+)?(?:(?:date|time|timestamp)(?:\s+and\s+time)?\s+(?:at\s+which|when)\s+(?:the|this)\s+"
    r"[\w ]{1,40}?\s+(?:was|is|were)\s+(?:first\s+|last\s+)?(?:created|updated|modified)"
    r"|(?:creation|modification|last[- ]modified|last[- ]update[d]?)\s+(?:date|time|timestamp))\b",
    re.IGNORECASE,
)


def output_only(source_name: str, prop: dict[str, Any], schema: dict[str, Any]) -> bool:
    """True when the server sets property ``source_name`` (its spec schema ``prop``, read as the field schema
    ``schema``) and a caller never gives it: ``readOnly``; a description that starts "[Output Only]" or
    "Output only." (Google's mark); an enum of exactly one value (a constant, such as Stripe's ``object``); a
    description that says the value is "always" its default (Google Storage's ``kind``, "this is always
    storage#bucket"); a name of :data:`_SERVER_SET_NAMES`; or the record's own creation or modification time
    (Stripe's ``created``, Google Storage's ``timeCreated`` and ``updated``)."""
    if prop.get("readOnly") is True or snake_case(source_name) in _SERVER_SET_NAMES:
        return True
    desc = prop.get("description")
    desc = desc if isinstance(desc, str) else ""
    if _OUTPUT_ONLY_TEXT.match(desc) or len(schema.get("enum", ())) == 1:
        return True
    default = prop.get("default")
    if isinstance(default, str) and default and f"always {default.lower()}" in desc.lower():
        return True
    return _record_time(source_name, desc, schema)


def _record_time(source_name: str, desc: str, schema: dict[str, Any]) -> bool:
    """Whether the field holds the record's own creation or modification time, which the server stamps: named
    only by those words (``created``, ``updated``, ``timeCreated``, ``date_created``, ``last_modified``; not
    ``created_by`` or ``update_mask``) and not a flag, where the name says it is a time (``updated_at``) or the
    value is one (a date or date-time string, a number of seconds, a string its description calls a time); or
    described as that time ("Time at which the object was created")."""
    if _RECORD_TIME_TEXT.match(desc):
        return True
    words = set(re.findall(r"[a-z]+", snake_case(source_name).replace("_", " ")))
    if not words & _RECORD_TIME_WORDS or not words <= _RECORD_TIME_WORDS | _RECORD_TIME_EXTRA:
        return False
    if schema.get("type") == "boolean":
        return False
    if words & _TIME_WORDS or schema.get("type") in ("integer", "number"):
        return True  # the name says it is a time (updated_at, date_created), or a bare word holds a number
    if schema.get("format") in ("date", "date-time"):
        return True
    return schema.get("type") == "string" and bool(re.search(r"\b(?:time|date|timestamp)\b", desc, re.IGNORECASE))


def parameter_name(name: str) -> str:
    """``name`` as a tool function may take it: ``<name>_value`` where ``name`` is ``state`` (every tool function's
    first parameter is the environment state) or a name the sandbox's static check refuses anywhere in the code
    (``input``, ``open``, ``getattr``...)."""
    if name == "state" or name in FORBIDDEN_BUILTINS or name in REFLECTIVE_BUILTINS:
        return f"{name}_value"
    return name


def extract_fields(spec: dict[str, Any], schema: Any, key: str) -> list[FieldSpec]:
    """Pick up to :data:`MAX_FIELDS` scalar fields of an object schema, required and common ones first.

    ``id``-like properties of the resource itself are dropped (the table's own ``key`` replaces them).
    """
    obj = object_schema(spec, schema)
    if not obj:
        return []
    required = set(obj["required"])
    candidates: list[tuple[int, str, dict[str, Any], str]] = []
    for source_name, prop in obj["properties"].items():
        if not isinstance(prop, dict):
            continue
        fschema = _scalar_field_schema(prop)
        if fschema is None:
            continue
        lowered = snake_case(source_name)
        if lowered in ("id", key, "uuid", "_id", "created_at") or not lowered:
            continue
        rank = 0 if source_name in required else 2
        if lowered in _PREFERRED_FIELDS:
            rank -= 1
        server_set = output_only(source_name, prop, fschema)
        if server_set and rank > 0:
            rank += 2
        desc = prop.get("description") or prop.get("title") or ""
        candidates.append((rank, source_name, fschema, str(desc), server_set))
    candidates.sort(key=lambda c: c[0])
    taken = {key}
    fields: list[FieldSpec] = []
    for _rank, source_name, fschema, desc, server_set in candidates[:MAX_FIELDS]:
        name = unique_name(parameter_name(to_identifier(source_name, fallback="field", max_len=40)), taken)
        # a server-set field is never required of a row: a created row has none until the server would set it
        given = source_name in required and not server_set
        fields.append(FieldSpec(name, source_name, fschema, clean_text(desc, 160), given, server_set))
    return fields


_TAGS = re.compile(r"<[^>]+>")
_WS = re.compile(r"\s+")
_MD = re.compile(r"[`*_#\[\]]")


def clean_text(text: Any, limit: int = 200) -> str:
    """Plain one-line text from spec prose: HTML tags and markdown marks removed, cut at ``limit``."""
    if not isinstance(text, str):
        return ""
    out = _WS.sub(" ", _MD.sub("", _TAGS.sub(" ", text))).strip()
    if len(out) > limit:
        cut = out[:limit]
        out = (cut[: cut.rfind(". ") + 1] if ". " in cut else cut.rsplit(" ", 1)[0]).strip()
    return out


def _request_schema(spec: dict[str, Any], op: dict[str, Any]) -> Any:
    body = deref(spec, op.get("requestBody"))
    if not isinstance(body, dict):
        return None
    content = body.get("content")
    if not isinstance(content, dict):
        return None
    for media, entry in content.items():
        if isinstance(media, str) and "json" in media and isinstance(entry, dict):
            return entry.get("schema")
    return None


def _response_schema(spec: dict[str, Any], op: dict[str, Any]) -> Any:
    responses = op.get("responses")
    if not isinstance(responses, dict):
        return None
    for code in ("200", "201", 200, 201):
        resp = deref(spec, responses.get(code))
        if isinstance(resp, dict) and isinstance(resp.get("content"), dict):
            for media, entry in resp["content"].items():
                if isinstance(media, str) and "json" in media and isinstance(entry, dict):
                    return entry.get("schema")
    return None


def _segments(path: str) -> list[str]:
    return [s for s in path.strip("/").split("/") if s]


def collection_resources(
    spec: dict[str, Any],
) -> tuple[list[Resource], dict[str, tuple[str, dict[str, Any]]], dict[str, dict[str, Any]]]:
    """The stateful resources of an OpenAPI 3 document's collections, in path order, before relations are
    read (:func:`envfactory_assets.sources.resources.extract_resources` adds them, orders and caps), with
    the path maps relations are read from: ``(resources, items, collections)``, ``items`` mapping a
    collection path to its item path and path item, ``collections`` a collection path to its path item.

    Collections at most :data:`MAX_NESTING` path parameters deep are used (``/a``, ``/a/{id}/b``,
    ``/a/{id}/b/{id}/c``), keyed to their nearest parent.

    Raises:
        SpecError: if the document is not OpenAPI 3 or has no ``paths`` object.
    """
    version = spec.get("openapi")
    if not isinstance(version, str) or not version.startswith("3"):
        raise SpecError(f"not an OpenAPI 3 document (openapi={version!r})")
    paths = spec.get("paths")
    if not isinstance(paths, dict) or not paths:
        raise SpecError("document has no paths")

    collections: dict[str, dict[str, Any]] = {}
    items: dict[str, tuple[str, dict[str, Any]]] = {}
    extras: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}  # item or collection path -> (segment, path, item)
    for path, item in paths.items():
        if not isinstance(path, str) or not isinstance(item, dict) or rpc_operation_name(path, paths):
            continue  # an RPC path names an operation, not a collection: rpc.py groups those
        segs = _segments(path)
        if not segs:
            continue
        action = split_action_path(path)
        if action is not None and action_verb(action[1]):
            extras.setdefault(action[0], []).append((action[1], path, item))
            continue
        if action is not None and _post_only(paths, path, item, action[1]):
            extras.setdefault(action[0], []).append((action[1], path, item))
            continue
        if _computed_path(spec, paths, path, item):
            extras.setdefault("/" + "/".join(segs[:-1]), []).append((snake_case(segs[-1]), path, item))
            continue
        if (
            len(segs) >= 2
            and snake_case(segs[-1]) in SEARCH_SEGMENTS + COUNT_SEGMENTS
            and not _PARAM_SEGMENT.match(segs[-2])
        ):
            extras.setdefault("/" + "/".join(segs[:-1]), []).append((snake_case(segs[-1]), path, item))
            continue
        if _PARAM_SEGMENT.match(segs[-1]):
            items.setdefault("/" + "/".join(segs[:-1]), (path, item))
        else:
            collections["/" + "/".join(segs)] = item

    _place_lone_items(spec, collections, items)
    resources: list[Resource] = []
    taken_names: set[str] = set()
    literals = Counter(_collection_literal(_segments(cpath), items.get(cpath, (None, {}))[0]) for cpath in collections)
    # names two collections share (bucket and object ACLs both end in /acl) are told apart by their parents
    shared = frozenset(literal for literal, n in literals.items() if n > 1)
    for cpath, citem in sorted(collections.items()):
        segs = row_segments(cpath)
        params = [s for s in segs if _PARAM_SEGMENT.match(s)]
        if len(params) > MAX_NESTING:
            continue
        names = set(taken_names)  # a collection that is not kept leaves its name to the next one
        try:
            res = None if "post" in citem else _singleton_resource(spec, cpath, citem, items, names)
            if res is None:
                res = _resource_from_collection(spec, cpath, citem, items, names, extras, shared)
        except (SpecError, RecursionError):
            continue
        if res is not None and res.is_stateful and any(f.name != res.parent_key for f in res.fields):
            resources.append(res)
            taken_names.add(res.name)
    return resources, items, collections


#: path segments that name an API's version or area, not rows (``/v1/{name}``, ``/api/{id}``, ``/2010-04-01``)
_VERSION_SEGMENT = re.compile(
    r"^(v\d+[a-z0-9]*|\d[\d._-]*|api|apis|rest|public|pub|private|pvt|latest)$", re.IGNORECASE
)
#: last words of an item operation's dotted ``operationId`` (``workstations.projects.locations.workstations.get``)
#: and of its collection's (``....workstations.list``)
_ITEM_OPERATION_WORDS = frozenset({"get", "patch", "update", "delete"})
_COLLECTION_OPERATION_WORDS = frozenset({"list", "create"})


def _dotted_prefix(spec: dict[str, Any], op: Any, words: frozenset[str]) -> str | None:
    """``a.b.c`` of an operation whose ``operationId`` is ``a.b.c.<word>`` with ``<word>`` in ``words``, else None."""
    op = deref(spec, op)
    oid = op.get("operationId") if isinstance(op, dict) else None
    if not isinstance(oid, str) or "." not in oid:
        return None
    prefix, word = oid.rsplit(".", 1)
    return prefix if word in words and prefix else None


#: first words of a literal that names a lookup, not rows (``/orders/findbyextref/{ref}`` reads orders)
_LOOKUP_SEGMENT = re.compile(r"^(?i:find|get|search|lookup|fetch|by)(_|-|[Bb]y|[A-Z]|$)")


def _names_rows(segment: str) -> bool:
    """Whether a collection path's last literal can name a table: a word, not a version or area (``v1``, ``api``)
    nor a lookup (``findbyextref``, ``getByName``)."""
    return not _VERSION_SEGMENT.match(segment) and not _LOOKUP_SEGMENT.match(segment) and speakable(snake_case(segment))


def _place_lone_items(
    spec: dict[str, Any], collections: dict[str, dict[str, Any]], items: dict[str, tuple[str, dict[str, Any]]]
) -> None:
    """Give the item paths whose collection path the document lacks a collection, in place, trying in turn:

    - Dotted operation ids: an item path whose operations are named ``<prefix>.get``, ``.patch``, ``.update`` or
      ``.delete`` belongs, for those operations, to the collection whose operations are named ``<prefix>.list``
      or ``<prefix>.create`` and that has no item path (Google's ``GET /v1/{name}``,
      ``workstations.projects.locations.workstations.get``, beside ``GET /v1/{parent}/workstations``).
    - A path ending in a parameter with only a GET that lists rows (``/Players/{team}``) is a collection of its
      own: the rows that hold that value (:func:`_resource_from_collection` reads it so).
    - An item path of a literal that exactly one collection path ends in, nested elsewhere and without an item
      path of its own (``/webinars/{webinar_id}`` beside ``/users/{user_id}/webinars``), is that collection's.
    - An item path of a literal no collection path ends in (``/cards/{card_id}`` alone) is its own read-only
      collection, with no list: an empty path item at its collection path.

    The last two, and the second, need a literal that names rows: ``/v1/{name}`` and ``/api/{id}`` are none.
    """
    ends: dict[str, list[str]] = {}
    dotted: dict[str, str] = {}
    for cpath, citem in collections.items():
        segs = _segments(cpath)
        if segs:
            ends.setdefault(segs[-1], []).append(cpath)
        if cpath in items:
            continue
        for method in ("get", "post"):
            prefix = _dotted_prefix(spec, citem.get(method), _COLLECTION_OPERATION_WORDS)
            if prefix:
                dotted.setdefault(prefix, cpath)
    lone = [(stem, entry) for stem, entry in items.items() if stem not in collections]
    for stem, (ipath, iitem) in sorted(lone):
        homes_by_name: dict[str, dict[str, Any]] = {}
        for method in HTTP_METHODS:
            home = dotted.get(_dotted_prefix(spec, iitem.get(method), _ITEM_OPERATION_WORDS) or "")
            if home is not None and home not in items:
                homes_by_name.setdefault(home, {})[method] = iitem[method]
        for home, methods in sorted(homes_by_name.items()):
            items[home] = (ipath, methods)
        if homes_by_name:
            continue
        segs = _segments(stem)
        if not segs or _PARAM_SEGMENT.match(segs[-1]) or not _names_rows(segs[-1]):
            continue
        try:
            lists = set(iitem) & set(HTTP_METHODS) == {"get"} and _lists_objects(spec, iitem["get"])
        except (SpecError, RecursionError):
            continue  # a response the rules cannot read gives no collection
        if lists:
            collections[ipath] = iitem
            continue
        homes = [c for c in ends.get(segs[-1], []) if c not in items]
        if len(homes) == 1 and any(_PARAM_SEGMENT.match(s) for s in _segments(homes[0])):
            items[homes[0]] = (ipath, iitem)
            del items[stem]
        elif not ends.get(segs[-1]):
            collections[stem] = {}


def _operation(
    spec: dict[str, Any], kind: str, method: str, path: str, op: Any, verb: str | None = None
) -> Operation | None:
    op = deref(spec, op)
    if not isinstance(op, dict):
        return None
    oid = op.get("operationId") if isinstance(op.get("operationId"), str) else None
    texts = [t for t in (op.get("summary"), op.get("description")) if isinstance(t, str) and t.strip()]
    # a summary that is only the operation id or a label ("getSiteRfdiagRecording") gives way to a description
    # that is a sentence ("Get RF Diage Recording Details")
    said = next((t for t in texts if is_sentence(t, (oid,))), texts[0] if texts else "")
    summary = clean_text(said, 200)
    prose = "\n\n".join(t for t in (op.get("summary"), op.get("description")) if isinstance(t, str))
    return Operation(kind, method, path, oid, summary, verb, prose[:MAX_TEXT_CHARS])


#: operation kinds whose stated preconditions the builder enforces: the writes that name one row
PRECONDITION_KINDS = ("update", "delete", "action")


def with_stated_preconditions(resource: Resource) -> Resource:
    """``resource`` with the precondition each of its update, delete and action operations states in words
    over its fields set on the operation (a singleton's update names no row and gets none)."""
    if resource.singleton:
        return resource
    for op in [*resource.operations.values(), *resource.actions]:
        if op.kind in PRECONDITION_KINDS:
            op.precondition = stated_precondition(op.text, resource.fields)
    return resource


#: path parameters that choose the response's encoding (``/{format}/Teams``: ``json`` or ``xml``), not a row: they
#: neither nest a collection nor count towards :data:`MAX_NESTING`
FORMAT_PARAMETERS = frozenset({"format", "response_format", "output_format", "data_format"})


def is_format_segment(segment: str) -> bool:
    """Whether a path segment is a parameter of :data:`FORMAT_PARAMETERS` (``{format}``)."""
    return bool(_PARAM_SEGMENT.match(segment)) and snake_case(segment.strip("{}")) in FORMAT_PARAMETERS


def row_segments(path: str) -> list[str]:
    """The segments of ``path`` without its :func:`format parameters <is_format_segment>`."""
    return [s for s in _segments(path) if not is_format_segment(s)]


def _parent_key(segs: list[str]) -> str | None | bool:
    """The foreign key a nested collection gets from its nearest parent item (``/a/{id}/b/{id}/c`` -> ``b_id``;
    a parameter right after another one names its parent itself: ``/repos/{owner}/{repo}/issues`` ->
    ``repo_id``), None when it is not nested, False when its shape is not usable. Format parameters
    (``/{format}/Teams``) are not parents."""
    segs = [s for s in segs if not is_format_segment(s)]
    params = [i for i, s in enumerate(segs) if _PARAM_SEGMENT.match(s)]
    if not params:
        return None
    idx = params[-1]
    named = snake_case(segs[idx].strip("{}")).removesuffix("_id").removesuffix("_name")
    if idx > 0 and _PARAM_SEGMENT.match(segs[idx - 1]):
        parent_literal = named
    else:
        parent_literal = snake_case(segs[idx - 1]) if idx > 0 else ""
        if parent_literal and not speakable(parent_literal) and speakable(named):
            parent_literal = named  # /b/{bucket}/acl: the parent is a bucket, not a "b"
    if not parent_literal:
        return False
    return to_identifier(f"{singular(parent_literal)}_id", fallback="parent_id", max_len=40)


def _singleton_resource(
    spec: dict[str, Any],
    cpath: str,
    citem: dict[str, Any],
    items: dict[str, tuple[str, dict[str, Any]]],
    taken_names: set[str],
) -> Resource | None:
    """The singleton of a path without create or item operations whose GET returns one object and which
    can be updated in place or is named like one (``/settings``, ``/me``), else None."""
    segs = _segments(cpath)
    literal = snake_case(segs[-1])
    if cpath in items or "get" not in citem or _PARAM_SEGMENT.match(segs[-1]) or not literal or len(literal) > 40:
        return None
    if any(_PARAM_SEGMENT.match(s) for s in segs):
        return None  # one object per parent is a sub-resource, not the account's singleton
    if literal not in SINGLETON_SEGMENTS and not any(m in citem for m in ("put", "patch")):
        return None
    get_op = deref(spec, citem["get"])
    schema = _response_schema(spec, get_op) if isinstance(get_op, dict) else None
    raw = deref(spec, schema)
    if not isinstance(raw, dict) or raw.get("type") == "array" or ("items" in raw and "properties" not in raw):
        return None
    ops: dict[str, Operation] = {}
    for kind, method in (("get", "get"), ("update", "patch"), ("update", "put")):
        if method in citem and kind not in ops:
            op = _operation(spec, kind, method, cpath, citem[method])
            if op is not None:
                ops[kind] = op
    if "get" not in ops:
        return None
    base = "_".join(snake_case(s) for s in segs if snake_case(s)) if literal in ("me", "info", "status") else literal
    name = unique_name(to_identifier(base, fallback="resource", max_len=40), taken_names)
    key = f"{singular(name)}_id"
    fields = extract_fields(spec, schema, key)
    return Resource(name, key, cpath, fields[:MAX_FIELDS], ops, None, [], True)


def _resource_from_collection(
    spec: dict[str, Any],
    cpath: str,
    citem: dict[str, Any],
    items: dict[str, tuple[str, dict[str, Any]]],
    taken_names: set[str],
    extras: dict[str, list[tuple[str, str, dict[str, Any]]]] | None = None,
    shared: frozenset[str] = frozenset(),
) -> Resource | None:
    """Build the :class:`Resource` of one collection path, or None when it has no usable shape.

    ``extras`` maps item and collection paths to their action, search and count paths
    (``(segment, path, path item)``); ``shared`` holds the names several collections of the document end in
    (a nested one is named with its parent's: ``bucket_acl``)."""
    extras = extras or {}
    segs = _segments(cpath)
    listed_by = None
    if segs and _PARAM_SEGMENT.match(segs[-1]):
        # a GET of a path ending in a parameter that lists rows (``/Players/{team}``): the rows that hold that value
        listed_by = to_identifier(segs[-1].strip("{}"), fallback="", max_len=40)
        listed_by = listed_by and parameter_name(listed_by)  # PeerTube's GET /jobs/{state}
        segs = segs[:-1]
        if not listed_by or not segs or _PARAM_SEGMENT.match(segs[-1]) or cpath in items:
            return None
    ipath, iitem = items.get(cpath, (None, {}))
    literal = _collection_literal(segs, ipath)
    if not literal or len(literal) > 40:
        return None
    parent_key = listed_by or _parent_key(segs)
    if parent_key is False:
        return None
    ops: dict[str, Operation] = {}

    def add(kind: str, method: str, path: str, op: Any) -> None:
        made = _operation(spec, kind, method, path, op)
        if made is not None:
            ops[kind] = made

    if "post" in citem:
        add("create", "post", cpath, citem["post"])
    if "get" in citem:
        add("list", "get", cpath, citem["get"])
    if iitem and ipath:
        if "get" in iitem:
            add("get", "get", ipath, iitem["get"])
        for method in ("patch", "put"):
            if method in iitem and "update" not in ops:
                add("update", method, ipath, iitem[method])
        if "delete" in iitem:
            add("delete", "delete", ipath, iitem["delete"])
    read_only = "create" not in ops
    if read_only and not ("list" in ops and _lists_objects(spec, citem["get"])) and "get" not in ops:
        return None  # a read-only path is a collection only when it lists objects or has an item read
    computed: list[Operation] = []
    for segment, path, item in sorted(extras.get(cpath, []), key=lambda e: e[1]):
        if segment in COMPUTED_SEGMENTS:
            made = _operation(spec, "computed_read", "get", path, item["get"], segment)
            if made is not None and not computed:
                computed.append(made)
            continue
        kind = "search" if segment in SEARCH_SEGMENTS else "count"
        method = "get" if "get" in item else "post" if kind == "search" and "post" in item else None
        if method and kind not in ops:
            add(kind, method, path, item[method])
    actions: list[Operation] = []
    seen_verbs: set[str] = set()
    transfers: list[Operation] = []
    side_effects: list[Operation] = []
    for segment, path, item in sorted(extras.get(ipath, []) if ipath else [], key=lambda e: e[1]):
        verb = action_verb(segment)
        method = next((m for m in ("post", "put", "patch") if m in item), None)
        if verb is None and transfer_verb(segment):
            made = _transfer_operation(spec, path, item, segment)
            if made is not None and all(t.verb != made.verb for t in transfers):
                transfers.append(made)
            continue
        if segment in COMPUTED_SEGMENTS and "get" in item and not method:
            made = _operation(spec, "computed_read", "get", path, item["get"], segment)
            if made is not None and not any(_item_scoped(c) for c in computed):
                computed.append(made)
            continue
        said = side_effect_verb(segment) if verb is None else None
        if said is not None:
            made = _side_effect_operation(spec, path, item, said)
            if made is not None and all(t.verb != said for t in side_effects):
                side_effects.append(made)
            continue
        if verb and method and verb not in seen_verbs:
            made = _operation(spec, "action", method, path, item[method], verb)
            if made is not None:
                actions.append(made)
                seen_verbs.add(verb)
    base = to_identifier(literal, fallback="resource", max_len=40)
    if (base in shared or base in taken_names) and parent_key:
        # bucket and object ACLs both end in /acl: the second is told apart by what it belongs to
        base = to_identifier(f"{parent_key.removesuffix('_id')}_{literal}", fallback=base, max_len=40)
    name = unique_name(base, taken_names)
    key = f"{singular(name)}_id"
    post = deref(spec, citem.get("post")) if "create" in ops else None
    schema = _request_schema(spec, post) if isinstance(post, dict) else None
    if schema is None and "get" in ops:
        schema = _response_schema(spec, deref(spec, iitem.get("get")))
    if schema is None and "list" in ops:
        listed = deref(spec, citem.get("get"))
        response = _response_schema(spec, listed) if isinstance(listed, dict) else None
        rows = listed_rows(spec, response)
        # rows without scalar fields of their own ({"hits": [{"fields": {...}}]}): the response as before
        schema = rows if rows is not None and extract_fields(spec, rows, key) else response
    if listed_by == key:
        return None  # /players/{player_id} answered with a list: a read of one row, not a list of rows
    if parent_key == key:  # /folders/{folder_id}/folders: the parent is another row of the same table
        parent_key = to_identifier(f"parent_{key}", fallback="parent_id", max_len=40)
    fields = extract_fields(spec, schema, key)
    if parent_key:
        fields = [f for f in fields if f.name != parent_key]
        fields.insert(
            0,
            FieldSpec(parent_key, parent_key, {"type": "string"}, f"Identifier of the parent {parent_key[:-3]}.", True),
        )
    resource = Resource(
        name,
        key,
        cpath,
        fields[:MAX_FIELDS],
        ops,
        parent_key,
        actions,
        read_only=read_only,
        transfers=transfers,
        side_effects=side_effects,
    )
    # an item's figures are its numeric fields: a row without one has nothing to compute
    numeric = any(f.schema.get("type") in ("integer", "number") and "enum" not in f.schema for f in fields[:MAX_FIELDS])
    resource.computed = [c for c in computed if numeric or not _item_scoped(c)]
    return with_stated_preconditions(resource)


#: most scalar request-body properties a side-effect action takes as arguments
MAX_SIDE_EFFECT_ARGUMENTS = 4


def _item_scoped(op: Operation) -> bool:
    """Whether a computed read ``op`` reads one item (``/accounts/{id}/balance``), not a collection."""
    segs = _segments(op.path)
    return len(segs) >= 2 and bool(_PARAM_SEGMENT.match(segs[-2]))


def _computed_path(spec: dict[str, Any], paths: dict[str, Any], path: str, item: dict[str, Any]) -> bool:
    """Whether ``path`` may be a computed read: its last segment is one of :data:`COMPUTED_SEGMENTS` after a
    literal or an item parameter, it has a GET and no other method, no item path below it, and its GET does not
    list objects (``GET /orders/stats`` returning stat rows is a read-only collection of its own)."""
    segs = _segments(path)
    if len(segs) < 2 or snake_case(segs[-1]) not in COMPUTED_SEGMENTS or set(item) & {"post", "put", "patch", "delete"}:
        return False
    if "get" not in item or _lists_rows_plainly(spec, item["get"]):
        return False
    below = path.rstrip("/") + "/{"
    return not any(isinstance(p, str) and p.startswith(below) for p in paths)


def _post_only(paths: dict[str, Any], path: str, item: dict[str, Any], segment: str) -> bool:
    """Whether ``path`` (an item path and the literal ``segment``) may be a transfer or a side-effect action
    (:mod:`envfactory_assets.sources.transfers`, :mod:`envfactory_assets.sources.side_effects`): its literal names
    one, it has a POST, and neither a GET nor an item path below it (rows of its own: a nested resource)."""
    if transfer_verb(segment) is None and side_effect_verb(segment) is None:
        return False
    if "post" not in item or "get" in item:
        return False
    below = path.rstrip("/") + "/{"
    return not any(isinstance(p, str) and p.startswith(below) for p in paths)


def request_names(spec: dict[str, Any], op: dict[str, Any]) -> list[str]:
    """snake_case names of ``op``'s request body properties (a JSON or form body) and query parameters."""
    names: list[str] = []
    body = deref(spec, op.get("requestBody"))
    content = body.get("content") if isinstance(body, dict) else None
    if isinstance(content, dict):
        for media, entry in content.items():
            if isinstance(media, str) and ("json" in media or "form" in media) and isinstance(entry, dict):
                names += [snake_case(k) for k in (object_schema(spec, entry.get("schema")) or {}).get("properties", {})]
                break
    for param in op.get("parameters") or []:
        param = deref(spec, param)
        if isinstance(param, dict) and param.get("in") == "query" and isinstance(param.get("name"), str):
            names.append(snake_case(param["name"]))
    return names


def _side_effect_operation(spec: dict[str, Any], path: str, item: dict[str, Any], verb: str) -> Operation | None:
    """The ``side_effect`` operation of the POST of ``path``, with up to :data:`MAX_SIDE_EFFECT_ARGUMENTS` scalar
    properties of its request body as arguments (required ones first)."""
    op = deref(spec, item.get("post"))
    made = _operation(spec, "side_effect", "post", path, op, verb)
    if made is None or not isinstance(op, dict):
        return None
    try:
        args = extract_fields(spec, _request_schema(spec, op), "")
    except (SpecError, RecursionError):
        args = []
    usable = [f for f in args if f.name.isidentifier() and f.name not in ("state", "limit")]
    made.arguments = tuple(usable[:MAX_SIDE_EFFECT_ARGUMENTS])
    return made


def _transfer_operation(spec: dict[str, Any], path: str, item: dict[str, Any], segment: str) -> Operation | None:
    """The ``transfer`` operation of the POST of ``path`` (ending in ``segment``), or None when its request
    names no amount (:func:`~envfactory_assets.sources.transfers.transfer_shape`)."""
    op = deref(spec, item.get("post"))
    if not isinstance(op, dict):
        return None
    shape = transfer_shape(segment, request_names(spec, op))
    made = _operation(spec, "transfer", "post", path, op, shape.verb if shape else None)
    if shape is None or made is None:
        return None
    made.transfer = shape
    return made


def _collection_literal(segs: list[str], item_path: str | None) -> str:
    """The table name a collection's last path segment gives, or, when a person cannot say that segment
    (Google Cloud Storage's ``/b/{bucket}``, ``/o/{object}``), the plural of its item's path parameter."""
    literal = snake_case(segs[-1])
    if speakable(literal) or not item_path:
        return literal
    named = snake_case(_segments(item_path)[-1].strip("{}")).removesuffix("_id").removesuffix("_name")
    return plural(named) if named and speakable(named) else literal


def _lists_objects(spec: dict[str, Any], get_op: Any) -> bool:
    """Whether a collection GET's 2xx response is a list of objects: :func:`listed_rows` finds its rows, or it holds
    them under one of :data:`_WRAPPER_KEYS` beside fields of its own (:func:`_lists_rows_plainly`)."""
    op = deref(spec, get_op)
    if not isinstance(op, dict):
        return False
    return listed_rows(spec, _response_schema(spec, op)) is not None or _lists_rows_plainly(spec, op)


def _lists_rows_plainly(spec: dict[str, Any], get_op: Any) -> bool:
    """Whether a GET's 2xx response is an array of objects, directly or under one of :data:`_WRAPPER_KEYS`
    (``{"data": [...]}``): the narrower reading :func:`_computed_path` keeps, so that figures answered in an
    envelope (``{"task_queues_statistics": [...], "meta": {...}}``) stay computed reads."""
    op = deref(spec, get_op)
    raw = deref(spec, _response_schema(spec, op)) if isinstance(op, dict) else None
    if isinstance(raw, dict) and raw.get("type") != "array" and isinstance(raw.get("properties"), dict):
        wrapped = next((raw["properties"][k] for k in _WRAPPER_KEYS if k in raw["properties"]), None)
        raw = deref(spec, wrapped) if wrapped is not None else raw
    if not isinstance(raw, dict) or raw.get("type") != "array" and "items" not in raw:
        return False
    item = deref(spec, raw.get("items"))
    return isinstance(item, dict) and (
        item.get("type") == "object" or isinstance(item.get("properties"), dict) or "allOf" in item
    )


#: fields of a list's envelope beside the list (paging, counts, links): an object with other fields is a row
ENVELOPE_FIELDS = frozenset(
    {
        "total",
        "total_count",
        "totalcount",
        "total_results",
        "total_items",
        "count",
        "size",
        "length",
        "next",
        "previous",
        "prev",
        "first",
        "last",
        "self",
        "offset",
        "limit",
        "page",
        "page_size",
        "per_page",
        "pages",
        "page_count",
        "total_pages",
        "page_number",
        "page_token",
        "next_page_token",
        "next_page",
        "next_link",
        "nextlink",
        "odata_next_link",
        "odata_count",
        "odata_context",
        "href",
        "url",
        "cursor",
        "next_cursor",
        "cursors",
        "has_more",
        "more",
        "links",
        "link",
        "meta",
        "metadata",
        "pagination",
        "paging",
        "object",
        "status",
        "success",
        "message",
        "code",
        "error",
        "errors",
        "took",
        "start",
        "end",
        "skip",
        "top",
        "embedded",
        "type",
        "kind",
        "etag",
        "version",
        "warnings",
        "warning",
        "request_id",
        "query",
        "included",
        "includes",
        "jsonapi",
    }
)
#: depth of envelope objects :func:`listed_rows` looks through (``{"_embedded": {"events": [...]}}`` is 2)
MAX_ENVELOPE_DEPTH = 2


def _merged_properties(spec: dict[str, Any], schema: Any, depth: int = 0) -> dict[str, Any]:
    """The properties of an object schema with those of its ``allOf`` members merged in, each dereferenced (no
    envelope unwrapping: :func:`object_schema` does that)."""
    schema = deref(spec, schema)
    if not isinstance(schema, dict) or depth > MAX_REF_DEPTH:
        return {}
    out: dict[str, Any] = {}
    members = schema.get("allOf")
    for member in members if isinstance(members, list) else []:
        out.update(_merged_properties(spec, member, depth + 1))
    if isinstance(schema.get("properties"), dict):
        out.update({k: deref(spec, v) for k, v in schema["properties"].items() if isinstance(k, str)})
    return out


def _is_array(schema: Any) -> bool:
    return isinstance(schema, dict) and (
        schema.get("type") == "array" or "items" in schema and "properties" not in schema
    )


def listed_rows(spec: dict[str, Any], schema: Any, depth: int = 0) -> dict[str, Any] | None:
    """The schema of one row of a list response ``schema``, or None when it lists no objects.

    A list is an array of objects, or an envelope object with exactly one property that is an array of objects
    (``{"data": [...], "total": 3}``, ``{"artists": [...], "next": ...}``, an ``allOf`` of a paging object and
    ``{"items": [...]}``), looked for through up to :data:`MAX_ENVELOPE_DEPTH` envelopes with one object
    property each (``{"_embedded": {"events": [...]}}``). Two arrays of objects in one envelope are two lists,
    and neither is taken.
    """
    schema = deref(spec, schema)
    if not isinstance(schema, dict) or depth > MAX_ENVELOPE_DEPTH:
        return None
    if _is_array(schema):
        item = deref(spec, schema.get("items"))
        if isinstance(item, dict) and (
            item.get("type") == "object" or isinstance(item.get("properties"), dict) or "allOf" in item
        ):
            return item
        return None
    props = _merged_properties(spec, schema)
    arrays = [k for k, v in props.items() if _is_array(v) and listed_rows(spec, v, MAX_ENVELOPE_DEPTH) is not None]
    others = [k for k in props if k not in arrays and not _is_array(props[k])]
    # an object with one list among fields of its own (a user and their addresses) is one row, not a list
    if len([k for k in others if snake_case(k).lstrip("_") not in ENVELOPE_FIELDS]) > 1:
        return None
    if len(arrays) > 1:
        # JSON:API's {"data": [...], "included": [...]}: the rows are the ones under a wrapper's name
        arrays = [k for k in arrays if k in _WRAPPER_KEYS]
        if len(arrays) != 1:
            return None
    if len(arrays) == 1:
        return listed_rows(spec, props[arrays[0]], MAX_ENVELOPE_DEPTH)
    objects = [v for v in props.values() if isinstance(v, dict) and not _is_array(v) and _merged_properties(spec, v)]
    if len(objects) == 1:
        return listed_rows(spec, objects[0], depth + 1)
    return None
