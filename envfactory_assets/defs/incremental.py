"""Incremental re-synthesis in Dagster: the resource sensor, the nightly schedule, the gated automation
conditions, and the two-phase materialization the CLI and tests use."""

from pathlib import Path
from typing import Any, Mapping, Sequence

import dagster as dg

from envfactory_assets.defs.partitions import environment_partitions
from envfactory_assets.defs.resources import EnvFactoryHome, user_resources_dir
from envfactory_assets.incremental.watch import decode_cursor, encode_cursor, plan, snapshot

PER_ENVIRONMENT = ["source_resources", "environments", "verified_environments"]
PARTITIONED = ["environments", "verified_environments"]
SPANNING = dg.AssetSelection.assets("tool_graph").downstream()

# Automation: a downstream asset updates when its dependencies did, and only while every blocking check on
# them passed, so failed data never flows on even when stages run in separate runs.
GATED = dg.AutomationCondition.eager() & dg.AutomationCondition.all_deps_blocking_checks_passed()


def last_source_config(instance: dg.DagsterInstance) -> dict[str, Any]:
    """The ``source_resources`` config of the latest run that materialized it ({} when none), so runs the
    sensor starts scan the same folders with the same selection."""
    event = instance.get_latest_materialization_event(dg.AssetKey("source_resources"))
    run = instance.get_run_by_id(event.run_id) if event else None
    config = ((run.run_config or {}).get("ops", {}).get("source_resources", {}).get("config", {})) if run else {}
    return dict(config)


@dg.sensor(name="resource_files", minimum_interval_seconds=60, asset_selection=PER_ENVIRONMENT,
           default_status=dg.DefaultSensorStatus.STOPPED,
           description="Watches the OpenAPI corpus and $ENVFACTORY_HOME/resources: adds environment partitions "
                       "for new user documents and re-synthesizes the partitions whose document changed.")
def resource_files(context: dg.SensorEvaluationContext, envfactory: EnvFactoryHome) -> dg.SensorResult:
    """One tick: snapshot the watched folders, compare with the cursor, request one run per changed
    partition (run key ``<partition>@<sha256 prefix>``: the same content never runs twice)."""
    source_config = last_source_config(context.instance)
    corpus = Path(source_config["corpus_dir"]) if source_config.get("corpus_dir") else envfactory.corpus_dir()
    user_dir = user_resources_dir(envfactory)
    state = decode_cursor(context.cursor)
    previous, complete = (state or ({}, False))
    current, left = snapshot([corpus, user_dir], previous)
    todo = plan(previous if complete else None, current, context.instance.get_dynamic_partitions(
        environment_partitions.name), [user_dir])
    run_config = {"ops": {"source_resources": {"config": source_config}}} if source_config else {}
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=rk, partition_key=key, run_config=run_config,
                                    asset_selection=[dg.AssetKey(a) for a in PER_ENVIRONMENT])
                      for key, rk in todo.runs],
        dynamic_partitions_requests=[environment_partitions.build_add_request(todo.new_partitions)]
        if todo.new_partitions else [],
        cursor=encode_cursor(current, complete or left == 0))


resynthesis_job = dg.define_asset_job(
    "resynthesis", selection=SPANNING,
    description="The tool graph and everything after it; chains and trajectories that touch no changed "
                "environment are reused as they are.")


@dg.schedule(name="nightly_resynthesis", cron_schedule="0 3 * * *", job=resynthesis_job, execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED)
def nightly_resynthesis(context: dg.ScheduleEvaluationContext):
    """Nightly at 03:00 UTC: re-synthesize the spanning stages when an environment was verified again since
    the tool graph was last built; skip otherwise. Run key: the run of the newest verification, so one change
    is re-synthesized once."""
    verified = context.instance.get_latest_materialization_event(dg.AssetKey("verified_environments"))
    graph = context.instance.get_latest_materialization_event(dg.AssetKey("tool_graph"))
    if verified is None:
        return dg.SkipReason("no environment verified yet: run `envfactory run` first")
    if graph is not None and graph.timestamp > verified.timestamp:
        return dg.SkipReason("no environment changed since the tool graph was built")
    return dg.RunRequest(run_key=f"resynthesis-after-{verified.run_id}")


gated_automation = dg.AutomationConditionSensorDefinition(
    "gated_automation", target=SPANNING, default_status=dg.DefaultSensorStatus.STOPPED,
    description="Evaluates the gated automation conditions of the tool graph and later stages.")


def with_gated_automation(assets: Sequence[Any]) -> list[Any]:
    """``assets`` with :data:`GATED` as the automation condition of the stages from the tool graph to the
    datasets (checkpoints train on request only)."""
    gated = {"tool_graph", "tool_chains", "raw_trajectories", "refined_trajectories", "sft_dataset", "rl_dataset"}
    return list(dg.map_asset_specs(
        lambda spec: spec.replace_attributes(automation_condition=GATED)
        if spec.key.to_user_string() in gated else spec, assets))


def check_partitions(instance: dg.DagsterInstance, partitions: Sequence[str]) -> None:
    """Raise ValueError (one line) when ``partitions`` names keys that are not ``environment`` partitions."""
    keys = list(instance.get_dynamic_partitions(environment_partitions.name))
    unknown = sorted(set(partitions) - set(keys))
    if unknown:
        raise ValueError(f"--partition names keys that are not environment partitions: {unknown}; "
                         f"known: {keys[:20]}")


def materialize_pipeline(assets: Sequence[Any], instance: dg.DagsterInstance, resources: Mapping[str, Any],
                         run_config: Mapping[str, Any] | None = None, selection: Any = None,
                         partitions: Sequence[str] | None = None,
                         raise_on_error: bool = True, tags: Mapping[str, str] | None = None
                         ) -> list[dg.ExecuteInProcessResult]:
    """Materialize ``selection`` (default: everything) in-process, the way ``envfactory run`` does.

    Phase 1 runs ``source_resources`` alone when selected (it sets the ``environment`` partitions); phase 2
    runs the rest in one run (an asset that shares its step with others, like ``sft_dataset`` with
    ``rl_dataset``, brings them along), the partitioned stages over ``partitions`` (default: all) at once.
    Returns the results of the runs made (phase 2 is skipped when phase 1 fails). ``tags`` go on every run.

    Raises:
        ValueError: ``partitions`` names keys that are not partitions, or a partitioned stage is selected
            while there are no partitions.
    """
    from envfactory_assets.cli import config_for_selection

    graph = dg.Definitions(assets=[a for a in assets if isinstance(a, dg.AssetsDefinition)], resources=resources
                           ).get_repository_def().asset_graph
    all_keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    # An asset written by one step together with others (sft_dataset and rl_dataset) cannot run alone, so
    # the selection takes the step's other assets too, as Dagster's own required_multi_asset_neighbors does.
    chosen = {k.to_user_string() for k in
              dg.AssetSelection.from_coercible(selection).required_multi_asset_neighbors().resolve(graph)} \
        if selection is not None else all_keys
    run_config = dict(run_config or {})
    results = []
    if "source_resources" in chosen:
        first = dg.materialize(assets, instance=instance, resources=resources, selection=["source_resources"],
                               run_config=config_for_selection(run_config, ["source_resources"]),
                               raise_on_error=raise_on_error, tags=dict(tags or {}))
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
        result = dg.materialize(assets, instance=instance, resources=resources, selection=rest,
                                run_config=config_for_selection(run_config, rest), tags={**(tags or {}), **run_tags},
                                raise_on_error=raise_on_error)
        results.append(result)
        if not result.success:
            break
    return results


def stale_assets(instance: dg.DagsterInstance, assets: Sequence[Any]) -> list[str]:
    """Unpartitioned assets that were materialized and are now stale by Dagster's rules (an upstream data
    version or their code version changed since), in graph order; never-materialized ones are left out.

    Uses Dagster's stale-status resolver (the one behind the UI's "Stale" badge).
    """
    from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
    from dagster._core.definitions.assets.graph.asset_graph import AssetGraph
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._time import get_current_datetime

    graph = AssetGraph.from_assets([a for a in assets if isinstance(a, dg.AssetsDefinition)])
    view = AssetGraphView(temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
                          instance=instance, asset_graph=graph)
    resolver = CachingStaleStatusResolver(instance=instance, asset_graph=graph, loading_context=view)
    out = []
    for key in graph.toposorted_asset_keys:
        if graph.get(key).partitions_def is None and resolver.get_status(key, None) == StaleStatus.STALE:
            out.append(key.to_user_string())
    return out
