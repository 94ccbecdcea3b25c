"""Every use of Dagster's private modules (``dagster._core``, ``dagster._time``) in this project, in one place.

Dagster has no public API for an asset graph built from loose asset definitions (``UpstreamGates`` and the
runner's selection read parents, check specs and keys from it) nor for the stale-status resolver behind the
UI's "Stale" badge. Private modules can move in any Dagster release, so nothing else imports them;
``envfactory_assets_tests/test_dagster_private.py`` exercises each function here and fails when an upgrade
breaks one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph import AssetGraph


def asset_graph(definitions: Sequence[Any]) -> AssetGraph:
    """The asset graph of ``definitions`` (asset definitions, including asset checks' definitions).

    Offers ``get_all_asset_keys()``, ``get(key).parent_keys`` / ``.partitions_def``,
    ``get_check_keys_for_assets(keys)``, ``get_check_spec(check_key)`` and ``toposorted_asset_keys``.
    """
    return AssetGraph.from_assets(list(definitions))


def stale_asset_keys(instance: dg.DagsterInstance, graph: AssetGraph) -> list[dg.AssetKey]:
    """Unpartitioned assets of ``graph`` that Dagster calls stale (an upstream data version or their code version
    changed since their last materialization), in graph order; never-materialized assets are not stale."""
    from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._time import get_current_datetime

    view = AssetGraphView(
        temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
        instance=instance,
        asset_graph=graph,
    )
    resolver = CachingStaleStatusResolver(instance=instance, asset_graph=graph, loading_context=view)
    return [
        key
        for key in graph.toposorted_asset_keys
        if graph.get(key).partitions_def is None and resolver.get_status(key, None) == StaleStatus.STALE
    ]
