"""``evaluations``: the base model, every checkpoint and the do-nothing baseline on held-out synthetic tasks and
BFCL multi-turn base, each compared with the base model by a paired bootstrap interval."""

from pathlib import Path

import dagster as dg

from envfactory_assets.config_schema import Source
from envfactory_assets.defs.common import passed_environments
from envfactory_assets.defs.config_fields import generated_config
from envfactory_assets.defs.partitions import asset_code_version
from envfactory_assets.defs.progress_observations import progress_callback
from envfactory_assets.defs.resources import STORE_POOL, EnvFactoryHome
from envfactory_assets.evaluation.model_policy import SamplingSpec
from envfactory_assets.evaluation.run import BASE, DO_NOTHING, EvalSpec
from envfactory_assets.evaluation.run_settings import EvaluationRunSpec
from envfactory_assets.reporting.results_table import results_markdown
from envfactory_assets.training.base_model import select_device

MIN_SEEDS = 3
#: Folder of ``ENVFACTORY_HOME`` holding every model's stored (model, benchmark, seed) results
#: (:class:`~envfactory_assets.evaluation.run.ResultCache`): what a stopped run resumes from.
EVAL_CACHE_DIR = "eval_cache"


#: Where each ``evaluations`` setting is stated.
EVALUATION_SOURCES = (
    Source(EvaluationRunSpec),
    # ``sampling`` is built from the sampling fields below
    Source(EvalSpec, skip=("sampling",)),
    # top_p stays off (1.0) and the prompt cut is the CPU budget's; both are set in SamplingSpec
    Source(SamplingSpec, skip=("top_p", "max_prompt_tokens")),
)


class EvaluationConfig(generated_config("EvaluationSettings", *EVALUATION_SOURCES)):
    """Evaluation settings (docs/configuration.md lists each with its default and help). Defaults fit the CPU
    budget of the default run (docs/evaluation.md); ``full_sets: true`` runs every held-out synthetic task
    (every turn) and all 200 BFCL multi-turn base tasks."""

    def eval_spec(self) -> EvalSpec:
        """The settings as an :class:`EvalSpec` (``full_sets`` lifts the task counts and ``first_turns_only``).

        Raises:
            ValueError: a setting out of range (from :class:`EvalSpec` / :class:`SamplingSpec`), or a task draw
                other than 0 with ``full_sets``.
        """
        EvaluationRunSpec(base_model=self.base_model, full_sets=self.full_sets)
        if self.full_sets and self.task_draw:
            raise ValueError(
                f"evaluation settings full_sets: true and task_draw: {self.task_draw}: every task is one draw (draw 0)"
            )
        return EvalSpec(
            n_synthetic=None if self.full_sets else self.n_synthetic,
            n_bfcl=None if self.full_sets else self.n_bfcl,
            n_bfcl_single_turn=None if self.full_sets else self.n_bfcl_single_turn,
            task_draw=self.task_draw,
            seeds=tuple(self.seeds),
            max_tool_rounds=self.max_tool_rounds,
            max_tools=self.max_tools,
            first_turns_only=self.first_turns_only and not self.full_sets,
            bfcl_call_timeout_s=self.bfcl_call_timeout_s,
            single_turn_prose_stop_tokens=self.single_turn_prose_stop_tokens,
            sampling=SamplingSpec(
                temperature=self.temperature,
                max_new_tokens=self.max_new_tokens,
                batch_size=self.batch_size,
                prefix_cache_tokens=self.prefix_cache_tokens,
                device=self.device,
            ),
        )


def models_to_evaluate(base_dir: Path, checkpoint_rows: list[dict]) -> list:
    """The base model (``base_dir``), the do-nothing baseline and each of ``checkpoint_rows`` (labelled by its
    id, a GRPO row with its SFT parent), as :class:`~envfactory_assets.evaluation.run.ModelRef` objects."""
    from envfactory_assets.evaluation.run import BASE, ModelRef, do_nothing_model
    from envfactory_assets.training.base_model import model_hash

    models = [ModelRef(BASE, BASE, str(base_dir), model_hash=model_hash(base_dir)), do_nothing_model()]
    for row in sorted(checkpoint_rows, key=lambda r: r["id"]):
        models.append(
            ModelRef(
                row["id"],
                row.get("stage") or "sft",
                row["path"],
                row["id"],
                model_hash=model_hash(Path(row["path"])),
                parent=row.get("parent_checkpoint_id"),
            )
        )
    return models


@dg.asset(
    group_name="evaluation",
    kinds={"duckdb", "pytorch"},
    pool=STORE_POOL,
    deps=["checkpoints", "rl_dataset"],
    code_version=asset_code_version(
        "envfactory_assets.evaluation",
        "envfactory_assets.training",
        "envfactory_assets.tooluse",
        "envfactory_assets.defs.evaluation",
    ),
)
def evaluations(
    context: dg.AssetExecutionContext, config: EvaluationConfig, envfactory: EnvFactoryHome
) -> dg.MaterializeResult:
    """The base model, every current checkpoint and the do-nothing baseline, each on the same held-out synthetic
    tasks (environments never trained on; task success, the hybrid reward beside it) and BFCL v3 multi-turn
    base tasks (safe executor, official per-turn checks), under every sampling seed; mean and spread across
    seeds, with and without benchmark-tagged environments, and each model's difference to the base model with
    its paired bootstrap 95% interval; on BFCL single-turn also the must-call call rate, the parse-failure share
    and the balanced score of the five categories, each with its interval. Each model's result on each
    benchmark under each seed is stored in ``$ENVFACTORY_HOME/eval_cache`` as soon as it is complete, keyed by
    the weights, the tasks, the seed, the settings and the score versions, so a stopped run started again
    computes only what is missing."""
    from envfactory_assets.evaluation.run import ResultCache, evaluate_models
    from envfactory_assets.training.base_model import resolve_base_model

    try:  # every setting checked (by the specs) before the store is read or the base model is resolved
        spec = config.eval_spec()
        select_device(config.device, "evaluation setting device")  # 'cuda' without a device fails here
    except ValueError as exc:
        raise dg.Failure(f"evaluations: {exc}") from exc
    store = envfactory.store()
    checkpoint_rows = store.read("checkpoints")
    missing = [r["id"] for r in checkpoint_rows if not Path(r["path"] or "").is_dir()]
    if missing:
        raise dg.Failure(f"evaluations: checkpoint directories missing for {missing}; re-materialize checkpoints")
    base_dir = resolve_base_model(config.base_model, envfactory.models_dir())
    envs, _ = passed_environments(envfactory)
    cache = ResultCache(envfactory.root() / EVAL_CACHE_DIR)
    rows = evaluate_models(
        models_to_evaluate(base_dir, checkpoint_rows),
        store.read("rl_dataset"),
        envs,
        spec,
        log=context.log.info,
        cache=cache,
        benchmark_overlap=store.read("benchmark_overlap"),
        progress=progress_callback(context, "task runs evaluated (model x task x seed)"),
    )
    written = store.replace_current("evaluations", rows)
    table = {f"{r['model']}/{r['benchmark']}/{r['subset']}": round(r["mean"], 4) for r in rows if r["mean"] is not None}
    diffs = {
        f"{r['model']}/{r['benchmark']}/{r['subset']}": f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
        for r in rows
        if (d := r["metrics"].get("vs_base"))
    }
    return dg.MaterializeResult(
        metadata={
            "rows": len(rows),
            "written": written,
            "models": len({r["model"] for r in rows}),
            "seeds": list(config.seeds),
            "means": table,
            "vs_base_95ci": diffs,
            # (model, benchmark, seed) units reused from earlier runs and units computed (and stored) now
            "units_reused": cache.hits,
            "units_computed": cache.writes,
            # the table `envfactory results` prints (mean, spread, difference to base with its interval), for the UI
            "results_table": dg.MetadataValue.md(results_markdown(rows)),
            "seconds": round(sum(r["metrics"]["seconds"] for r in rows if r["subset"] == "all"), 1),
        },
        data_version=dg.DataVersion(",".join(sorted(r["id"] for r in rows))[:512] or "empty"),
    )


@dg.asset_check(asset=evaluations, blocking=True)
def every_checkpoint_evaluated(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
    """Blocking: the base model, the do-nothing baseline and every current checkpoint have results on every
    benchmark evaluated, and every evaluated model directory exists (the baseline has none)."""
    store = envfactory.store()
    rows = store.read("evaluations")
    checkpoint_ids = {r["id"] for r in store.read("checkpoints")}
    benchmarks = {r["benchmark"] for r in rows}
    covered = {(r["model"], r["benchmark"]) for r in rows}
    missing = [
        f"{m}/{b}"
        for m in sorted(checkpoint_ids | {BASE, DO_NOTHING})
        for b in sorted(benchmarks)
        if (m, b) not in covered
    ]
    gone = sorted(
        {r["model_path"] for r in rows if r["stage"] != DO_NOTHING and not Path(r["model_path"] or "").is_dir()}
    )
    return dg.AssetCheckResult(
        passed=bool(rows) and not missing and not gone,
        metadata={"rows": len(rows), "missing": missing[:10], "model_paths_missing": gone[:10]},
    )


@dg.asset_check(asset=evaluations, blocking=False)
def results_have_a_seed_spread(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
    """Warning: every sampled result is averaged over at least 3 sampling seeds (a greedy one, temperature 0,
    gives the same text under every seed and needs one), and every result covers at least one task."""
    rows = envfactory.store().read("evaluations")

    def greedy(row: dict) -> bool:
        return ((row.get("config") or {}).get("sampling") or {}).get("temperature") == 0

    thin = [
        f"{r['model']}/{r['benchmark']}/{r['subset']}"
        for r in rows
        if (len(r["seeds"] or []) < MIN_SEEDS and not greedy(r)) or not r["n_tasks"]
    ]
    return dg.AssetCheckResult(
        passed=not thin, severity=dg.AssetCheckSeverity.WARN, metadata={"rows": len(rows), "thin_results": thin[:10]}
    )
