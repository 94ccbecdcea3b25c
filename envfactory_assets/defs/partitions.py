"""The per-environment and per-arm partitions, the on-demand tag and the code versions of the assets."""

import dagster as dg

from envfactory_assets.ablations.plan import ARMS
from envfactory_assets.incremental.code_versions import code_version
from envfactory_assets.incremental.partitions import ENVIRONMENT_PARTITIONS

environment_partitions = dg.DynamicPartitionsDefinition(name=ENVIRONMENT_PARTITIONS)

# One run may process many environments (the default run builds all of them at once).
SINGLE_RUN = dg.BackfillPolicy.single_run()

_COMMON = ("envfactory_assets.store", "envfactory_assets.defs.common", "envfactory_assets.defs.resources")


def asset_code_version(*modules: str, files=()) -> str:
    """The code version of an asset running ``modules`` (plus the store and the shared defs helpers)."""
    return code_version(*_COMMON, *modules, files=files)


#: Tag of the assets a plain ``envfactory run`` and the ``full_pipeline`` job leave out: materialized only when
#: selected by name (the ablations: hours of synthesis and training per arm).
ON_DEMAND_TAG = "envfactory/on_demand"

#: One partition per ablation arm (``envfactory_assets.ablations.plan.ARMS``).
arm_partitions = dg.StaticPartitionsDefinition([arm.name for arm in ARMS])
