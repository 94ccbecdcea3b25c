"""Evaluate the base model and every checkpoint on held-out synthetic tasks, BFCL multi-turn base and
BFCL v3 single-turn (:mod:`~envfactory_assets.evaluation.bfcl_single_turn`).

Every model runs the same tasks under the same sampling seeds; results are aggregated per benchmark and
subset as the mean over seeds of the per-seed mean reward, with the standard deviation across seeds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envfactory_assets.evaluation import bfcl, bfcl_single_turn, synthetic
from envfactory_assets.evaluation.agent import AgentTask, run_agent
from envfactory_assets.evaluation.bfcl_sandbox import (
    DEFAULT_CALL_TIMEOUT_S,
    ExecutorSettings,
)
from envfactory_assets.evaluation.policy import Policy, SamplingSpec
from envfactory_assets.store.ids import content_id
from envfactory_assets.tooluse.task_episode import TaskRunner

TRACES_KEPT_PER_MODEL = 3  # full traces stored for the first tasks of the first seed; scores for all


@dataclass(frozen=True)
class EvalSpec:
    """What one evaluation runs. Defaults fit the CPU budget (see docs/evaluation.md for the timing).

    Attributes:
        n_synthetic: held-out synthetic tasks (None = all held-out RL rows).
        n_bfcl: BFCL multi-turn base tasks (None = all 200; 0 = skip BFCL).
        n_bfcl_single_turn: BFCL v3 single-turn tasks per category (5 categories; None = all 1,240; 0 = skip);
            each category's generation budget is at least 1.5x its longest gold answer
            (:func:`.bfcl_single_turn.generation_budget`), never below ``sampling.max_new_tokens``.
        seeds: sampling seeds (>= 3 for a spread).
        max_tool_rounds: assistant messages with tool calls per turn.
        max_tools: tools shown per synthetic task (gold tools + distractors; 0 = all), as in training.
        first_turns_only: synthetic tasks only from first turns (short prompts; see ``held_out_rows``).
        sampling: :class:`SamplingSpec`.
        bfcl_call_timeout_s: wall-clock seconds one model call may take in the BFCL executor's sandboxed
            worker before it is stopped (:class:`.bfcl_sandbox.ExecutorSettings`).
    """

    n_synthetic: int | None = 6
    n_bfcl: int | None = 2
    n_bfcl_single_turn: int | None = 4
    seeds: tuple[int, ...] = (0, 1, 2)
    max_tool_rounds: int = 2
    max_tools: int = 8
    first_turns_only: bool = True
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    bfcl_call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S

    def __post_init__(self) -> None:
        """Raises ValueError naming the setting when a count is negative (``n_bfcl: -2`` used to mean "all but
        two" through slicing), no seed is given or one is repeated, or fewer than one tool round per turn is
        allowed."""
        for name in ("n_synthetic", "n_bfcl", "n_bfcl_single_turn"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"evaluation setting {name}={value!r}: expected a whole number >= 0 (0 skips)")
        if not self.seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in self.seeds):
            raise ValueError(f"evaluation setting seeds={list(self.seeds)!r}: expected at least one integer seed")
        if len(set(self.seeds)) != len(self.seeds):  # [0, 0, 0] is one seed three times: a spread of zero
            raise ValueError(f"evaluation setting seeds={list(self.seeds)!r}: expected distinct seeds")
        if self.max_tool_rounds < 1:
            raise ValueError(f"evaluation setting max_tool_rounds={self.max_tool_rounds}: expected >= 1")
        if self.max_tools < 0:
            raise ValueError(f"evaluation setting max_tools={self.max_tools}: expected >= 0 (0 shows all tools)")
        timeout = self.bfcl_call_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
            raise ValueError(f"evaluation setting bfcl_call_timeout_s={timeout!r}: expected a positive number of seconds")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seeds"] = list(self.seeds)
        return d


@dataclass(frozen=True)
class ModelRef:
    """A model to evaluate: ``label`` (checkpoint id or ``"base"``), ``stage`` (base|sft|grpo), ``path``
    (local HF model directory), ``checkpoint_id`` (None for the base model)."""

    label: str
    stage: str
    path: str
    checkpoint_id: str | None = None


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def aggregate(results: list[dict[str, Any]], seeds: tuple[int, ...]) -> dict[str, Any]:
    """Mean and spread of one benchmark subset's per-task results.

    Args:
        results: ``run_agent`` outputs (each with ``seed`` and ``score`` holding ``reward``).
        seeds: the seeds that were run.

    Returns:
        ``{"n_tasks", "mean", "std", "per_seed": {seed: mean reward}, "metrics": {score key: mean over all
        results for numeric keys, "calls_per_task"}}``; mean/std are None when there is no task.
    """
    per_seed = {}
    for seed in seeds:
        rewards = [r["score"]["reward"] for r in results if r["seed"] == seed]
        if rewards:
            per_seed[str(seed)] = statistics.fmean(rewards)
    mean, std = _mean_std(list(per_seed.values()))
    numeric = {k for r in results for k, v in r["score"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    metrics = {k: statistics.fmean(float(r["score"][k]) for r in results) for k in sorted(numeric)} if results else {}
    if results:
        metrics["calls_per_task"] = statistics.fmean(r["n_calls"] for r in results)
    n_tasks = len({r["task_id"] for r in results})
    return {"n_tasks": n_tasks, "mean": mean, "std": std, "per_seed": per_seed, "metrics": metrics}


def _rows_for(model: ModelRef, benchmark: str, subsets: Mapping[str, list[dict[str, Any]]], spec: EvalSpec,
              seconds: float, cpu_seconds: float) -> list[dict[str, Any]]:
    rows = []
    for subset, results in subsets.items():
        agg = aggregate(results, spec.seeds)
        task_ids = sorted({r["task_id"] for r in results})
        key = {"model": model.label, "path": model.path, "benchmark": benchmark, "subset": subset,
               "spec": spec.as_dict(), "tasks": task_ids}
        kept = [r for r in results if r["seed"] == spec.seeds[0]][:TRACES_KEPT_PER_MODEL]
        rows.append({
            "id": content_id("eval", key), "checkpoint_id": model.checkpoint_id, "model": model.label,
            "stage": model.stage, "model_path": model.path, "benchmark": benchmark, "subset": subset,
            "n_tasks": agg["n_tasks"], "seeds": list(spec.seeds), "mean": agg["mean"], "std": agg["std"],
            "per_seed": agg["per_seed"], "metrics": {**agg["metrics"], "seconds": round(seconds, 2),
                                                             "cpu_seconds": round(cpu_seconds, 2)},
            "results": [{"task_id": r["task_id"], "seed": r["seed"], "score": r["score"], "n_calls": r["n_calls"]}
                        for r in results],
            "traces": kept, "config": spec.as_dict(), "task_ids": task_ids,
        })
    return rows


def evaluate_models(models: list[ModelRef], rl_rows: list[dict[str, Any]], environments: Mapping[str, Any],
                    spec: EvalSpec, log: Callable[[str], Any] = print,
                    num_threads: int | None = None,
                    benchmark_overlap: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Evaluate every model on the same synthetic and BFCL tasks under every seed.

    Args:
        models: the base model and the checkpoints.
        rl_rows: current ``rl_dataset`` rows; the held-out ones are the synthetic tasks.
        environments: ``{env_id: environment dict}`` of passed environments (code for the sandbox).
        spec: :class:`EvalSpec`.
        log: progress messages.
        benchmark_overlap: ``benchmark_overlap`` table rows (which environment tools resemble which
            benchmark functions); BFCL single-turn tasks with a matched function leave ``no_overlap``.

    Returns:
        ``evaluations`` rows: per model, ``synthetic_held_out`` subsets ``all`` and ``no_overlap`` (tasks
        whose environments carry no benchmark-overlap tag), ``bfcl_v3_multi_turn_base`` subset ``all`` and
        ``bfcl_v3_single_turn`` subsets ``all``, ``no_overlap`` and one per category (per-category
        accuracy, budget and truncated outputs in ``metrics``).

    Raises:
        ValueError: no model, or fewer than one seed.
        FileNotFoundError / OSError: a model path does not load.
    """
    if not models:
        raise ValueError("no model to evaluate")
    if not spec.seeds:
        raise ValueError("at least one sampling seed is needed")
    rows_by_id, synth_tasks = {}, []
    for row in synthetic.held_out_rows(rl_rows, spec.n_synthetic, spec.first_turns_only):
        if all(e in environments for e in row["env_ids"]):
            task, restricted = synthetic.as_agent_task(row, spec.max_tools)
            synth_tasks.append(task)
            rows_by_id[row["id"]] = restricted
    bfcl_tasks = bfcl.load_tasks(spec.n_bfcl) if spec.n_bfcl != 0 else []
    bfcl_by_id = {t.id: t for t in bfcl_tasks}
    bfcl_agent_tasks = [AgentTask(t.id, list(t.turns[0]), bfcl.task_tools(t),
                                  ["\n".join(m["content"] for m in turn if m.get("role") == "user")
                                   for turn in t.turns[1:]])
                        for t in bfcl_tasks]
    single_turn = bfcl_single_turn.load_tasks(spec.n_bfcl_single_turn) if spec.n_bfcl_single_turn != 0 else []
    single_turn_overlap = bfcl_single_turn.task_overlap(single_turn, benchmark_overlap or [])
    log(f"evaluating {len(models)} model(s) on {len(synth_tasks)} held-out synthetic, {len(bfcl_tasks)} BFCL "
        f"multi-turn and {len(single_turn)} BFCL single-turn tasks, seeds {list(spec.seeds)}")
    out = []
    executor = ExecutorSettings(call_timeout_s=float(spec.bfcl_call_timeout_s))
    with TaskRunner(environments) as runner:
        open_synth = synthetic.episode_factory(runner, rows_by_id)
        for model in models:
            policy = Policy(Path(model.path), spec.sampling, num_threads=num_threads)
            for benchmark, tasks, opener in ((synthetic.BENCHMARK, synth_tasks, open_synth),
                                             (bfcl.BENCHMARK, bfcl_agent_tasks,
                                              lambda t: bfcl.BFCLEpisode(bfcl_by_id[t.task_id], executor))):
                if not tasks:
                    continue
                started, cpu_started = time.perf_counter(), time.process_time()
                results = []
                for seed in spec.seeds:
                    results += run_agent(policy.generate, tasks, opener, seed, spec.max_tool_rounds)
                seconds = time.perf_counter() - started
                cpu_seconds = time.process_time() - cpu_started
                subsets = {"all": results}
                if benchmark == synthetic.BENCHMARK:
                    subsets["no_overlap"] = [r for r in results if not r["tags"].get("benchmark_overlap")]
                new = _rows_for(model, benchmark, subsets, spec, seconds, cpu_seconds)
                log(f"{model.label} ({model.stage}) {benchmark}: mean {new[0]['mean']:.3f} +- {new[0]['std']:.3f} "
                    f"over {len(spec.seeds)} seeds in {seconds:.0f}s ({cpu_seconds:.0f} CPU-s)")
                out += new
            if single_turn:
                out += _single_turn_rows(model, policy, single_turn, single_turn_overlap, spec, log)
    return out


def _single_turn_rows(model: ModelRef, policy: Policy, tasks: list[bfcl_single_turn.SingleTurnTask],
                      overlap: Mapping[str, list[str]], spec: EvalSpec, log: Callable[[str], Any]) -> list[dict[str, Any]]:
    """The BFCL single-turn rows of one model: one answer per task and seed at its category's budget."""
    budgets = bfcl_single_turn.category_budgets(tasks, bfcl_single_turn.token_counter(policy),
                                                spec.sampling.max_new_tokens)
    started, cpu_started = time.perf_counter(), time.process_time()
    results = bfcl_single_turn.run_tasks(policy, tasks, spec.seeds, budgets, overlap)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    subsets = bfcl_single_turn.result_subsets(results)
    rows = _rows_for(model, bfcl_single_turn.BENCHMARK, subsets, spec, seconds, cpu_seconds)
    for row in rows:
        row["metrics"].update(bfcl_single_turn.category_metrics(subsets[row["subset"]], budgets))
    log(f"{model.label} ({model.stage}) {bfcl_single_turn.BENCHMARK}: mean {rows[0]['mean']:.3f} +- "
        f"{rows[0]['std']:.3f}, {rows[0]['metrics']['truncated_outputs']} output(s) cut off at the budget "
        f"{budgets}, in {seconds:.0f}s")
    return rows
