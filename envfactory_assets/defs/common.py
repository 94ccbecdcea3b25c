"""Small helpers shared by the asset modules."""

from typing import Any, Iterable

import dagster as dg

from envfactory_assets.defs.resources import EnvFactoryHome
from envfactory_assets.store.gates import failed_environment_leaks
from envfactory_assets.store.ids import content_id


def data_version(rows: Iterable[dict[str, Any]]) -> dg.DataVersion:
    """A data version from the sorted ids of the current rows (same rows -> same version)."""
    return dg.DataVersion(content_id("v", sorted(r["id"] for r in rows)))


def status_counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out


def no_failed_environment_check(asset: Any, tables: list[str]) -> dg.AssetChecksDefinition:
    """A blocking check on ``asset``: none of ``tables``' current rows uses an environment that failed
    verification (or has no current verification)."""

    @dg.asset_check(asset=asset, blocking=True, name="no_failed_environment",
                    description=f"No row of {', '.join(tables)} uses an environment that did not pass verification.")
    def _check(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
        leaks = failed_environment_leaks(envfactory.store(), tables)
        return dg.AssetCheckResult(passed=not leaks, metadata={"leaks": len(leaks), "examples": leaks[:5]})

    return _check
