"""``environments`` and ``verified_environments``: build each selected resource, then verify it by execution."""

import time
from collections import Counter

import dagster as dg

from envfactory_assets.config_schema import Source, build_spec
from envfactory_assets.defs.common import checked, data_version, model_usage, partition_scope, status_counts
from envfactory_assets.defs.config_fields import generated_config
from envfactory_assets.defs.partitions import SINGLE_RUN, asset_code_version, environment_partitions
from envfactory_assets.defs.progress_observations import asset_progress
from envfactory_assets.defs.resources import STORE_POOL, EnvFactoryHome, ModelBackend, VerificationGate
from envfactory_assets.envgen.model_tools import summarize_outcomes
from envfactory_assets.envgen.run_settings import EnvironmentRunSpec, VerificationRunSpec
from envfactory_assets.envgen.stage import as_environment, environment_rows, verify_all
from envfactory_assets.envgen.tool_names import readability_figures
from envfactory_assets.incremental.partitions import env_scope
from envfactory_assets.quality.value_semantics import summarise as value_figures
from envfactory_assets.store.gates import pass_rate

#: Where each ``environments`` and ``verified_environments`` setting is stated.
ENVIRONMENT_SOURCES = (Source(EnvironmentRunSpec),)
VERIFICATION_SOURCES = (Source(VerificationRunSpec),)


class EnvironmentsConfig(generated_config("EnvironmentSettings", *ENVIRONMENT_SOURCES)):
    """How much of each document becomes its environment (docs/configuration.md lists each setting with its
    default and help)."""

    def check_settings(self) -> EnvironmentRunSpec:
        """The settings as an :class:`EnvironmentRunSpec`, checked before anything is built (raises SettingError
        naming the setting)."""
        return build_spec(ENVIRONMENT_SOURCES[0], self)


class VerificationConfig(generated_config("VerificationSettings", *VERIFICATION_SOURCES)):
    """Sandbox limits of the verification workers and how many run at once (docs/configuration.md lists each
    setting with its default and help); the pass-rate floor is the ``verification_gate`` resource."""

    def check_settings(self) -> VerificationRunSpec:
        """The settings as a :class:`VerificationRunSpec`, checked before anything is verified (raises
        SettingError naming a limit no worker can run under)."""
        return build_spec(VERIFICATION_SOURCES[0], self)


def changed_settings(config: dg.Config) -> str:
    """``"name=value (default d), ..."`` for each field of ``config`` that differs from its default, for the
    messages of refused writes; empty when none does."""
    changed = []
    for name, field in type(config).model_fields.items():
        value = getattr(config, name)
        if not field.is_required() and value != field.get_default(call_default_factory=True):
            changed.append(f"{name}={value!r} (default {field.get_default(call_default_factory=True)!r})")
    return ", ".join(changed)


_ENVGEN_CODE = asset_code_version(
    "envfactory_assets.envgen",
    "envfactory_assets.runtime",
    "envfactory_assets.llm",
    "envfactory_assets.sources",
    "envfactory_assets.defs.envgen",
)


@dg.asset(
    group_name="envgen",
    kinds={"duckdb"},
    pool=STORE_POOL,
    deps=["source_resources"],
    code_version=_ENVGEN_CODE,
    partitions_def=environment_partitions,
    backfill_policy=SINGLE_RUN,
)
def environments(
    context: dg.AssetExecutionContext,
    config: EnvironmentsConfig,
    envfactory: EnvFactoryHome,
    model_backend: ModelBackend,
) -> dg.MaterializeResult:
    """Stateful environments (state schema, CRUD tools with JSON Schema input/output, Python source,
    valid/boundary/invalid initial states) built by the programmatic builder, one per ``environment``
    partition (the resource selected by ``source_resources`` under that key). With a ``model_backend`` the
    model writes the code, and the tools of the operations the rules do not map (metadata ``model_tools``)."""
    spec = checked(config.check_settings)
    started = time.monotonic()
    backend = model_backend.backend_for(envfactory.root())
    store = envfactory.store()
    keys = context.partition_keys
    chosen = store.read("source_resources", env_scope(keys, "resource_key"))
    meter = asset_progress(context, len(chosen), "environments built")
    # with a model, as many environments at once as the backend serves requests (its max_concurrency)
    rows = environment_rows(
        chosen, backend, model_backend.max_revisions, progress=meter.advance, resource_cap=spec.resource_cap
    )
    meter.finish()
    written = store.replace_current(
        "environments", rows, scope=partition_scope(context, keys), settings_note=changed_settings(config)
    )
    built = [r for r in rows if r["status"] == "built"]
    return dg.MaterializeResult(
        metadata={
            "environments": len(rows),
            "status": status_counts(rows),
            "written": written,
            "tools": sum(r["n_tools"] for r in built),
            "by_domain": dict(sorted(Counter(r["domain"] for r in built).items())),
            "builder": model_backend.backend,
            # seeded values judged by the field-semantic check (a zone is a zone, a status a status word)
            "value_semantics": value_figures(as_environment(r) for r in built),
            "model_usage": model_usage(backend, started),
            # with a model: the tools it wrote for operations the rules do not map, passed and failed (why)
            "model_tools": summarize_outcomes(rows) if backend is not None else {},
            "max_resources": spec.max_resources,
            "partitions": len(keys),
            "missing_sources": sorted(set(keys) - {r["resource_key"] for r in chosen})[:20],
        },
        data_version=data_version(rows),
    )


@dg.asset(
    group_name="envgen",
    kinds={"duckdb"},
    pool=STORE_POOL,
    deps=["environments"],
    code_version=_ENVGEN_CODE,
    partitions_def=environment_partitions,
    backfill_policy=SINGLE_RUN,
)
def verified_environments(
    context: dg.AssetExecutionContext,
    config: VerificationConfig,
    envfactory: EnvFactoryHome,
    verification_gate: VerificationGate,
) -> dg.MaterializeResult:
    """Every environment run in its own sandbox worker: initial states, every tool with valid and invalid
    arguments, output schemas, CRUD semantics, save/load round trip, replay determinism."""
    spec = checked(config.check_settings)
    verification_gate.check_settings()  # its floor judges this result: refuse a floor no run can meet first
    store = envfactory.store()
    keys = context.partition_keys
    env_rows = store.read("environments", env_scope(keys))
    meter = asset_progress(context, len(env_rows), "environments verified")
    rows = verify_all(env_rows, spec.limits(), spec.max_workers, progress=meter.advance)
    meter.finish()
    written = store.replace_current(
        "verified_environments", rows, scope=partition_scope(context, keys), settings_note=changed_settings(config)
    )
    failures = Counter(reason.split(":", 1)[0] for r in rows for reason in r["reasons"])
    passed = [r for r in rows if r["status"] == "passed"]
    return dg.MaterializeResult(
        metadata={
            "status": status_counts(rows),
            "written": written,
            "checks_run": sum(r["n_checks"] for r in rows),
            "pass_rate": len(passed) / len(rows) if rows else 0.0,
            "passed_by_domain": dict(sorted(Counter(r["domain"] for r in passed).items())),
            "failure_reasons": dict(failures.most_common(20)),
            "partitions": len(keys),
        },
        data_version=data_version(rows),
    )


@dg.asset_check(asset=verified_environments, blocking=True)
def verified_pass_rate_above_floor(
    envfactory: EnvFactoryHome, verification_gate: VerificationGate
) -> dg.AssetCheckResult:
    """Blocking gate: the share of environments that pass verification is at least ``min_pass_rate``."""
    verification_gate.check_settings()
    rate, n = pass_rate(envfactory.store())
    floor = verification_gate.min_pass_rate
    return dg.AssetCheckResult(
        passed=n > 0 and rate >= floor, metadata={"pass_rate": rate, "environments": n, "floor": floor}
    )


@dg.asset_check(asset=environments, blocking=False)
def tool_names_are_readable(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
    """Warning: no built environment has a tool name longer than 40 characters, one with a counter or an empty
    word (``list_webhooks_2``, ``case__id``), or one given twice (counts and examples in the metadata)."""
    rows = envfactory.store().read("environments")
    figures = readability_figures(as_environment(r) for r in rows if r["status"] == "built")
    return dg.AssetCheckResult(
        passed=not (figures["long"] or figures["artefact"] or figures["duplicate"]),
        severity=dg.AssetCheckSeverity.WARN,
        metadata=figures,
    )
