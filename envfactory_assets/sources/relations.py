"""Relations between two resources of one document (``PUT /groups/{group_id}/members/{user_id}``).

A relation is a sub-collection under an item path whose items are rows of another resource of the same
document: ``/groups/{group_id}/members/{user_id}`` pairs a group with a user. Its operations are
``relation_add`` (PUT or POST on the member item path), ``relation_remove`` (DELETE on it) and
``relation_list`` (GET on the sub-collection: the member rows). It has no fields of its own; its table holds
one row per pair (:class:`~envfactory_assets.sources.openapi.Relation`).

A sub-collection ``<parent item path>/<words>`` with member item path ``<parent item path>/<words>/{param}`` is
read as a relation when

- ``<words>`` is a plural (``members``, ``attribute-groups``): a singular word after an item names one value of
  it (Jira's ``PUT /project/{id}/type/{newProjectTypeKey}`` sets the project's type);
- the member item path has a PUT or POST (the add: a row is put into the parent, as a pair), and the
  sub-collection has no POST (a POST there creates rows with fields of their own: a nested resource, as
  GitLab's ``POST /groups/{id}/members``). A member item path with only a DELETE is left as it was: without
  an add it reads as often as not as the deletion of a row the parent owns (``DELETE
  /users/{userId}/sessions/{sessionId}``);
- the parent item path is the item path of a resource of the document that is not a singleton;
- the member is another resource of the document (not the sub-collection itself), found by the first of: the
  member parameter's noun (``{user_id}``, ``{userId}``, ``{username}`` -> ``user``), the sub-collection's word
  (``/teams/{team_id}/users/{id}`` -> ``users``), the schema its GET returns or its add reads or returns
  (``$ref: "#/components/schemas/User"`` -> ``user``);
- the add does not send the member's own schema (``PUT /stores/{id}/products/{sku}`` with a product body
  writes a product row, it does not pair two rows).

Such a sub-collection was read before as a read-only nested table of copies of the member rows; the relation
replaces it. Of two sub-collections that pair the same two resources the other way round
(``/users/{user_id}/groups/{group_id}`` beside ``/groups/{group_id}/members/{user_id}``) only the first in path
order is kept: the second would hold the same facts in another table. Everything here is a function of the
document alone (path order, no randomness).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from envfactory_assets.sources.names import singular, snake_case, speakable, to_identifier, unique_name
from envfactory_assets.sources.openapi import (
    _PARAM_SEGMENT,
    _WRAPPER_KEYS,
    MAX_NESTING,
    Relation,
    Resource,
    _operation,
    _request_schema,
    _response_schema,
    _segments,
    deref,
)

#: relation operation kinds: the tool kinds the programmatic builder gives them
RELATION_KINDS = ("relation_list", "relation_add", "relation_remove")
#: first words of an operation's name or summary that say it changes a row, not that it adds a pair
_UPDATE_WORDS = frozenset(
    {"update", "updates", "change", "changes", "modify", "edit", "set", "sets", "patch", "replace"}
)
_ANY_PARAM = re.compile(r"\{[^}/]*\}")
#: endings of a member parameter that name the identifier, not the thing (``user_id``, ``username``)
_ID_SUFFIXES = ("_id", "_ids", "_uuid", "_key", "_name", "_login", "_slug", "id", "name")


def _shape(path: str) -> str:
    """``path`` with every parameter unnamed (``/a/{id}/b`` -> ``/a/{}/b``): documents name one parameter
    differently on two paths (Stripe's ``/v1/transfers/{id}/reversals`` and
    ``/v1/transfers/{transfer}/reversals/{id}``)."""
    return _ANY_PARAM.sub("{}", path)


def param_noun(segment: str) -> str:
    """The thing a path parameter identifies: ``{user_id}``, ``{userId}``, ``{username}`` -> ``"user"``;
    ``""`` for a parameter that names no thing (``{id}``, ``{name}``)."""
    word = snake_case(segment.strip("{}"))
    for suffix in _ID_SUFFIXES:
        stem = word.removesuffix(suffix).rstrip("_")
        if stem != word and len(stem) >= 2 and speakable(stem):
            return singular(stem)
    return ""


def _schema_noun(schema: Any, depth: int = 0) -> str:
    """The singular snake_case name of the component schema ``schema`` refers to, through an array or a wrapper
    object (``{"data": [{"$ref": ".../User"}]}`` -> ``"user"``); ``""`` when it names none."""
    if depth > 4 or not isinstance(schema, dict):
        return ""
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return singular(snake_case(ref.rsplit("/", 1)[-1])) if ref.startswith("#/components/schemas/") else ""
    if "items" in schema:
        return _schema_noun(schema["items"], depth + 1)
    props = schema.get("properties")
    if isinstance(props, dict):
        wrapped = next((props[k] for k in _WRAPPER_KEYS if k in props), None)
        return _schema_noun(wrapped, depth + 1)
    return ""


def _op_schema_nouns(spec: dict[str, Any], item: dict[str, Any], methods: tuple[str, ...]) -> list[str]:
    """Schema nouns of the responses, then of the request bodies, of ``item``'s ``methods``."""
    nouns = []
    for method in methods:
        op = deref(spec, item.get(method))
        if isinstance(op, dict):
            nouns += [_schema_noun(_response_schema(spec, op)), _schema_noun(_request_schema(spec, op))]
    return [n for n in nouns if n]


def _member(
    spec: dict[str, Any],
    cpath: str,
    param: str,
    item: dict[str, Any],
    collection: dict[str, Any],
    candidates: list[Resource],
) -> Resource | None:
    """The resource whose rows the sub-collection ``cpath`` holds (see the module docstring), or None."""

    def named(noun: str) -> Resource | None:
        return next((r for r in candidates if noun and (r.singular == noun or r.key == f"{noun}_id")), None)

    nouns = [
        param_noun(param),
        singular(snake_case(_segments(cpath)[-1])),
        *_op_schema_nouns(spec, collection, ("get",)),
        *_op_schema_nouns(spec, item, ("put", "post")),
    ]
    return next((r for noun in nouns for r in [named(noun)] if r is not None), None)


def _relation(
    spec: dict[str, Any],
    sub_collection: tuple[str, dict[str, Any]],
    ipath: str,
    item: dict[str, Any],
    resources: list[Resource],
) -> tuple[Resource, Relation] | None:
    """``(parent, relation)`` of the sub-collection ``(path, path item)`` (an empty path item when the document
    has no such path) with member item path ``ipath``, or None when it is not a relation (module docstring)."""
    cpath, collection = sub_collection
    segs = _segments(cpath)
    if len(segs) < 3 or not _PARAM_SEGMENT.match(segs[-2]) or _PARAM_SEGMENT.match(segs[-1]):
        return None
    if sum(1 for s in _segments(ipath) if _PARAM_SEGMENT.match(s)) > MAX_NESTING or "post" in collection:
        return None
    literal = snake_case(segs[-1])
    add_method = next((m for m in ("put", "post") if m in item), None)
    if add_method is None or not literal or singular(literal) == literal:
        return None
    parent_path = _shape("/" + "/".join(segs[:-2]))
    parent = next((r for r in resources if _shape(r.collection_path) == parent_path and not r.singleton), None)
    if parent is None:
        return None
    # top-level resources first: a bare noun names the document's main table of that thing
    candidates = sorted(
        (r for r in resources if not r.singleton and _shape(r.collection_path) != _shape(cpath)),
        key=lambda r: (r.parent_key is not None, r.collection_path),
    )
    member = _member(spec, cpath, _segments(ipath)[-1], item, collection, candidates)
    if member is None:
        return None
    add_op = deref(spec, item.get(add_method or ""))
    if not isinstance(add_op, dict) or _schema_noun(_request_schema(spec, add_op)) == member.singular:
        return None  # the add sends a member row: an upsert of that row, not a pair
    said = [snake_case(str(add_op.get(k) or "")).split("_")[0] for k in ("operationId", "summary")]
    if any(w in _UPDATE_WORDS for w in said):
        return None  # Twilio's POST .../Conversations/{sid} "Update a specific User Conversation": no add
    member_field = member.key
    if member_field == parent.key:  # /users/{user_id}/followers/{follower_id}: one table on both sides
        own = snake_case(_segments(ipath)[-1].strip("{}"))
        member_field = next(
            (
                f
                for f in (own, f"{singular(literal)}_id", f"member_{member.key}")
                if f.endswith("_id") and f != parent.key
            ),
            f"member_{member.key}",
        )
    ops = {}
    for kind, method, path, raw in (
        ("relation_list", "get", cpath, collection.get("get")),
        ("relation_add", add_method, ipath, item.get(add_method or "")),
        ("relation_remove", "delete", ipath, item.get("delete")),
    ):
        made = _operation(spec, kind, method, path, raw) if method and raw is not None else None
        if made is not None:
            ops[kind] = made
    if "relation_add" not in ops:
        return None
    relation = Relation(
        name=to_identifier(f"{parent.singular}_{literal}", fallback="relation", max_len=40),
        parent=parent.name,
        member=member.name,
        parent_field=parent.key,
        member_field=to_identifier(member_field, fallback="member_id", max_len=40),
        path=cpath,
        role=singular(literal) or "member",
        operations=ops,
        idempotent_add=add_method == "put",
    )
    return parent, relation


def attach_relations(
    spec: dict[str, Any],
    resources: list[Resource],
    items: dict[str, tuple[str, dict[str, Any]]],
    collections: dict[str, dict[str, Any]],
) -> list[Resource]:
    """``resources`` of ``spec`` with each relation (module docstring) attached to its parent's ``relations``,
    and without the read-only nested tables that the relations' sub-collections had been read as.

    ``items`` maps each collection path to ``(its item path, that path's item)``; ``collections`` maps
    collection paths to their path items (as :func:`~envfactory_assets.sources.resources.extract_resources`
    gathers them).
    """
    by_shape: dict[str, tuple[str, dict[str, Any]]] = {}
    for cpath, citem in sorted(collections.items()):
        by_shape.setdefault(_shape(cpath), (cpath, citem))
    found: list[tuple[Resource, Relation]] = []
    for cpath, (ipath, item) in sorted(items.items()):
        collection = by_shape.get(_shape(cpath), (cpath, {}))
        made = _relation(spec, collection, ipath, item, resources)
        if made is not None:
            found.append(made)
    replaced = {_shape(rel.path) for _, rel in found}
    kept = [r for r in resources if _shape(r.collection_path) not in replaced]
    names = {r.name for r in kept}
    taken = set(names)
    paired: set[tuple[str, str]] = set()
    for parent, rel in found:
        if rel.parent not in names or rel.member not in names:
            continue
        if rel.member != rel.parent and (rel.member, rel.parent) in paired:
            continue  # the same pairs seen from the other side
        paired.add((rel.parent, rel.member))
        parent.relations.append(dataclasses.replace(rel, name=unique_name(rel.name, taken)))
    return kept
