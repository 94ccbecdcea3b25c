"""Two-phase materialization of the asset graph (what ``envfactory run`` and the tests use), the names of its
runs' jobs, and the stale assets after a run."""

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from envfactory_assets.defs.common import UpstreamGates
from envfactory_assets.defs.dagster_private import asset_graph, stale_asset_keys
from envfactory_assets.defs.incremental import PARTITIONED
from envfactory_assets.defs.partitions import environment_partitions
from envfactory_assets.runner.selection import config_for_selection


def check_partitions(instance: dg.DagsterInstance, partitions: Sequence[str]) -> None:
    """Raise ValueError (one line) when ``partitions`` names keys that are not ``environment`` partitions."""
    keys = list(instance.get_dynamic_partitions(environment_partitions.name))
    unknown = sorted(set(partitions) - set(keys))
    if unknown:
        raise ValueError(f"--partition names keys that are not environment partitions: {unknown}; known: {keys[:20]}")


#: job name of a run of the whole graph (the UI lists a run under its job's name)
PIPELINE_JOB = "envfactory_run"
_SLUG_WORDS = {"+": "_plus_", "*": "_all_", ",": "__", ":": "_", "/": "_"}
_MAX_JOB_NAME = 80


def run_job_name(selection: str | None, prefix: str = PIPELINE_JOB) -> str:
    """The job name of an ``envfactory run [--select SELECTION]``: ``prefix`` (``envfactory_run``) for the
    whole graph, else ``<prefix>__`` and the selection spelt with Dagster's name characters (``+`` as
    ``plus``, ``*`` as ``all``, ``,`` as ``__``; ``refined_trajectories+`` gives
    ``envfactory_run__refined_trajectories_plus``). Dagster's ``materialize`` would name every run
    ``__ephemeral_asset_job__``.

    A name over 80 characters is cut and ends with 8 hex digits of the selection's hash, so two selections
    never share a name by being cut; spellings that differ only in marks (``a+b``, ``a_plus_b``) share one,
    and the run's ``envfactory/command`` tag keeps the exact text.
    """
    if not selection or not selection.strip():
        return prefix
    text = selection.strip()
    for mark, word in _SLUG_WORDS.items():
        text = text.replace(mark, word)
    slug = re.sub(r"_{3,}", "__", re.sub(r"[^A-Za-z0-9_]+", "_", text)).strip("_") or "selection"
    name = f"{prefix}__{slug}"
    if len(name) > _MAX_JOB_NAME:
        digest = hashlib.sha256(selection.encode()).hexdigest()[:8]
        name = f"{name[: _MAX_JOB_NAME - 9].rstrip('_')}_{digest}"
    return name


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
    """Materialize ``selection`` (default: everything) in-process, the way ``envfactory run`` does.

    Phase 1 runs ``source_resources`` alone when selected (it sets the ``environment`` partitions); phase 2
    runs the rest in one run (an asset that shares its step with others, like ``sft_dataset`` with
    ``rl_dataset``, brings them along), the partitioned stages over ``partitions`` (default: all) at once.
    Returns the results of the runs made (phase 2 is skipped when phase 1 fails). ``tags`` go on every run.
    Phase 2's runs belong to a job named ``job_name`` (:func:`run_job_name`), phase 1's to
    ``<job_name>__sources``.

    Raises:
        ValueError: ``partitions`` names keys that are not partitions, or a partitioned stage is selected
            while there are no partitions.
    """
    graph = asset_graph([a for a in assets if isinstance(a, dg.AssetsDefinition)])
    # the gates of these runs are the blocking checks of this graph, whatever other graph a caller defined
    resources = {"upstream_gates": UpstreamGates.of(graph), **resources}
    all_keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    # An asset written by one step together with others (sft_dataset and rl_dataset) cannot run alone, so
    # the selection takes the step's other assets too, as Dagster's own required_multi_asset_neighbors does.
    chosen = (
        {
            k.to_user_string()
            for k in dg.AssetSelection.from_coercible(selection).required_multi_asset_neighbors().resolve(graph)
        }
        if selection is not None
        else all_keys
    )
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
    rest = sorted(chosen - {"source_resources"})
    if not rest:
        return results
    keys = list(instance.get_dynamic_partitions(environment_partitions.name))
    if partitions is not None:
        check_partitions(instance, partitions)
        keys = [k for k in keys if k in set(partitions)]
    if set(rest) & set(PARTITIONED) and not keys:
        raise ValueError("there are no environment partitions yet: materialize source_resources first")
    if not set(rest) & set(PARTITIONED):
        tag_sets = [{}]
    elif partitions is None:  # every partition in one run (single-run backfill policy)
        tag_sets = [{"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}]
    else:
        tag_sets = [{"dagster/partition": k} for k in keys]
    for run_tags in tag_sets:
        result = _run_job(
            assets,
            job_name,
            rest,
            resources,
            instance=instance,
            run_config=config_for_selection(graph, run_config, rest),
            tags={**(tags or {}), **run_tags},
            raise_on_error=raise_on_error,
        )
        results.append(result)
        if not result.success:
            break
    return results


def stale_assets(instance: dg.DagsterInstance, assets: Sequence[Any]) -> list[str]:
    """Unpartitioned assets that were materialized and are now stale by Dagster's rules (an upstream data
    version or their code version changed since), in graph order; never-materialized ones are left out.

    Uses Dagster's stale-status resolver (the one behind the UI's "Stale" badge).
    """
    graph = asset_graph([a for a in assets if isinstance(a, dg.AssetsDefinition)])
    return [key.to_user_string() for key in stale_asset_keys(instance, graph)]
