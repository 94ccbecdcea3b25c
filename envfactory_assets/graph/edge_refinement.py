"""Second phase of the tool graph: edge refinement and user-providable classification.

Source: EnvFactory (arXiv 2605.18703), tool graph. After the embedding pass, an LLM may only *add* edges,
and only between tools of one server (environment); an LLM flags each input parameter as user-providable
or not ("when in doubt, not"). Each role has two implementations:

- programmatic (the offline default): edges from an identifier output to the list-of-identifiers input of
  another tool of the same environment (``author_id`` -> ``author_ids``, which the name+type rule misses
  because the types differ), provenance ``id_list``; user-providable flags from
  :func:`envfactory_assets.graph.parameters.is_user_providable`.
- model-backed (a :class:`~envfactory_assets.llm.base.ChatBackend`, roles ``edge_refiner`` and
  ``providable_classifier``): the model sees one environment's tools with their parameters and answers JSON.
  Its answer is untrusted: a proposed edge is kept only if both tools are in that environment, the output
  path and input name exist, it is no self-loop and no existing edge (provenance ``model``); a flag is kept
  only if it names an existing input parameter and is a JSON boolean. Everything dropped is reported with
  its reason.

The edge refiner also judges the doubtful cross-environment pairs that the build kept aside
(:attr:`~envfactory_assets.graph.build.ToolGraph.candidates`: free text, "other" values, or two different
kinds; never identifiers): the programmatic refiner makes none of them edges ("when in doubt, not"); the
model sees the candidates into one environment at a time (at most :data:`MAX_CANDIDATES_PER_REQUEST`, most
similar first) and names the ones through which a person would pass a real-world value, with that value's
kind. A kept candidate becomes an edge of provenance ``model_cross`` whose ``value_kind`` is the model's
kind, which must be one of :data:`~envfactory_assets.graph.parameters.SHARED_KINDS`; anything else is
rejected with its reason.

Edge similarity of an added edge is the cosine of its two parameter texts under the graph's embedder, so
every edge row keeps a comparable number.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envfactory_assets.graph.build import SIMILARITY_DECIMALS, ToolGraph
from envfactory_assets.graph.embeddings import ParameterEmbedder, l2_normalize
from envfactory_assets.graph.parameters import SHARED_KINDS, edge_value_kind, is_identifier_name, normalize_name
from envfactory_assets.llm.base import ChatBackend, concurrency_of

EDGE_REFINER_ROLE = "edge_refiner"
PROVIDABLE_ROLE = "providable_classifier"
PROVENANCE_MODEL = "model"
PROVENANCE_ID_LIST = "id_list"
PROVENANCE_MODEL_CROSS = "model_cross"
#: Candidate pairs shown to the model in one request (the most similar ones of one destination environment).
MAX_CANDIDATES_PER_REQUEST = 40
MAX_TOKENS = 2048

_JSON_BLOCK = re.compile(r"```(?:json)?\s*\n(.*?)\n```", re.S)


@dataclass
class RefinementReport:
    """What a refinement pass did: added edges (rows), changed flags, and every rejected proposal."""

    added_edges: list[dict[str, Any]] = field(default_factory=list)
    cross_env_requests: int = 0
    cross_env_judged: int = 0
    cross_env_kept: int = 0
    flags_from_model: int = 0
    flags_changed: int = 0
    rejected: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "added_edges": len(self.added_edges),
            "cross_env_requests": self.cross_env_requests,
            "cross_env_judged": self.cross_env_judged,
            "cross_env_kept": self.cross_env_kept,
            "flags_from_model": self.flags_from_model,
            "flags_changed": self.flags_changed,
            "rejected": len(self.rejected),
            "rejected_examples": self.rejected[:10],
        }


def _by_env(graph: ToolGraph) -> dict[str, list[str]]:
    envs: dict[str, list[str]] = defaultdict(list)
    for node in graph.nodes:
        envs[node["env_id"]].append(node["node_id"])
    return dict(sorted(envs.items()))


def _params_of(graph: ToolGraph) -> dict[str, dict[str, list[dict[str, Any]]]]:
    out: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: {"in": [], "out": []})
    for p in graph.parameters:
        out[p["node_id"]][p["direction"]].append(p)
    return out


def environment_payload(graph: ToolGraph, env_id: str) -> dict[str, Any]:
    """The JSON the model sees for one environment: its tools, their inputs (name, type, description text)
    and outputs (paths), and the edges that already exist."""
    params = _params_of(graph)
    nodes = _by_env(graph).get(env_id, [])
    tools = [
        {
            "tool": n.split(".", 1)[1],
            "inputs": [{"name": p["name"], "type": p["type"], "text": p["text"]} for p in params[n]["in"]],
            "outputs": [p["path"] for p in params[n]["out"]],
        }
        for n in nodes
    ]
    existing = [
        {
            "src": e["src"].split(".", 1)[1],
            "src_param": e["src_param"],
            "dst": e["dst"].split(".", 1)[1],
            "dst_param": e["dst_param"],
        }
        for e in graph.edges
        if e["src"] in nodes and e["dst"] in nodes
    ]
    return {"environment": env_id, "tools": tools, "existing_edges": existing}


def edge_refiner_messages(graph: ToolGraph, env_id: str) -> list[dict[str, str]]:
    """Chat messages asking for edges to add within ``env_id`` (reply: a JSON object ``{"edges": [...]}``)."""
    system = (
        "You link the tools of one API environment into a dependency graph. An edge means an output "
        "field of one tool can supply an input argument of another tool. You may only ADD edges, only "
        "between tools listed here, never from a tool to itself. Reply with one JSON object: "
        '{"edges": [{"src": tool, "src_param": output path, "dst": tool, "dst_param": input name}]}; '
        'reply {"edges": []} if nothing is missing.'
    )
    payload = json.dumps(environment_payload(graph, env_id), ensure_ascii=False, indent=1)
    return [{"role": "system", "content": system}, {"role": "user", "content": f"```json\n{payload}\n```"}]


def providable_messages(graph: ToolGraph, env_id: str) -> list[dict[str, str]]:
    """Chat messages asking which inputs of ``env_id``'s tools a user could state in a request
    (reply: ``{"flags": {"tool.param": true|false}}``)."""
    system = (
        "For each input parameter below, decide whether a user could plausibly state its value in a "
        "request (true) or whether it must come from an earlier tool result, such as an identifier or "
        "an opaque token (false). When in doubt, answer false. Reply with one JSON object: "
        '{"flags": {"<tool>.<param>": true or false, ...}}.'
    )
    payload = json.dumps(environment_payload(graph, env_id)["tools"], ensure_ascii=False, indent=1)
    return [{"role": "system", "content": system}, {"role": "user", "content": f"```json\n{payload}\n```"}]


def parse_json_reply(text: str, key: str) -> Any:
    """The value under ``key`` of the JSON object in a model reply (bare or in a fenced block).

    Raises:
        ValueError: no JSON object, or it has no ``key``.
    """
    match = _JSON_BLOCK.search(text)
    body = match.group(1) if match else text[text.find("{") : text.rfind("}") + 1]
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"reply is not a JSON object ({exc.msg})") from None
    if not isinstance(data, dict) or key not in data:
        raise ValueError(f"reply JSON has no {key!r} key")
    return data[key]


def validate_edge_proposals(graph: ToolGraph, env_id: str, proposals: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Keep the proposals that are valid add-only edges within ``env_id``; return ``(edges, rejections)``.

    An edge is ``{"src", "dst"}`` (node ids), ``src_param`` (an output path of src), ``dst_param`` (an input
    name of dst). Duplicates of existing edges and of each other are rejected.
    """
    if not isinstance(proposals, list):
        return [], [f"{env_id}: 'edges' is not a list"]
    nodes = set(_by_env(graph).get(env_id, []))
    params = _params_of(graph)
    seen = {(e["src"], e["src_param"], e["dst"], e["dst_param"]) for e in graph.edges}
    kept, rejected = [], []
    for prop in proposals:
        if not isinstance(prop, dict) or not all(
            isinstance(prop.get(k), str) for k in ("src", "src_param", "dst", "dst_param")
        ):
            rejected.append(f"{env_id}: malformed edge {str(prop)[:120]}")
            continue
        src, dst = f"{env_id}.{prop['src']}", f"{env_id}.{prop['dst']}"
        key = (src, prop["src_param"], dst, prop["dst_param"])
        if src not in nodes or dst not in nodes:
            rejected.append(f"{env_id}: unknown tool in {prop['src']} -> {prop['dst']} (only this environment's tools)")
        elif src == dst:
            rejected.append(f"{env_id}: self-loop on {prop['src']}")
        elif prop["src_param"] not in {p["path"] for p in params[src]["out"]}:
            rejected.append(f"{env_id}: {prop['src']} has no output {prop['src_param']!r}")
        elif prop["dst_param"] not in {p["name"] for p in params[dst]["in"]}:
            rejected.append(f"{env_id}: {prop['dst']} has no input {prop['dst_param']!r}")
        elif key in seen:
            rejected.append(
                f"{env_id}: edge {prop['src']}.{prop['src_param']} -> {prop['dst']}.{prop['dst_param']} exists already"
            )
        else:
            seen.add(key)
            kept.append({"src": src, "dst": dst, "src_param": prop["src_param"], "dst_param": prop["dst_param"]})
    return kept, rejected


def id_list_edges(graph: ToolGraph) -> list[dict[str, Any]]:
    """Programmatic edge refinement: within one environment, an identifier output ``x_id`` (scalar) feeds an
    input ``x_ids`` (array) of another tool. Existing edges are not repeated."""
    params = _params_of(graph)
    seen = {(e["src"], e["src_param"], e["dst"], e["dst_param"]) for e in graph.edges}
    edges = []
    for nodes in _by_env(graph).values():
        for dst in nodes:
            for p_in in params[dst]["in"]:
                if p_in["type"] != "array" or not is_identifier_name(p_in["name"]):
                    continue
                stem = normalize_name(p_in["name"]).removesuffix("s")
                for src in nodes:
                    for p_out in params[src]["out"]:
                        key = (src, p_out["path"], dst, p_in["name"])
                        if src != dst and normalize_name(p_out["name"]) == stem and key not in seen:
                            seen.add(key)
                            edges.append(
                                {"src": src, "dst": dst, "src_param": p_out["path"], "dst_param": p_in["name"]}
                            )
    return edges


def _candidates_by_env(graph: ToolGraph) -> dict[str, list[dict[str, Any]]]:
    """Doubtful cross-environment candidates by destination environment, most similar first (ties by ids)."""
    by_env: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in graph.candidates:
        by_env[graph.env_of(c["dst"])].append(c)
    return {
        env: sorted(rows, key=lambda c: (-c["similarity"], c["src"], c["src_param"], c["dst"], c["dst_param"]))[
            :MAX_CANDIDATES_PER_REQUEST
        ]
        for env, rows in sorted(by_env.items())
    }


def cross_env_messages(graph: ToolGraph, env_id: str, candidates: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Chat messages asking which ``candidates`` (pairs from other environments into ``env_id``) pass a
    real-world value a person would carry from one service into the other (reply: ``{"keep": [{"n": index,
    "kind": value kind}]}``)."""
    text = {
        (p["node_id"], p["direction"], p["path"] if p["direction"] == "out" else p["name"]): p["text"]
        for p in graph.parameters
    }
    shown = [
        {
            "n": k,
            "from_environment": graph.env_of(c["src"]),
            "from_tool": c["src"].split(".", 1)[1],
            "output": text.get((c["src"], "out", c["src_param"]), c["src_param"]),
            "to_tool": c["dst"].split(".", 1)[1],
            "input": text.get((c["dst"], "in", c["dst_param"]), c["dst_param"]),
        }
        for k, c in enumerate(candidates)
    ]
    system = (
        "Each pair below joins an output of a tool in one API to an input of a tool in another API "
        f"({env_id}). An identifier issued by one API means nothing to another; only real-world values "
        "cross: e-mail addresses, people's or companies' names, dates, places, amounts, standard codes "
        "(currency, country, language), links, phone numbers. Keep a pair only if a person would "
        "really copy that value from the first service into the second. Reply with one JSON object: "
        '{"keep": [{"n": pair number, "kind": one of ' + json.dumps(sorted(SHARED_KINDS)) + "}]}; "
        'reply {"keep": []} if none.'
    )
    payload = json.dumps({"environment": env_id, "pairs": shown}, ensure_ascii=False, indent=1)
    return [{"role": "system", "content": system}, {"role": "user", "content": f"```json\n{payload}\n```"}]


def validate_cross_env_answer(
    env_id: str, candidates: list[dict[str, Any]], answer: Any
) -> tuple[list[dict[str, Any]], list[str]]:
    """The candidates the model kept, each with the model's shared kind as ``value_kind``; and rejections
    (not a list, malformed item, unknown or repeated index, a kind that is not shared)."""
    if not isinstance(answer, list):
        return [], [f"{env_id}: 'keep' is not a list"]
    kept, rejected, seen = [], [], set()
    for item in answer:
        n = item.get("n") if isinstance(item, dict) else None
        kind = item.get("kind") if isinstance(item, dict) else None
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n < len(candidates):
            rejected.append(f"{env_id}: unknown pair {str(item)[:80]}")
        elif n in seen:
            rejected.append(f"{env_id}: pair {n} kept twice")
        elif kind not in SHARED_KINDS:
            rejected.append(f"{env_id}: pair {n} kind {kind!r} is not a shared real-world value")
        else:
            seen.add(n)
            c = candidates[n]
            kept.append(
                {
                    "src": c["src"],
                    "dst": c["dst"],
                    "src_param": c["src_param"],
                    "dst_param": c["dst_param"],
                    "similarity": c["similarity"],
                    "provenance": PROVENANCE_MODEL_CROSS,
                    "value_kind": kind,
                }
            )
    return kept, rejected


def _with_similarity(
    graph: ToolGraph, edges: list[dict[str, Any]], provenance: str, embedder: ParameterEmbedder
) -> list[dict[str, Any]]:
    if not edges:
        return []
    text = {
        (p["node_id"], p["direction"], p["path"] if p["direction"] == "out" else p["name"]): p["text"]
        for p in graph.parameters
    }
    pairs = [(text[(e["src"], "out", e["src_param"])], text[(e["dst"], "in", e["dst_param"])]) for e in edges]
    texts = sorted({t for pair in pairs for t in pair})
    vectors = l2_normalize(np.asarray(embedder.embed(texts)))
    row = {t: i for i, t in enumerate(texts)}
    kinds = {
        (p["node_id"], p["direction"], p["path"] if p["direction"] == "out" else p["name"]): p.get("value_kind")
        for p in graph.parameters
    }
    return [
        {
            **e,
            "similarity": round(float(vectors[row[a]] @ vectors[row[b]]), SIMILARITY_DECIMALS),
            "provenance": provenance,
            "value_kind": edge_value_kind(
                kinds[(e["src"], "out", e["src_param"])] or "other", kinds[(e["dst"], "in", e["dst_param"])] or "other"
            ),
        }
        for e, (a, b) in zip(edges, pairs, strict=False)
    ]


def _ask_list(backend: Any, messages: list[dict[str, Any]], key: str, env_id: str, report: Any) -> list[Any]:
    """The edge refiner's reply list under ``key``; a reply that does not parse is recorded as rejected for
    ``env_id`` in ``report`` and counts as an empty list."""
    reply = backend.complete(messages, role=EDGE_REFINER_ROLE, max_tokens=MAX_TOKENS)
    try:
        return parse_json_reply(reply.text, key)
    except ValueError as exc:
        report.rejected.append(f"{env_id}: {exc}")
        return []


def refine_graph(
    graph: ToolGraph,
    embedder: ParameterEmbedder,
    edge_backend: ChatBackend | None = None,
    providable_backend: ChatBackend | None = None,
) -> tuple[ToolGraph, RefinementReport]:
    """Add refined edges and (with a model) re-flag user-providable inputs; returns a new graph and a report.

    Programmatic ``id_list`` edges are always added; with ``edge_backend`` the model's valid proposals are
    added too, one request per environment, and the model judges the graph's doubtful cross-environment
    candidates, one request per destination environment that has some (module docstring; without a model
    none becomes an edge). With ``providable_backend`` each environment's input flags come from the model
    where it gives a valid boolean, else they stay as built. Edges are never removed.

    Raises:
        LLMError (from the backend): the endpoint failed after its retries or the token budget ran out.
    """
    report = RefinementReport()
    added = _with_similarity(graph, id_list_edges(graph), PROVENANCE_ID_LIST, embedder)
    base = ToolGraph.from_rows(graph.nodes, graph.parameters, graph.edges + added, graph.meta)
    # Every request is known before any reply: an environment's prompt shows its own edges only, and the
    # model adds edges within one environment, so no reply changes another environment's prompt. They are
    # sent at once (as many as each backend serves) and the replies are then used in order below.
    edge_backend, providable_backend = (
        _prefetched(
            edge_backend,
            [(edge_refiner_messages(base, e), EDGE_REFINER_ROLE) for e in _by_env(graph)]
            + [
                (cross_env_messages(graph, e, shown), EDGE_REFINER_ROLE)
                for e, shown in _candidates_by_env(graph).items()
            ],
        ),
        _prefetched(providable_backend, [(providable_messages(base, e), PROVIDABLE_ROLE) for e in _by_env(graph)]),
    )
    parameters = [dict(p) for p in graph.parameters]
    for env_id in _by_env(graph):
        if edge_backend is not None:
            proposals = _ask_list(edge_backend, edge_refiner_messages(base, env_id), "edges", env_id, report)
            kept, rejected = validate_edge_proposals(base, env_id, proposals)
            report.rejected += rejected
            new = _with_similarity(base, kept, PROVENANCE_MODEL, embedder)
            added += new
            base = ToolGraph.from_rows(base.nodes, base.parameters, base.edges + new, base.meta)
        if providable_backend is not None:
            _apply_flags(parameters, env_id, providable_backend, base, report)
    remaining = list(graph.candidates)
    if edge_backend is not None:
        judged: set[tuple[str, str, str, str]] = set()
        for env_id, shown in _candidates_by_env(graph).items():
            answer = _ask_list(edge_backend, cross_env_messages(graph, env_id, shown), "keep", env_id, report)
            report.cross_env_requests += 1
            kept, rejected = validate_cross_env_answer(env_id, shown, answer)
            report.rejected += rejected
            report.cross_env_judged += len(shown)
            report.cross_env_kept += len(kept)
            judged |= {(c["src"], c["src_param"], c["dst"], c["dst_param"]) for c in shown}
            added += kept
        remaining = [c for c in remaining if (c["src"], c["src_param"], c["dst"], c["dst_param"]) not in judged]
    report.added_edges = added
    cross_kept = dict(graph.meta.get("cross_env_edges_by_kind") or {})
    for e in added:
        if graph.env_of(e["src"]) != graph.env_of(e["dst"]):
            cross_kept[e["value_kind"]] = cross_kept.get(e["value_kind"], 0) + 1
    meta = {
        **graph.meta,
        "n_edges_added": len(added),
        "n_edge_rows": len(graph.edges) + len(added),
        "cross_env_edges_by_kind": dict(sorted(cross_kept.items())),
        "n_cross_env_candidates": len(remaining),
        "n_cross_env_kept_by_model": report.cross_env_kept,
    }
    return ToolGraph.from_rows(graph.nodes, parameters, graph.edges + added, meta, remaining), report


class _Replies:
    """A backend whose replies to known requests were fetched beforehand; other requests go to ``backend``.

    A request that failed raises its error when it is asked for, so errors surface in the order a
    sequential run would meet them."""

    def __init__(self, backend: ChatBackend, requests: list[tuple[list[dict[str, str]], str]]) -> None:
        self.backend = backend
        self._replies: dict[str, Any] = {}

        def fetch(request: tuple[list[dict[str, str]], str]) -> Any:
            messages, role = request
            try:
                return backend.complete(messages, role=role, max_tokens=MAX_TOKENS)
            except Exception as exc:  # kept for the sequential pass, which raises it in its place
                return exc

        unique = list({self._key(m, r): (m, r) for m, r in requests}.items())
        with ThreadPoolExecutor(
            max_workers=max(1, min(concurrency_of(backend), len(unique))), thread_name_prefix="graph-refine"
        ) as pool:
            for (key, _), reply in zip(unique, pool.map(fetch, [req for _, req in unique]), strict=False):
                self._replies[key] = reply

    @staticmethod
    def _key(messages: list[dict[str, str]], role: str) -> str:
        return json.dumps([role, messages], sort_keys=True, ensure_ascii=False)

    def complete(
        self, messages: list[dict[str, str]], *, role: str, max_tokens: int = MAX_TOKENS, temperature: float = 0.0
    ) -> Any:
        key = self._key(messages, role)
        if max_tokens != MAX_TOKENS or temperature != 0.0 or key not in self._replies:
            return self.backend.complete(messages, role=role, max_tokens=max_tokens, temperature=temperature)
        reply = self._replies.pop(key)  # asked once: a second equal request goes to the backend, as before
        if isinstance(reply, Exception):
            raise reply
        return reply


def _prefetched(backend: ChatBackend | None, requests: list[tuple[list[dict[str, str]], str]]) -> Any:
    """``backend`` with ``requests`` answered beforehand, in threads, when it serves several at once."""
    if backend is None or concurrency_of(backend) <= 1 or not requests:
        return backend
    return _Replies(backend, requests)


def _apply_flags(
    parameters: list[dict[str, Any]], env_id: str, backend: ChatBackend, graph: ToolGraph, report: RefinementReport
) -> None:
    reply = backend.complete(providable_messages(graph, env_id), role=PROVIDABLE_ROLE, max_tokens=MAX_TOKENS)
    try:
        flags = parse_json_reply(reply.text, "flags")
        if not isinstance(flags, dict):
            raise ValueError("'flags' is not an object")
    except ValueError as exc:
        report.rejected.append(f"{env_id}: {exc}")
        return
    inputs = {
        f"{p['node_id'].split('.', 1)[1]}.{p['name']}": p
        for p in parameters
        if p["direction"] == "in" and p["node_id"].startswith(env_id + ".")
    }
    for name, value in flags.items():
        param = inputs.get(name)
        if param is None:
            report.rejected.append(f"{env_id}: flag for unknown input {name!r}")
        elif not isinstance(value, bool):
            report.rejected.append(f"{env_id}: flag for {name!r} is not a boolean ({value!r})")
        else:
            report.flags_from_model += 1
            report.flags_changed += param["user_providable"] != value
            param["user_providable"] = value
            param["user_providable_source"] = PROVENANCE_MODEL
