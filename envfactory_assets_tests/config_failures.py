"""Materialize one asset with a run config on an empty home and return how it failed (for settings tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def step_failure(asset: Any, settings: dict[str, Any], home: Path) -> tuple[bool, str]:
    """``(run succeeded, message of the first step failure or "")`` after materializing ``asset`` alone with
    ``settings`` as its op config, in a throwaway Dagster instance, against an ``ENVFACTORY_HOME`` of ``home``."""
    import dagster as dg

    from envfactory_assets.defs.resources import EnvFactoryHome

    with dg.instance_for_test() as instance:
        result = dg.materialize([asset], instance=instance, raise_on_error=False,
                                resources={"envfactory": EnvFactoryHome(home=str(home))},
                                run_config={"ops": {asset.key.path[-1]: {"config": settings}}})
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return result.success, failures[0].event_specific_data.error.message if failures else ""
