"""Tool dependency graph: tools -> parameters -> edges ``producer -> consumer``.

Source: EnvFactory (arXiv 2605.18703), tool-graph construction. Every parameter is embedded as
``"name (type): description"``; an edge ``A -> B`` joins an *output* parameter of tool A and an *input*
parameter of tool B whose cosine similarity is above 0.85 (the paper's threshold), or -- added here, see
``docs/design.md`` -- whose names and types match exactly. There are no self-loops; edges may cross
environments (the chain sampler caps the number of servers per chain).

Exact name+type matching details (choices made here, not in the paper):

- names are compared case/separator-insensitively (``companyId`` matches ``company_id``);
- a bare ``id`` only matches within one environment's same ``table`` (``id`` alone names no entity);
- across environments, by default names match only when both parameters hold the same *shared* value kind
  (``cross_env_name_match="shared"``: ``email`` -> ``email``, ``currency`` -> ``currency``). Generic names
  (``name``, ``status``, ``created_at``...) exist in almost every API; matching them by name across
  environments joins unrelated entities and, at ~100 environments x ~10 tools, turns ~10^3 meaningful edges
  into ~4 x 10^5 (measured on a synthetic corpus). ``cross_env_name_match="all"`` restores the plain rule.

Value kinds (added here, not in the paper): every parameter gets a kind
(:func:`envfactory_assets.graph.parameters.value_kind`: identifier, email, person name, date/time, place,
money, code, URL, phone, free text, other) and every edge the kind of value it passes
(:func:`~envfactory_assets.graph.parameters.edge_value_kind`). An identifier is meaningful only in the API
that issued it, so an edge between two environments is made only when it passes a *shared* real-world value
(:data:`~envfactory_assets.graph.parameters.SHARED_KINDS`): cross-environment pairs that pass an identifier
are never made (in the default run, 1,522 of 3,317 cross-environment argument flows were a Meshery
``application_id`` becoming a Sinao ``app_id`` and the like, because the two parameters embed alike), and
pairs of a doubtful kind (free text, other, or two different kinds) are kept aside as
:attr:`ToolGraph.candidates` for the edge refiner to judge (the programmatic refiner makes none of them).
Within one environment every pair is an edge, as in the paper, except one: a pair joined by embedding alone
between an identifier and a written text (a name, a title, a person's or an organisation's name,
:data:`HANDLE_AND_TEXT`) is not made. ``monitoring_schedule_id`` and ``monitoring_schedule_name`` embed alike
(0.92 in the default run) yet a schedule's id is never its name: such an edge made updates rename a schedule
to another schedule's id ("set the name to 'mon_00026'"), and every one of the 64 such edges of that run was
of this sort. Pairs matched by their names are kept whatever their kinds.

Scale: similarities are computed as blocked matrix products of L2-normalized embeddings (one
``(block, n_in)`` float32 block at a time, about 64 MiB), and identical parameter texts are embedded once,
so ~100 environments x ~10 tools (~10^4 parameters) take seconds after the model is loaded.

Not done here (paper): an LLM pass that may only *add* edges within one server, and an LLM user-providable
flag; this module's flags come from :func:`envfactory_assets.graph.parameters.is_user_providable` (or the
``providable`` callable passed to :func:`build_tool_graph`).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import networkx as nx
import numpy as np

from envfactory_assets.envgen.mcp_signatures import canonical_tool

from .embeddings import ParameterEmbedder, l2_normalize
from .parameters import (
    FREE_TEXT,
    IDENTIFIER,
    ORGANIZATION,
    PERSON_NAME,
    SHARED_KINDS,
    Parameter,
    edge_value_kind,
    extract_input_parameters,
    extract_output_parameters,
    is_user_providable,
    normalize_name,
    tool_node_id,
    value_family,
    value_kind,
)

__all__ = [
    "PAPER_SIMILARITY_THRESHOLD",
    "PROVENANCE_NAME_TYPE",
    "PROVENANCE_EMBEDDING",
    "PROVENANCE_VALUE_KIND",
    "ToolGraph",
    "build_tool_graph",
    "tools_from_environments",
]

#: Cosine threshold for an embedding edge (paper: 0.85; strictly greater than).
PAPER_SIMILARITY_THRESHOLD = 0.85
PROVENANCE_NAME_TYPE = "name_type"
PROVENANCE_EMBEDDING = "embedding"
#: a cross-environment pair whose two parameters hold the same family of shared value (both e-mail
#: addresses, both currency codes, both city names...) under any names and any embedding similarity
PROVENANCE_VALUE_KIND = "value_kind"
#: Similarities are rounded to this many decimals in rows, so row content hashes are stable across BLAS builds.
SIMILARITY_DECIMALS = 4
#: Elements per similarity block (float32: 64 MiB).
_BLOCK_ELEMENTS = 1 << 24
#: Parameter texts per embedder call for an embedder without a ``batch_size``: the progress of a long
#: embedding is reported after each call.
EMBED_CHUNK = 256


@dataclass
class ToolGraph:
    """The tool graph as rows (for storage) plus a ``networkx.DiGraph`` (for sampling).

    Attributes:
        nodes: one row per tool: ``node_id`` (``"{env_id}.{tool_name}"``), ``env_id``, ``domain``, ``tool_name``,
            ``kind``, ``n_inputs``, ``n_outputs``; sorted by ``node_id``.
        parameters: one row per parameter: ``node_id``, ``direction`` (``"in"``/``"out"``), ``name``, ``path``,
            ``type``, ``required`` (bool), ``user_providable`` (bool), ``text`` (the embedded text),
            ``value_kind`` (:func:`~envfactory_assets.graph.parameters.value_kind`); tools in ``node_id``
            order, inputs before outputs, schema order within.
        edges: one row per joined parameter pair: ``src``, ``dst`` (node ids), ``src_param`` (output *path*
            of src, e.g. ``"items[].company_id"``), ``dst_param`` (input *name* of dst), ``similarity`` (cosine,
            float rounded to 4 decimals), ``provenance`` (``"name_type"`` when names and types match, else
            ``"embedding"``), ``value_kind`` (what the edge passes: a kind of
            :data:`~envfactory_assets.graph.parameters.VALUE_KINDS` or ``"mixed"``; None in rows stored before
            kinds existed); sorted. No edge between two environments passes an identifier.
        graph: ``DiGraph`` with one node per tool (node attributes = node row fields minus ``node_id``) and one
            edge per tool pair having >= 1 edge row; edge attributes ``params`` (list of
            ``{src_param, dst_param, similarity, provenance, value_kind}``) and ``similarity`` (max over
            ``params``).
        meta: build facts (threshold, embedder name, counts, cross-environment pairs by kind;
            ``embedding_seconds`` is a timing, not content: leave it out of any content hash).
        candidates: cross-environment pairs of a doubtful kind that were *not* made edges (edge-row shape);
            the edge refiner may judge them (:func:`envfactory_assets.graph.edge_refinement.refine_graph`). Not stored.
    """

    nodes: list[dict[str, Any]]
    parameters: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    graph: nx.DiGraph
    meta: dict[str, Any] = field(default_factory=dict)
    candidates: list[dict[str, Any]] = field(default_factory=list)
    _index: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    # ----------------------------------------------------------------- construction from stored rows
    @classmethod
    def from_rows(
        cls,
        nodes: Iterable[Mapping[str, Any]],
        parameters: Iterable[Mapping[str, Any]],
        edges: Iterable[Mapping[str, Any]],
        meta: Mapping[str, Any] | None = None,
        candidates: Iterable[Mapping[str, Any]] = (),
    ) -> ToolGraph:
        """Rebuild a graph from its rows (e.g. read back from the store).

        Raises ``ValueError`` when a parameter or edge names an unknown node, an edge is a self-loop, or an
        edge between two environments passes an identifier.
        """
        node_rows = sorted((dict(n) for n in nodes), key=lambda r: r["node_id"])
        param_rows = [dict(p) for p in parameters]
        edge_rows = sorted((dict(e) for e in edges), key=lambda r: (r["src"], r["dst"], r["src_param"], r["dst_param"]))
        g = nx.DiGraph()
        for row in node_rows:
            if row["node_id"] in g:
                raise ValueError(f"duplicate node {row['node_id']!r}")
            g.add_node(row["node_id"], **{k: v for k, v in row.items() if k != "node_id"})
        for p in param_rows:
            if p["node_id"] not in g:
                raise ValueError(f"parameter of unknown node {p['node_id']!r}")
        for e in edge_rows:
            src, dst = e["src"], e["dst"]
            if src not in g or dst not in g:
                raise ValueError(f"edge {src!r} -> {dst!r} names an unknown node")
            if src == dst:
                raise ValueError(f"self-loop on {src!r}")
            e.setdefault("value_kind", None)
            if e["value_kind"] == IDENTIFIER and g.nodes[src]["env_id"] != g.nodes[dst]["env_id"]:
                raise ValueError(
                    f"edge {src!r} -> {dst!r} passes an identifier ({e['src_param']} -> "
                    f"{e['dst_param']}) from one environment into another"
                )
            info = {k: e[k] for k in ("src_param", "dst_param", "similarity", "provenance", "value_kind")}
            if g.has_edge(src, dst):
                data = g.edges[src, dst]
                data["params"].append(info)
                data["similarity"] = max(data["similarity"], float(e["similarity"]))
            else:
                g.add_edge(src, dst, params=[info], similarity=float(e["similarity"]))
        return cls(
            nodes=node_rows,
            parameters=param_rows,
            edges=edge_rows,
            graph=g,
            meta=dict(meta or {}),
            candidates=[dict(c) for c in candidates],
        )

    # ----------------------------------------------------------------- lookups used by the sampler
    def _idx(self) -> dict[str, Any]:
        if self._index is None:
            inputs: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for p in self.parameters:
                if p["direction"] == "in":
                    inputs[p["node_id"]].append(
                        {
                            "name": p["name"],
                            "type": p["type"],
                            "required": bool(p["required"]),
                            "user_providable": bool(p["user_providable"]),
                        }
                    )
            producers: dict[tuple[str, str], set[str]] = defaultdict(set)
            kinds: dict[tuple[str, str, str], set[str]] = defaultdict(set)
            env = {n: d["env_id"] for n, d in self.graph.nodes(data=True)}
            shared_in: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
            linked_envs: set[str] = set()  # either end of a cross-environment edge of a shared kind
            for e in self.edges:
                producers[(e["dst"], e["dst_param"])].add(e["src"])
                kinds[(e["src"], e["dst"], e["dst_param"])].add(e.get("value_kind") or "unknown")
                if env[e["src"]] != env[e["dst"]] and e.get("value_kind") in SHARED_KINDS:
                    shared_in[e["dst"]][e["dst_param"]].add(e["src"])
                    linked_envs.update((env[e["src"]], env[e["dst"]]))
            self._index = {
                "node_ids": tuple(sorted(self.graph.nodes)),
                "linked_node_ids": tuple(sorted(n for n in self.graph.nodes if env[n] in linked_envs)),
                "inputs": {n: tuple(v) for n, v in inputs.items()},
                "producers": {k: tuple(sorted(v)) for k, v in producers.items()},
                "producer_sets": {k: frozenset(v) for k, v in producers.items()},
                "successors": {n: tuple(sorted(self.graph.successors(n))) for n in self.graph.nodes},
                "kinds": {k: frozenset(v) for k, v in kinds.items()},
                "env": env,
                "shared_in": {d: {p: frozenset(v) for p, v in by.items()} for d, by in shared_in.items()},
            }
        return self._index

    @property
    def node_ids(self) -> tuple[str, ...]:
        """All node ids, sorted."""
        return self._idx()["node_ids"]

    @property
    def linked_node_ids(self) -> tuple[str, ...]:
        """Sorted nodes of the environments that exchange a shared real-world value with another environment
        (either end of a cross-environment edge of a shared kind); empty when none does."""
        return self._idx()["linked_node_ids"]

    def env_of(self, node_id: str) -> str:
        """Environment id of a node (``KeyError`` if unknown)."""
        return self._idx()["env"][node_id]

    def inputs(self, node_id: str) -> tuple[dict[str, Any], ...]:
        """Input parameters of a node in schema order: ``{name, type, required, user_providable}``."""
        if node_id not in self.graph:
            raise KeyError(node_id)
        return self._idx()["inputs"].get(node_id, ())

    def producers(self, node_id: str, param: str) -> tuple[str, ...]:
        """Sorted nodes with an edge into ``node_id`` whose ``dst_param`` is ``param``."""
        return self._idx()["producers"].get((node_id, param), ())

    def producer_set(self, node_id: str, param: str) -> frozenset[str]:
        """:meth:`producers` as a set, for membership tests (built once per graph)."""
        return self._idx()["producer_sets"].get((node_id, param), frozenset())

    def successors(self, node_id: str) -> tuple[str, ...]:
        """Sorted graph successors of a node."""
        return self._idx()["successors"][node_id]

    def flow_kinds(self, src: str, dst: str, param: str) -> frozenset[str]:
        """Value kinds of the edges from ``src`` into input ``param`` of ``dst`` (empty when none;
        ``"unknown"`` for rows stored without a kind)."""
        return self._idx()["kinds"].get((src, dst, param), frozenset())

    def shared_producers(self, node_id: str) -> Mapping[str, frozenset[str]]:
        """``{input name: tools of other environments whose edge into it passes a shared value}`` of a node."""
        return self._idx()["shared_in"].get(node_id, {})

    def passes_shared_value(self, src: str, dst: str, param: str) -> bool:
        """True when an edge from ``src`` into input ``param`` of ``dst`` passes a shared real-world value
        (:data:`~envfactory_assets.graph.parameters.SHARED_KINDS`)."""
        return bool(self.flow_kinds(src, dst, param) & SHARED_KINDS)


def tools_from_environments(environments: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Flatten environment rows (``{"env_id", "domain", "tools": [ToolSpec, ...]}``) into tool dicts.

    A tool with a real MCP server's signature (``mcp_binding``, :mod:`envfactory_assets.envgen.mcp_signatures`)
    enters in its canonical view (:func:`~envfactory_assets.envgen.mcp_signatures.canonical_tool`): the
    builder's argument names (a row's ``..._id``, ``limit``, ``query``) that the sampler, the query writer and
    the refinement plan in. Its calls are executed and recorded in the real names
    (:mod:`envfactory_assets.synth.trajectories.real_calls`)."""
    out: list[dict[str, Any]] = []
    for env in environments:
        for spec in env.get("tools") or []:
            out.append({**canonical_tool(spec), "env_id": env["env_id"], "domain": env.get("domain")})
    return out


#: Value kinds a person writes (names, titles, free text): an identifier is never passed into one of them,
#: nor one of them into an identifier, on the strength of an embedding alone (module docstring).
HANDLE_AND_TEXT: frozenset[str] = frozenset({FREE_TEXT, PERSON_NAME, ORGANIZATION})


def _pairs_above(
    e_out: np.ndarray, e_in: np.ndarray, out_node: np.ndarray, in_node: np.ndarray, threshold: float
) -> np.ndarray:
    """Codes ``i * n_in + j`` of (out i, in j) pairs with cosine > threshold on different nodes (int64)."""
    n_out, n_in = e_out.shape[0], e_in.shape[0]
    if n_out == 0 or n_in == 0:
        return np.zeros(0, dtype=np.int64)
    block = max(1, _BLOCK_ELEMENTS // n_in)
    chunks = []
    e_in_t = np.ascontiguousarray(e_in.T)
    for start in range(0, n_out, block):
        sims = e_out[start : start + block] @ e_in_t
        mask = sims > threshold
        mask &= out_node[start : start + block, None] != in_node[None, :]
        i, j = np.nonzero(mask)
        chunks.append((i.astype(np.int64) + start) * n_in + j.astype(np.int64))
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def _handle_into_text(src_kind: str, dst_kind: str) -> bool:
    """True when one side is an identifier and the other a written text (:data:`HANDLE_AND_TEXT`)."""
    return (src_kind == IDENTIFIER and dst_kind in HANDLE_AND_TEXT) or (
        dst_kind == IDENTIFIER and src_kind in HANDLE_AND_TEXT
    )


def _name_type_pairs(
    outs: Sequence[Parameter],
    ins: Sequence[Parameter],
    cross_env: str,
    out_kinds: Sequence[str],
    in_kinds: Sequence[str],
) -> np.ndarray:
    """Codes ``i * n_in + j`` of (out, in) pairs with equal normalized name and equal type, no self-loops.

    A bare ``id`` matches only within the same environment and the same ``table``; across environments
    only names whose two parameters hold the same shared value kind match unless ``cross_env == "all"``.
    """
    n_in = len(ins)
    by_key: dict[tuple[str, str], list[int]] = defaultdict(list)
    for j, p in enumerate(ins):
        by_key[(normalize_name(p.name), p.type)].append(j)
    codes: list[int] = []
    for i, o in enumerate(outs):
        key = (normalize_name(o.name), o.type)
        for j in by_key.get(key, ()):
            p = ins[j]
            if p.node_id == o.node_id:
                continue
            if key[0] == "id" and (p.env_id != o.env_id or p.table != o.table):
                continue
            if (
                p.env_id != o.env_id
                and cross_env != "all"
                and not (out_kinds[i] == in_kinds[j] and out_kinds[i] in SHARED_KINDS)
            ):
                continue
            codes.append(i * n_in + j)
    return np.asarray(codes, dtype=np.int64)


def _family_pairs(
    outs: Sequence[Parameter], ins: Sequence[Parameter], out_fam: Sequence[str | None], in_fam: Sequence[str | None]
) -> np.ndarray:
    """Codes ``i * n_in + j`` of (out, in) pairs of *different environments* whose parameters hold the same
    value family (:func:`~envfactory_assets.graph.parameters.value_family`) and the same type."""
    n_in = len(ins)
    by_family: dict[tuple[str, str], list[int]] = defaultdict(list)
    for j, f in enumerate(in_fam):
        if f is not None:
            by_family[(f, ins[j].type)].append(j)
    codes = [
        i * n_in + j
        for i, f in enumerate(out_fam)
        if f is not None
        for j in by_family.get((f, outs[i].type), ())
        if ins[j].env_id != outs[i].env_id
    ]
    return np.asarray(codes, dtype=np.int64)


def _embed_in_chunks(
    embedder: ParameterEmbedder, texts: list[str], progress: Callable[[int, int], None] | None
) -> np.ndarray:
    """``embedder.embed`` of ``texts`` (rows in ``texts`` order), reporting ``progress`` before the first call
    (0 done) and after each call.

    Texts go longest first, one embedder batch per call (``embedder.batch_size``, else :data:`EMBED_CHUNK`):
    each forward pass holds texts of similar length (little padding), and which texts share a pass, hence
    every vector, is fixed by the texts alone, whether or not progress is reported.

    Raises:
        ValueError: the embedder returned an array that is not one row per text.
    """
    size = getattr(embedder, "batch_size", EMBED_CHUNK)
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # stable: ties keep text order
    out: np.ndarray | None = None
    if progress is not None:
        # the first report starts the bar's clock: made after the first call, it divided that call's texts by
        # almost no time (a corpus of one embedder batch showed millions of texts per second)
        progress(0, len(texts))
    for start in range(0, len(texts), size):
        rows = order[start : start + size]
        part = np.asarray(embedder.embed([texts[i] for i in rows]))
        if part.ndim != 2 or part.shape[0] != len(rows):
            raise ValueError(f"embedder returned shape {part.shape} for {len(rows)} texts")
        if out is None:
            out = np.empty((len(texts), part.shape[1]), dtype=np.float32)
        out[rows] = part
        if progress is not None:
            progress(start + len(rows), len(texts))
    return out if out is not None else np.zeros((0, 1), dtype=np.float32)


def build_tool_graph(
    tools: Sequence[Mapping[str, Any]],
    embedder: ParameterEmbedder,
    threshold: float = PAPER_SIMILARITY_THRESHOLD,
    providable: Callable[[Parameter], bool] = is_user_providable,
    cross_env_name_match: Literal["shared", "all"] = "shared",
    cross_env_family_match: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> ToolGraph:
    """Build the tool dependency graph of ``tools``.

    Args:
        tools: tool dicts ``{"env_id", "domain", "name", "description", "kind", "table", "read_only",
            "input_schema", "output_schema"}`` (``domain``/``kind``/``table``/``description``/``read_only`` may be
            missing -> None). Order does not matter (rows are sorted).
        embedder: a :class:`~envfactory_assets.graph.embeddings.ParameterEmbedder`; rows are re-normalized.
        threshold: cosine above which an output/input pair is an edge (paper: 0.85, strict ``>``).
        providable: user-providable rule for each parameter (default: the deterministic paper-style rule).
        cross_env_name_match: which exact name+type matches count across environments: ``"shared"``
            (default; see the module docstring) or ``"all"``. Either way a cross-environment pair is an edge
            only when it passes a shared value kind (module docstring).
        cross_env_family_match: also join outputs and inputs of different environments that hold the same
            family of shared value (provenance ``"value_kind"``: an e-mail address into an e-mail address
            under any name, a currency code into a currency code...; see
            :func:`~envfactory_assets.graph.parameters.value_family`). Added here: without identifiers, the
            embedding and name rules alone leave 38 of the default run's 95 environments with no link to
            any other.
        progress: called as ``progress(texts embedded, distinct texts)`` once with 0 texts before the first
            embedder call, then after every call (:func:`_embed_in_chunks`; embedding is most of the build's
            time); the last call has both equal.
            Not called when there is no parameter.

    Returns:
        :class:`ToolGraph`.

    Raises:
        ValueError: a tool without ``env_id`` or with an invalid name, two tools with the same node id,
            a non-object ``properties``, a threshold outside [-1, 1], an unknown ``cross_env_name_match``, or an
            embedder returning the wrong shape.

    Complexity: O(P_out * P_in * d) floating point in blocks, O(E) Python work for E edge rows.
    """
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [-1, 1], got {threshold}")
    if cross_env_name_match not in ("shared", "all"):
        raise ValueError(f"cross_env_name_match must be 'shared' or 'all', got {cross_env_name_match!r}")
    by_id: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        nid = tool_node_id(tool)
        if nid in by_id:
            raise ValueError(f"duplicate tool {nid!r}")
        by_id[nid] = tool

    node_rows: list[dict[str, Any]] = []
    ins: list[Parameter] = []
    outs: list[Parameter] = []
    param_rows: list[dict[str, Any]] = []
    for nid in sorted(by_id):
        tool = by_id[nid]
        t_in = extract_input_parameters(tool)
        t_out = extract_output_parameters(tool)
        node_rows.append(
            {
                "node_id": nid,
                "env_id": tool["env_id"],
                "domain": tool.get("domain"),
                "tool_name": tool["name"],
                "kind": tool.get("kind"),
                "n_inputs": len(t_in),
                "n_outputs": len(t_out),
            }
        )
        for p in t_in + t_out:
            param_rows.append(
                {
                    "node_id": nid,
                    "direction": p.direction,
                    "name": p.name,
                    "path": p.path,
                    "type": p.type,
                    "required": p.required,
                    "user_providable": bool(providable(p)),
                    "text": p.text,
                    "value_kind": value_kind(p),
                }
            )
        ins.extend(t_in)
        outs.extend(t_out)

    # Embed each distinct text once.
    texts = sorted({p.text for p in ins} | {p.text for p in outs})
    t0 = time.perf_counter()
    vectors = _embed_in_chunks(embedder, texts, progress) if texts else np.zeros((0, 1), dtype=np.float32)
    embed_seconds = time.perf_counter() - t0
    vectors = l2_normalize(vectors)
    row_of = {t: k for k, t in enumerate(texts)}
    e_out = vectors[[row_of[p.text] for p in outs]] if outs else np.zeros((0, vectors.shape[1]), np.float32)
    e_in = vectors[[row_of[p.text] for p in ins]] if ins else np.zeros((0, vectors.shape[1]), np.float32)
    node_num = {nid: k for k, nid in enumerate(sorted(by_id))}
    out_node = np.asarray([node_num[p.node_id] for p in outs], dtype=np.int64)
    in_node = np.asarray([node_num[p.node_id] for p in ins], dtype=np.int64)

    n_in = len(ins)
    emb_codes = _pairs_above(e_out, e_in, out_node, in_node, threshold)
    out_kinds = [value_kind(p) for p in outs]
    in_kinds = [value_kind(p) for p in ins]
    nt_codes = _name_type_pairs(outs, ins, cross_env_name_match, out_kinds, in_kinds)
    fam_codes = (
        _family_pairs(
            outs,
            ins,
            [value_family(p, k) for p, k in zip(outs, out_kinds, strict=False)],
            [value_family(p, k) for p, k in zip(ins, in_kinds, strict=False)],
        )
        if cross_env_family_match
        else np.zeros(0, dtype=np.int64)
    )
    codes = np.union1d(np.union1d(emb_codes, nt_codes), fam_codes)
    is_nt = np.isin(codes, nt_codes)
    is_emb = np.isin(codes, emb_codes)
    oi, ij = (codes // n_in, codes % n_in) if n_in else (codes, codes)
    sims = np.empty(len(codes), dtype=np.float32)
    step = 1 << 16
    for s in range(0, len(codes), step):
        sims[s : s + step] = np.einsum("ij,ij->i", e_out[oi[s : s + step]], e_in[ij[s : s + step]])

    edge_rows, candidates = [], []
    cross_kept: Counter[str] = Counter()
    cross_dropped: Counter[str] = Counter()
    n_nt = 0
    n_family = 0
    n_handle_text = 0
    for a, b, sim, nt, emb in zip(
        oi.tolist(), ij.tolist(), sims.tolist(), is_nt.tolist(), is_emb.tolist(), strict=False
    ):
        o, p = outs[a], ins[b]
        kind = edge_value_kind(out_kinds[a], in_kinds[b])
        if not nt and o.env_id == p.env_id and _handle_into_text(out_kinds[a], in_kinds[b]):
            n_handle_text += 1
            continue
        row = {
            "src": o.node_id,
            "dst": p.node_id,
            "src_param": o.path,
            "dst_param": p.name,
            "similarity": round(float(sim), SIMILARITY_DECIMALS),
            "provenance": PROVENANCE_NAME_TYPE if nt else PROVENANCE_EMBEDDING if emb else PROVENANCE_VALUE_KIND,
            "value_kind": kind,
        }
        if o.env_id != p.env_id:
            if kind not in SHARED_KINDS:
                cross_dropped[kind] += 1
                if kind != IDENTIFIER:
                    candidates.append(row)
                continue
            cross_kept[kind] += 1
        n_nt += nt
        n_family += not (nt or emb)
        edge_rows.append(row)

    meta = {
        "threshold": threshold,
        "cross_env_name_match": cross_env_name_match,
        "embedder": getattr(embedder, "name", type(embedder).__name__),
        "n_nodes": len(node_rows),
        "n_parameters": len(param_rows),
        "n_distinct_texts": len(texts),
        "n_edge_rows": len(edge_rows),
        "n_edges_name_type": n_nt,
        "n_edges_embedding": len(edge_rows) - n_nt - n_family,
        "n_edges_value_kind": n_family,
        "n_not_made_handle_text": n_handle_text,
        "edges_by_kind": dict(sorted(Counter(e["value_kind"] for e in edge_rows).items())),
        "cross_env_edges_by_kind": dict(sorted(cross_kept.items())),
        "cross_env_not_made_by_kind": dict(sorted(cross_dropped.items())),
        "n_cross_env_candidates": len(candidates),
        "embedding_seconds": round(embed_seconds, 4),
    }
    graph = ToolGraph.from_rows(node_rows, param_rows, edge_rows, meta, candidates)
    graph.meta["n_node_pairs"] = graph.graph.number_of_edges()
    return graph
