"""Store rows of the ``tool_graph`` stage: nodes, parameters (with user-providable flags) and edges."""

from __future__ import annotations

from typing import Any

from envfactory_assets.graph.build import ToolGraph, build_tool_graph, tools_from_environments
from envfactory_assets.graph.embeddings import ParameterEmbedder
from envfactory_assets.store.ids import content_id


def tool_graph_rows(
    environments: list[dict[str, Any]], verified_ids: dict[str, str], embedder: ParameterEmbedder, threshold: float
) -> tuple[ToolGraph, dict[str, list[dict[str, Any]]]]:
    """Build the graph over ``environments`` (Environment dicts of verified, passed environments).

    ``verified_ids`` maps env_id to its ``verified_environments`` row id (the parent of each node).
    Returns the graph and ``{"tool_graph_nodes": [...], "tool_graph_parameters": [...], "tool_graph_edges": [...]}``.
    """
    graph = build_tool_graph(tools_from_environments(environments), embedder, threshold=threshold)
    return graph, graph_rows(graph, verified_ids)


def graph_rows(graph: ToolGraph, verified_ids: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Store rows of a built (and possibly refined) graph; see :func:`tool_graph_rows`."""
    node_ids = {}
    nodes = []
    for n in graph.nodes:
        row = {
            "node_id": n["node_id"],
            "verified_environment_id": verified_ids[n["env_id"]],
            "env_id": n["env_id"],
            "domain": n["domain"],
            "tool_name": n["tool_name"],
            "kind": n["kind"],
            "n_inputs": n["n_inputs"],
            "n_outputs": n["n_outputs"],
        }
        row["id"] = content_id("node", row)
        node_ids[n["node_id"]] = row["id"]
        nodes.append(row)
    params = []
    for p in graph.parameters:
        row = {
            "tool_graph_node_id": node_ids[p["node_id"]],
            "node_id": p["node_id"],
            "direction": p["direction"],
            "name": p["name"],
            "path": p["path"],
            "type": p["type"],
            "required": bool(p["required"]),
            "user_providable": bool(p["user_providable"]),
            "text": p["text"],
            "user_providable_source": p.get("user_providable_source", "rule"),
            "value_kind": p.get("value_kind"),
        }
        row["id"] = content_id("param", row)
        params.append(row)
    edges = []
    for e in graph.edges:
        row = {
            "src_node_id": e["src"],
            "dst_node_id": e["dst"],
            "src_param": e["src_param"],
            "dst_param": e["dst_param"],
            "similarity": float(e["similarity"]),
            "provenance": e["provenance"],
            "value_kind": e.get("value_kind"),
        }
        row["id"] = content_id("edge", {**row, "src": node_ids[e["src"]], "dst": node_ids[e["dst"]]})
        edges.append(row)
    # Duplicate parameter rows (same tool, same name twice) collapse to one id.
    params = list({p["id"]: p for p in params}.values())
    return {"tool_graph_nodes": nodes, "tool_graph_parameters": params, "tool_graph_edges": edges}


def graph_from_store_rows(
    nodes: list[dict[str, Any]], params: list[dict[str, Any]], edges: list[dict[str, Any]]
) -> ToolGraph:
    """Rebuild the :class:`ToolGraph` from stored rows. Rows stored before value kinds existed have
    ``value_kind`` None (such an edge never counts as passing a shared value)."""
    return ToolGraph.from_rows(
        [
            {k: n[k] for k in ("node_id", "env_id", "domain", "tool_name", "kind", "n_inputs", "n_outputs")}
            for n in nodes
        ],
        [
            {
                **{
                    k: p[k]
                    for k in ("node_id", "direction", "name", "path", "type", "required", "user_providable", "text")
                },
                "value_kind": p.get("value_kind"),
            }
            for p in params
        ],
        [
            {
                "src": e["src_node_id"],
                "dst": e["dst_node_id"],
                "src_param": e["src_param"],
                "dst_param": e["dst_param"],
                "similarity": e["similarity"],
                "provenance": e["provenance"],
                "value_kind": e.get("value_kind"),
            }
            for e in edges
        ],
    )
