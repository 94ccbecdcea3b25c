"""Tool-chain samplers over the tool graph: the paper's topology-aware sampler and a random-walk baseline.

Source: EnvFactory (arXiv 2605.18703), topology-aware sampling. Constants (the paper's):

- a chain holds at most 15 tools from at most 3 servers (environments);
- BFS from a random start tool (see ``p_linked_start``);
- before a tool is added, each of its inputs that nothing in the chain can fill yet (not user-providable and
  no earlier tool produces it) gets a producer chosen uniformly at random among the graph predecessors that
  produce that input; the producer is resolved the same way, recursively, to depth <= 5, and placed before
  the tool;
- optional inputs are skipped with p = 0.6;
- inputs that are already fillable still get an explicit producer with p = 0.1;
- after a tool is added, 1..all of its unvisited successors (count uniform, then a uniform subset) are
  enqueued.

Baseline (paper): a random walk along graph edges that ignores input dependencies.

Determinism: every sampler draws only from ``random.Random(seed)``; every candidate list is sorted before a
draw, so the same graph rows + seed + config give the same chain. Per-chain seeds come from
:func:`chain_seed` (sha256 of a stable key), never from one global random stream, so adding or removing a
chain does not move the others.

Environments that define the same tool name are never combined in one chain (both samplers): one episode
exposes every tool of its environments by bare name, and tool names must stay unique within a task.

Environments are joined only through a shared real-world value (added here, not in the paper): a tool of an
environment the chain does not use yet is added only when one of its inputs is filled by an earlier tool of
another environment through an edge that passes a shared value kind (an e-mail address, a name, a date, a
place, an amount, a code, a link, a phone number; see :data:`envfactory_assets.graph.parameters.SHARED_KINDS`),
or when it is the producer of such a value for a tool of an environment already in the chain. An input that
could take that value is then bound to it even when the optional-skip draw would have left it out, so the
link is a real argument flow. The tool graph never joins two environments through an identifier, so no
identifier issued by one API reaches another. A multi-environment chain also gets an episode plan
(:func:`episode_plan`): who the user is and what they are trying to do across those tools.

A chain is *valid* (:func:`validate_chain`) when every required input of every tool is user-providable or is
produced, through a graph edge, by a tool placed earlier in the chain, and its environments are connected by
flows of shared values.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import networkx as nx

from envfactory_assets.config_checks import finite_number, setting, whole_number
from envfactory_assets.graph.build import ToolGraph
from envfactory_assets.graph.parameters import SHARED_KINDS

__all__ = [
    "SamplerConfig",
    "Chain",
    "ChainSamplingError",
    "USER",
    "SAMPLERS",
    "chain_seed",
    "sample_chain",
    "random_walk_chain",
    "sample_chains",
    "clashing_environments",
    "validate_chain",
    "dependency_stats",
    "episode_plan",
    "flow_kind",
    "flow_stats",
    "service_name",
    "PERSONAS",
    "GOALS",
]

#: Binding value for an input the user states in the request (no producer tool).
USER = "user"


class ChainSamplingError(RuntimeError):
    """No chain of at least ``min_tools`` tools could be sampled for this seed (e.g. an edgeless graph)."""


@dataclass(frozen=True)
class SamplerConfig:
    """Sampler limits and probabilities: the paper's values, except ``min_tools``, ``max_start_attempts``,
    ``max_producer_candidates``, ``p_join_environment`` and ``p_linked_start``, which the paper does not have
    (each field's help says what it does)."""

    max_tools: int = setting(15, "most tools in one chain (paper: 15); at least 1.")
    max_servers: int = setting(3, "most distinct environments (servers) in one chain (paper: 3); at least 1.")
    max_depth: int = setting(
        5,
        "deepest producer recursion below a tool that BFS adds (paper: 5): the tool's producers are depth 1, "
        "their producers depth 2, and so on; 0 or more.",
    )
    p_skip_optional: float = setting(0.6, "probability (0..1) that an optional input is left out (paper: 0.6).")
    p_explicit_producer: float = setting(
        0.1, "probability (0..1) that an input the chain can already fill still gets a producer tool (paper: 0.1)."
    )
    min_tools: int = setting(
        3, "shortest chain returned, in tools (1..max_tools); a shorter attempt restarts from another start tool."
    )
    max_start_attempts: int = setting(
        20, "start tools tried, with the same random stream, before the seed gives no chain; at least 1."
    )
    max_producer_candidates: int = setting(
        3,
        "producers tried, in random order, for one input nothing fills yet before it is given up (bounds the "
        "recursion's branching; 1 = the paper's single uniform draw); at least 1.",
    )
    p_join_environment: float = setting(
        0.8,
        "probability (0..1) that, when an added tool has successors in environments the chain does not use yet "
        "(and may still take one), one of them goes to the front of the BFS queue; not in the paper: "
        "cross-environment edges pass shared values only, so plain BFS reaches them after the chain is full, "
        "and 0.8 keeps about two thirds of the default run's chains multi-environment.",
    )
    p_linked_start: float = setting(
        0.5,
        "probability (0..1) that the start tool is drawn among the tools of environments that exchange a "
        "shared value with another environment (ToolGraph.linked_node_ids), else among all tools; not in the "
        "paper: at 0.5 about 70% of the default run's chains span several environments and every environment "
        "still starts chains.",
    )

    def __post_init__(self) -> None:
        """Raises :class:`~envfactory_assets.config_checks.SettingError` (a ValueError) naming the setting
        (``sampler setting <name>=<value>: expected ...``); the ``tool_chains`` config reports these same
        checks under its own name."""
        owner = "sampler"  # each check refuses the wrong type too (a float or NaN passes a plain comparison)
        whole_number(owner, "max_tools", self.max_tools, low=1)
        whole_number(owner, "max_servers", self.max_servers, low=1)
        whole_number(owner, "max_depth", self.max_depth, low=0)
        whole_number(owner, "min_tools", self.min_tools, low=1, high=self.max_tools)
        for name in ("p_skip_optional", "p_explicit_producer", "p_join_environment", "p_linked_start"):
            finite_number(owner, name, getattr(self, name), low=0.0, high=1.0)
        whole_number(owner, "max_start_attempts", self.max_start_attempts, low=1)
        whole_number(owner, "max_producer_candidates", self.max_producer_candidates, low=1)


@dataclass(frozen=True)
class Chain:
    """One sampled tool chain.

    Attributes:
        tools: node ids (``"{env_id}.{tool_name}"``) in call order; each tool at most once.
        servers: distinct ``env_id`` of ``tools`` in order of first use.
        seed: the ``random.Random`` seed it was drawn with.
        sampler: ``"topology"`` or ``"random_walk"``.
        producers: per tool, per input that the chain uses: the node id of the earlier tool whose output fills
            it, or :data:`USER` when the user states it. Inputs left out (skipped optional ones, and inputs
            nothing fills in a baseline chain) are absent.
        key: the stable key the seed was derived from (:func:`chain_seed`), when sampled by key.
        plan: the episode plan of a multi-environment chain (:func:`episode_plan`), else None.
    """

    tools: tuple[str, ...]
    servers: tuple[str, ...]
    seed: int
    sampler: str
    producers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    key: str | None = None
    plan: Mapping[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.tools)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (lists instead of tuples)."""
        d = asdict(self)
        d["tools"] = list(self.tools)
        d["servers"] = list(self.servers)
        d["producers"] = {t: dict(v) for t, v in self.producers.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Chain:
        return cls(
            tools=tuple(d["tools"]),
            servers=tuple(d["servers"]),
            seed=int(d["seed"]),
            sampler=str(d["sampler"]),
            producers={t: dict(v) for t, v in (d.get("producers") or {}).items()},
            key=d.get("key"),
            plan=d.get("plan"),
        )


def chain_seed(key: str) -> int:
    """Stable 64-bit seed of a chain key: the first 8 bytes of ``sha256(key)``, big-endian, as an int."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")


def clashing_environments(graph: ToolGraph) -> dict[str, frozenset[str]]:
    """``{env_id: environments that define one of its tool names}`` from the graph's node ids
    (``"{env_id}.{tool_name}"``); environments without a clash are absent."""
    by_name: dict[str, set[str]] = {}
    for node in graph.node_ids:
        env = graph.env_of(node)
        by_name.setdefault(node[len(env) + 1 :], set()).add(env)
    clashes: dict[str, set[str]] = {}
    for envs in by_name.values():
        for env in envs if len(envs) > 1 else ():
            clashes.setdefault(env, set()).update(envs - {env})
    return {e: frozenset(v) for e, v in clashes.items()}


def keep_apart(
    clashes: Mapping[str, frozenset[str]], apart: Collection[str], env_ids: Collection[str]
) -> dict[str, frozenset[str]]:
    """``clashes`` (``{env_id: environments it may not share a chain with}``) extended so that no environment
    of ``apart`` shares a chain with one of ``env_ids`` outside it (held-out environments are combined only
    with each other, so a chain is wholly held out or wholly for training)."""
    inside, outside = frozenset(apart) & frozenset(env_ids), frozenset(env_ids) - frozenset(apart)
    if not inside:
        return dict(clashes)
    out = {e: frozenset(v) for e, v in clashes.items()}
    for env in env_ids:
        out[env] = out.get(env, frozenset()) | (outside if env in inside else inside)
    return out


def _can_join(env_id: str, servers: list[str], max_servers: int, clashes: Mapping[str, frozenset[str]]) -> bool:
    """True when ``env_id`` is already in ``servers`` or fits and shares no tool name with any of them."""
    if env_id in servers:
        return True
    return len(servers) < max_servers and not clashes.get(env_id, frozenset()).intersection(servers)


# ----------------------------------------------------------------------------- topology-aware sampler
@dataclass
class _Draft:
    """A chain under construction; copied before a tentative addition so a failure leaves no trace."""

    tools: list[str] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)
    producers: dict[str, dict[str, str]] = field(default_factory=dict)
    clashes: Mapping[str, frozenset[str]] = field(default_factory=dict)  # shared, read-only

    def copy(self) -> _Draft:
        # a binding map is never changed once added (add() takes a fresh one), so copies may share them
        return _Draft(list(self.tools), list(self.servers), dict(self.producers), self.clashes)

    def has_room(self, env_id: str, cfg: SamplerConfig) -> bool:
        return len(self.tools) < cfg.max_tools and _can_join(env_id, self.servers, cfg.max_servers, self.clashes)

    def add(self, node: str, env_id: str, bindings: dict[str, str]) -> None:
        self.tools.append(node)
        if env_id not in self.servers:
            self.servers.append(env_id)
        self.producers[node] = bindings


def _latest_producer(graph: ToolGraph, node: str, param: str, tools: list[str]) -> str | None:
    """The latest tool already in ``tools`` with an edge into ``node`` for ``param``, or None."""
    producers = graph.producer_set(node, param)
    for t in reversed(tools):
        if t in producers:
            return t
    return None


def _shared_link(graph: ToolGraph, node: str, env: str, tools: list[str], bindings: Mapping[str, str]) -> bool:
    """True when one of ``bindings`` is a tool of another environment passing ``node`` a shared value."""
    shared = graph.shared_producers(node)
    return any(src in shared.get(name, ()) and src in tools for name, src in bindings.items())


def _force_shared_link(
    graph: ToolGraph, node: str, env: str, tools: list[str], bindings: dict[str, str], rng: random.Random
) -> bool:
    """Bind one input of ``node`` (left out or user-stated so far) to the latest earlier tool of another
    environment that passes it a shared value; False when no input can take one."""
    options = []
    for name, srcs in sorted(graph.shared_producers(node).items()):
        if bindings.get(name, USER) != USER:
            continue
        for t in reversed(tools):
            if t in srcs:
                options.append((name, t))
                break
    if not options:
        return False
    name, src = rng.choice(options)
    bindings[name] = src
    return True


def _try_add(
    graph: ToolGraph,
    node: str,
    draft: _Draft,
    depth: int,
    stack: frozenset[str],
    rng: random.Random,
    cfg: SamplerConfig,
    consumer: tuple[str, str] | None = None,
) -> _Draft | None:
    """Return a new draft with ``node`` appended after the producers its inputs need, or None.

    ``depth`` is the producer depth of ``node`` (0 for a tool BFS adds); ``stack`` holds the tools whose
    addition is in progress (a producer may not be one of them: no cycles); ``consumer`` is the
    ``(tool, input)`` that ``node`` is the producer for, if any. A tool of an environment new to the chain
    must exchange a shared value with an environment already in it (module docstring).
    """
    if node in draft.tools:
        return draft
    env = graph.env_of(node)
    if not draft.has_room(env, cfg):
        return None
    feeds_chain = (
        consumer is not None
        and graph.env_of(consumer[0]) in draft.servers
        and graph.env_of(consumer[0]) != env
        and graph.passes_shared_value(node, *consumer)
    )
    d = draft.copy()
    bindings: dict[str, str] = {}
    inner = stack | {node}
    for inp in graph.inputs(node):
        name = inp["name"]
        if not inp["required"] and rng.random() < cfg.p_skip_optional:
            continue
        earlier = _latest_producer(graph, node, name, d.tools)
        fillable = inp["user_providable"] or earlier is not None
        if fillable:
            if rng.random() < cfg.p_explicit_producer and depth < cfg.max_depth:
                cands = [p for p in graph.producers(node, name) if p not in d.tools and p not in inner]
                if cands:
                    p = rng.choice(cands)
                    nd = _try_add(graph, p, d, depth + 1, inner, rng, cfg, (node, name))
                    if nd is not None:
                        d, bindings[name] = nd, p
                        continue
            bindings[name] = earlier if earlier is not None else USER
            continue
        # Unfillable: a producer must come first (uniform choice; retry a few others if it fails).
        chosen = None
        if depth < cfg.max_depth:
            cands = [p for p in graph.producers(node, name) if p not in d.tools and p not in inner]
            rng.shuffle(cands)
            for p in cands[: cfg.max_producer_candidates]:
                nd = _try_add(graph, p, d, depth + 1, inner, rng, cfg, (node, name))
                if nd is not None:
                    d, chosen = nd, p
                    break
        if chosen is not None:
            bindings[name] = chosen
        elif inp["required"]:
            return None
        # An optional input nothing can fill is left out.
    joins = bool(d.servers) and env not in d.servers
    if (
        joins
        and not feeds_chain
        and not _shared_link(graph, node, env, d.tools, bindings)
        and not _force_shared_link(graph, node, env, d.tools, bindings, rng)
    ):
        return None
    if not d.has_room(env, cfg):
        return None
    d.add(node, env, bindings)
    return d


def _finish(graph: ToolGraph, draft: _Draft, seed: int, sampler: str, key: str | None) -> Chain:
    chain = Chain(
        tools=tuple(draft.tools),
        servers=tuple(draft.servers),
        seed=seed,
        sampler=sampler,
        producers={t: dict(b) for t, b in draft.producers.items()},
        key=key,
    )
    plan = episode_plan(graph, chain)
    return chain if plan is None else replace(chain, plan=plan)


def _bridge(graph: ToolGraph, draft: _Draft, rng: random.Random, cfg: SamplerConfig, tries: int = 8) -> _Draft:
    """``draft`` with one more tool, from another environment that an earlier tool passes a shared value
    to, when one of up to ``tries`` such tools (random order) can be added; else ``draft`` itself."""
    cands = sorted(
        {
            s
            for t in draft.tools
            for s in graph.successors(t)
            if s not in draft.tools
            and graph.env_of(s) not in draft.servers
            and _can_join(graph.env_of(s), draft.servers, cfg.max_servers, draft.clashes)
        }
    )
    rng.shuffle(cands)
    for s in cands[:tries]:
        added = _try_add(graph, s, draft, 0, frozenset(), rng, cfg)
        if added is not None:
            return added
    return draft


def sample_chain(
    graph: ToolGraph,
    seed: int,
    config: SamplerConfig | None = None,
    *,
    key: str | None = None,
    clashes: Mapping[str, frozenset[str]] | None = None,
) -> Chain:
    """Topology-aware chain (paper): BFS from a random tool, producers resolved before consumers.

    Args:
        graph: the tool graph.
        seed: seed of the only random stream used (``random.Random(seed)``).
        config: limits and probabilities (default :class:`SamplerConfig`).
        key: recorded on the chain (the stable key ``seed`` was derived from, if any).
        clashes: :func:`clashing_environments` of ``graph`` (computed when None; pass it when sampling many).

    Returns:
        a :class:`Chain` with ``min_tools <= len <= max_tools`` tools from ``<= max_servers`` environments that
        passes :func:`validate_chain`.

    Raises:
        ChainSamplingError: no start among ``max_start_attempts`` gave ``min_tools`` tools; ValueError: empty graph.
    """
    cfg = config or SamplerConfig()
    nodes = graph.node_ids
    if not nodes:
        raise ValueError("the tool graph has no nodes")
    clashes = clashing_environments(graph) if clashes is None else clashes
    linked = graph.linked_node_ids
    rng = random.Random(seed)
    for _ in range(cfg.max_start_attempts):
        start = rng.choice(linked if linked and rng.random() < cfg.p_linked_start else nodes)
        draft = _Draft(clashes=clashes)
        queue: deque[str] = deque([start])
        queued = {start}
        # While the chain has one environment, one place is kept free for a tool of another (see _bridge).
        while queue and len(draft.tools) < cfg.max_tools - (len(draft.servers) == 1 < cfg.max_servers):
            node = queue.popleft()
            if node not in draft.tools:
                added = _try_add(graph, node, draft, 0, frozenset(), rng, cfg)
                if added is None:
                    continue
                draft = added
            succ = [
                s
                for s in graph.successors(node)
                if s not in draft.tools
                and s not in queued
                and _can_join(graph.env_of(s), draft.servers, cfg.max_servers, clashes)
            ]
            if succ:
                chosen = rng.sample(succ, rng.randint(1, len(succ)))
                queue.extend(chosen)
                queued.update(chosen)
                bridges = [s for s in succ if graph.env_of(s) not in draft.servers]
                if bridges and len(draft.servers) < cfg.max_servers and rng.random() < cfg.p_join_environment:
                    bridge = rng.choice(bridges)
                    if bridge in queue:
                        queue.remove(bridge)
                    queue.appendleft(bridge)
                    queued.add(bridge)
        if len(draft.servers) == 1 and cfg.max_servers > 1 and rng.random() < cfg.p_join_environment:
            draft = _bridge(graph, draft, rng, cfg)
        if len(draft.tools) >= cfg.min_tools:
            return _finish(graph, draft, seed, "topology", key)
    raise ChainSamplingError(
        f"no chain of >= {cfg.min_tools} tools after {cfg.max_start_attempts} start tools (seed {seed})"
    )


# ----------------------------------------------------------------------------- random-walk baseline
def _observed_bindings(graph: ToolGraph, tools: list[str]) -> dict[str, dict[str, str]]:
    """For each tool, each input filled by an earlier tool (latest one) or by the user; unfillable -> absent."""
    out: dict[str, dict[str, str]] = {}
    for k, t in enumerate(tools):
        b: dict[str, str] = {}
        for inp in graph.inputs(t):
            earlier = _latest_producer(graph, t, inp["name"], tools[:k])
            if earlier is not None:
                b[inp["name"]] = earlier
            elif inp["user_providable"]:
                b[inp["name"]] = USER
        out[t] = b
    return out


def random_walk_chain(
    graph: ToolGraph,
    seed: int,
    config: SamplerConfig | None = None,
    *,
    key: str | None = None,
    clashes: Mapping[str, frozenset[str]] | None = None,
) -> Chain:
    """Baseline (paper): a random walk along graph edges, blind to input dependencies.

    From a uniformly random start, repeatedly step to a uniformly random successor not yet in the walk whose
    environment still fits ``max_servers`` (and shares no tool name with the walk's environments), until a length drawn
    uniformly from ``[min_tools, max_tools]`` is
    reached or the walk is stuck. ``producers`` records what the walk happens to satisfy. Same errors as
    :func:`sample_chain`; the result need not pass :func:`validate_chain`.
    """
    cfg = config or SamplerConfig()
    nodes = graph.node_ids
    if not nodes:
        raise ValueError("the tool graph has no nodes")
    clashes = clashing_environments(graph) if clashes is None else clashes
    rng = random.Random(seed)
    for _ in range(cfg.max_start_attempts):
        target = rng.randint(cfg.min_tools, cfg.max_tools)
        cur = rng.choice(nodes)
        walk, servers = [cur], [graph.env_of(cur)]
        while len(walk) < target:
            succ = [
                s
                for s in graph.successors(cur)
                if s not in walk and _can_join(graph.env_of(s), servers, cfg.max_servers, clashes)
            ]
            if not succ:
                break
            cur = rng.choice(succ)
            walk.append(cur)
            if graph.env_of(cur) not in servers:
                servers.append(graph.env_of(cur))
        if len(walk) >= cfg.min_tools:
            chain = Chain(
                tools=tuple(walk),
                servers=tuple(servers),
                seed=seed,
                sampler="random_walk",
                producers=_observed_bindings(graph, walk),
                key=key,
            )
            plan = episode_plan(graph, chain)
            return chain if plan is None else replace(chain, plan=plan)
    raise ChainSamplingError(
        f"no walk of >= {cfg.min_tools} tools after {cfg.max_start_attempts} start tools (seed {seed})"
    )


SAMPLERS: dict[str, Callable[..., Chain]] = {"topology": sample_chain, "random_walk": random_walk_chain}


# ----------------------------------------------------------------------------- validation
def validate_chain(graph: ToolGraph, chain: Chain, config: SamplerConfig | None = None) -> list[str]:
    """Problems with ``chain`` on ``graph`` (empty list = valid).

    Checks: tools known and not repeated; ``servers`` equals the tools' environments in first-use order;
    every required input of every tool is user-providable or produced (through a graph edge for that input)
    by an earlier tool; every recorded producer is earlier in the chain and has such an edge; no recorded
    flow between two environments passes anything but a shared value (an identifier, free text, or an edge
    stored without a kind); the environments of a multi-environment chain are connected by such flows; with
    ``config``, the ``max_tools`` / ``max_servers`` / ``min_tools`` limits.
    """
    problems: list[str] = []
    tools = list(chain.tools)
    if not tools:
        return ["chain is empty"]
    unknown = [t for t in tools if t not in graph.graph]
    if unknown:
        return [f"unknown tool {t!r}" for t in unknown]
    seen: set[str] = set()
    for t in tools:
        if t in seen:
            problems.append(f"tool {t!r} appears more than once")
        seen.add(t)
    envs: list[str] = []
    for t in tools:
        e = graph.env_of(t)
        if e not in envs:
            envs.append(e)
    if tuple(envs) != tuple(chain.servers):
        problems.append(f"servers {list(chain.servers)} != environments of the tools {envs}")
    if config is not None:
        if len(tools) > config.max_tools:
            problems.append(f"{len(tools)} tools > max_tools {config.max_tools}")
        if len(tools) < config.min_tools:
            problems.append(f"{len(tools)} tools < min_tools {config.min_tools}")
        if len(envs) > config.max_servers:
            problems.append(f"{len(envs)} servers > max_servers {config.max_servers}")
    position = {t: k for k, t in enumerate(tools)}
    for k, t in enumerate(tools):
        earlier = set(tools[:k])
        for inp in graph.inputs(t):
            name = inp["name"]
            if inp["required"] and not inp["user_providable"]:
                if not earlier.intersection(graph.producers(t, name)):
                    problems.append(f"{t}: required input {name!r} has no earlier producer")
        for name, src in (chain.producers.get(t) or {}).items():
            if src == USER:
                continue
            if src not in position or position[src] >= k:
                problems.append(f"{t}: producer {src!r} of {name!r} is not earlier in the chain")
            elif src not in graph.producers(t, name):
                problems.append(f"{t}: {src!r} has no edge into input {name!r}")
            elif graph.env_of(src) != graph.env_of(t) and not graph.passes_shared_value(src, t, name):
                problems.append(
                    f"{t}: input {name!r} takes a {flow_kind(graph, src, t, name)} value from "
                    f"{src!r} in another environment (only shared real-world values cross)"
                )
    if len(envs) > 1:
        linked = nx.Graph()
        linked.add_nodes_from(envs)
        for t, b in chain.producers.items():
            for name, src in b.items():
                if (
                    src != USER
                    and src in position
                    and t in position
                    and graph.env_of(src) != graph.env_of(t)
                    and graph.passes_shared_value(src, t, name)
                ):
                    linked.add_edge(graph.env_of(src), graph.env_of(t))
        if not nx.is_connected(linked):
            parts = sorted(sorted(c) for c in nx.connected_components(linked))
            problems.append(f"environments not joined by a flow of a shared value: {parts}")
    return problems


def flow_kind(graph: ToolGraph, src: str, dst: str, param: str) -> str:
    """The value kind of the flow from ``src`` into input ``param`` of ``dst``: a shared kind when one of
    the edges passes one, else the first of the edges' kinds (``"none"`` without an edge)."""
    kinds = graph.flow_kinds(src, dst, param)
    shared = kinds & SHARED_KINDS
    return min(shared) if shared else min(kinds, default="none")


def flow_stats(graph: ToolGraph, chains: Iterable[Chain]) -> dict[str, Any]:
    """Argument flows of ``chains`` by value kind.

    Returns ``{"chains", "multi_env_chains", "multi_env_share", "multi_env_with_shared_flow",
    "flows", "cross_env_flows", "cross_env_flows_by_kind", "flows_by_kind", "identifier_crossings"}``: a flow
    is one input bound to an earlier tool (user-stated inputs are not flows); ``multi_env_with_shared_flow``
    counts multi-environment chains with at least one cross-environment flow of a shared kind;
    ``identifier_crossings`` counts cross-environment flows whose edge passes an identifier (0 on a graph
    built with value kinds).
    """
    n = multi = multi_shared = flows = cross = id_cross = 0
    by_kind: Counter[str] = Counter()
    cross_by_kind: Counter[str] = Counter()
    for chain in chains:
        n += 1
        has_shared = False
        for t, b in chain.producers.items():
            for name, src in b.items():
                if src == USER or src not in graph.graph or t not in graph.graph:
                    continue
                kind = flow_kind(graph, src, t, name)
                flows += 1
                by_kind[kind] += 1
                if graph.env_of(src) != graph.env_of(t):
                    cross += 1
                    cross_by_kind[kind] += 1
                    id_cross += "identifier" in graph.flow_kinds(src, t, name)
                    has_shared |= kind in SHARED_KINDS
        if len(chain.servers) > 1:
            multi += 1
            multi_shared += has_shared
    return {
        "chains": n,
        "multi_env_chains": multi,
        "multi_env_share": round(multi / n, 4) if n else 0.0,
        "multi_env_with_shared_flow": multi_shared,
        "flows": flows,
        "cross_env_flows": cross,
        "cross_env_flows_by_kind": dict(cross_by_kind.most_common()),
        "flows_by_kind": dict(by_kind.most_common()),
        "identifier_crossings": id_cross,
    }


def dependency_stats(graph: ToolGraph, chains: Iterable[Chain]) -> dict[str, float | int]:
    """Dependency satisfaction over chains.

    Returns ``{"chains", "valid_chains", "chain_valid_rate", "required_inputs", "satisfied_inputs",
    "input_satisfaction_rate"}``: a required non-user-providable input counts as satisfied when an earlier
    tool produces it; the rates are in [0, 1] (1.0 for no chains / no such inputs).
    """
    n = valid = req = sat = 0
    for chain in chains:
        n += 1
        valid += not validate_chain(graph, chain)
        for k, t in enumerate(chain.tools):
            earlier = set(chain.tools[:k])
            for inp in graph.inputs(t):
                if inp["required"] and not inp["user_providable"]:
                    req += 1
                    sat += bool(earlier.intersection(graph.producers(t, inp["name"])))
    return {
        "chains": n,
        "valid_chains": valid,
        "chain_valid_rate": valid / n if n else 1.0,
        "required_inputs": req,
        "satisfied_inputs": sat,
        "input_satisfaction_rate": sat / req if req else 1.0,
    }


def sample_chains(
    graph: ToolGraph,
    n: int,
    base_key: str,
    config: SamplerConfig | None = None,
    sampler: Literal["topology", "random_walk"] = "topology",
    *,
    require_valid: bool = True,
    max_attempts: int | None = None,
    apart: Collection[str] = frozenset(),
    progress: Callable[[int, int], None] | None = None,
) -> list[Chain]:
    """Up to ``n`` distinct chains, deterministic for the same graph, ``base_key``, config and sampler.

    Attempt ``i`` uses key ``f"{base_key}/{i}"`` and seed :func:`chain_seed` of it. A chain is kept when it is
    new (deduplicated on its tool sequence) and, if ``require_valid``, passes :func:`validate_chain` with
    ``config``. Stops after ``n`` chains or ``max_attempts`` attempts (default ``10 * n + 10``); seeds where
    sampling fails (:class:`ChainSamplingError`) are skipped, and a graph without nodes gives ``[]``.

    ``apart``: environments that share chains only with each other (:func:`keep_apart`; the held-out
    environments, so that no chain mixes tools an agent is trained on with tools it is evaluated on).
    ``progress(chains kept, n)`` is called after each kept chain.

    Raises ``ValueError`` for ``n < 0`` or an unknown sampler name.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; expected one of {sorted(SAMPLERS)}")
    cfg = config or SamplerConfig()
    fn = SAMPLERS[sampler]
    attempts = max_attempts if max_attempts is not None else 10 * n + 10
    out: list[Chain] = []
    if not graph.node_ids:
        return out
    seen: set[tuple[str, ...]] = set()
    clashes = keep_apart(clashing_environments(graph), apart, {graph.env_of(n) for n in graph.node_ids})
    for i in range(attempts):
        if len(out) >= n:
            break
        key = f"{base_key}/{i}"
        try:
            chain = fn(graph, chain_seed(key), cfg, key=key, clashes=clashes)
        except ChainSamplingError:
            continue
        if chain.tools in seen:
            continue
        if require_valid and validate_chain(graph, chain, cfg):
            continue
        seen.add(chain.tools)
        out.append(chain)
        if progress is not None:
            progress(len(out), n)
    return out


# ----------------------------------------------------------------------------- episode plans
#: Who the user of a multi-environment episode is, by the domain of the chain's first environment
#: (the corpus's domains, see ``envfactory_assets.sources``; unknown domains use ``"*"``).
PERSONAS: dict[str, tuple[str, ...]] = {
    "productivity": ("an office manager", "a project coordinator", "an executive assistant"),
    "developer_tools": ("a DevOps engineer", "a backend developer", "a platform engineer"),
    "knowledge_media_health": ("a clinic administrator", "a content editor", "a research assistant"),
    "finance_payments": ("an accountant at a small business", "a finance operations analyst"),
    "finance": ("an accountant at a small business", "a finance operations analyst"),
    "ecommerce_retail": ("an online shop owner", "a retail operations manager"),
    "travel_transport": ("a travel coordinator", "a logistics planner"),
    "communication": ("a community manager", "a customer success manager"),
    "customer_support": ("a support team lead", "a customer support agent"),
    "*": ("a small-business owner", "an operations analyst"),
}
#: What the user is trying to do, by the kind of value that links two services ({a}: where the value comes
#: from, {b}: where it goes).
GOALS: dict[str, str] = {
    "email": "find a person's e-mail address in {a} and use it to reach or register the same person in {b}",
    "person_name": "take a person's name from {a} and find or record the same person in {b}",
    "organization": "keep one company's records in step between {a} and {b}",
    "datetime": "plan around a date found in {a} by using the same date in {b}",
    "place": "use an address or place found in {a} when setting things up in {b}",
    "money": "carry an amount from {a} over into {b}",
    "code": "use the same currency, country or language from {a} in {b}",
    "url": "share a link found in {a} in {b}",
    "phone": "use a phone number from {a} to reach or register someone in {b}",
}
_HOST_SUFFIXES = frozenset(
    {"com", "org", "io", "net", "local", "dev", "co", "ai", "app", "us", "uk", "de", "fr", "eu", "cloud", "tech"}
)


def service_name(env_id: str) -> str:
    """How a person names an environment's service: ``stripe_com__billing`` -> ``"Stripe billing"``,
    ``linode_com`` -> ``"Linode"`` (provider without its host suffix, then the API's words)."""
    provider, _, api = env_id.partition("__")
    words = provider.split("_")
    while len(words) > 1 and words[-1] in _HOST_SUFFIXES:
        words.pop()
    head = " ".join(w.capitalize() for w in words if w)
    tail = " ".join(w for w in api.split("_") if w)
    return f"{head} {tail}".strip() if tail and tail.lower() != head.lower() else head or env_id


def episode_plan(graph: ToolGraph, chain: Chain) -> dict[str, Any] | None:
    """A short goal a person could have across the chain's environments, or None for a one-environment chain.

    Returns ``{"persona", "goal", "services", "domains", "linked_by"}``: ``linked_by`` lists the flows of
    shared values between environments (``{"kind", "from", "to", "from_tool", "to_tool", "input"}``, in call
    order); the persona is drawn (``random.Random(chain.seed)``) from :data:`PERSONAS` of the first
    environment's domain; the goal joins one :data:`GOALS` sentence per linked pair of services (the first
    flow of each pair), or says the services are used side by side when no shared value links them (a
    random-walk chain; such a chain does not validate).
    """
    if len(chain.servers) < 2:
        return None
    domain_of = {graph.env_of(t): graph.graph.nodes[t].get("domain") for t in chain.tools if t in graph.graph}
    links = []
    for t in chain.tools:
        for name, src in (chain.producers.get(t) or {}).items():
            if src == USER or src not in graph.graph or t not in graph.graph:
                continue
            a, b = graph.env_of(src), graph.env_of(t)
            kind = flow_kind(graph, src, t, name)
            if a != b and kind in SHARED_KINDS:
                links.append(
                    {
                        "kind": kind,
                        "from": a,
                        "to": b,
                        "from_tool": graph.graph.nodes[src]["tool_name"],
                        "to_tool": graph.graph.nodes[t]["tool_name"],
                        "input": name,
                    }
                )
    rng = random.Random(chain.seed)
    first_domain = domain_of.get(chain.servers[0]) or "*"
    persona = rng.choice(PERSONAS.get(first_domain, PERSONAS["*"]))
    seen_pairs: set[frozenset[str]] = set()
    parts = []
    for link in links:
        pair = frozenset((link["from"], link["to"]))
        if pair not in seen_pairs:
            seen_pairs.add(pair)
            parts.append(GOALS[link["kind"]].format(a=service_name(link["from"]), b=service_name(link["to"])))
    services = [service_name(e) for e in chain.servers]
    if not parts:
        parts = ["get a task done using " + ", ".join(services[:-1]) + " and " + services[-1] + " side by side"]
    goal = f"As {persona}, the user wants to " + "; then ".join(parts) + "."
    return {
        "persona": persona,
        "goal": goal,
        "services": services,
        "domains": [domain_of.get(e) for e in chain.servers],
        "linked_by": links,
    }
