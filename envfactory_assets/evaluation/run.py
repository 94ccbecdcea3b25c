"""Evaluate the base model, every checkpoint and a do-nothing baseline on the same benchmarks: held-out
synthetic tasks, BFCL multi-turn base and BFCL v3 single-turn (:mod:`~envfactory_assets.evaluation.bfcl_single_turn`).

Every model runs the same tasks under the same sampling seeds. Each benchmark names its headline score
key (synthetic: task success, :mod:`~envfactory_assets.evaluation.scoring`; BFCL: ``valid``) and how its
results split into subsets (``all``, categories, ``no_overlap``). Per subset a row holds the mean over
seeds of the per-seed mean headline score, the standard deviation across seeds, every per-task result,
and ``metrics["vs_base"]``: the paired bootstrap interval of the difference to the base model on the same
tasks (:mod:`~envfactory_assets.evaluation.stats`); a model trained from another evaluated one (GRPO from
SFT) also gets ``metrics["vs_parent"]``, the same interval against its parent.

Runs resume: each unit of work (one model on one benchmark under one seed) is stored on disk as soon as it is
complete (:class:`ResultCache`, keyed by what determines it), so a run stopped at any point and started again
computes only the units that are missing, and a re-run with the same models, tasks and settings generates
nothing.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envfactory_assets.config_checks import SettingError, finite_number, flag, setting, whole_number
from envfactory_assets.evaluation import bfcl, bfcl_single_turn, synthetic
from envfactory_assets.evaluation.agent import AgentTask, run_agent
from envfactory_assets.evaluation.bfcl_sandbox import (
    DEFAULT_CALL_TIMEOUT_S,
    ExecutorSettings,
)
from envfactory_assets.evaluation.model_policy import DO_NOTHING_REPLY, DoNothingPolicy, Policy, SamplingSpec
from envfactory_assets.evaluation.scoring import SCORE_VERSION
from envfactory_assets.evaluation.stats import Measure, compare_on_shared_tasks, compare_summaries, per_task_scores
from envfactory_assets.store.ids import content_id
from envfactory_assets.tooluse.task_episode import TaskRunner
from envfactory_assets.tooluse.tool_calls import PROSE_STOP_TOKENS
from envfactory_assets.training.base_model import select_device

TRACES_KEPT_PER_MODEL = 3  # full traces stored for the first tasks of the first seed; scores for all
BASE = "base"  # label and stage of the base model, which every other model is compared with
DO_NOTHING = "do_nothing"  # label and stage of the built-in policy that never calls a tool
# EvalSpec fields that choose which tasks run rather than how (the task ids themselves are in the cache key),
# and the seed list (a unit's key holds its own seed, so adding a seed reuses the others)
_NOT_IN_UNIT_KEY = ("n_synthetic", "n_bfcl", "n_bfcl_single_turn", "task_draw", "first_turns_only", "seeds")


@dataclass(frozen=True)
class EvalSpec:
    """What one evaluation runs. Defaults fit the CPU budget (see docs/evaluation.md for the timing); each
    field's default and help text are stated here alone (``metadata["help"]``)."""

    n_synthetic: int | None = setting(
        12,
        "held-out synthetic tasks (environments never trained on), sampled in "
        "a fixed hash order; None = every held-out RL row.",
    )
    n_bfcl: int | None = setting(
        0,
        "BFCL v3 multi-turn base tasks, sampled in a fixed hash order (None = all 200; 0 skips them); off by "
        "default because a 135M model solved none of them in any recorded run while they took a third of "
        "the evaluation's time; configs/cpu_benchmark.yaml runs 2.",
    )
    n_bfcl_single_turn: int | None = setting(
        6,
        "BFCL v3 single-turn tasks per category (5 categories; None = all 1,240; 0 skips them): 6 so that "
        "the default run shows what training did on an external benchmark within its CPU budget (about a "
        "minute per model, greedy); it tells a model that calls from one that does not, not a 10-point "
        "gain (configs/cpu_benchmark.yaml runs 40 per category).",
    )
    task_draw: int = setting(
        0,
        "which block of tasks each benchmark draws: its tasks in order of sha256 of their id, draw k the k-th "
        "block of n_synthetic / n_bfcl / n_bfcl_single_turn of them, so two draws share no task; choose a "
        "recipe on draw 1 and report it once on draw 0 (evaluation/task_draw.py).",
    )
    seeds: tuple[int, ...] = setting(
        (0,),
        "sampling seeds, distinct; one with greedy decoding (every seed would give the same text: the paired "
        "interval over tasks is the uncertainty reported), at least 3 for a spread with a temperature above 0.",
    )
    max_tool_rounds: int = setting(2, "assistant messages with tool calls per turn.")
    max_tools: int = setting(
        8, "tools shown per synthetic task (gold tools plus distractors, as in training; 0 = all)."
    )
    first_turns_only: bool = setting(
        True, "sample synthetic tasks from first turns only (short prompts: CPU time is set by prompt length)."
    )
    sampling: SamplingSpec = setting(factory=SamplingSpec, help="how the policy samples (SamplingSpec).")
    bfcl_call_timeout_s: float = setting(
        DEFAULT_CALL_TIMEOUT_S,
        "wall-clock seconds one model call may take in the BFCL executor's sandboxed worker before it is stopped.",
    )
    single_turn_prose_stop_tokens: int = setting(
        PROSE_STOP_TOKENS,
        "a BFCL single-turn answer stops once it has written this many tokens of prose "
        "without opening a call, or this many after its closed calls (neither changes the "
        "calls it parses to; tooluse/tool_calls.answer_is_complete); 0 = every answer runs "
        "to its end-of-turn token or its budget.",
    )

    def __post_init__(self) -> None:
        """Raises SettingError (a ValueError) naming the setting when a count is negative (``n_bfcl: -2`` would
        mean "all but two" through slicing), no seed is given or one is repeated, or fewer than one tool round
        per turn is allowed."""
        owner = "evaluation"
        for name in ("n_synthetic", "n_bfcl", "n_bfcl_single_turn"):
            if getattr(self, name) is not None:
                whole_number(owner, name, getattr(self, name), low=0)
        whole_number(owner, "task_draw", self.task_draw, low=0)
        if not self.seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in self.seeds):
            raise SettingError(
                f"{owner} setting seeds={list(self.seeds)!r}: expected at least one integer seed",
                owner,
                "seeds",
                self.seeds,
                "at least one integer seed",
            )
        if len(set(self.seeds)) != len(self.seeds):  # [0, 0, 0] is one seed three times: a spread of zero
            raise SettingError(
                f"{owner} setting seeds={list(self.seeds)!r}: expected distinct seeds",
                owner,
                "seeds",
                self.seeds,
                "distinct seeds",
            )
        whole_number(owner, "max_tool_rounds", self.max_tool_rounds, low=1)
        whole_number(owner, "max_tools", self.max_tools, low=0)
        whole_number(owner, "single_turn_prose_stop_tokens", self.single_turn_prose_stop_tokens, low=0)
        finite_number(owner, "bfcl_call_timeout_s", self.bfcl_call_timeout_s, low=0.0, low_open=True)
        flag(owner, "first_turns_only", self.first_turns_only)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seeds"] = list(self.seeds)
        return d


@dataclass(frozen=True)
class ModelRef:
    """A model to evaluate: ``label`` (checkpoint id, ``"base"`` or ``"do_nothing"``), ``stage``
    (base|sft|grpo|do_nothing), ``path`` (local HF model directory; empty for the do-nothing policy),
    ``checkpoint_id`` (None for the base model and the baseline), ``model_hash`` (sha256 of the weights,
    :func:`~envfactory_assets.training.base_model.model_hash`, or another id of what fixes its outputs;
    with a :class:`ResultCache` every (benchmark, seed) result of the model is stored under it as soon as it is
    complete; None = never stored), ``parent`` (the label of the evaluated model it was
    trained from, e.g. a GRPO checkpoint's SFT parent; its rows get ``metrics["vs_parent"]``,
    :func:`add_parent_comparisons`)."""

    label: str
    stage: str
    path: str
    checkpoint_id: str | None = None
    model_hash: str | None = None
    parent: str | None = None


def do_nothing_model() -> ModelRef:
    """The built-in baseline that never calls a tool (:class:`~.policy.DoNothingPolicy`); no model is loaded.
    Its ``model_hash`` is a content id of its one reply, so its results are stored like a model's."""
    return ModelRef(DO_NOTHING, DO_NOTHING, "", model_hash=content_id("do_nothing", {"reply": DO_NOTHING_REPLY}))


def by_category(results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Subsets ``all`` and one per ``tags["category"]`` of the results (none when no task has a category)."""
    subsets = {"all": results}
    for r in results:
        category = (r.get("tags") or {}).get("category")
        if category:
            subsets.setdefault(str(category), []).append(r)
    return subsets


def synthetic_subsets(results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``all`` and ``no_overlap`` (tasks whose environments carry no benchmark-overlap tag)."""
    return {"all": results, "no_overlap": [r for r in results if not r["tags"].get("benchmark_overlap")]}


@dataclass
class Benchmark:
    """One benchmark as the evaluation loop runs it.

    Attributes:
        name: the ``benchmark`` column of its rows.
        tasks: the agent tasks, the same for every model.
        open_episode: ``task -> episode`` (a fresh one per task and seed).
        headline: the score key that is averaged into ``mean`` and compared with the base model.
        subsets: ``results -> {subset: results}``; one row and one interval per subset (default
            :func:`by_category`: ``all`` plus one per task category).
        run: ``(policy, seed) -> results`` for a benchmark that is not an agent loop (one answer per task
            at its own budget: BFCL single-turn); None runs :func:`~.agent.run_agent` with ``open_episode``.
        row_metrics: ``subset results -> extra metrics`` merged into each row's ``metrics``.
        measures: per-task scores reported beside the headline (:class:`~.stats.Measure`), each with its own
            mean, spread and paired intervals in ``metrics["measures"][name]`` of every row.
    """

    name: str
    tasks: list[Any]
    open_episode: Callable[[Any], Any] | None
    headline: str
    subsets: Callable[[list[dict[str, Any]]], dict[str, list[dict[str, Any]]]] = by_category
    run: Callable[[Any, int], list[dict[str, Any]]] | None = None
    row_metrics: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None
    measures: tuple[Measure, ...] = ()


class ResultCache:
    """Per-task results of one unit of an evaluation (one model on one benchmark under one seed), kept as JSON
    files in ``directory`` (under ``ENVFACTORY_HOME``), keyed by a content hash of what determines them.

    The key (:meth:`key`) is the content id of the model's weight hash, the benchmark, every task's id and
    content (prompt, tools, later turns, tags), the seed, the settings that change generation or scoring (the
    :class:`EvalSpec` without the fields that only choose tasks, and without the seed list) and the score
    versions. :func:`evaluate_models` writes each unit as soon as it is complete, so a run stopped at any
    point keeps every finished unit and a re-run computes only the missing ones. Files are written to a
    temporary name and renamed, so a killed run leaves no half-written entry; an unreadable entry is a miss.

    Attributes:
        hits / misses / writes: counters since construction (what a re-run reused).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.hits = 0
        self.misses = 0
        self.writes = 0

    @staticmethod
    def key(model_hash: str, benchmark: str, tasks: list[Any], spec: EvalSpec, seed: int) -> str:
        """The cache key (``evalcache_<16 hex>``) of one model on one benchmark's tasks (agent tasks or
        BFCL single-turn tasks) under one sampling seed.

        The sampling ``device`` enters as the device and dtype it resolves to
        (:func:`~envfactory_assets.training.base_model.select_device`), so ``auto`` on a GPU machine and
        ``auto`` on a CPU one (bf16 against float32 texts) never share an entry, and ``auto`` and ``cpu`` on
        a CPU do."""
        settings = {k: v for k, v in spec.as_dict().items() if k not in _NOT_IN_UNIT_KEY}
        plan = select_device(spec.sampling.device, "sampling setting device")
        settings["sampling"] = {**settings["sampling"], "device": f"{plan.device}/{plan.dtype}"}
        return content_id(
            "evalcache",
            {
                "model_hash": model_hash,
                "benchmark": benchmark,
                "seed": seed,
                "settings": settings,
                "score_version": SCORE_VERSION,
                "single_turn_score_version": bfcl_single_turn.SCORE_VERSION,
                "tasks": [_task_fingerprint(t) for t in tasks],
            },
        )

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry ``{"results", "seconds", "cpu_seconds"}`` of ``key``, or None (counted)."""
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.misses += 1
            return None
        if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("results"), list):
            self.misses += 1
            return None
        self.hits += 1
        return entry

    def put(self, key: str, results: list[dict[str, Any]], seconds: float, cpu_seconds: float) -> None:
        """Store ``results`` under ``key`` (atomic replace).

        Raises:
            OSError: the directory cannot be created or written.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"key": key, "results": results, "seconds": seconds, "cpu_seconds": cpu_seconds}, handle)
            os.replace(tmp, self._path(key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.writes += 1


def _task_fingerprint(task: Any) -> dict[str, str]:
    if isinstance(task, AgentTask):
        return {
            "id": task.task_id,
            "content": content_id(
                "task",
                {"messages": task.messages, "tools": task.tools, "later": task.later_user_turns, "tags": task.tags},
            ),
        }
    return {"id": task.id, "content": content_id("task", asdict(task))}


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def aggregate(results: list[dict[str, Any]], seeds: tuple[int, ...], metric: str = "reward") -> dict[str, Any]:
    """Mean and spread of one benchmark subset's per-task results.

    Args:
        results: ``run_agent`` outputs (each with ``seed`` and ``score`` holding ``metric``).
        seeds: the seeds that were run.
        metric: the score key averaged into ``mean`` (the benchmark's headline).

    Returns:
        ``{"n_tasks", "mean", "std", "per_seed": {seed: mean of metric}, "metrics": {score key: mean over all
        results for numeric keys, "calls_per_task"}}``; mean/std are None when there is no task.
    """
    per_seed = {}
    for seed in seeds:
        scores = [r["score"][metric] for r in results if r["seed"] == seed]
        if scores:
            per_seed[str(seed)] = statistics.fmean(scores)
    mean, std = _mean_std(list(per_seed.values()))
    numeric = {
        k for r in results for k, v in r["score"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    metrics = (
        {k: statistics.fmean(float(r["score"][k]) for r in results if k in r["score"]) for k in sorted(numeric)}
        if results
        else {}
    )
    if results:
        metrics["calls_per_task"] = statistics.fmean(r["n_calls"] for r in results)
    n_tasks = len({r["task_id"] for r in results})
    return {"n_tasks": n_tasks, "mean": mean, "std": std, "per_seed": per_seed, "metrics": metrics}


def _rows_for(
    model: ModelRef,
    benchmark: Benchmark,
    results: list[dict[str, Any]],
    spec: EvalSpec,
    seconds: float,
    cpu_seconds: float,
    cached: bool,
) -> list[dict[str, Any]]:
    rows = []
    for subset, subset_results in benchmark.subsets(results).items():
        if not subset_results and subset != "all":
            continue  # a subset no task falls in (no untagged environment, say) has no score to report
        agg = aggregate(subset_results, spec.seeds, benchmark.headline)
        task_ids = sorted({r["task_id"] for r in subset_results})
        key = {
            "model": model.label,
            "path": model.path,
            "benchmark": benchmark.name,
            "subset": subset,
            "spec": spec.as_dict(),
            "tasks": task_ids,
            "headline": benchmark.headline,
        }
        kept = [r for r in subset_results if r["seed"] == spec.seeds[0]][:TRACES_KEPT_PER_MODEL]
        rows.append(
            {
                "id": content_id("eval", key),
                "checkpoint_id": model.checkpoint_id,
                "model": model.label,
                "stage": model.stage,
                "model_path": model.path,
                "benchmark": benchmark.name,
                "subset": subset,
                "n_tasks": agg["n_tasks"],
                "seeds": list(spec.seeds),
                "mean": agg["mean"],
                "std": agg["std"],
                "per_seed": agg["per_seed"],
                "metrics": {
                    **agg["metrics"],
                    **(benchmark.row_metrics(subset_results) if benchmark.row_metrics else {}),
                    **(
                        {"measures": {m.name: m.summary(subset_results, spec.seeds) for m in benchmark.measures}}
                        if benchmark.measures
                        else {}
                    ),
                    "headline": benchmark.headline,
                    "seconds": round(seconds, 2),
                    "cpu_seconds": round(cpu_seconds, 2),
                    "cached": cached,
                },
                "results": [
                    {"task_id": r["task_id"], "seed": r["seed"], "score": r["score"], "n_calls": r["n_calls"]}
                    for r in subset_results
                ],
                "traces": kept,
                "config": spec.as_dict(),
                "task_ids": task_ids,
            }
        )
    return rows


def add_comparisons(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set ``metrics["vs_base"]`` on every row that is not the base model's: the paired bootstrap interval
    (:func:`~envfactory_assets.evaluation.stats.paired_bootstrap`) of its headline score minus the base
    model's, per task (mean over seeds), on the tasks of the same benchmark and subset that both ran.

    ``vs_base`` is None when the base model has no row for that benchmark and subset. Works on rows of any
    benchmark that keeps ``results`` and ``metrics["headline"]``; the rows are changed in place and returned.
    Every measure of the row (``metrics["measures"]``) gets its own ``vs_base`` the same way
    (:func:`~envfactory_assets.evaluation.stats.compare_summaries`; None where either side is not measured).
    """
    base = {(r["benchmark"], r["subset"]): r for r in rows if r["model"] == BASE}
    for row in rows:
        if row["model"] == BASE:
            continue
        ref = base.get((row["benchmark"], row["subset"]))
        row["metrics"]["vs_base"] = None if ref is None else _paired_difference(ref, row)
        for name, summary in _measures(row).items():
            diff = compare_summaries(_measures(ref).get(name), summary) if ref is not None else None
            summary["vs_base"] = None if diff is None else diff.as_dict()
    return rows


def _measures(row: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return (((row or {}).get("metrics") or {}).get("measures")) or {}


def _paired_difference(ref: dict[str, Any], row: dict[str, Any]) -> dict[str, Any] | None:
    """The paired bootstrap interval of ``row``'s headline score minus ``ref``'s on the tasks both ran
    (:func:`~envfactory_assets.evaluation.stats.compare_on_shared_tasks`), as a dict; None without shared
    tasks."""
    metric = row["metrics"].get("headline", "reward")
    diff = compare_on_shared_tasks(per_task_scores(ref["results"], metric), per_task_scores(row["results"], metric))
    return None if diff is None else diff.as_dict()


def add_parent_comparisons(rows: list[dict[str, Any]], parents: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """Set ``metrics["vs_parent"]`` on the rows of every model that was trained from another evaluated model
    (GRPO from its SFT checkpoint): the paired bootstrap interval of its headline score minus the parent's
    on the same benchmark, subset and tasks, as :func:`add_comparisons` does against the base model, plus
    ``"parent"`` (the parent's label).

    Args:
        rows: ``evaluations`` rows (they keep ``results``); changed in place and returned.
        parents: ``{model label: parent label or None}``, e.g. ``checkpoints``' ``parent_checkpoint_id``;
            a parent with no row on a benchmark and subset gives no ``vs_parent`` there.
    """
    by_model = {(r["model"], r["benchmark"], r["subset"]): r for r in rows}
    for row in rows:
        parent = parents.get(row["model"])
        ref = by_model.get((parent, row["benchmark"], row["subset"])) if parent else None
        if ref is None:
            continue
        diff = _paired_difference(ref, row)
        row["metrics"]["vs_parent"] = None if diff is None else {**diff, "parent": parent}
        for name, summary in _measures(row).items():
            over = compare_summaries(_measures(ref).get(name), summary)
            if over is not None:
                summary["vs_parent"] = {**over.as_dict(), "parent": parent}
    return rows


def _default_policy(model: ModelRef, spec: EvalSpec, num_threads: int | None) -> Any:
    if model.stage == DO_NOTHING:
        return DoNothingPolicy()
    return Policy(Path(model.path), spec.sampling, num_threads=num_threads)


def evaluate_models(
    models: list[ModelRef],
    rl_rows: list[dict[str, Any]],
    environments: Mapping[str, Any],
    spec: EvalSpec,
    log: Callable[[str], Any] = print,
    num_threads: int | None = None,
    cache: ResultCache | None = None,
    load_policy: Callable[[ModelRef], Any] | None = None,
    benchmark_overlap: list[dict[str, Any]] | None = None,
    progress: Callable[[int, int], Any] | None = None,
) -> list[dict[str, Any]]:
    """Evaluate every model on the same synthetic and BFCL tasks under every seed.

    Args:
        models: the base model (label ``"base"``), the checkpoints and usually :func:`do_nothing_model`.
        rl_rows: current ``rl_dataset`` rows; the held-out ones are the synthetic tasks.
        environments: ``{env_id: environment dict}`` of passed environments (code for the sandbox).
        spec: :class:`EvalSpec`.
        log: progress messages.
        num_threads: torch threads of each :class:`Policy` (None: chosen per batch).
        cache: where each (model, benchmark, seed) unit's results are stored as soon as they are complete and
            reused from on a later run (every model with a ``model_hash``); None = nothing stored.
        load_policy: ``model -> object with generate(conversations, seed)``; default: :class:`Policy` of the
            model's path, :class:`DoNothingPolicy` for the do-nothing stage. Loaded only when some unit of the
            model is not stored.
        benchmark_overlap: ``benchmark_overlap`` table rows (which environment tools resemble which
            benchmark functions); BFCL single-turn tasks with a matched function leave ``no_overlap``.
        progress: called as ``progress(task runs done, task runs in all)`` (a task run: one model on one task
            under one seed) once before the first run with ``done`` 0, then after every model, benchmark and
            seed that is computed; units reused from ``cache`` are not counted (they cost nothing, and
            counting them at once made the rate meaningless); the last call has both equal (``(0, 0)`` when everything
            was cached). Not called when there is no
            task.

    Returns:
        ``evaluations`` rows: per model and benchmark, one per subset (``synthetic_held_out``: ``all`` and
        ``no_overlap``; ``bfcl_v3_multi_turn_base``: ``all``; ``bfcl_v3_single_turn``: ``all``, ``no_overlap`` and one
        per
        category, with per-category accuracy, budget and cut-off outputs), each with ``metrics["vs_base"]``
        (:func:`add_comparisons`) and, for a model with a ``parent``, ``metrics["vs_parent"]``
        (:func:`add_parent_comparisons`).

    Raises:
        ValueError: no model, or fewer than one seed.
        FileNotFoundError / OSError: a model path does not load.
    """
    if not models:
        raise ValueError("no model to evaluate")
    if not spec.seeds:
        raise ValueError("at least one sampling seed is needed")
    load = load_policy or (lambda m: _default_policy(m, spec, num_threads))
    out = []
    with TaskRunner(environments) as runner:
        benchmarks = _benchmarks(rl_rows, environments, spec, runner, log, benchmark_overlap or [])
        log(
            f"evaluating {len(models)} model(s) on "
            + ", ".join(f"{len(b.tasks)} {b.name}" for b in benchmarks)
            + f" tasks, seeds {list(spec.seeds)}"
        )

        # every (model, benchmark, seed) unit already stored costs nothing: left out of the progress, so the
        # bar's rate and eta are those of the units that are computed
        keys = {
            (i, b.name, seed): ResultCache.key(m.model_hash, b.name, b.tasks, spec, seed)
            for i, m in enumerate(models)
            for b in benchmarks
            if b.tasks and cache is not None and m.model_hash
            for seed in spec.seeds
        }
        cached = {at: entry for at, key in keys.items() if (entry := cache.get(key)) is not None}
        runs_total = sum(
            len(b.tasks)
            for i in range(len(models))
            for b in benchmarks
            for seed in spec.seeds
            if (i, b.name, seed) not in cached
        )
        runs_done = [0]

        def task_runs_done(n: int) -> None:
            runs_done[0] += n
            if progress is not None:
                progress(runs_done[0], runs_total)

        if progress is not None:
            # the first call starts the bar's clock (and draws it complete when everything was cached): made
            # only after the first model's runs, it divided their count by almost no time
            progress(0, runs_total)
        for i, model in enumerate(models):
            policy = None
            for benchmark in benchmarks:
                if not benchmark.tasks:
                    continue
                results, seconds, cpu_seconds, reused = [], 0.0, 0.0, 0
                for seed in spec.seeds:
                    key, entry = keys.get((i, benchmark.name, seed)), cached.get((i, benchmark.name, seed))
                    if entry is not None:
                        results += entry["results"]
                        reused += 1
                        continue
                    policy = policy or load(model)
                    started, cpu_started = time.perf_counter(), time.process_time()
                    unit = (
                        benchmark.run(policy, seed)
                        if benchmark.run
                        else run_agent(
                            policy.generate, benchmark.tasks, benchmark.open_episode, seed, spec.max_tool_rounds
                        )
                    )
                    unit_seconds, unit_cpu = time.perf_counter() - started, time.process_time() - cpu_started
                    # as a stored unit reads back: a resumed run's rows equal an uninterrupted run's
                    unit = json.loads(json.dumps(unit))
                    if key:  # stored at once: a run stopped after this point keeps the unit
                        cache.put(key, unit, unit_seconds, unit_cpu)
                    results += unit
                    seconds += unit_seconds
                    cpu_seconds += unit_cpu
                    task_runs_done(len(benchmark.tasks))
                if reused:
                    log(
                        f"{model.label} {benchmark.name}: reusing stored results of "
                        f"{reused} of {len(spec.seeds)} seed(s)"
                    )
                new = _rows_for(model, benchmark, results, spec, seconds, cpu_seconds, cached=reused == len(spec.seeds))
                for row in new:
                    row["metrics"]["units_reused"] = reused
                log(
                    f"{model.label} ({model.stage}) {benchmark.name}: {benchmark.headline} {new[0]['mean']:.3f} "
                    f"+- {new[0]['std']:.3f} over {len(spec.seeds)} seeds in {seconds:.0f}s ({cpu_seconds:.0f} CPU-s)"
                )
                out += new
    return add_parent_comparisons(add_comparisons(out), {m.label: m.parent for m in models})


def _benchmarks(
    rl_rows: list[dict[str, Any]],
    environments: Mapping[str, Any],
    spec: EvalSpec,
    runner: TaskRunner,
    log: Callable[[str], Any] = print,
    benchmark_overlap: list[dict[str, Any]] | None = None,
) -> list[Benchmark]:
    """Every benchmark of this evaluation with its tasks (the same for every model); a new benchmark is one
    more :class:`Benchmark` here (tasks tagged with ``category`` get one row and interval per category)."""
    rows_by_id, synth_tasks = {}, []
    for row in synthetic.held_out_rows(rl_rows, spec.n_synthetic, spec.first_turns_only, spec.task_draw):
        if all(e in environments for e in row["env_ids"]):
            task, restricted = synthetic.as_agent_task(row, spec.max_tools)
            synth_tasks.append(task)
            rows_by_id[row["id"]] = restricted
    if spec.n_synthetic is not None and len(synth_tasks) < spec.n_synthetic:
        # a smaller sample than configured widens every interval; say so instead of passing it off as the size asked
        log(
            f"warning: {len(synth_tasks)} held-out synthetic tasks available of n_synthetic={spec.n_synthetic} "
            f"(first_turns_only={spec.first_turns_only})"
        )
    bfcl_tasks = bfcl.load_tasks(spec.n_bfcl, spec.task_draw) if spec.n_bfcl != 0 else []
    bfcl_by_id = {t.id: t for t in bfcl_tasks}
    bfcl_agent_tasks = [
        AgentTask(
            t.id,
            list(t.turns[0]),
            bfcl.task_tools(t),
            ["\n".join(m["content"] for m in turn if m.get("role") == "user") for turn in t.turns[1:]],
        )
        for t in bfcl_tasks
    ]
    executor = ExecutorSettings(call_timeout_s=float(spec.bfcl_call_timeout_s))
    return [
        Benchmark(
            synthetic.BENCHMARK,
            synth_tasks,
            synthetic.episode_factory(runner, rows_by_id),
            synthetic.HEADLINE,
            synthetic_subsets,
        ),
        Benchmark(
            bfcl.BENCHMARK, bfcl_agent_tasks, lambda t: bfcl.BFCLEpisode(bfcl_by_id[t.task_id], executor), "valid"
        ),
        _single_turn_benchmark(spec, benchmark_overlap or []),
    ]


def _single_turn_benchmark(spec: EvalSpec, benchmark_overlap: list[dict[str, Any]]) -> Benchmark:
    """BFCL v3 single-turn as a :class:`Benchmark`: one answer per task and seed at its category's budget
    (counted with the policy's tokenizer), scored by bfcl-eval's AST checker; each result's tags carry its
    category's budget, so the per-category metrics need no policy (cached results have none)."""
    tasks = (
        bfcl_single_turn.load_tasks(spec.n_bfcl_single_turn, draw=spec.task_draw)
        if spec.n_bfcl_single_turn != 0
        else []
    )
    overlap = bfcl_single_turn.task_overlap(tasks, benchmark_overlap)

    def run(policy: Any, seed: int) -> list[dict[str, Any]]:
        budgets = bfcl_single_turn.category_budgets(
            tasks, bfcl_single_turn.token_counter(policy), spec.sampling.max_new_tokens
        )
        results = bfcl_single_turn.run_tasks(
            policy, tasks, [seed], budgets, overlap, prose_stop_tokens=spec.single_turn_prose_stop_tokens
        )
        for result in results:
            result["tags"]["budget"] = budgets[result["tags"]["category"]]
        return results

    def row_metrics(results: list[dict[str, Any]]) -> dict[str, Any]:
        return bfcl_single_turn.category_metrics(results, {r["tags"]["category"]: r["tags"]["budget"] for r in results})

    return Benchmark(
        bfcl_single_turn.BENCHMARK,
        tasks,
        None,
        "valid",
        bfcl_single_turn.result_subsets,
        run,
        row_metrics,
        bfcl_single_turn.MEASURES,
    )
