"""The paper's ablations as assets partitioned by arm (``topology``, ``random_walk``, ``raw_queries``), each
arm in its own home under ``$ENVFACTORY_HOME/ablations/<arm>``: ``ablation_data`` (the arm's synthesis),
``ablation_checkpoint`` (its SFT checkpoint), ``ablation_evaluation`` (that checkpoint on the main store's
held-out tasks), and ``ablations_report`` (the page, from whatever arms exist). Each step is skipped when it
already finished with the same settings and inputs (:mod:`envfactory_assets.ablations.steps`). They carry
:data:`~envfactory_assets.defs.partitions.ON_DEMAND_TAG`: a plain ``envfactory run`` leaves them out."""

import time
from pathlib import Path
from typing import Any

import dagster as dg

from envfactory_assets import settings
from envfactory_assets.ablations.plan import (
    ARMS,
    ARMS_DIR,
    DATA_SELECTION,
    DATASETS_SELECTION,
    TRAIN_ASSET,
    AblationSynthesisSpec,
    arm_config,
    arm_home,
    arm_named,
    require_rows,
    sft_config,
    synthesis_settings,
)
from envfactory_assets.ablations.shared_synthesis import copy_store
from envfactory_assets.ablations.steps import StepLedger, step_key
from envfactory_assets.config_schema import Source
from envfactory_assets.defs.ablations.arm_runs import materialize_in_arm, share_models
from envfactory_assets.defs.config_fields import generated_config
from envfactory_assets.defs.evaluation.assets import EVAL_CACHE_DIR, EvaluationConfig, models_to_evaluate
from envfactory_assets.defs.partitions import ON_DEMAND_TAG, arm_partitions, asset_code_version
from envfactory_assets.defs.resources import STORE_POOL, EnvFactoryHome, ModelBackend, VerificationGate
from envfactory_assets.defs.training.assets import CheckpointConfig
from envfactory_assets.store.ids import content_id

#: Where the page is written in the main home (``envfactory ablations --write-docs`` copies it to docs/).
REPORT_FILE = "ablations.md"
_TAGS = {ON_DEMAND_TAG: "true"}
_CODE = ("envfactory_assets.ablations", "envfactory_assets.defs.ablations")
#: What every arm step's asset shares: one partition per arm, the on-demand tag, the store's pool.
_ARM_STEP: dict[str, Any] = {
    "partitions_def": arm_partitions,
    "group_name": "ablations",
    "tags": _TAGS,
    "pool": STORE_POOL,
}


class AblationDataConfig(generated_config("AblationDataSettings", Source(AblationSynthesisSpec))):
    """Settings of every arm's synthesis (docs/configuration.md); the arm's own settings (sampler, query source)
    and the main home's corpus go over them."""


def _settings(config: dg.Config) -> dict[str, Any]:
    return {name: getattr(config, name) for name in type(config).model_fields}


def _skipped(step: str, outputs: dict[str, Any]) -> dg.MaterializeResult:
    return dg.MaterializeResult(
        metadata={"skipped": True, "reason": f"{step} already finished with these settings and inputs"}
        | {k: v for k, v in outputs.items() if isinstance(v, (int, float, str))},
    )


def _finished(
    ledger: StepLedger, step: str, key: str, outputs: dict[str, Any], started: float, **metadata: Any
) -> dg.MaterializeResult:
    """Record ``step`` as finished in ``ledger`` and return its result (``outputs`` but its settings, and
    ``metadata``)."""
    ledger.record(step, key, outputs, time.monotonic() - started)
    return dg.MaterializeResult(metadata={k: v for k, v in outputs.items() if k != "settings"} | metadata)


def _arm(context: dg.AssetExecutionContext, envfactory: EnvFactoryHome) -> tuple[Any, Path, StepLedger]:
    arm = arm_named(context.partition_key)
    home = arm_home(envfactory.root(), arm)
    return arm, home, StepLedger(home)


def _earlier(ledger: StepLedger, step: str, asset: str, arm: str) -> dict[str, Any]:
    outputs = ledger.outputs(step)
    if outputs is None:
        raise dg.Failure(
            f"ablation arm {arm}: its {step} step has not finished; materialize it first "
            f"(envfactory run --select {asset} --partition {arm})"
        )
    return outputs


@dg.asset(
    **_ARM_STEP,
    kinds={"duckdb"},
    code_version=asset_code_version(*_CODE),
)
def ablation_data(
    context: dg.AssetExecutionContext,
    config: AblationDataConfig,
    envfactory: EnvFactoryHome,
    model_backend: ModelBackend,
    verification_gate: VerificationGate,
) -> dg.MaterializeResult:
    """One arm's full synthesis, sources to ``sft_dataset``, in the arm's own ``ENVFACTORY_HOME``
    (``<home>/ablations/<arm>``) reading the main home's OpenAPI corpus, under the arm's sampler and query
    source; for an arm that shares another arm's synthesis (``raw_queries``: the topology arm's), a copy of that
    arm's finished store with the datasets step run again. Skipped when it already finished with the same
    settings (and the same shared synthesis)."""
    try:
        spec = AblationSynthesisSpec(**_settings(config))
        arm, home, ledger = _arm(context, envfactory)
        run_config = arm_config(spec.run_config(), arm, envfactory.corpus_dir())
    except ValueError as exc:
        raise dg.Failure(f"ablation_data: {exc}") from exc
    shared = _shared_synthesis(arm, run_config, envfactory.root())
    key = step_key("data", run_config, {"synthesis_of": shared} if shared else {})
    done = ledger.finished("data", key)
    if done is not None and settings.store_path(home).exists():
        return _skipped("data", done)
    started = time.monotonic()
    if shared:
        copied = copy_store(arm_home(envfactory.root(), arm_named(shared["arm"])), home)
        context.log.info(f"ablation arm {arm.name}: the {shared['arm']} arm's synthesis copied to {copied}")
    materialize_in_arm(
        home,
        run_config,
        DATASETS_SELECTION if shared else DATA_SELECTION,
        {"model_backend": model_backend, "verification_gate": verification_gate},
        context.log.info,
    )
    from envfactory_assets.training.stage import train_split

    sft = EnvFactoryHome(home=str(home)).store().read("sft_dataset")
    outputs = {
        "train_rows": len(train_split(sft)),
        "sft_rows": len(sft),
        "sft_dataset_version": content_id("v", sorted(r["id"] for r in sft)),
        "settings": run_config,
    }
    if shared:
        outputs["synthesis_of"] = shared["arm"]
    return _finished(ledger, "data", key, outputs, started, home=str(home))


def _shared_synthesis(arm: Any, run_config: dict[str, Any], main_home: Path) -> dict[str, str] | None:
    """``{"arm", "key"}`` of the finished data step whose synthesis ``arm`` shares (None: the arm synthesizes
    its own).

    Raises:
        dg.Failure: that arm's data step has not finished, or finished with other synthesis settings.
    """
    if arm.shares_synthesis_of is None:
        return None
    source = arm.shares_synthesis_of
    entry = StepLedger(arm_home(main_home, arm_named(source))).entries().get("data") or {}
    settings_ = (entry.get("outputs") or {}).get("settings")
    if (
        not entry.get("key")
        or not isinstance(settings_, dict)
        or (synthesis_settings(settings_) != synthesis_settings(run_config))
    ):
        raise dg.Failure(
            f"ablation arm {arm.name} shares the synthesis of the {source} arm, whose data step has not finished "
            f"with these settings; materialize it first (envfactory run --select ablation_data --partition "
            f"{source})"
        )
    return {"arm": source, "key": entry["key"]}


@dg.asset(
    **_ARM_STEP,
    kinds={"duckdb", "pytorch"},
    deps=[ablation_data],
    code_version=asset_code_version(*_CODE),
)
def ablation_checkpoint(
    context: dg.AssetExecutionContext,
    config: CheckpointConfig,
    envfactory: EnvFactoryHome,
    model_backend: ModelBackend,
    verification_gate: VerificationGate,
) -> dg.MaterializeResult:
    """The arm's SFT checkpoint (GRPO off) on exactly ``max_train_rows`` of its train-split rows, the same
    number for every arm (an arm with fewer is refused), trained by the ``checkpoints`` asset in the arm's home
    (a stopped run resumes from its last saved step); skipped when it already finished with the same settings
    and data."""
    try:
        config.validate()
    except ValueError as exc:
        raise dg.Failure(f"ablation_checkpoint: {exc}") from exc
    arm, home, ledger = _arm(context, envfactory)
    data = _earlier(ledger, "data", "ablation_data", arm.name)
    try:
        require_rows(arm.name, data["train_rows"], config.max_train_rows)
    except ValueError as exc:
        raise dg.Failure(f"ablation_checkpoint: {exc}") from exc
    settings_ = _settings(config)
    key = step_key("checkpoint", settings_, {"data": data["sft_dataset_version"]})
    done = ledger.finished("checkpoint", key)
    if done is not None and Path(done["path"]).is_dir():
        return _skipped("checkpoint", done)
    started = time.monotonic()
    share_models(envfactory.root(), home)
    materialize_in_arm(
        home,
        sft_config(settings_),
        TRAIN_ASSET,
        {"model_backend": model_backend, "verification_gate": verification_gate},
        context.log.info,
    )
    rows = [r for r in EnvFactoryHome(home=str(home)).store().read("checkpoints") if r.get("stage") == "sft"]
    if len(rows) != 1 or not Path(rows[0].get("path") or "").is_dir():
        raise dg.Failure(f"ablation arm {arm.name}: expected one SFT checkpoint with its folder, found {rows!r:.300}")
    row = rows[0]
    metrics = row.get("metrics") or {}
    outputs = {
        "checkpoint_id": row["id"],
        "path": row["path"],
        "training_rows": len(row["sft_dataset_ids"]),
        "train_loss": metrics.get("train_loss"),
        "steps": metrics.get("steps"),
        "settings": settings_,
    }
    return _finished(ledger, "checkpoint", key, outputs, started)


@dg.asset(
    **_ARM_STEP,
    kinds={"duckdb", "pytorch"},
    deps=[ablation_checkpoint],
    code_version=asset_code_version(*_CODE, "envfactory_assets.evaluation"),
)
def ablation_evaluation(
    context: dg.AssetExecutionContext, config: EvaluationConfig, envfactory: EnvFactoryHome
) -> dg.MaterializeResult:
    """The arm's SFT checkpoint (labelled by the arm's name), the base model and the do-nothing baseline on the
    MAIN store's held-out tasks and BFCL, written to the arm's store (``evaluations``). Every (model,
    benchmark, seed) result is kept in the main home's evaluation result cache as soon as it is complete, so
    the base model and the baseline are computed once for all arms and a stopped evaluation resumes; skipped
    when it already finished with the same settings, checkpoint and tasks."""
    from envfactory_assets.defs.common import passed_environments
    from envfactory_assets.evaluation.run import ModelRef, ResultCache, evaluate_models
    from envfactory_assets.training.base_model import model_hash, resolve_base_model, select_device

    try:
        spec = config.eval_spec()
        select_device(config.device, "evaluation setting device")
    except ValueError as exc:
        raise dg.Failure(f"ablation_evaluation: {exc}") from exc
    arm, home, ledger = _arm(context, envfactory)
    ckpt = _earlier(ledger, "checkpoint", "ablation_checkpoint", arm.name)
    main = envfactory.store()
    rl_rows = main.read("rl_dataset") if settings.store_path(envfactory.root()).exists() else []
    if not rl_rows:
        raise dg.Failure(
            f"ablation_evaluation: the main store under {envfactory.root()} has no rl_dataset (its held-out "
            "tasks are what every arm is evaluated on); run the pipeline first (envfactory run)"
        )
    settings_ = _settings(config)
    tasks = content_id("v", sorted(r["id"] for r in rl_rows))
    key = step_key("evaluation", settings_, {"checkpoint": ckpt["checkpoint_id"], "tasks": tasks})
    done = ledger.finished("evaluation", key)
    if done is not None and settings.store_path(home).exists():
        return _skipped("evaluation", done)
    started = time.monotonic()
    base_dir = resolve_base_model(config.base_model, envfactory.models_dir())
    models = models_to_evaluate(base_dir, [])
    models.append(ModelRef(arm.name, "sft", ckpt["path"], ckpt["checkpoint_id"], model_hash(Path(ckpt["path"]))))
    envs, _ = passed_environments(envfactory)
    cache = ResultCache(envfactory.root() / EVAL_CACHE_DIR)
    rows = evaluate_models(
        models,
        rl_rows,
        envs,
        spec,
        log=context.log.info,
        cache=cache,
        benchmark_overlap=main.read("benchmark_overlap"),
    )
    EnvFactoryHome(home=str(home)).store().replace_current("evaluations", rows)
    outputs = {
        "evaluation_ids": sorted(r["id"] for r in rows),
        "units_reused": cache.hits,
        "units_computed": cache.writes,
        "settings": settings_,
    }
    means = {f"{r['model']}/{r['benchmark']}/{r['subset']}": r["mean"] for r in rows if r["mean"] is not None}
    return _finished(ledger, "evaluation", key, outputs, started, rows=len(rows), means=dg.MetadataValue.json(means))


def _arm_evaluations(home: Path, ids: list[str]) -> list[dict[str, Any]]:
    """The rows of ``ids`` in the arm store of ``home`` (its ``evaluations``, current or not)."""
    from envfactory_assets.store.db import Store

    wanted = set(ids)
    rows = Store(settings.store_path(home)).read("evaluations", current=False)
    return [{k: v for k, v in r.items() if k not in ("superseded", "written_at")} for r in rows if r["id"] in wanted]


@dg.asset(
    group_name="ablations",
    tags=_TAGS,
    kinds={"duckdb"},
    pool=STORE_POOL,
    deps=[ablation_evaluation],
    code_version=asset_code_version(*_CODE, "envfactory_assets.reporting"),
)
def ablations_report(context: dg.AssetExecutionContext, envfactory: EnvFactoryHome) -> dg.MaterializeResult:
    """``ablation_evaluations`` in the main store (every evaluated arm's rows, with the base model's and the
    do-nothing baseline's once, ``arm`` naming the arm) and the page ``$ENVFACTORY_HOME/ablations/ablations.md``:
    the arms, each arm's steps, the paired bootstrap intervals between arms on their shared tasks and the
    paper's findings beside ours, from whatever arms exist (``envfactory ablations --write-docs`` copies it to
    docs/ablations.md)."""
    from envfactory_assets.ablations.report import write_ablations

    steps: dict[str, dict[str, Any]] = {}
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for arm in ARMS:
        home = arm_home(envfactory.root(), arm)
        entries = StepLedger(home).entries()
        if entries:
            steps[arm.name] = entries
        ids = ((entries.get("evaluation") or {}).get("outputs") or {}).get("evaluation_ids")
        for row in _arm_evaluations(home, ids) if ids else []:
            # the base model and the baseline: the first arm's rows (the same cached results in every arm)
            rows.setdefault((row["model"], row["benchmark"], row["subset"]), row)
    arms = {a.name for a in ARMS}
    table = [{**r, "arm": r["model"] if r["model"] in arms else None} for r in rows.values()]
    written = envfactory.store().replace_current("ablation_evaluations", table)
    out = envfactory.root() / ARMS_DIR / REPORT_FILE
    text = write_ablations(out, list(rows.values()), steps)
    evaluated = sorted({r["arm"] for r in table if r["arm"]})
    context.log.info(f"wrote {out} (arms evaluated: {evaluated or 'none'})")
    return dg.MaterializeResult(
        metadata={
            "page": str(out),
            "arms_evaluated": evaluated,
            "rows": len(table),
            "written": written,
            "report": dg.MetadataValue.md(text),
        }
    )
