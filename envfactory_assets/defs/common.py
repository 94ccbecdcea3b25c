"""Small helpers shared by the asset modules."""

import time
from collections.abc import Callable, Iterable
from typing import Any

import dagster as dg

from envfactory_assets import catalog
from envfactory_assets.config_checks import SettingError
from envfactory_assets.defs.resources import EnvFactoryHome, user_curation
from envfactory_assets.incremental.partitions import ENVIRONMENT_PARTITIONS, env_scope
from envfactory_assets.store.gates import failed_environment_leaks
from envfactory_assets.store.ids import content_id


def checked(check: Callable[[], Any]) -> Any:
    """Run a settings check (``config.check_settings``) and return its result; a :class:`SettingError`
    becomes a ``dg.Failure`` with the same one-line message, so a step refuses a bad setting before it
    reads or writes anything."""
    try:
        return check()
    except SettingError as exc:
        raise dg.Failure(str(exc)) from exc


def model_usage(backend: Any, started: float) -> dict[str, Any]:
    """Metadata ``model_usage`` of a model-backed stage: the backend's counters (``calls``: requests answered,
    ``cached``: replies served from the response cache, ``retries``, ``prompt_tokens``, ``completion_tokens``,
    ``by_role``: the same per role) and ``wall_s``, the stage's seconds since ``started`` (a
    ``time.monotonic()`` reading taken when the stage began); {} without a backend (the programmatic roles)."""
    if backend is None:
        return {}
    usage = backend.usage() if hasattr(backend, "usage") else {}
    return {**usage, "wall_s": round(time.monotonic() - started, 3)}


def data_version(rows: Iterable[dict[str, Any]]) -> dg.DataVersion:
    """A data version from the sorted ids of the current rows (same rows -> same version)."""
    return dg.DataVersion(content_id("v", sorted(r["id"] for r in rows)))


def status_counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """``{status: number of rows}``."""
    out: dict[str, int] = {}
    for r in rows:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out


def no_failed_environment_check(asset: Any, tables: list[str]) -> dg.AssetChecksDefinition:
    """A blocking check on ``asset``: none of ``tables``' current rows uses an environment that failed
    verification (or has no current verification)."""

    @dg.asset_check(
        asset=asset,
        blocking=True,
        name="no_failed_environment",
        description=f"No row of {', '.join(tables)} uses an environment that did not pass verification.",
    )
    def _check(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
        leaks = failed_environment_leaks(envfactory.store(), tables)
        return dg.AssetCheckResult(passed=not leaks, metadata={"leaks": len(leaks), "examples": leaks[:5]})

    return _check


def partition_scope(context: dg.AssetExecutionContext, keys: Iterable[str]) -> str:
    """Which current rows a per-environment write may supersede: the rows of the partitions it ran, and rows
    of environments that are no longer partitions (dropped from the selection)."""
    everything = context.instance.get_dynamic_partitions(ENVIRONMENT_PARTITIONS)
    return f"({env_scope(keys)}) OR NOT ({env_scope(everything)})"


def previous_config(context: dg.AssetExecutionContext) -> Any:
    """The ``config`` metadata of this asset's latest materialization on this instance, or None if there is
    none or it ran another code version of this asset: rows are reused from the store only when they were
    made with the same config by the same code (a changed writer must not leave its old queries in place)."""
    event = context.instance.get_latest_materialization_event(context.asset_key)
    materialization = event.asset_materialization if event else None
    if materialization is None:
        return None
    current = context.assets_def.code_versions_by_key.get(context.asset_key)
    if current is not None and (materialization.tags or {}).get("dagster/code_version") != current:
        return None
    metadata = materialization.metadata
    return metadata["config"].value if "config" in metadata else None


class GateClosed(dg.Failure):
    """An upstream asset's latest blocking check failed: its data must not flow downstream."""


class UpstreamGates(dg.ConfigurableResource):
    """The blocking checks on each asset's upstream assets, taken from the graph the runs execute.

    A step sees only its own job, which leaves out the checks of unselected upstream assets; so whoever
    assembles the graph (``definitions.py``, ``runner.materialize_pipeline``) passes its gates in with
    :meth:`of`, and a second ``Definitions`` gates by its own graph, never by a global one.
    """

    blocking_checks: dict[str, list[str]] = {}  # asset key -> blocking check keys of its parents

    @classmethod
    def of(cls, asset_graph: Any) -> "UpstreamGates":
        out = {}
        for key in asset_graph.get_all_asset_keys():
            parents = asset_graph.get(key).parent_keys
            checks = [
                ck for ck in asset_graph.get_check_keys_for_assets(parents) if asset_graph.get_check_spec(ck).blocking
            ]
            if checks:
                out[key.to_user_string()] = sorted(ck.to_user_string() for ck in checks)
        return cls(blocking_checks=out)


def require_upstream_gates(context: dg.AssetExecutionContext, gates: UpstreamGates) -> list[str]:
    """Raise :class:`GateClosed` if the latest evaluation of a blocking check on any upstream asset of this
    step failed; returns the checks consulted.

    A blocking check stops downstream steps only inside its own run; this makes the gate hold across runs
    (a stage launched alone, from the CLI, the UI or a schedule, after its upstream failed a gate).
    """
    names = {ck for key in context.assets_def.keys for ck in gates.blocking_checks.get(key.to_user_string(), [])}
    check_keys = [dg.AssetCheckKey.from_user_string(ck) for ck in sorted(names)]
    if not check_keys:
        return []
    latest = context.instance.event_log_storage.get_latest_asset_check_execution_by_key(check_keys)
    closed = []
    for ck, record in latest.items():
        evaluation = record.event.asset_check_evaluation if record.event is not None else None
        if evaluation is not None and not evaluation.passed:
            closed.append(ck.to_user_string())
    if closed:
        raise GateClosed(
            f"upstream blocking checks failed at their latest evaluation: {sorted(closed)}; "
            "fix and re-materialize the upstream assets first"
        )
    return sorted(ck.to_user_string() for ck in check_keys)


def passed_environments(envfactory: EnvFactoryHome) -> tuple[dict[str, dict], dict[str, str]]:
    """The catalogue's passed environments of the pipeline's store, curated by the user's curation file:
    ``({env_id: Environment dict}, {env_id: verification id})``."""
    passed = catalog.passed_environments(envfactory.store(), user_curation(envfactory))
    return passed.environments, passed.verified_ids
