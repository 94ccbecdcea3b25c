"""The stateful resources of an OpenAPI 3 document: its collections' (:mod:`.openapi`) and the things its RPC
operations name (:mod:`.rpc`), with the relations between them (:mod:`.relations`), best-covered first. Kept
apart from all three so that :mod:`.relations` and :mod:`.rpc` can read documents with :mod:`.openapi`'s readers
and none imports its caller."""

from __future__ import annotations

from typing import Any

from envfactory_assets.sources.openapi import Resource, collection_resources
from envfactory_assets.sources.relations import attach_relations
from envfactory_assets.sources.rpc import rpc_resources

__all__ = ["extract_resources"]


def extract_resources(spec: dict[str, Any], max_resources: int | None = None) -> list[Resource]:
    """Find the stateful resources of an OpenAPI 3 document, best-covered first, at most ``max_resources``
    of them when given (writable collections first: an environment's tables are capped, and reads of seeded
    rows teach less).

    Collections at most :data:`~envfactory_assets.sources.openapi.MAX_NESTING` path parameters deep are used,
    keyed to their nearest parent; operations of RPC paths (``/#Action=CreateGroup``) are grouped by the thing
    they name (:func:`~envfactory_assets.sources.rpc.rpc_resources`); sub-collections whose items are rows of
    another resource are relations kept on their parent (:func:`~envfactory_assets.sources.relations.attach_relations`).

    Raises:
        SpecError: if the document is not OpenAPI 3 or has no ``paths`` object.
    """
    resources, items, collections = collection_resources(spec)
    # an RPC document's operations grouped by the thing they name, beside any collections it has
    resources.extend(r for r in rpc_resources(spec, {r.name for r in resources}) if r.is_stateful)
    resources = attach_relations(spec, resources, items, collections)
    resources.sort(
        key=lambda r: (r.read_only, -r.n_operations, r.parent_key is not None, r.singleton, -len(r.fields), r.name)
    )
    return resources[:max_resources] if max_resources else resources
