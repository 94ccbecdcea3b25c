"""``show_trajectory``: render any trajectory from the UI (Jobs -> show_trajectory -> Launchpad).

Its run config names a raw or refined trajectory id; the rendering (turns, calls, results, the query before
and after refinement) is logged as an observation of ``refined_trajectories``, so it appears in that
asset's Events tab as Markdown, and in the run's log.
"""

import dagster as dg

from envfactory_assets.config_schema import Source, build_spec
from envfactory_assets.defs.common import checked
from envfactory_assets.defs.config_fields import generated_config
from envfactory_assets.defs.resources import STORE_POOL, EnvFactoryHome
from envfactory_assets.store.db import StoreBusy
from envfactory_assets.viewer import ShowTrajectorySpec, TrajectoryNotFound, render_from_store

#: Where the ``show_trajectory`` setting is stated.
SHOW_TRAJECTORY_SOURCES = (Source(ShowTrajectorySpec),)


class ShowTrajectoryConfig(generated_config("ShowTrajectorySettings", *SHOW_TRAJECTORY_SOURCES)):
    """The trajectory to render (docs/configuration.md lists the setting with its help)."""


@dg.op(pool=STORE_POOL)
def render_trajectory_markdown(
    context: dg.OpExecutionContext, config: ShowTrajectoryConfig, envfactory: EnvFactoryHome
) -> str:
    """Render the trajectory and log it as a Markdown observation of ``refined_trajectories``."""
    checked(lambda: build_spec(SHOW_TRAJECTORY_SOURCES[0], config))
    try:
        text = render_from_store(envfactory.store(), config.trajectory_id.strip())
    except (TrajectoryNotFound, FileNotFoundError, StoreBusy) as exc:
        raise dg.Failure(f"show_trajectory: {exc}") from exc
    context.log_event(
        dg.AssetObservation(
            asset_key="refined_trajectories",
            metadata={"trajectory_id": config.trajectory_id, "rendering": dg.MetadataValue.md(text)},
        )
    )
    return text


@dg.job(
    description="Render one trajectory (raw or refined id in the run config) as Markdown: it appears as an "
    "observation in refined_trajectories' Events tab."
)
def show_trajectory():
    render_trajectory_markdown()
