"""Materialize one asset with a run config on an empty home and return how it failed (for settings tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def step_failure(
    asset: Any,
    settings: dict[str, Any],
    home: Path,
    resources: dict[str, Any] | None = None,
    partitions: list[str] | None = None,
) -> tuple[bool, str]:
    """``(run succeeded, message of the first step failure or "")`` after materializing ``asset`` alone with
    ``settings`` as its op config, in a throwaway Dagster instance, against an ``ENVFACTORY_HOME`` of ``home``.

    ``asset`` may be a multi-asset (its op is configured). ``resources`` add to (or replace) the default
    ``envfactory`` and ``model_backend`` / ``verification_gate`` / ``upstream_gates`` (no gate) resources;
    ``partitions`` become the
    instance's ``environment`` partitions, all of them materialized in one run when ``asset`` is partitioned.
    """
    import dagster as dg

    from envfactory_assets.defs.common import UpstreamGates
    from envfactory_assets.defs.partitions import environment_partitions
    from envfactory_assets.defs.resources import EnvFactoryHome, ModelBackend, VerificationGate

    given = {
        "envfactory": EnvFactoryHome(home=str(home)),
        "model_backend": ModelBackend(),
        "verification_gate": VerificationGate(),
        "upstream_gates": UpstreamGates(),
        **(resources or {}),
    }
    needed = asset.required_resource_keys
    tags = {}
    with dg.instance_for_test() as instance:
        if partitions:
            instance.add_dynamic_partitions(environment_partitions.name, partitions)
        if partitions and asset.partitions_def is not None:
            tags = {
                "dagster/asset_partition_range_start": partitions[0],
                "dagster/asset_partition_range_end": partitions[-1],
            }
        result = dg.materialize(
            [asset],
            instance=instance,
            raise_on_error=False,
            tags=tags,
            resources={k: v for k, v in given.items() if k in needed},
            run_config={"ops": {asset.node_def.name: {"config": settings}}},
        )
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return result.success, failures[0].event_specific_data.error.message if failures else ""
