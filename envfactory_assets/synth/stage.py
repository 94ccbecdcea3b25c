"""Store rows of the synthesis stages: tool_chains, raw/refined trajectories, SFT and RL datasets."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from envfactory_assets.graph.build import ToolGraph
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker
from envfactory_assets.store.ids import content_id
from envfactory_assets.synth.datasets.datagaps import (
    DataGapsConfig,
    GapStats,
    augment_trajectory,
)
from envfactory_assets.synth.datasets.name_masking import check_mask_share, is_masked, mask_names
from envfactory_assets.synth.datasets.rows import (
    replay_check,
    rl_rows,
    sft_row,
    split_of,
)
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig, calibrate_trajectory, persona_of
from envfactory_assets.synth.refinement.calibrate_pool import calibrate_all, load_environments, resolve_workers
from envfactory_assets.synth.refinement.filtering import apply_filter
from envfactory_assets.synth.refinement.model_querygen import ModelQueryWriter, ModelRefiner
from envfactory_assets.synth.refinement.solver.base import Solver
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver
from envfactory_assets.synth.sampling.sampler import (
    Chain,
    SamplerConfig,
    sample_chains,
    validate_chain,
)
from envfactory_assets.synth.threaded import map_with_workers, role_concurrency
from envfactory_assets.synth.trajectories.execution import (
    SynthConfig,
    synthesize_trajectory,
    tool_name_collisions,
)
from envfactory_assets.synth.trajectories.real_calls import has_real_signatures, real_trajectory
from envfactory_assets.tooluse.splits import (
    TRAIN_SPLIT,
    dataset_split,
    held_out_environments,
    is_held_out_environment,
)


def dependency_depth(chain: Chain) -> int:
    """Longest producer -> consumer path in the chain (0 when no tool feeds another)."""
    depth: dict[str, int] = {}
    for node in chain.tools:
        feeders = [p for p in chain.producers.get(node, {}).values() if p in depth]
        depth[node] = 1 + max((depth[p] for p in feeders), default=-1)
    return max(depth.values(), default=0)


def chain_rows(
    graph: ToolGraph,
    environments: dict[str, dict[str, Any]],
    verified_ids: dict[str, str],
    n_chains: int,
    base_key: str,
    sampler: str,
    config: SamplerConfig,
    benchmark_tags: dict[str, list[str]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Sample ``n_chains`` distinct chains and return ``tool_chains`` rows (status ``passed``/``failed``);
    ``progress(chains sampled, n_chains)`` as they are drawn.

    A chain fails when it does not validate against the graph or combines environments whose tool
    names collide (they could not share one episode). No chain combines a held-out environment
    (:func:`~envfactory_assets.tooluse.splits.held_out_environments`) with a training one.
    ``benchmark_tags`` (``{env_id: [benchmark, ...]}``) fills each row's ``benchmark_overlap``; raw and refined
    trajectories inherit it from their chain.
    """
    tags = benchmark_tags or {}
    rows = []
    # the dataset stage holds out the same environments (the rule depends on the ids alone)
    held_out = held_out_environments(graph.env_of(n) for n in graph.node_ids)
    for chain in sample_chains(
        graph, n_chains, base_key, config, sampler=sampler, require_valid=False, apart=held_out, progress=progress
    ):
        problems = validate_chain(graph, chain, config)
        clashes = tool_name_collisions([environments[e] for e in chain.servers])
        if clashes:
            problems = problems + [f"tool names shared by several environments: {clashes}"]
        row = {
            "chain_key": chain.key or "",
            "sampler": chain.sampler,
            "seed": chain.seed,
            "tools": chain.to_dict(),
            "env_ids": list(chain.servers),
            "verified_environment_ids": [verified_ids[e] for e in chain.servers],
            "domains": sorted({environments[e]["domain"] for e in chain.servers}),
            "n_tools": len(chain.tools),
            "n_servers": len(chain.servers),
            "dependency_depth": dependency_depth(chain),
            "status": "failed" if problems else "passed",
            "reasons": problems,
            "benchmark_overlap": sorted({b for e in chain.servers for b in tags.get(e, [])}),
            "episode_plan": chain.plan,  # also inside "tools" (Chain.plan), here for SQL
        }
        # Tags are part of a tagged chain's identity, so a changed tag gives new rows downstream.
        row["id"] = content_id(
            "chain",
            {
                "tools": row["tools"],
                "envs": row["verified_environment_ids"],
                **({"overlap": row["benchmark_overlap"]} if row["benchmark_overlap"] else {}),
            },
        )
        rows.append(row)
    return list({r["id"]: r for r in rows}.values())


def raw_trajectory_rows(
    chains: list[dict[str, Any]],
    graph: ToolGraph,
    environments: dict[str, dict[str, Any]],
    config: SynthConfig,
    limits: SandboxLimits | None = None,
    progress: Any = None,
    writer: ModelQueryWriter | None = None,
) -> list[dict[str, Any]]:
    """Execute every passed chain into a ``raw_trajectories`` row, all in one long-lived sandbox worker.

    ``writer`` (with ``config.query_writer == "model"``) writes the raw queries in the voice of the chain's
    episode-plan persona, or else of :func:`~envfactory_assets.synth.refinement.calibrate.persona_of` the chain's id
    (the trajectory's own id, which calibration draws its persona by, depends on the queries being written).
    With a writer, chains run in as many threads as its backend serves requests at once
    (:func:`~envfactory_assets.synth.threaded.map_with_workers`, a sandbox worker per thread); the rows are
    those of one thread, in the order of ``chains``.
    """
    parsed = [Chain.from_dict(c["tools"]) for c in chains]

    def one(pair: tuple[dict[str, Any], Chain], worker: SandboxWorker) -> dict[str, Any]:
        chain_row, chain = pair
        persona = (
            (chain.plan or {}).get("persona") or persona_of(chain_row["id"], chain_row["domains"])
            if writer is not None
            else None
        )
        traj = synthesize_trajectory(chain, graph, environments, worker, config, writer, persona)
        row = {
            "tool_chain_id": chain_row["id"],
            "env_ids": traj["env_ids"],
            "domains": chain_row["domains"],
            "status": traj["status"],
            "reasons": traj["reasons"],
            "n_turns": len(traj["turns"]),
            "n_calls": sum(len(t["calls"]) for t in traj["turns"]),
            "turns": traj["turns"],
            "initial_state": traj["initial_state"],
            "final_state": traj.get("final_state"),
            "initial_state_hash": traj["initial_state_hash"],
            "final_state_hash": traj.get("final_state_hash"),
            "benchmark_overlap": chain_row.get("benchmark_overlap") or [],
        }
        row["id"] = content_id("raw", {"chain": chain_row["id"], "turns": row["turns"], "status": row["status"]})
        return row

    pairs = list(zip(chains, parsed, strict=False))
    threads = role_concurrency(writer)
    rows = []
    if threads > 1:
        results: Any = map_with_workers(pairs, one, lambda pair: pair[1].servers, environments, threads, limits)
        for i, row in enumerate(results):
            rows.append(row)
            if progress is not None:
                progress(i + 1, len(chains))
        return rows
    with SandboxWorker(limits or SandboxLimits()) as worker:
        load_environments(worker, environments, (e for chain in parsed for e in chain.servers))
        for i, pair in enumerate(pairs):
            rows.append(one(pair, worker))
            if progress is not None:
                progress(i + 1, len(chains))
    return rows


def refined_trajectory_rows(
    raw_rows: list[dict[str, Any]],
    environments: dict[str, dict[str, Any]],
    solver: Solver | None = None,
    config: CalibrationConfig | None = None,
    limits: SandboxLimits | None = None,
    progress: Any = None,
    user: Any = None,
    providable: Any = None,
    refiner: ModelRefiner | None = None,
) -> list[dict[str, Any]]:
    """Refine and calibrate every passed raw trajectory into a ``refined_trajectories`` row.

    ``user`` (a :class:`~envfactory_assets.synth.trajectories.simulated_user.SimulatedUser`) and ``providable`` (the
    tool
    graph's user-providable flags) are needed when ``config.conversational_share > 0``; ``refiner`` (the
    model refiner) exactly when ``config.refiner == "model"``.

    Every turn is solved by ``config.k`` attempts of ``solver`` (default :class:`ProgrammaticSolver`) in a
    long-lived sandbox worker (:func:`envfactory_assets.synth.refinement.calibrate.calibrate_trajectory`). With the
    programmatic solver and user, trajectories are calibrated in ``config.workers`` processes
    (:func:`~envfactory_assets.synth.refinement.calibrate_pool.resolve_workers`), with the same rows as one process; a
    model-backed role keeps one process (its backend holds a connection and a cache) and calibrates
    trajectories in as many threads as its backend serves requests at once
    (:func:`~envfactory_assets.synth.threaded.map_with_workers`, a sandbox worker per thread), again with the
    rows of one thread. Near-duplicates (same tool sequence, near-identical queries) are then marked
    ``failed`` (:func:`envfactory_assets.synth.refinement.filtering.apply_filter`).
    """
    from envfactory_assets.synth.trajectories.simulated_user import ProgrammaticUser

    solver = solver or ProgrammaticSolver()
    cfg = config or CalibrationConfig()
    offline = (
        isinstance(solver, ProgrammaticSolver)
        and (user is None or isinstance(user, ProgrammaticUser))
        and refiner is None
    )
    workers = (
        resolve_workers(cfg.workers, len(raw_rows), len({e for r in raw_rows for e in r["env_ids"]})) if offline else 1
    )
    calibrate = functools.partial(
        calibrate_trajectory, solver=solver, config=cfg, user=user, providable=providable, refiner=refiner
    )
    threads = 1 if offline else role_concurrency(solver, user, refiner)
    if threads > 1:
        calibrations: Any = map_with_workers(
            raw_rows,
            lambda raw, worker: calibrate(raw, environments, worker),
            lambda raw: raw["env_ids"],
            environments,
            threads,
            limits,
        )
    else:
        calibrations = calibrate_all(raw_rows, environments, calibrate, workers, limits)
    rows = []
    for i, (raw, cal) in enumerate(zip(raw_rows, calibrations, strict=False)):
        unresolved = [o for o in cal["operators"] if o["operator"] == "implicit_reference" and not o["obtainable_from"]]
        reasons = cal["reasons"] + [f"unobtainable reference: {o}" for o in unresolved]
        row = {
            "raw_trajectory_id": raw["id"],
            "tool_chain_id": raw["tool_chain_id"],
            "env_ids": raw["env_ids"],
            "domains": raw["domains"],
            "status": "failed" if unresolved else cal["status"],
            "reasons": reasons,
            "n_turns": len(cal["turns"]),
            "operators": cal["operators"],
            "turns": cal["turns"],
            "benchmark_overlap": raw.get("benchmark_overlap") or [],
        }
        row["id"] = refined_trajectory_id(raw["id"], cal["turns"], row["status"], solver.name)
        rows.append(row)
        if progress is not None:  # after the trajectory, so the last report is len(raw_rows) of len(raw_rows)
            progress(i + 1, len(raw_rows))
    apply_filter(rows)
    return rows


def refined_trajectory_id(raw_id: str, turns: Sequence[Mapping[str, Any]], status: str, solver_name: str) -> str:
    """The id of a refined trajectory: a content id (``ref_`` + 16 hex digits) of its raw trajectory's id, its
    status, the solver's name and, per turn, the request, the clarification exchange, the calls (names and
    arguments) and the reply.

    It covers what the solver, the refiner and the reply writer made of the trajectory, not only its requests:
    the store keeps a stored id's row as it is, so a re-run whose code changes a clarification, a call or a
    reply makes a new row (and supersedes the old one) instead of leaving the old one current.
    """
    return content_id(
        "ref",
        {
            "raw": raw_id,
            "turns": [
                {
                    "query": t["query"],
                    "clarification": t.get("clarification") or [],
                    "calls": [[c["name"], c.get("arguments")] for c in t["calls"]],
                    "reply": t.get("assistant_summary"),
                }
                for t in turns
            ],
            "status": status,
            "solver": solver_name,
        },
    )


#: Which query of each turn the datasets are built from: ``refined`` (calibrated refinement's rewrite, the
#: paper's data) or ``raw`` (the query as synthesized, before refinement; the refined-vs-raw ablation).
QUERY_SOURCES = ("refined", "raw")
DEFAULT_QUERY_SOURCE = "refined"


def with_query_source(trajectory: dict[str, Any], query_source: str) -> dict[str, Any]:
    """``trajectory`` (a ``refined_trajectories`` row) with each turn's ``query`` taken from ``query_source``.

    ``raw`` puts back each turn's ``query_raw`` (the synthesized query refinement started from; a turn without
    one keeps its query); the calls, states and the turns kept are those of the refined trajectory, so the two
    sources differ only in how the user asks. The trajectory id is unchanged (the source is the same
    trajectory); rows built from it get new ids because their messages differ. ``refined`` returns the row as is.

    Raises:
        ValueError: ``query_source`` is not one of :data:`QUERY_SOURCES`.
    """
    if query_source not in QUERY_SOURCES:
        raise ValueError(f"query_source={query_source!r}: expected one of {list(QUERY_SOURCES)}")
    if query_source == "refined":
        return trajectory
    return {**trajectory, "turns": [{**t, "query": t.get("query_raw", t["query"])} for t in trajectory["turns"]]}


def dataset_rows(
    refined: list[dict[str, Any]],
    environments: dict[str, dict[str, Any]],
    sft_share: float,
    limits: SandboxLimits | None = None,
    benchmark_tags: dict[str, list[str]] | None = None,
    gaps: DataGapsConfig | None = None,
    gap_stats: GapStats | None = None,
    query_source: str = DEFAULT_QUERY_SOURCE,
    progress: Callable[[], None] | None = None,
    name_mask_share: float = 0.0,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Split refined trajectories (each by a stable hash of its id, :func:`split_of`: about ``sft_share``
    go to SFT, and a trajectory's split never depends on the others, so incremental re-synthesis leaves the
    rows of unchanged trajectories as they are) into ``sft_dataset`` rows and replay-checked ``rl_dataset`` rows.

    ``benchmark_tags`` (``{env_id: [benchmark, ...]}``) marks rows built from environments that overlap a
    held-out benchmark, in their ``benchmark_overlap`` column.

    ``query_source`` (:func:`with_query_source`): ``refined`` (default) or ``raw`` queries in every row.

    Each row's stored ``split`` (``train``/``validation``) is :func:`~envfactory_assets.tooluse.splits.dataset_split`
    over the held-out environments of all of ``refined`` at once, and is part of the row's id (a row whose
    split moved is a new row, never the stored one kept). Abstention requests of ``train`` rows never come
    from a held-out environment.

    ``gaps`` (default :class:`DataGapsConfig`'s shares) adds abstention turns, parallel calls and converted
    values to each trajectory first (:func:`envfactory_assets.synth.datasets.datagaps.augment_trajectory`; abstention
    requests may come from any of ``environments``); ``gap_stats``, when given, receives the row counts per kind.

    ``progress()`` is called after each trajectory of ``refined`` is turned into rows (its RL rows replayed).

    ``name_mask_share`` (0 here: no masking unless asked; the datasets asset passes
    :class:`~envfactory_assets.synth.run_settings.DatasetRunSpec`'s): that share of ``train`` SFT rows, chosen by
    a hash of the trajectory id (:func:`~envfactory_assets.synth.datasets.name_masking.is_masked`), have every tool
    name replaced by a neutral token (:func:`~envfactory_assets.synth.datasets.name_masking.mask_names`). RL rows
    keep the real names (their gold calls are replayed against the environments), and so do ``validation`` rows
    (they measure the model as it is used). Every SFT row's ``names_masked`` says which; a masked row's id is
    that of its masked content.

    Returns ``(sft_rows, rl_rows, rejection reasons of RL rows)``.

    Raises:
        ValueError: ``query_source`` is unknown, or ``name_mask_share`` is not a share in [0, 1].
    """
    check_mask_share(name_mask_share)
    refined = [with_query_source(t, query_source) for t in refined]
    tags = benchmark_tags or {}
    gaps = gaps or DataGapsConfig()
    stats = gap_stats if gap_stats is not None else GapStats()
    # by the raw trajectory: whether a trajectory trains SFT or RL must not move when only its refinement's
    # wording does (a refined id covers its clarifications and replies)
    splits = {t["id"]: split_of(t.get("raw_trajectory_id") or t["id"], sft_share) for t in refined}
    held_out = held_out_environments(e for t in refined for e in t["env_ids"])
    # A train row's abstention request may name another environment's tool: never a held-out one's (nor
    # one the hash rule would hold out once its trajectories arrive), or training would see its tools.
    unseen = held_out | {e for e in environments if is_held_out_environment(e)}
    train_pool = {e: env for e, env in environments.items() if e not in unseen}
    sft, rl, rejected = [], [], []
    with SandboxWorker(limits or SandboxLimits()) as worker:
        # every trajectory's environments: the parallel-call check replays SFT turns too, and same-tool
        # parallel turns execute in them
        sft_calls = gaps.parallel_share > 0 or gaps.same_tool_parallel_share > 0
        # and those whose calls are recorded in a real MCP server's names: they replay to be translated
        load_environments(
            worker,
            environments,
            (
                e
                for t in refined
                if splits[t["id"]] == "rl"
                or sft_calls
                or has_real_signatures({x: environments[x] for x in t["env_ids"]})
                for e in t["env_ids"]
            ),
        )
        for source in refined:
            split = splits[source["id"]]
            stored = dataset_split(source["env_ids"], held_out)
            traj = augment_trajectory(
                source, train_pool if stored == TRAIN_SPLIT else environments, split, gaps, worker
            )
            envs = {e: environments[e] for e in traj["env_ids"]}
            try:
                # what the model sees and is scored on: calls of real MCP signatures in the server's own names
                traj = real_trajectory(traj, envs, worker)
            except ValueError as exc:
                rejected.append(f"trajectory {traj['id']}: {exc}")
                if progress is not None:
                    progress()
                continue
            overlap = sorted({b for e in traj["env_ids"] for b in tags.get(e, [])})
            if split == "sft":
                row = {
                    "refined_trajectory_id": traj["id"],
                    "env_ids": traj["env_ids"],
                    "domains": traj["domains"],
                    "split": stored,
                    "n_turns": traj["n_turns"],
                    "benchmark_overlap": overlap,
                    **sft_row(traj, envs),
                }
                masked = stored == TRAIN_SPLIT and is_masked(traj["id"], name_mask_share)
                if masked:
                    row = mask_names(row, traj["id"])
                row["names_masked"] = masked
                # the split is part of the id: the store keeps a stored id's row as it is, so a row whose
                # split moved (the held-out fallback changes with the corpus) must be a new row
                row["id"] = content_id(
                    "sft",
                    {
                        "src": traj["id"],
                        "messages": row["messages"],
                        "split": stored,
                        **({"names_masked": True} if masked else {}),
                    },
                )
                sft.append(row)
                stats.add_sft(traj["turns"])
                if progress is not None:
                    progress()
                continue
            for r in rl_rows(traj, envs):
                problem = replay_check(r, worker)
                if problem:
                    rejected.append(problem)
                    continue
                stats.add_rl(traj["turns"][r["turn_index"]], r["gold_calls"])
                r.pop("changes_state")
                row = {
                    "refined_trajectory_id": traj["id"],
                    "env_ids": traj["env_ids"],
                    "domains": traj["domains"],
                    "split": stored,
                    "benchmark_overlap": overlap,
                    **r,
                }
                row["id"] = content_id(
                    "rl", {"src": traj["id"], "turn": r["turn_index"], "gold": r["gold_calls"], "split": stored}
                )
                rl.append(row)
            if progress is not None:
                progress()
    return sft, rl, rejected
