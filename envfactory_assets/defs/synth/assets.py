"""Synthesis assets: tool_chains -> raw_trajectories -> refined_trajectories -> sft_dataset / rl_dataset."""

import statistics
import time
from collections import Counter
from typing import Any

import dagster as dg

from envfactory_assets.catalog import unserved_nodes
from envfactory_assets.config_checks import SettingError
from envfactory_assets.config_schema import Source, build_spec
from envfactory_assets.decontam.tagging import benchmark_tags
from envfactory_assets.defs.common import (
    UpstreamGates,
    checked,
    data_version,
    model_usage,
    no_failed_environment_check,
    passed_environments,
    previous_config,
    require_upstream_gates,
    status_counts,
)
from envfactory_assets.defs.config_fields import generated_config
from envfactory_assets.defs.partitions import asset_code_version
from envfactory_assets.defs.progress_observations import asset_progress
from envfactory_assets.defs.resources import STORE_POOL, EnvFactoryHome, ModelBackend
from envfactory_assets.graph.stage import graph_from_store_rows
from envfactory_assets.incremental.chains import merge_chains, split_by_previous
from envfactory_assets.quality.reply_facts import reply_figures
from envfactory_assets.reporting.dataset_mix import sft_mix
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.synth.datasets.datagaps import DataGapsConfig, GapStats
from envfactory_assets.synth.datasets.rows import complete_answer_problem, gold_writes_state, replay_check
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.refinement.model_querygen import ModelQueryWriter, ModelRefiner, role_outcomes
from envfactory_assets.synth.refinement.report import raw_examples_markdown, refinement_report
from envfactory_assets.synth.refinement.solver.model import ModelSolver
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver
from envfactory_assets.synth.run_settings import ChainRunSpec, DatasetRunSpec, TrajectoryRunSpec
from envfactory_assets.synth.sampling.sampler import Chain, SamplerConfig, dependency_stats, flow_stats, validate_chain
from envfactory_assets.synth.stage import (
    chain_rows,
    dataset_rows,
    load_environments,
    raw_trajectory_rows,
    refined_trajectory_rows,
)
from envfactory_assets.synth.trajectories.execution import SynthConfig
from envfactory_assets.synth.trajectories.simulated_user import ModelUser, ProgrammaticUser, providable_flags
from envfactory_assets.viewer import sample_markdown

_SYNTH_CODE = asset_code_version(
    "envfactory_assets.synth",
    "envfactory_assets.graph",
    # calls of real-signature MCP tools are translated by its real_arguments and canonical_output
    "envfactory_assets.envgen.mcp_signatures",
    "envfactory_assets.runtime",
    "envfactory_assets.incremental",
    "envfactory_assets.decontam",
    "envfactory_assets.quality",
    "envfactory_assets.tooluse",
    "envfactory_assets.defs.synth",
)


#: Where each ``tool_chains`` setting is stated.
CHAIN_SOURCES = (
    Source(ChainRunSpec),
    # the sampler's internal search budgets, not a run's choice; set them in SamplerConfig
    Source(SamplerConfig, skip=("max_start_attempts", "max_producer_candidates")),
)
#: Where each ``raw_trajectories`` setting is stated.
TRAJECTORY_SOURCES = (Source(TrajectoryRunSpec), Source(SynthConfig))
#: Where each ``refined_trajectories`` setting is stated.
REFINE_SOURCES = (Source(CalibrationConfig),)
#: Where each ``sft_dataset`` / ``rl_dataset`` setting is stated.
DATASET_SOURCES = (Source(DatasetRunSpec), Source(DataGapsConfig))


class ChainsConfig(generated_config("ChainsSettings", *CHAIN_SOURCES)):
    """Sampler settings (docs/configuration.md lists each with its default and help); the defaults are the
    paper's topology-aware sampler, 15 tools, 3 servers, depth 5."""

    def check_settings(self) -> tuple[ChainRunSpec, SamplerConfig]:
        """The settings as the run's :class:`ChainRunSpec` and the sampler's :class:`SamplerConfig`, each
        setting checked once, by the dataclass that states it, before the store is read.

        Raises:
            SettingError: a setting out of range or of the wrong type, named in the message.
        """
        # the sampler's own limits, checked in SamplerConfig and reported under this asset's name
        return build_spec(CHAIN_SOURCES[0], self), build_spec(CHAIN_SOURCES[1], self, owner="tool_chains")


class TrajectoryConfig(generated_config("TrajectorySettings", *TRAJECTORY_SOURCES)):
    """Trajectory synthesis settings (docs/configuration.md lists each with its default and help): only chains
    of ``sampler`` are executed; ``query_writer: model`` has the ``model_backend``'s model write the raw
    queries (the programmatic writer is the default)."""

    def check_settings(self) -> tuple[TrajectoryRunSpec, SynthConfig]:
        """The settings as the run's :class:`TrajectoryRunSpec` and the synthesis :class:`SynthConfig`, each
        setting checked once, by the dataclass that states it, before the store is read.

        Raises:
            SettingError: a setting out of range or of the wrong type, named in the message.
        """
        return build_spec(TRAJECTORY_SOURCES[0], self), build_spec(
            TRAJECTORY_SOURCES[1], self, owner="raw_trajectories"
        )


class DatasetConfig(generated_config("DatasetSettings", *DATASET_SOURCES)):
    """How refined trajectories are split into SFT and RL rows, and the data-gap shares (abstention turns,
    parallel calls, converted values; :mod:`envfactory_assets.synth.datasets.datagaps`); docs/configuration.md
    lists each setting with its default and help."""

    def check_settings(self) -> tuple[DatasetRunSpec, DataGapsConfig]:
        """The settings as the run's :class:`DatasetRunSpec` and the :class:`DataGapsConfig`, each setting
        checked once, by the dataclass that states it, before the store is read.

        Raises:
            SettingError: ``sft_share`` or a data-gap share out of range or of the wrong type, named in the message.
        """
        return build_spec(DATASET_SOURCES[0], self), build_spec(DATASET_SOURCES[1], self, owner="datasets")


def min_turns_reachable(owner: str, min_turns: int, longest: int | None, why: str) -> None:
    """Raise :class:`SettingError` when no input allows ``min_turns`` turns: ``longest`` is the most turns any
    input allows (``why`` says so in words), or None when there is no input at all, which the store's
    empty-result guard reports instead. Without this, every trajectory failed and replaced the stored ones."""
    if longest is not None and min_turns > longest:
        raise SettingError(f"{owner} setting min_turns={min_turns}: expected a whole number in [1, {longest}] ({why})")


def served(envs: dict[str, dict], row: dict) -> bool:
    """Whether every environment of a trajectory row and every tool its turns call are still in the curated
    catalogue ``envs``: ``curation.yaml`` may exclude an environment or a tool after the row was made, and the
    exclusion holds for every row made before it too."""
    calls = (c.get("node") or f"{c['env_id']}.{c['name']}" for t in row["turns"] for c in t["calls"])
    return all(e in envs for e in row["env_ids"]) and not unserved_nodes(envs, calls)


def _refuse_a_graph_curation_outdated(envfactory: EnvFactoryHome, envs: dict[str, dict]) -> None:
    """Raise ``dg.Failure`` when the stored tool graph has tools the curated catalogue no longer serves
    (``curation.yaml`` changed after ``tool_graph`` ran): sampling it would put excluded tools in chains."""
    stale = unserved_nodes(envs, (r["node_id"] for r in envfactory.store().read("tool_graph_nodes")))
    if stale:
        shown = ", ".join(stale[:5]) + (f" and {len(stale) - 5} more" if len(stale) > 5 else "")
        raise dg.Failure(
            f"tool_chains: the stored tool_graph has {len(stale)} tools that curation.yaml now excludes "
            f"or whose environment no longer passes ({shown}); re-materialize tool_graph first"
        )


def model_role_backend(owner: str, setting: str, choice: str, backend):
    """The chat backend a model role (``setting``, e.g. ``refiner``) uses when ``choice`` is ``model``, else None.

    Raises:
        dg.Failure: ``choice`` is ``model`` while ``model_backend`` is ``programmatic`` (no model to ask).
    """
    if choice != "model":
        return None
    if backend is None:
        raise dg.Failure(
            f"{owner} setting {setting}='model' needs a model: set the model_backend resource's "
            f"backend to openai or transformers"
        )
    return backend


def _graph(envfactory: EnvFactoryHome):
    store = envfactory.store()
    return graph_from_store_rows(
        store.read("tool_graph_nodes"), store.read("tool_graph_parameters"), store.read("tool_graph_edges")
    )


@dg.asset(group_name="synth", kinds={"duckdb"}, pool=STORE_POOL, deps=["tool_graph"], code_version=_SYNTH_CODE)
def tool_chains(
    context: dg.AssetExecutionContext, config: ChainsConfig, envfactory: EnvFactoryHome, upstream_gates: UpstreamGates
) -> dg.MaterializeResult:
    """Seeded tool chains from the topology-aware sampler (or the random-walk baseline), each validated:
    every required input is user-providable or produced earlier in the chain. Chains that touch no changed
    environment are kept as they are (same ids) when the config is unchanged."""
    run, cfg = checked(config.check_settings)
    require_upstream_gates(context, upstream_gates)
    envs, verified_ids = passed_environments(envfactory)
    _refuse_a_graph_curation_outdated(envfactory, envs)
    graph = _graph(envfactory)
    tags = benchmark_tags(envfactory.store().read("benchmark_overlap"))
    meter = asset_progress(context, run.n_chains + run.baseline_chains, "chains sampled")
    rows = chain_rows(
        graph,
        envs,
        verified_ids,
        run.n_chains,
        run.base_key,
        run.sampler,
        cfg,
        tags,
        progress=lambda done, total: meter.update(done),
    )
    meter.update(run.n_chains)  # its draws are over, also when a small graph gave fewer distinct chains
    # The other sampler's chains are kept for comparison only (mart sampler_comparison); trajectories
    # are synthesized from chains of `sampler` alone.
    other = "random_walk" if run.sampler == "topology" else "topology"
    comparison = (
        chain_rows(
            graph,
            envs,
            verified_ids,
            run.baseline_chains,
            run.base_key + "/baseline",
            other,
            cfg,
            tags,
            progress=lambda done, total: meter.update(run.n_chains + done),
        )
        if run.baseline_chains
        else []
    )
    meter.update(run.n_chains + run.baseline_chains)
    meter.finish()
    rows = list({r["id"]: r for r in rows + comparison}.values())
    store = envfactory.store()
    reused: list = []
    if previous_config(context) == config.model_dump():
        rows, reused = merge_chains(
            store.read("tool_chains"),
            rows,
            verified_ids,
            {run.sampler: run.n_chains, other: run.baseline_chains},
            still_valid=lambda r: (
                not validate_chain(graph, Chain.from_dict(r["tools"]), cfg) or r["status"] == "failed"
            ),
        )
    written = store.replace_current("tool_chains", rows)
    lengths = [r["n_tools"] for r in rows]
    return dg.MaterializeResult(
        metadata={
            "chains": len(rows),
            "status": status_counts(rows),
            "written": written,
            "sampler": run.sampler,
            "dependency_satisfaction": {
                name: dependency_stats(graph, [Chain.from_dict(r["tools"]) for r in rows if r["sampler"] == name])
                for name in sorted({r["sampler"] for r in rows})
            },
            # argument flows by the kind of value they pass, within and across environments (no identifier
            # crosses: the graph has no such edge)
            "flows_by_kind": {
                name: flow_stats(graph, [Chain.from_dict(r["tools"]) for r in rows if r["sampler"] == name])
                for name in sorted({r["sampler"] for r in rows})
            },
            "episode_plans": sum(1 for r in rows if r.get("episode_plan")),
            "mean_tools": statistics.fmean(lengths) if lengths else 0.0,
            "servers": dict(Counter(r["n_servers"] for r in rows)),
            "domains": dict(Counter(d for r in rows for d in r["domains"])),
            "chains_overlapping_benchmarks": sum(1 for r in rows if r["benchmark_overlap"]),
            "reused_unchanged": len(reused),
            "config": config.model_dump(),
        },
        data_version=data_version(rows),
    )


@dg.asset(group_name="synth", kinds={"duckdb"}, pool=STORE_POOL, deps=["tool_chains"], code_version=_SYNTH_CODE)
def raw_trajectories(
    context: dg.AssetExecutionContext,
    config: TrajectoryConfig,
    envfactory: EnvFactoryHome,
    model_backend: ModelBackend,
    upstream_gates: UpstreamGates,
) -> dg.MaterializeResult:
    """Each passed chain executed on its own copy of the initial state in a sandbox worker: turns split
    as in the paper, a user query per turn, tool calls, results, and states (with hashes) per turn. A chain
    whose trajectory is already stored (same chain id, same config, programmatic query writer) is not
    executed again."""
    started = time.monotonic()
    run, synth = checked(config.check_settings)
    model_backend.check_settings()
    backend = model_role_backend(
        "raw_trajectories",
        "query_writer",
        synth.query_writer,
        model_backend.backend_for(envfactory.root()) if synth.query_writer == "model" else None,
    )
    writer = ModelQueryWriter(backend, attempts=synth.query_writer_attempts) if backend is not None else None
    require_upstream_gates(context, upstream_gates)
    envs, _ = passed_environments(envfactory)
    store = envfactory.store()
    stored = store.read("tool_chains", "status = 'passed' AND sampler = ?", [run.sampler])
    # chains sampled before curation.yaml excluded one of their environments or tools are not executed
    chains = [
        c for c in stored if all(e in envs for e in c["env_ids"]) and not unserved_nodes(envs, c["tools"]["tools"])
    ]
    longest = max((c["n_tools"] for c in chains), default=None)
    checked(
        lambda: min_turns_reachable(
            "raw_trajectories",
            synth.min_turns,
            longest,
            f"every turn makes at least one call and the longest stored {run.sampler} chain has {longest} tools",
        )
    )

    reused, todo = [], chains
    # a model writer's queries depend on the model too, which the stored config does not name: write them anew
    if previous_config(context) == config.model_dump() and writer is None:
        reused, todo = split_by_previous(chains, store.read("raw_trajectories"), "tool_chain_id")
    meter = asset_progress(context, len(todo), "chains executed")
    rows = reused + raw_trajectory_rows(
        todo, _graph(envfactory), envs, synth, progress=lambda done, total: meter.update(done), writer=writer
    )
    meter.finish()
    written = store.replace_current("raw_trajectories", rows)
    ok = [r for r in rows if r["status"] == "passed"]
    return dg.MaterializeResult(
        metadata={
            "trajectories": len(rows),
            "status": status_counts(rows),
            "written": written,
            "turns_per_trajectory": dict(sorted(Counter(r["n_turns"] for r in ok).items())),
            "calls_per_trajectory": dict(sorted(Counter(r["n_calls"] for r in ok).items())),
            "failure_reasons": dict(Counter(x.split(":")[0][:60] for r in rows for x in r["reasons"]).most_common(10)),
            "reused_unchanged": len(reused),
            "config": config.model_dump(),
            "chains_not_served": len(stored) - len(chains),
            "query_writer": role_outcomes((t for r in rows for t in r["turns"]), "query_writer") or "programmatic",
            "model_usage": model_usage(backend, started),
            "examples_md": dg.MetadataValue.md(raw_examples_markdown(rows)),
        },
        data_version=data_version(rows),
    )


class RefineConfig(generated_config("RefineSettings", *REFINE_SOURCES)):
    """Calibrated refinement (docs/configuration.md lists each setting with its default and help): ``k`` solve
    attempts per turn (paper: 4) by the programmatic solver, or by the model of the ``model_backend`` resource
    when one is configured; ``refiner: model`` has that model rewrite each programmatically refined query too
    (the programmatic refiner alone is the default)."""

    def check_settings(self) -> CalibrationConfig:
        """The settings as a :class:`CalibrationConfig`, checked before the store is read.

        Raises:
            SettingError: a setting out of range or of the wrong type, named in the message.
        """
        # every limit is CalibrationConfig's, reported under this asset's name
        return build_spec(REFINE_SOURCES[0], self, owner="refined_trajectories")


@dg.asset(group_name="synth", kinds={"duckdb"}, pool=STORE_POOL, deps=["raw_trajectories"], code_version=_SYNTH_CODE)
def refined_trajectories(
    context: dg.AssetExecutionContext,
    config: RefineConfig,
    envfactory: EnvFactoryHome,
    model_backend: ModelBackend,
    upstream_gates: UpstreamGates,
) -> dg.MaterializeResult:
    """Queries rewritten by calibrated refinement; every turn solved by k attempts on forked states (raw
    query, then refined query), per-turn accuracy stored; an unsolvable refined query is reverted and an
    unsolvable turn ends the chain."""
    started = time.monotonic()
    cal = checked(config.check_settings)
    model_backend.check_settings()
    require_upstream_gates(context, upstream_gates)
    envs, _ = passed_environments(envfactory)
    store = envfactory.store()
    raw = store.read("raw_trajectories", "status = 'passed'")
    longest = max((r["n_turns"] for r in raw), default=None)
    checked(
        lambda: min_turns_reachable(
            "refined_trajectories",
            config.min_turns,
            longest,
            f"refinement never adds turns and the passed raw trajectories have at most {longest}",
        )
    )
    backend = model_backend.backend_for(envfactory.root())
    conversational = config.conversational_share > 0
    solver = ModelSolver(backend) if backend is not None else ProgrammaticSolver(ask=conversational)
    user = (ModelUser(backend) if backend is not None else ProgrammaticUser()) if conversational else None
    providable = providable_flags(_graph(envfactory)) if conversational else None
    refiner_backend = model_role_backend("refined_trajectories", "refiner", cal.refiner, backend)
    refiner = ModelRefiner(refiner_backend, attempts=cal.refiner_attempts) if refiner_backend is not None else None

    todo = [r for r in raw if served(envs, r)]
    meter = asset_progress(context, len(todo), "trajectories calibrated")
    rows = refined_trajectory_rows(
        todo,
        envs,
        solver,
        cal,
        progress=lambda done, total: meter.update(done),
        user=user,
        providable=providable,
        refiner=refiner,
    )
    meter.finish()
    written = store.replace_current("refined_trajectories", rows)
    report = refinement_report(rows)
    report["examples_md"] = dg.MetadataValue.md(report["examples_md"])
    return dg.MaterializeResult(
        metadata={
            "trajectories": len(rows),
            "status": status_counts(rows),
            "written": written,
            "solver": solver.name,
            "simulated_user": user.name if user else "off",
            "refiner": role_outcomes((t for r in rows for t in r["turns"]), "refiner") or "programmatic",
            # the model writer's raw queries kept ("model"), refused ("fallback") or unsolvable ("reverted")
            "query_writer": role_outcomes((t for r in rows for t in r["turns"]), "query_writer") or "programmatic",
            # tokens per role (solver, user, refiner) of the model_backend, {} without one
            "model_usage": model_usage(backend, started),
            "conversational_turns": sum(1 for r in rows for t in r["turns"] if t.get("clarification")),
            "sample_trajectories": dg.MetadataValue.md(sample_markdown(raw, rows)),
            **report,
        },
        data_version=data_version(rows),
    )


@dg.multi_asset(
    group_name="datasets",
    pool=STORE_POOL,
    specs=[
        dg.AssetSpec(
            "sft_dataset",
            kinds={"duckdb"},
            code_version=_SYNTH_CODE,
            deps=["refined_trajectories"],
            description="SFT rows: OpenAI chat messages with tool_calls, one per trajectory.",
        ),
        dg.AssetSpec(
            "rl_dataset",
            kinds={"duckdb"},
            code_version=_SYNTH_CODE,
            deps=["refined_trajectories"],
            description="RL rows: one per turn, gold calls (every call the turn ran), masked "
            "arguments, initial and final state; every row replays exactly.",
        ),
    ],
)
def datasets(
    context: dg.AssetExecutionContext, config: DatasetConfig, envfactory: EnvFactoryHome, upstream_gates: UpstreamGates
):
    """Split refined trajectories into SFT rows and replay-checked RL rows."""
    run, gaps = checked(config.check_settings)
    require_upstream_gates(context, upstream_gates)
    envs, _ = passed_environments(envfactory)
    store = envfactory.store()
    refined = store.read("refined_trajectories", "status = 'passed'")
    stats = GapStats()
    todo = [r for r in refined if served(envs, r)]
    # one bar for the step, on its first asset (a multi-asset step has no single asset key)
    meter = asset_progress(
        context, len(todo), "trajectories turned into SFT or replayed RL rows", asset_key=dg.AssetKey("sft_dataset")
    )
    sft, rl, rejected = dataset_rows(
        todo,
        envs,
        run.sft_share,
        benchmark_tags=benchmark_tags(store.read("benchmark_overlap")),
        gaps=gaps,
        gap_stats=stats,
        query_source=run.query_source,
        progress=meter.advance,
        name_mask_share=run.name_mask_share,
    )
    meter.finish()
    shares = stats.shares()
    mix = sft_mix(sft)
    written = store.replace_current_tables({"sft_dataset": sft, "rl_dataset": rl})
    w_sft, w_rl = written["sft_dataset"], written["rl_dataset"]
    yield dg.MaterializeResult(
        asset_key="sft_dataset",
        metadata={
            "rows": len(sft),
            "written": w_sft,
            "turns": sum(r["n_turns"] for r in sft),
            "rows_overlapping_benchmarks": sum(1 for r in sft if r["benchmark_overlap"]),
            "data_gap_rows": dict(stats.sft),
            "data_gap_shares": shares["sft"],
            "data_gap_shares_last_turn": shares["sft_last_turn"],
            "last_turn_kind_shares": mix["last_turn_kind_shares"],
            "names_masked_share": mix["names_masked_share"],
            "distractor_share": mix["distractor_share"],
            "mean_distractors": mix["mean_distractors"],
            "query_source": run.query_source,
        },
        data_version=data_version(sft),
    )
    yield dg.MaterializeResult(
        asset_key="rl_dataset",
        metadata={
            "rows": len(rl),
            "written": w_rl,
            "rejected": len(rejected),
            "replay_rate": len(rl) / (len(rl) + len(rejected)) if rl or rejected else 1.0,
            "rejection_reasons": dict(Counter(x.split(":")[0][:80] for x in rejected)),
            "data_gap_rows": dict(stats.rl),
            "data_gap_shares": shares["rl"],
        },
        data_version=data_version(rl),
    )


@dg.asset_check(asset="rl_dataset", blocking=True)
def rl_rows_replay_exactly(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
    """Blocking gate: replaying every RL row's gold calls on its initial state in a fresh worker reaches
    its recorded final state, and no row is a no-op task."""
    envs, _ = passed_environments(envfactory)
    rows = envfactory.store().read("rl_dataset")
    failures = []
    with SandboxWorker() as worker:
        load_environments(worker, envs, (e for r in rows for e in r["env_ids"] if e in envs))
        for r in rows:
            missing = [e for e in r["env_ids"] if e not in envs]
            if missing:  # the no_failed_environment check names these too
                failures.append(f"{r['id']}: environments without a passed verification: {missing}")
                continue
            writers = {t["name"] for e in r["env_ids"] for t in envs[e]["tools"] if not t["read_only"]}
            problem = replay_check({**r, "changes_state": gold_writes_state(r["gold_calls"], writers)}, worker)
            if problem:
                failures.append(f"{r['id']}: {problem}")
    return dg.AssetCheckResult(
        passed=bool(rows) and not failures,
        metadata={"rows": len(rows), "failures": len(failures), "examples": failures[:5]},
    )


@dg.asset_check(asset="rl_dataset", blocking=True)
def rl_rows_won_by_a_complete_answer(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
    """Blocking gate: on every RL row, replaying the turn's executed calls earns the training reward's maximum,
    and the gold calls leave out none of them (the turn's reply reports every call's result), so a model
    that answers as the turn did is never charged for a call."""
    envs, _ = passed_environments(envfactory)
    rows = envfactory.store().read("rl_dataset")
    failures = []
    with SandboxWorker() as worker:
        load_environments(worker, envs, (e for r in rows for e in r["env_ids"] if e in envs))
        for r in rows:
            if any(e not in envs for e in r["env_ids"]):  # the no_failed_environment check names these
                failures.append(f"{r['id']}: environments without a passed verification")
                continue
            writers = {t["name"] for e in r["env_ids"] for t in envs[e]["tools"] if not t["read_only"]}
            problem = complete_answer_problem(r, worker, writers)
            if problem:
                failures.append(f"{r['id']}: {problem}")
    return dg.AssetCheckResult(
        passed=bool(rows) and not failures,
        metadata={"rows": len(rows), "failures": len(failures), "examples": failures[:5]},
    )


def replies_check(asset: Any, table: str) -> dg.AssetChecksDefinition:
    """A blocking check on ``asset``: every reply of the passed rows of ``table`` states only what its turn's tool
    results say (:func:`~envfactory_assets.quality.reply_facts.reply_problems`), whoever wrote it."""

    @dg.asset_check(
        asset=asset,
        blocking=True,
        name="replies_state_only_the_results",
        description=f"Every assistant reply of {table} states only numbers, dates, quotes and identifiers its "
        "turn's tool results hold (rows returned, a total only where stated, a refusal with its reason).",
    )
    def _check(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
        figures = reply_figures(envfactory.store().read(table, "status = 'passed'"))
        return dg.AssetCheckResult(
            # no reply measured is said so in the metadata; the table's own gates fail an empty stage
            passed=figures["pass_share"] == 1.0,
            metadata={
                "replies": figures["replies"],
                "passing": figures["passing"],
                "pass_share": figures["pass_share"],
                "failures": [f"{r} turn {t}: {reply!r}: {'; '.join(p)}" for r, t, reply, p in figures["failures"]],
            },
        )

    return _check


raw_replies_gate = replies_check(raw_trajectories, "raw_trajectories")
refined_replies_gate = replies_check(refined_trajectories, "refined_trajectories")
chain_gate = no_failed_environment_check(tool_chains, ["tool_chains"])
raw_gate = no_failed_environment_check(raw_trajectories, ["raw_trajectories"])
refined_gate = no_failed_environment_check(refined_trajectories, ["refined_trajectories"])
sft_gate = no_failed_environment_check("sft_dataset", ["sft_dataset"])
rl_gate = no_failed_environment_check("rl_dataset", ["rl_dataset"])


def _quality_result(report) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=report.success,
        metadata={
            "expectations": len(report.results),
            "failed": len(report.failures),
            "failures": [
                f"{f['expectation']}({f['column']}): {f['unexpected_count']} unexpected" for f in report.failures
            ][:10],
        },
    )


@dg.asset_check(asset="sft_dataset", blocking=True)
def sft_expectations(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
    """Great Expectations suite: schema, nulls, ranges, JSON-object arguments, tool names in the row's tools."""
    from envfactory_assets.quality.suites import validate_sft

    return _quality_result(validate_sft(envfactory.store().read("sft_dataset")))


@dg.asset_check(asset="rl_dataset", blocking=True)
def rl_expectations(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
    """Great Expectations suite: prompts end on the user, gold calls valid and in the row's tools, masks used."""
    from envfactory_assets.quality.suites import validate_rl

    return _quality_result(validate_rl(envfactory.store().read("rl_dataset")))


@dg.asset_check(asset="refined_trajectories", blocking=True)
def clarifications_ask_only_for_missing_values(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
    """Blocking gate: no clarification question of a passed refined trajectory asks for a value the
    conversation had already given, or reads malformed (a field named twice, "the is ..."), and every kept
    turn whose request left out a user-providable value asks for it; judged by
    :func:`~envfactory_assets.quality.conversation_text.clarification_figures`, not by the solver that asks."""
    from envfactory_assets.quality.conversation_text import clarification_figures

    figures = clarification_figures(envfactory.store().read("refined_trajectories", "status = 'passed'"))
    return dg.AssetCheckResult(
        passed=not figures["asking_for_given"]
        and not figures["malformed"]
        and figures["omissions_asked"] == figures["omissions"],
        metadata={
            **{k: v for k, v in figures.items() if k != "examples"},
            "examples": [f"{e['question']} -> {e['answer']} (request: {e['request']})" for e in figures["examples"]],
        },
    )


@dg.asset_check(asset="refined_trajectories", blocking=False)
def user_text_without_spec_identifiers(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
    """Warning: the share of user messages of passed refined trajectories holding a spec identifier (a
    snake_case or camelCase name, a path fragment, a parameter's raw words with a short form), target 0
    (:func:`~envfactory_assets.quality.conversation_text.user_text_figures`)."""
    from envfactory_assets.quality.conversation_text import user_text_figures

    envs, _ = passed_environments(envfactory)
    parameters = {e: [p for t in env["tools"] for p in t["input_schema"]["properties"]] for e, env in envs.items()}
    figures = user_text_figures(envfactory.store().read("refined_trajectories", "status = 'passed'"), parameters)
    return dg.AssetCheckResult(
        passed=not figures["with_identifier"],
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            **{k: v for k, v in figures.items() if k != "examples"},
            "examples": [f"{e['text']} ({', '.join(e['identifiers'])})" for e in figures["examples"]],
        },
    )
