"""Per-shard progress of a long asset: a log line and an asset observation (done, total, rate) per shard.

``envfactory run`` reads these observations from the run's event log to draw its progress bar; the UI
shows them in the asset's Events tab and the run's log.
"""

import dagster as dg

from envfactory_assets.progress import Progress, ProgressMeter


def asset_progress(context: dg.AssetExecutionContext, total: int, what: str,
                   shard: int | None = None) -> ProgressMeter:
    """A meter for ``total`` items of ``context``'s asset; ``what`` names the items in log lines."""
    asset_key = context.asset_key

    def emit(progress: Progress) -> None:
        context.log.info(f"{asset_key.to_user_string()}: {progress.done}/{progress.total} {what} "
                         f"({progress.rate:.2f}/s)")
        context.log_event(dg.AssetObservation(asset_key=asset_key, metadata=progress.as_metadata()))

    return ProgressMeter(total, emit, shard=shard)
