"""Incremental re-synthesis in Dagster: the resource sensor, the nightly schedule, the gated automation
conditions and the resynthesis job (running the graph from outside Dagster is in ``runner``)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


@dg.sensor(
    name="resource_files",
    minimum_interval_seconds=60,
    asset_selection=PER_ENVIRONMENT,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Watches the OpenAPI corpus and $ENVFACTORY_HOME/resources: adds environment partitions "
    "for new user documents and re-synthesizes the partitions whose document changed.",
)
def resource_files(context: dg.SensorEvaluationContext, envfactory: EnvFactoryHome) -> dg.SensorResult:
    """One tick: snapshot the watched folders, compare with the cursor, request one run per changed
    partition (run key ``<partition>@<sha256 prefix>``: the same content never runs twice)."""
    source_config = last_source_config(context.instance)
    corpus = Path(source_config["corpus_dir"]) if source_config.get("corpus_dir") else envfactory.corpus_dir()
    user_dir = user_resources_dir(envfactory)
    state = decode_cursor(context.cursor)
    previous, complete = state or ({}, False)
    current, left = snapshot([corpus, user_dir], previous)
    todo = plan(
        previous if complete else None,
        current,
        context.instance.get_dynamic_partitions(environment_partitions.name),
        [user_dir],
    )
    run_config = {"ops": {"source_resources": {"config": source_config}}} if source_config else {}
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=rk,
                partition_key=key,
                run_config=run_config,
                asset_selection=[dg.AssetKey(a) for a in PER_ENVIRONMENT],
            )
            for key, rk in todo.runs
        ],
        dynamic_partitions_requests=[environment_partitions.build_add_request(todo.new_partitions)]
        if todo.new_partitions
        else [],
        cursor=encode_cursor(current, complete or left == 0),
    )


resynthesis_job = dg.define_asset_job(
    "resynthesis",
    selection=SPANNING,
    description="The tool graph and everything after it; chains and trajectories that touch no changed "
    "environment are reused as they are.",
)


@dg.schedule(
    name="nightly_resynthesis",
    cron_schedule="0 3 * * *",
    job=resynthesis_job,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.STOPPED,
)
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
    "gated_automation",
    target=SPANNING,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Evaluates the gated automation conditions of the tool graph and later stages.",
)


def with_gated_automation(assets: Sequence[Any]) -> list[Any]:
    """``assets`` with :data:`GATED` as the automation condition of the stages from the tool graph to the
    datasets (checkpoints train on request only)."""
    gated = {"tool_graph", "tool_chains", "raw_trajectories", "refined_trajectories", "sft_dataset", "rl_dataset"}
    return list(
        dg.map_asset_specs(
            lambda spec: (
                spec.replace_attributes(automation_condition=GATED) if spec.key.to_user_string() in gated else spec
            ),
            assets,
        )
    )
