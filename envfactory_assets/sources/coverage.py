"""Which operations of an OpenAPI document become tools, and why the others do not.

Every operation (a path and an HTTP method) of the document is either mapped to the tool kind the
programmatic builder gives it (``list``, ``get``, ``create``, ``update``, ``delete``, ``search``,
``count``, ``action``, ``transfer`` (an amount moved between or out of rows:
:mod:`envfactory_assets.sources.transfers`), ``side_effect`` (a call recorded in an outbox:
:mod:`envfactory_assets.sources.side_effects`), ``computed_read`` (figures derived from the rows: ``GET /orders/total``,
``GET /accounts/{id}/balance``), or one of a relation's ``relation_list``, ``relation_add`` and
``relation_remove``: :mod:`envfactory_assets.sources.relations`) or unmapped with one reason:

- ``beyond_resource_cap``: its resource exists, but the environment keeps only the best-covered ones (a
  relation is kept when both of its resources are);
- ``action_without_state``: a verb after an item (``POST /a/{id}/archive_logs``) that names no state of the row
  and is no side-effect verb (``send``, ``restart``: those are ``side_effect`` tools,
  :mod:`envfactory_assets.sources.side_effects`);
- ``nested_too_deep``: more path parameters than :data:`~envfactory_assets.sources.openapi.MAX_NESTING`;
- ``no_stateful_collection``: its collection has no create and read, or no object schema with scalar fields (an
  RPC path, ``/#Action=TagResource``: its name groups it with no resource, :mod:`envfactory_assets.sources.rpc`);
- ``not_modelled``: a path a resource has, by a method its kind does not use (``PUT /orders``), or
  a second operation of one kind (a second search).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from envfactory_assets.sources.actions import action_verb, split_action_path
from envfactory_assets.sources.openapi import HTTP_METHODS, MAX_NESTING, Operation, Resource, is_format_segment
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.rpc_paths import rpc_operation_name

UNMAPPED_REASONS = (
    "beyond_resource_cap",
    "action_without_state",
    "nested_too_deep",
    "no_stateful_collection",
    "not_modelled",
)


@dataclass(frozen=True)
class OperationCoverage:
    """One operation of a document: ``kind`` it became (None when unmapped) or the ``reason`` it did not."""

    method: str
    path: str
    kind: str | None
    reason: str | None = None


def _operations(resources: list[Resource]) -> list[Operation]:
    """The operations ``resources`` implement: their own, their actions, and those of their relations whose two
    resources are both among them."""
    names = {r.name for r in resources}
    return [
        op
        for r in resources
        for op in [
            *r.operations.values(),
            *r.actions,
            *r.transfers,
            *r.side_effects,
            *r.computed,
            *(o for rel in r.relations if rel.member in names for o in rel.operations.values()),
        ]
    ]


def _mapped(resources: list[Resource], spec: dict[str, Any]) -> dict[tuple[str, str], str]:
    """``{(method, path): kind}`` of the operations ``resources`` implement; an RPC path's other methods are the same
    operation in another encoding (the query protocol's GET and POST of ``/#Action=CreateGroup``) and count too."""
    out: dict[tuple[str, str], str] = {}
    paths = spec.get("paths") if isinstance(spec.get("paths"), dict) else {}
    for op in _operations(resources):
        out.setdefault((op.method.lower(), op.path), op.kind)
        item = paths.get(op.path)
        if rpc_operation_name(op.path, paths) and isinstance(item, dict):
            for method in HTTP_METHODS:
                if method in item:
                    out.setdefault((method, op.path), op.kind)
    return out


def _stem(path: str) -> str:
    """The collection path an operation belongs to: the path without a trailing parameter or action verb."""
    action = split_action_path(path)
    base = action[0] if action else path
    segs = [s for s in base.strip("/").split("/") if s]
    if segs and segs[-1].startswith("{"):
        segs = segs[:-1]
    return "/" + "/".join(segs)


def operation_coverage(
    spec: dict[str, Any], max_resources: int | None = None, resources: list[Resource] | None = None
) -> list[OperationCoverage]:
    """Every operation of ``spec``, in path order, with the kind it becomes when at most ``max_resources``
    resources are kept (None: all), or its unmapped reason (module docstring). ``resources``: the document's
    :func:`~envfactory_assets.sources.resources.extract_resources`, when the caller has it already.

    Raises:
        SpecError: as :func:`~envfactory_assets.sources.resources.extract_resources`.
    """
    every = extract_resources(spec) if resources is None else resources
    kept = _mapped(every[:max_resources] if max_resources else every, spec)
    mapped_anywhere = _mapped(every, spec)
    resource_stems = {_stem(op.path) for op in _operations(every)}
    out: list[OperationCoverage] = []
    for path, item in spec.get("paths", {}).items():
        if not isinstance(path, str) or not isinstance(item, dict):
            continue
        for method in HTTP_METHODS:
            if method not in item:
                continue
            kind = kept.get((method, path))
            if kind is not None:
                out.append(OperationCoverage(method, path, kind))
                continue
            action = split_action_path(path)
            if (method, path) in mapped_anywhere:
                reason = "beyond_resource_cap"
            elif path.count("{") - sum(1 for s in path.split("/") if is_format_segment(s)) > MAX_NESTING:
                reason = "nested_too_deep"
            elif action is not None and method == "post" and action_verb(action[1]) is None:
                reason = "action_without_state"
            elif _stem(path) in resource_stems:
                reason = "not_modelled"
            else:
                reason = "no_stateful_collection"
            out.append(OperationCoverage(method, path, None, reason))
    return out


def summarize(coverage: list[OperationCoverage]) -> dict[str, Any]:
    """``{"operations", "mapped", "by_kind": {kind: n}, "unmapped": {reason: n}}`` of one or more documents."""
    return {
        "operations": len(coverage),
        "mapped": sum(1 for c in coverage if c.kind),
        "by_kind": dict(Counter(c.kind for c in coverage if c.kind)),
        "unmapped": dict(Counter(c.reason for c in coverage if not c.kind)),
    }


def count_operations(spec: Any) -> int:
    """Operations (a path and one of :data:`HTTP_METHODS`) of a parsed document; 0 for one without paths."""
    paths = spec.get("paths") if isinstance(spec, dict) else None
    if not isinstance(paths, dict):
        return 0
    return sum(1 for item in paths.values() if isinstance(item, dict) for m in HTTP_METHODS if m in item)
