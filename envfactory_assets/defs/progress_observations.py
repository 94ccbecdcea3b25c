"""Per-shard progress of a long asset: a log line and an asset observation (done, total, rate) per shard.

``envfactory run`` reads these observations from the run's event log to draw its progress bar; the UI
shows them in the asset's Events tab and the run's log.
"""

from collections.abc import Callable

import dagster as dg

from envfactory_assets.progress_meter import LABEL, Progress, ProgressMeter


def asset_progress(
    context: dg.AssetExecutionContext,
    total: int,
    what: str,
    shard: int | None = None,
    asset_key: dg.AssetKey | None = None,
    label: str | None = None,
) -> ProgressMeter:
    """A meter for ``total`` items of ``context``'s asset (``asset_key``: the one of a multi-asset's assets the
    observations are recorded on, and the bar is labelled with unless ``label`` names it, as a multi-asset's
    step name does); ``what`` names the items in log lines."""
    asset_key = asset_key or context.asset_key
    extra = {LABEL: label} if label else {}

    def emit(progress: Progress) -> None:
        context.log.info(
            f"{label or asset_key.to_user_string()}: {progress.done}/{progress.total} {what} ({progress.rate:.2f}/s)"
        )
        context.log_event(dg.AssetObservation(asset_key=asset_key, metadata={**progress.as_metadata(), **extra}))

    return ProgressMeter(total, emit, shard=shard)


def progress_callback(
    context: dg.AssetExecutionContext, what: str, asset_key: dg.AssetKey | None = None, label: str | None = None
) -> Callable[[int, int], None]:
    """A plain ``progress(done, total)`` for core code that learns its total only as it runs: the meter
    (:func:`asset_progress`, with ``asset_key`` and ``label``) is made on the first call, with that call's
    ``total``. The bar ends at 100% when the core code's last call has ``done == total``; a core function that
    never calls it draws no bar."""
    meters: list[ProgressMeter] = []

    def progress(done: int, total: int) -> None:
        if not meters:
            meters.append(asset_progress(context, total, what, asset_key=asset_key, label=label))
        meters[0].update(done)

    return progress
