"""Materializing a selection of the asset graph in-process, the way ``envfactory run`` does (and the ablation
assets do, in each arm's own home): the phases of a run, the partition keys a run may name, the Dagster
instance of a home, and the on-demand assets a plain run leaves out."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from envfactory_assets import settings
from envfactory_assets.defs.common import UpstreamGates
from envfactory_assets.defs.dagster_private import asset_graph
from envfactory_assets.defs.incremental import PARTITIONED
from envfactory_assets.defs.partitions import arm_partitions, environment_partitions
from envfactory_assets.defs.selection import config_for_selection, on_demand

#: job name of a run of the whole graph (the UI lists a run under its job's name)
PIPELINE_JOB = "envfactory_run"

DAGSTER_YAML = """\
# Written by envfactory. The store takes one writer at a time: the envfactory_store pool runs one step at once.
telemetry:
  enabled: false
concurrency:
  pools:
    default_limit: 1
"""


def prepare_dagster_home(home: Path) -> Path:
    """Create ``DAGSTER_HOME`` under ``home`` (``<home>/dagster``) with its ``dagster.yaml``; returns the path."""
    dagster_home = settings.dagster_home(home)
    dagster_home.mkdir(parents=True, exist_ok=True)
    config = dagster_home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    return dagster_home


@contextlib.contextmanager
def home_environment(home: Path) -> Iterator[None]:
    """``ENVFACTORY_HOME`` and ``DAGSTER_HOME`` pointed at ``home`` (and its ``dagster`` folder) for the block,
    restored after it: code that reads ``$ENVFACTORY_HOME`` at run time then sees ``home``."""
    saved = {k: os.environ.get(k) for k in ("ENVFACTORY_HOME", "DAGSTER_HOME")}
    os.environ["ENVFACTORY_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(settings.dagster_home(home))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def plain_run_assets(graph: Any) -> set[str]:
    """The assets a run without a selection materializes: every asset of ``graph`` but the on-demand ones."""
    return {k.to_user_string() for k in graph.get_all_asset_keys() if not on_demand(graph, k)}


def adjacent_blocks(order: Sequence[str], chosen: Sequence[str]) -> list[list[str]]:
    """``chosen`` split into the blocks of keys that are adjacent in ``order`` (the partitions' own order), each
    block in that order: a block is one partition-range run. Keys not in ``order`` are left out."""
    position = {k: i for i, k in enumerate(order)}
    ranked = sorted({k for k in chosen if k in position}, key=position.__getitem__)
    blocks: list[list[str]] = []
    for key in ranked:
        if blocks and position[key] == position[blocks[-1][-1]] + 1:
            blocks[-1].append(key)
        else:
            blocks.append([key])
    return blocks


def _partition_tags(block: Sequence[str]) -> dict[str, str]:
    if len(block) == 1:
        return {"dagster/partition": block[0]}
    return {"dagster/asset_partition_range_start": block[0], "dagster/asset_partition_range_end": block[-1]}


def check_partitions(instance: dg.DagsterInstance, partitions: Sequence[str]) -> None:
    """Raise ValueError (one line) when ``partitions`` names keys that are neither ``environment`` partitions
    nor ablation arms."""
    keys = list(instance.get_dynamic_partitions(environment_partitions.name))
    arms = arm_partitions.get_partition_keys()
    unknown = sorted(set(partitions) - set(keys) - set(arms))
    if unknown:
        raise ValueError(
            f"--partition names keys that are neither environment partitions nor ablation arms: {unknown}; "
            f"environments: {keys[:20]}; arms: {arms}"
        )


def _run_job(
    assets: Sequence[Any], job_name: str, selection: Sequence[str], resources: Mapping[str, Any], **execute: Any
) -> dg.ExecuteInProcessResult:
    """``dg.materialize`` under a job of our name: the same job Dagster builds for it, named ``job_name``;
    ``execute`` goes to ``execute_in_process``."""
    defs = dg.Definitions(
        assets=assets, jobs=[dg.define_asset_job(name=job_name, selection=selection)], resources=resources
    )
    defs.resolve_all_job_defs()  # an unsatisfied resource or a broken graph fails here, before the run
    return defs.resolve_job_def(job_name).execute_in_process(**execute)


def _phases(
    graph: Any, chosen: set[str], instance: dg.DagsterInstance, partitions: Sequence[str] | None
) -> list[tuple[list[str], list[dict[str, str]]]]:
    """``[(asset names, tag sets: one run each)]`` after ``source_resources``: the pipeline's assets (the
    environment-partitioned stages over ``partitions``, default all, in one run; named keys in one run per block
    of keys adjacent in the partitions' order), then each ablation arm's
    partitioned assets (one run per arm of ``partitions``, default every arm), then the on-demand assets
    that read them (the report)."""
    partitioned_by_arm = {
        k.to_user_string() for k in graph.get_all_asset_keys() if graph.get(k).partitions_def == arm_partitions
    }
    demand = {k.to_user_string() for k in graph.get_all_asset_keys() if on_demand(graph, k)}
    main = sorted(chosen - {"source_resources"} - demand)
    arms = sorted(chosen & partitioned_by_arm)
    after = sorted((chosen & demand) - partitioned_by_arm)
    out: list[tuple[list[str], list[dict[str, str]]]] = []
    if main:
        all_keys = list(instance.get_dynamic_partitions(environment_partitions.name))
        keys = all_keys if partitions is None else [k for k in all_keys if k in set(partitions)]
        if set(main) & set(PARTITIONED) and not keys:
            raise ValueError("there are no environment partitions yet: materialize source_resources first")
        if not set(main) & set(PARTITIONED):
            out.append((main, [{}]))
        elif partitions is None:  # every partition in one run (single-run backfill policy)
            out.append(
                (
                    main,
                    [{"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}],
                )
            )
        else:  # one run per block of keys adjacent in the partitions' order (a run costs seconds to start)
            out.append((main, [_partition_tags(block) for block in adjacent_blocks(all_keys, keys)]))
    if arms:
        names = arm_partitions.get_partition_keys()
        wanted = [a for a in names if partitions is None or a in set(partitions)]
        if not wanted:
            raise ValueError(f"--partition names no ablation arm for {', '.join(arms)}; arms: {names}")
        out.append((arms, [{"dagster/partition": a} for a in wanted]))
    if after:
        out.append((after, [{}]))
    return out


def _chosen_assets(graph: Any, selection: Any) -> set[str]:
    """The assets a run of ``selection`` (None: a plain run) materializes. An asset written by one step
    together with others (sft_dataset and rl_dataset) cannot run alone, so the selection takes the step's
    other assets too, as Dagster's own ``required_multi_asset_neighbors`` does."""
    if selection is None:
        return plain_run_assets(graph)
    return {
        k.to_user_string()
        for k in dg.AssetSelection.from_coercible(selection).required_multi_asset_neighbors().resolve(graph)
    }


def assets_left(assets: Sequence[Any], selection: Any, results: Sequence[Any]) -> list[str]:
    """The assets of ``selection`` (None: a plain run) that none of ``results`` (the runs of one
    :func:`materialize_pipeline` call) materialized, upstream first: what a re-run of the same command
    with ``--select`` of these names still has to build after a run stopped. A partitioned asset with at
    least one partition materialized counts as built.

    Raises:
        dagster.DagsterInvalidSubsetError: ``selection`` names an asset that ``assets`` does not define.
    """
    graph = asset_graph([a for a in assets if isinstance(a, dg.AssetsDefinition)])
    chosen = _chosen_assets(graph, selection)
    built = {e.asset_key.to_user_string() for r in results for e in r.get_asset_materialization_events()}
    return [name for key in graph.toposorted_asset_keys if (name := key.to_user_string()) in chosen - built]


def materialize_pipeline(
    assets: Sequence[Any],
    instance: dg.DagsterInstance,
    resources: Mapping[str, Any],
    run_config: Mapping[str, Any] | None = None,
    selection: Any = None,
    partitions: Sequence[str] | None = None,
    raise_on_error: bool = True,
    tags: Mapping[str, str] | None = None,
    job_name: str = PIPELINE_JOB,
) -> list[dg.ExecuteInProcessResult]:
    """Materialize ``selection`` (default: everything but the on-demand assets, :data:`ON_DEMAND_TAG`)
    in-process, the way ``envfactory run`` does.

    Phase 1 runs ``source_resources`` alone when selected (it sets the ``environment`` partitions); phase 2
    runs the pipeline's other selected assets in one run (an asset that shares its step with others, like
    ``sft_dataset`` with ``rl_dataset``, brings them along), the partitioned stages over ``partitions``
    (default: all) at once; then the selected ablation assets, one run per arm named in ``partitions``
    (default: every arm), then the on-demand assets downstream of them (:func:`_phases`).
    Returns the results of the runs made (later runs are skipped once one fails). ``tags`` go on every run.
    Phase 2's runs belong to a job named ``job_name`` (``runner.materialize.run_job_name``), phase 1's to
    ``<job_name>__sources``.

    Raises:
        ValueError: ``partitions`` names keys that are not partitions, or a partitioned stage is selected
            while there are no partitions.
    """
    graph = asset_graph([a for a in assets if isinstance(a, dg.AssetsDefinition)])
    # the gates of these runs are the blocking checks of this graph, whatever other graph a caller defined
    resources = {"upstream_gates": UpstreamGates.of(graph), **resources}
    chosen = _chosen_assets(graph, selection)
    run_config = dict(run_config or {})
    results = []
    if "source_resources" in chosen:
        first = _run_job(
            assets,
            f"{job_name}__sources",
            ["source_resources"],
            resources,
            instance=instance,
            run_config=config_for_selection(graph, run_config, ["source_resources"]),
            raise_on_error=raise_on_error,
            tags=dict(tags or {}),
        )
        results.append(first)
        if not first.success:
            return results
    if partitions is not None:  # after phase 1, which adds the partitions of new documents
        check_partitions(instance, partitions)
    for names, tag_sets in _phases(graph, chosen, instance, partitions):
        for run_tags in tag_sets:
            result = _run_job(
                assets,
                job_name,
                names,
                resources,
                instance=instance,
                run_config=config_for_selection(graph, run_config, names),
                tags={**(tags or {}), **run_tags},
                raise_on_error=raise_on_error,
            )
            results.append(result)
            if not result.success:
                return results
    return results


def latest_partition_metadata(instance: dg.DagsterInstance, asset: str, name: str) -> dict[str, Any]:
    """``{partition key: the value of metadata entry name}`` of each partition's latest materialization of
    ``asset`` on ``instance`` (None where that materialization has no such entry); partitions never
    materialized are absent. Reads every materialization event of the asset, newest first, 1,000 at a time."""
    latest: dict[str, Any] = {}
    cursor = None
    while True:
        page = instance.fetch_materializations(dg.AssetKey(asset), limit=1000, cursor=cursor)
        for record in page.records:
            key = record.partition_key
            if key is not None and key not in latest:
                entry = record.asset_materialization.metadata.get(name) if record.asset_materialization else None
                latest[key] = getattr(entry, "value", None)
        if not page.has_more:
            return latest
        cursor = page.cursor
