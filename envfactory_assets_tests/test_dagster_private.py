"""The adapter over Dagster's private modules works with the installed Dagster: each function runs on a real
graph and instance, so an upgrade that moves or changes a private name fails here, not in a run."""

from __future__ import annotations

import dagster as dg

from envfactory_assets.defs.dagster_private import asset_graph, stale_asset_keys


def _graph_defs(b_version: str) -> list:
    @dg.asset(code_version="1")
    def upstream() -> int:
        return 1

    @dg.asset(code_version=b_version)
    def downstream(upstream: int) -> int:
        return upstream + 1

    @dg.asset(code_version="1")
    def never_run() -> int:
        return 0

    @dg.asset_check(asset=upstream, blocking=True)
    def upstream_is_positive(upstream: int) -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=upstream > 0)

    return [upstream, downstream, never_run, upstream_is_positive]


def test_asset_graph_reads_keys_parents_checks_and_order():
    graph = asset_graph(_graph_defs("1"))
    up, down = dg.AssetKey("upstream"), dg.AssetKey("downstream")
    assert set(graph.get_all_asset_keys()) == {up, down, dg.AssetKey("never_run")}
    assert graph.get(down).parent_keys == {up}
    assert graph.get(down).partitions_def is None
    [check] = graph.get_check_keys_for_assets({up})
    assert check.name == "upstream_is_positive" and graph.get_check_spec(check).blocking
    order = list(graph.toposorted_asset_keys)
    assert order.index(up) < order.index(down)


def test_stale_asset_keys_sees_a_changed_code_version():
    instance = dg.DagsterInstance.ephemeral()
    first = _graph_defs("1")
    assert dg.materialize(first[:2], instance=instance).success  # never_run stays unmaterialized
    assert stale_asset_keys(instance, asset_graph(first)) == []
    changed = _graph_defs("2")  # downstream's code changed since it was materialized
    assert stale_asset_keys(instance, asset_graph(changed)) == [dg.AssetKey("downstream")]
