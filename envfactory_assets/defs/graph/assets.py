"""``tool_graph``: parameter embeddings, user-providable flags and producer -> consumer edges."""

import time
from collections import Counter

import dagster as dg

from envfactory_assets import catalog
from envfactory_assets.config_schema import Source, build_spec
from envfactory_assets.decontam.benchmarks import all_benchmark_tools, benchmark_availability
from envfactory_assets.decontam.tagging import benchmark_tags, overlap_rows
from envfactory_assets.defs.common import (
    UpstreamGates,
    checked,
    data_version,
    model_usage,
    no_failed_environment_check,
    require_upstream_gates,
)
from envfactory_assets.defs.config_fields import generated_config
from envfactory_assets.defs.partitions import asset_code_version
from envfactory_assets.defs.progress_observations import progress_callback
from envfactory_assets.defs.resources import STORE_POOL, EnvFactoryHome, ModelBackend, user_curation
from envfactory_assets.graph.build import build_tool_graph, tools_from_environments
from envfactory_assets.graph.edge_refinement import refine_graph
from envfactory_assets.graph.embedding_cache import CachedEmbedder
from envfactory_assets.graph.run_settings import EMBEDDERS, ToolGraphRunSpec
from envfactory_assets.graph.stage import graph_rows
from envfactory_assets.graph.stats import graph_statistics, subgraph_markdown
from envfactory_assets.llm.base import LLMError
from envfactory_assets.store.ids import content_id

#: Where each ``tool_graph`` setting is stated.
TOOL_GRAPH_SOURCES = (Source(ToolGraphRunSpec),)


class ToolGraphConfig(generated_config("ToolGraphSettings", *TOOL_GRAPH_SOURCES)):
    """How the tool graph is built and shown (docs/configuration.md lists each setting with its default and
    help); ``model`` roles use the ``model_backend`` resource's model."""

    def check_settings(self) -> ToolGraphRunSpec:
        """The settings as a :class:`ToolGraphRunSpec`, checked before the store is read (raises SettingError)."""
        return build_spec(TOOL_GRAPH_SOURCES[0], self)


@dg.asset(
    group_name="graph",
    kinds={"duckdb", "networkx"},
    pool=STORE_POOL,
    deps=["verified_environments"],
    code_version=asset_code_version(
        "envfactory_assets.graph",
        "envfactory_assets.decontam",
        "envfactory_assets.envgen.stage",
        # the graph holds a real-signature MCP tool in its canonical view
        "envfactory_assets.envgen.mcp_signatures",
        "envfactory_assets.defs.graph",
    ),
)
def tool_graph(
    context: dg.AssetExecutionContext,
    config: ToolGraphConfig,
    envfactory: EnvFactoryHome,
    model_backend: ModelBackend,
    upstream_gates: UpstreamGates,
) -> dg.MaterializeResult:
    """Nodes (tools of passed environments), parameters with user-providable flags, and edges where an
    output parameter of one tool matches an input of another (name and type, or cosine > 0.85). Also
    tags environments whose tools overlap BFCL's multi-turn APIs or tau2-bench's (table ``benchmark_overlap``)."""
    started = time.monotonic()
    checked(config.check_settings)
    roles = {"edge_refiner": config.edge_refiner, "providable_classifier": config.providable_classifier}
    if "model" in roles.values():
        model_backend.check_settings()
        if model_backend.backend == "programmatic":
            raise dg.Failure(
                f"tool_graph settings {roles} ask for a model, but model_backend.backend is "
                "'programmatic': set model_backend or use 'programmatic' for both roles"
            )
    require_upstream_gates(context, upstream_gates)
    passed = catalog.passed_environments(envfactory.store(), user_curation(envfactory))
    envs, verified_ids, excluded = passed.environments, passed.verified_ids, passed.excluded
    if not envs:
        if excluded:  # the stored graph stays: an emptied catalogue is a curation file to fix, not a result
            raise dg.Failure(
                f"curation.yaml excludes every passed environment ({len(excluded)} exclusions, e.g. "
                f"{sorted(excluded)[:3]}): nothing to build a tool graph from"
            )
        raise dg.Failure("no environment passed verification: nothing to build a tool graph from")
    embedder = EMBEDDERS[config.embedder]()
    backend = None
    if "model" in roles.values():
        backend = model_backend.backend_for(envfactory.root())
    graph = build_tool_graph(
        tools_from_environments(envs.values()),
        embedder,
        threshold=config.threshold,
        progress=progress_callback(context, "parameter texts embedded"),
    )
    try:
        graph, refinement = refine_graph(
            graph,
            embedder,
            backend if config.edge_refiner == "model" else None,
            backend if config.providable_classifier == "model" else None,
        )
    except LLMError as exc:
        raise dg.Failure(f"tool_graph refinement: the model backend failed: {exc}") from exc
    tables = graph_rows(graph, verified_ids)
    reference_embedder = CachedEmbedder(embedder, envfactory.embedding_cache_dir())
    overlap = overlap_rows(envs.values(), all_benchmark_tools(), embedder, reference_embedder=reference_embedder)
    for row in overlap:
        row["verified_environment_id"] = verified_ids[row["env_id"]]
        row["id"] = content_id("bench", row)
    tables["benchmark_overlap"] = list({r["id"]: r for r in overlap}.values())
    written = envfactory.store().replace_current_tables(tables)
    params = tables["tool_graph_parameters"]
    return dg.MaterializeResult(
        metadata={
            "nodes": len(tables["tool_graph_nodes"]),
            "edges": len(tables["tool_graph_edges"]),
            "parameters": len(params),
            "user_providable_share": sum(p["user_providable"] for p in params if p["direction"] == "in")
            / max(1, sum(1 for p in params if p["direction"] == "in")),
            "edge_provenance": dict(Counter(e["provenance"] for e in tables["tool_graph_edges"])),
            "environments": len(envs),
            "written": written,
            "embedder": config.embedder,
            "curation_excluded": excluded,
            "refinement": {**refinement.summary(), **roles},
            "graph_statistics": graph_statistics(graph),
            "sample_subgraph": dg.MetadataValue.md(subgraph_markdown(graph, config.picture_nodes)),
            "model_usage": model_usage(backend, started),
            "benchmark_overlap_environments": benchmark_tags(overlap),
            "benchmark_references": benchmark_availability(),
            "benchmark_reference_embeddings": "cached" if reference_embedder.hits else "embedded",
        },
        data_version=data_version(tables["tool_graph_nodes"] + tables["tool_graph_edges"]),
    )


tool_graph_gate = no_failed_environment_check(tool_graph, ["tool_graph_nodes"])
