"""The Dagster code location: every asset, check, resource and job of EnvFactory-Assets."""

from __future__ import annotations

import dagster as dg

from envfactory_assets.defs.ablations import assets as ablation_assets
from envfactory_assets.defs.common import UpstreamGates
from envfactory_assets.defs.dagster_private import asset_graph
from envfactory_assets.defs.envgen import assets as envgen_assets
from envfactory_assets.defs.evaluation import assets as evaluation_assets
from envfactory_assets.defs.exports import assets as export_assets
from envfactory_assets.defs.graph import assets as graph_assets
from envfactory_assets.defs.incremental import (
    gated_automation,
    nightly_resynthesis,
    resource_files,
    resynthesis_job,
    with_gated_automation,
)
from envfactory_assets.defs.partitions import ON_DEMAND_TAG
from envfactory_assets.defs.resources import EnvFactoryHome, ModelBackend, VerificationGate
from envfactory_assets.defs.sources import assets as source_assets
from envfactory_assets.defs.sql.assets import sql_assets
from envfactory_assets.defs.synth import assets as synth_assets
from envfactory_assets.defs.training import assets as training_assets
from envfactory_assets.defs.viewer.jobs import show_trajectory

_MODULES = [source_assets, envgen_assets, graph_assets, synth_assets, training_assets]
_MODULES += [evaluation_assets, export_assets, ablation_assets]

#: The assets a plain run materializes: every asset but the on-demand ones (the ablations).
ON_DEMAND = dg.AssetSelection.tag(ON_DEMAND_TAG, "true")

full_pipeline_job = dg.define_asset_job(
    "full_pipeline",
    selection=dg.AssetSelection.all() - ON_DEMAND,
    description="Every stage from source_resources to checkpoints, evaluations and exports, plus the SQL marts.",
)

ALL_ASSETS = with_gated_automation([*dg.load_assets_from_modules(_MODULES), *sql_assets])
ALL_CHECKS = list(dg.load_asset_checks_from_modules(_MODULES))
# The gates are this graph's own blocking checks: a step's job holds only its selection, not its upstream checks.
RESOURCES = {
    "envfactory": EnvFactoryHome(),
    "model_backend": ModelBackend(),
    "verification_gate": VerificationGate(),
    "upstream_gates": UpstreamGates.of(asset_graph([*ALL_ASSETS, *ALL_CHECKS])),
}

defs = dg.Definitions(
    assets=ALL_ASSETS,
    asset_checks=ALL_CHECKS,
    resources=RESOURCES,
    jobs=[full_pipeline_job, resynthesis_job, show_trajectory],
    sensors=[resource_files, gated_automation],
    schedules=[nightly_resynthesis],
    # DuckDB takes one writer at a time: steps run one after another.
    executor=dg.multiprocess_executor.configured({"max_concurrent": 1}),
)
