"""Statistics of a tool graph and an SVG picture of a sample subgraph, for asset metadata.

The picture is drawn from ``networkx`` layout positions as plain SVG text (no plotting library), so it can be
embedded in Markdown metadata and shown by the Dagster UI.
"""

from __future__ import annotations

import base64
import html
import random
from collections import Counter
from typing import Any

import networkx as nx

from envfactory_assets.graph.build import ToolGraph

#: colours of edges by provenance in the picture
PROVENANCE_COLOURS = {
    "name_type": "#1f77b4",
    "embedding": "#2ca02c",
    "value_kind": "#ff7f0e",
    "id_list": "#9467bd",
    "model": "#d62728",
    "model_cross": "#8c564b",
}


def graph_statistics(graph: ToolGraph) -> dict[str, Any]:
    """Counts and shape of ``graph``: nodes, edge rows, tool pairs, density, weakly connected components,
    largest component, isolated tools, mean/max in- and out-degree, edge rows by provenance, share of
    tool pairs that cross environments, the share of inputs flagged user-providable, edge rows by value kind,
    cross-environment edge rows by the kind they pass, and the cross-environment pairs that were not made
    edges, by kind (identifiers never; doubtful kinds unless the edge refiner kept them)."""
    g = graph.graph
    n = g.number_of_nodes()
    components = list(nx.weakly_connected_components(g)) if n else []
    ins = [d for _, d in g.in_degree()]
    outs = [d for _, d in g.out_degree()]
    cross = sum(1 for a, b in g.edges if g.nodes[a]["env_id"] != g.nodes[b]["env_id"])
    inputs = [p for p in graph.parameters if p["direction"] == "in"]
    cross_kinds = Counter(
        e.get("value_kind") or "unknown"
        for e in graph.edges
        if g.nodes[e["src"]]["env_id"] != g.nodes[e["dst"]]["env_id"]
    )
    return {
        "nodes": n,
        "edge_rows": len(graph.edges),
        "tool_pairs": g.number_of_edges(),
        "density": round(nx.density(g), 4) if n > 1 else 0.0,
        "components": len(components),
        "largest_component": max((len(c) for c in components), default=0),
        "isolated_tools": sum(1 for v in g if g.degree(v) == 0),
        "mean_in_degree": round(sum(ins) / n, 3) if n else 0.0,
        "max_in_degree": max(ins, default=0),
        "mean_out_degree": round(sum(outs) / n, 3) if n else 0.0,
        "max_out_degree": max(outs, default=0),
        "edges_by_provenance": dict(Counter(e["provenance"] for e in graph.edges).most_common()),
        "cross_environment_pair_share": round(cross / g.number_of_edges(), 4) if g.number_of_edges() else 0.0,
        "user_providable_input_share": round(sum(bool(p["user_providable"]) for p in inputs) / len(inputs), 4)
        if inputs
        else 0.0,
        "edges_by_kind": dict(Counter(e.get("value_kind") or "unknown" for e in graph.edges).most_common()),
        "cross_environment_edges_by_kind": dict(cross_kinds.most_common()),
        "cross_environment_not_made_by_kind": dict(graph.meta.get("cross_env_not_made_by_kind") or {}),
        "cross_environment_candidates_left": len(graph.candidates),
    }


#: Nodes the tool graph's inline picture shows by default (``tool_graph``'s ``picture_nodes``).
PICTURE_NODES = 12


def sample_subgraph(graph: ToolGraph, max_nodes: int = PICTURE_NODES, seed: int = 0) -> nx.DiGraph:
    """A connected-looking sample: BFS (both directions) from the highest-degree tool, up to ``max_nodes``
    tools; ties broken by a seeded shuffle so the picture is stable for a given graph."""
    g = graph.graph
    if g.number_of_nodes() == 0:
        return nx.DiGraph()
    order = sorted(g.nodes)
    random.Random(seed).shuffle(order)
    start = max(order, key=g.degree)
    picked, frontier = [start], [start]
    while frontier and len(picked) < max_nodes:
        node = frontier.pop(0)
        for nb in sorted(set(g.successors(node)) | set(g.predecessors(node))):
            if nb not in picked and len(picked) < max_nodes:
                picked.append(nb)
                frontier.append(nb)
    return g.subgraph(picked).copy()


def subgraph_svg(sub: nx.DiGraph, width: int = 720, height: int = 480, seed: int = 0) -> str:
    """SVG text of ``sub``: tools as labelled circles coloured per environment, edges as arrows coloured by
    the provenance of their first parameter pair (:data:`PROVENANCE_COLOURS`), with a legend."""
    pad = 70
    pos = nx.spring_layout(sub, seed=seed) if sub.number_of_nodes() else {}
    xs = [p[0] for p in pos.values()] or [0.0]
    ys = [p[1] for p in pos.values()] or [0.0]

    def scale(v: float, lo: float, hi: float, size: int) -> float:
        return pad + (v - lo) / (hi - lo) * (size - 2 * pad) if hi > lo else size / 2

    xy = {n: (scale(p[0], min(xs), max(xs), width), scale(p[1], min(ys), max(ys), height - 30)) for n, p in pos.items()}
    envs = sorted({sub.nodes[n].get("env_id", "") for n in sub})
    palette = ["#fdd49e", "#c6dbef", "#c7e9c0", "#dadaeb", "#fcbba1", "#d9d9d9"]
    fill = {e: palette[i % len(palette)] for i, e in enumerate(envs)}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="18" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for a, b, data in sub.edges(data=True):
        colour = PROVENANCE_COLOURS.get(data["params"][0]["provenance"], "#555")
        (x1, y1), (x2, y2) = xy[a], xy[b]
        parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}" '
            'stroke-width="1.5" marker-end="url(#arrow)"/>'
        )
    for n in sub:
        x, y = xy[n]
        label = html.escape(sub.nodes[n].get("tool_name", n))
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="9" fill="{fill[sub.nodes[n].get("env_id", "")]}" '
            f'stroke="#333"><title>{html.escape(n)}</title></circle>'
        )
        parts.append(f'<text x="{x:.1f}" y="{y - 13:.1f}" text-anchor="middle">{label}</text>')
    legend_x = 10
    for name, colour in PROVENANCE_COLOURS.items():
        parts.append(
            f'<line x1="{legend_x}" y1="{height - 12}" x2="{legend_x + 20}" y2="{height - 12}" '
            f'stroke="{colour}" stroke-width="2"/><text x="{legend_x + 24}" y="{height - 8}">{name}</text>'
        )
        legend_x += 110
    parts.append("</svg>")
    return "\n".join(parts)


def subgraph_markdown(graph: ToolGraph, max_nodes: int = PICTURE_NODES) -> str:
    """Markdown for asset metadata: the sample subgraph's SVG as an inline image (data URI), then its edges
    as a table so the picture is readable even where images are not shown."""
    sub = sample_subgraph(graph, max_nodes)
    svg = subgraph_svg(sub)
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
    rows = [
        "| from | output | to | input | provenance | value kind | parameter pairs |",
        "|---|---|---|---|---|---|---|",
    ]
    for a, b, data in sorted(sub.edges(data=True))[:40]:
        p = data["params"][0]
        rows.append(
            f"| {a} | {p['src_param']} | {b} | {p['dst_param']} | {p['provenance']} | "
            f"{p.get('value_kind') or ''} | {len(data['params'])} |"
        )
    return (
        f"Sample of {sub.number_of_nodes()} tools around the best-connected one "
        f"(colour = environment; edge colour = provenance).\n\n![tool graph sample]({uri})\n\n" + "\n".join(rows)
    )
