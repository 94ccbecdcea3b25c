"""What a selection of assets means for a run: the op names it picks, the part of a config file that
applies to it, and whether its upstream assets exist. Every function takes the asset graph it works on,
so a second code location (or a test's subset) is checked against its own graph."""

from __future__ import annotations

from typing import Any

import dagster as dg

from envfactory_assets.defs.partitions import ON_DEMAND_TAG


class SelectionError(ValueError):
    """A selection or run config that cannot be used with the graph; the message names the input."""


def on_demand(graph: Any, key: Any) -> bool:
    """Whether the asset ``key`` of ``graph`` carries :data:`ON_DEMAND_TAG` (materialized only when selected)."""
    return (graph.get(key).tags or {}).get(ON_DEMAND_TAG) == "true"


def op_names(graph: Any, keys: Any = None) -> set[str]:
    """Op (step) names of ``keys`` in ``graph`` (default: every asset)."""
    return {graph.get(k).assets_def.node_def.name for k in (keys if keys is not None else graph.get_all_asset_keys())}


def selected_ops(graph: Any, selection: Any) -> set[str]:
    """Op names of the assets ``selection`` picks in ``graph``.

    Raises:
        SelectionError: the selection is invalid or selects nothing.
    """
    try:
        keys = dg.AssetSelection.from_coercible(selection).resolve(graph)
    except Exception as exc:  # Dagster raises several error types for a bad selection
        raise SelectionError(f"--select {selection!r} is not a valid asset selection: {exc}") from None
    if not keys:
        raise SelectionError(f"--select {selection!r} selects no asset")
    return op_names(graph, keys)


def config_for_selection(graph: Any, run_config: dict[str, Any], selection: Any) -> dict[str, Any]:
    """Drop op config of assets outside ``selection``, so one config file serves every partial run.

    Raises:
        SelectionError: ``ops`` is not a mapping, names an op ``graph`` does not have, or the selection is invalid.
    """
    ops_config = run_config.get("ops", {})
    if not isinstance(ops_config, dict):
        raise SelectionError(f"config 'ops' must be a mapping of asset name to config, got {type(ops_config).__name__}")
    known = op_names(graph)
    unknown = sorted(set(ops_config) - known)
    if unknown:
        raise SelectionError(f"config names unknown assets {unknown}; known: {sorted(known)}")
    if not selection:
        return run_config
    selected = selected_ops(graph, selection)
    return {**run_config, "ops": {op: cfg for op, cfg in ops_config.items() if op in selected}}


def check_selection_runnable(graph: Any, instance: Any, selection: Any, store_exists: bool) -> list[str]:
    """Refuse, before any run starts, a selection whose steps cannot run: an asset outside it that one of
    its assets reads was never materialized on ``instance`` (or the store does not exist while one is
    needed). Returns the assets the selection adds because they share a step with selected ones
    (``sft_dataset`` brings ``rl_dataset``).

    Raises:
        SelectionError: one line naming the upstream assets to materialize first.
    """
    if not selection:
        return []
    picked = dg.AssetSelection.from_coercible(selection)
    try:
        keys = picked.resolve(graph)
        full = picked.required_multi_asset_neighbors().resolve(graph)
    except Exception as exc:  # Dagster raises several error types for a bad selection
        raise SelectionError(f"--select {selection!r} is not a valid asset selection: {exc}") from None
    upstream = {parent for key in full for parent in graph.get(key).parent_keys} - set(full)
    missing = sorted(k.to_user_string() for k in upstream if instance.get_latest_materialization_event(k) is None)
    names = ", ".join(sorted(k.to_user_string() for k in full))
    if missing:
        hint = f'envfactory run --select "*{missing[0]}"' if len(missing) == 1 else "envfactory run"
        also = "run the whole graph (envfactory run)"
        if any(on_demand(graph, k) for k in upstream if k.to_user_string() in missing):
            # an on-demand asset (an ablation step) is never in a plain run: name the run that makes it
            hint, also = f"envfactory run --select {','.join(missing)} --partition ARM", "envfactory ablations"
        raise SelectionError(
            f"--select {selection!r} cannot run yet: {names} read{'s' if len(full) == 1 else ''} "
            f"{', '.join(missing)}, which {'was' if len(missing) == 1 else 'were'} never materialized "
            f"in this ENVFACTORY_HOME; materialize {'it' if len(missing) == 1 else 'them'} first "
            f"({hint}) or {also}"
        )
    if upstream and not store_exists:
        raise SelectionError(
            f"--select {selection!r} cannot run: {names} read the store, which does not exist yet "
            f"(was ENVFACTORY_HOME moved or emptied?); run the whole graph first (envfactory run)"
        )
    return sorted(k.to_user_string() for k in set(full) - set(keys))
