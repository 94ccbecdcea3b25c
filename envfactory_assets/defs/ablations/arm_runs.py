"""Runs in an ablation arm's own home: the pipeline's synthesis and training assets materialized on the arm's
own Dagster instance and store, from inside an ablation asset's step."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from envfactory_assets import settings
from envfactory_assets.defs.envgen import assets as envgen_assets
from envfactory_assets.defs.graph import assets as graph_assets
from envfactory_assets.defs.pipeline_runs import home_environment, materialize_pipeline, prepare_dagster_home
from envfactory_assets.defs.resources import EnvFactoryHome
from envfactory_assets.defs.sources import assets as source_assets
from envfactory_assets.defs.synth import assets as synth_assets
from envfactory_assets.defs.training import assets as training_assets

#: The stages an arm runs: sources to datasets, and checkpoints (no evaluation or export in an arm's home).
_ARM_MODULES = [source_assets, envgen_assets, graph_assets, synth_assets, training_assets]


def arm_graph() -> list[Any]:
    """The asset and check definitions an arm's runs materialize from."""
    return [*dg.load_assets_from_modules(_ARM_MODULES), *dg.load_asset_checks_from_modules(_ARM_MODULES)]


def share_models(main_home: Path, home: Path) -> None:
    """Link ``home``'s models folder to ``main_home``'s (the base model converted once, not once per arm) when
    ``home`` has none and ``main_home`` has one."""
    mine, main = settings.models_dir(home), settings.models_dir(main_home)
    if not mine.exists() and not mine.is_symlink() and main.is_dir():
        home.mkdir(parents=True, exist_ok=True)
        mine.symlink_to(main.resolve(), target_is_directory=True)


def materialize_in_arm(
    home: Path,
    run_config: Mapping[str, Any],
    selection: str,
    resources: Mapping[str, Any],
    log: Callable[[str], Any],
) -> None:
    """Materialize ``selection`` of the pipeline in the arm home ``home`` (its store, its Dagster instance under
    ``<home>/dagster``, ``$ENVFACTORY_HOME`` pointed at it for the run) with ``run_config``; ``resources`` (the
    model backend, the verification gate) are the calling step's, with the ``envfactory`` resource pinned to
    ``home``.

    Raises:
        dg.Failure: a run failed (the message names the home and the selection, and how to inspect it).
    """
    home.mkdir(parents=True, exist_ok=True)
    dagster_home = prepare_dagster_home(home)
    with home_environment(home), dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        results = materialize_pipeline(
            arm_graph(),
            instance,
            {**resources, "envfactory": EnvFactoryHome(home=str(home))},
            dict(run_config),
            selection=selection,
            raise_on_error=False,
            tags={"envfactory/command": f"ablation arm {home.name}: {selection}"},
            job_name=f"envfactory_ablation_{home.name}",
        )
    if not results or not all(r.success for r in results):
        raise dg.Failure(
            f"ablation arm {home.name}: materializing {selection} in {home} failed; inspect it with "
            f"ENVFACTORY_HOME={home} envfactory ui"
        )
    log(f"ablation arm {home.name}: {selection} materialized in {home}")
