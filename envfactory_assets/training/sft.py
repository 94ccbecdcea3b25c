"""Supervised fine-tuning on tool-use conversations with TRL's ``SFTTrainer`` (CPU float32, or CUDA with bf16/fp16).

Rows are OpenAI-format conversations plus their tools. They are stored in a ``datasets.Dataset`` with
``Json()`` features for the message columns, because ``Dataset.from_list`` would otherwise merge the
argument dicts of different rows into one struct type and add ``null`` keys that the model then learns to
emit (``docs/design.md``, "Paper settings and measured facts"). Tools travel as a JSON string, which TRL 1.16 decodes
(``SFTTrainer._prepare_dataset.tokenize_fn``). Loss masking is done by TRL from the template's
``{% generation %}`` markers (``assistant_only_loss``) and, for ``loss_on="last_turn"``, a
prompt/completion split (``completion_only_loss``); tool results and user turns never carry loss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envfactory_assets.config_checks import finite_number, number_types, one_of, setting, whole_number
from envfactory_assets.tooluse.chat_template import (
    TOOL_CHAT_TEMPLATE,
    normalize_messages,
)
from envfactory_assets.training.base_model import (
    DEVICE_SETTINGS,
    DevicePlan,
    force_offline,
    model_hash,
    prepare_tokenizer,
    select_device,
)
from envfactory_assets.training.resume import (
    checkpointing_kwargs,
    finish_run,
    last_complete_checkpoint,
    result_settings,
    resume_callback,
    run_dir,
    run_key,
)
from envfactory_assets.training.step_callback import step_progress_callback
from envfactory_assets.training.threads import ThreadGovernor, governor_callback

LossOn = Literal["all_assistant", "last_turn"]
TRAINING_CONFIG_FILE = "training_config.json"


@dataclass(frozen=True)
class SFTConfigSpec:
    """What a caller chooses for one SFT run (everything else is fixed for CPU training); each field's default
    and help text are stated here alone (``metadata["help"]``; docs/configuration.md is generated from them).

    Raises:
        SettingError: (a ValueError) a setting of the wrong type or out of range, named in the message.
    """

    max_steps: int = setting(
        32,
        "SFT optimizer steps (a CPU-sized run: a step of 2 conversations for 135M parameters takes about 12 s on 2 "
        "idle cores, 20-30 s with other jobs on them; docs/training.md, 'The CPU budget').",
    )
    learning_rate: float = setting(
        1e-4,
        "peak SFT learning rate, linear decay (Hugging Face's default "
        "schedule); 1e-4 so a few dozen steps teach a 135M model the call "
        "format (at 5e-5 and 24 steps the default run's SFT made no call on "
        "its held-out prompts); the paper uses 1e-6 for one epoch.",
    )
    per_device_train_batch_size: int = setting(2, "conversations per SFT step.")
    gradient_accumulation_steps: int = setting(1, "micro-batches per SFT optimizer step.")
    max_length: int = setting(
        1024, "tokens per conversation after templating; longer ones are truncated (the start is kept)."
    )
    loss_on: LossOn = setting(
        "last_turn",
        "'last_turn' (as in the paper: loss only on the assistant messages "
        "after the last user message) or 'all_assistant' (every assistant "
        "message of every turn); tool results, user and system text never "
        "carry loss.",
    )
    seed: int = setting(
        0, "seed of the trainer (data order, dropout), transformers.set_seed and, in the checkpoints asset, GRPO."
    )
    padding_free: bool = setting(
        False,
        "concatenate a step's conversations instead of padding them (TRL's "
        "padding_free: same loss, ~10% fewer tokens, but no faster on a CPU, "
        "where attention then runs with a dense mask).",
    )
    save_steps: int = setting(
        8,
        "optimizer steps between resumable checkpoints (model, optimizer, scheduler, RNG state and step, "
        "kept in '<checkpoint folder>.resume' until SFT finishes); a run stopped and started again with "
        "the same inputs continues from the last one; 0 writes none.",
    )
    device: str = setting(
        "auto",
        "'auto' (a CUDA device when torch sees one, bf16 mixed precision where "
        "supported, else the CPU in float32), 'cpu' (float32), 'cpu_bf16' (bf16 mixed "
        "precision over float32 weights on a CPU with native bf16 instructions, AVX512-BF16 "
        "or AMX; refused elsewhere) or 'cuda' (refused when no CUDA device is visible); in "
        "the checkpoints asset SFT, GRPO and the validity passes all follow it.",
    )

    def __post_init__(self) -> None:
        number_types(self, "sft")
        one_of("sft", "device", self.device, DEVICE_SETTINGS)
        one_of("sft", "loss_on", self.loss_on, ("all_assistant", "last_turn"))
        for name in ("max_steps", "per_device_train_batch_size", "gradient_accumulation_steps", "max_length"):
            whole_number("sft", name, getattr(self, name), low=1)
        whole_number("sft", "save_steps", self.save_steps, low=0)
        finite_number("sft", "learning_rate", self.learning_rate, low=0.0, low_open=True)


def _split_last_turn(messages: list[dict[str, Any]], row_id: str) -> tuple[list[dict], list[dict]]:
    """(prompt, completion): prompt ends with the last user message; completion must hold an assistant message."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last_user is None:
        raise ValueError(f"row {row_id!r}: no user message, cannot split off the last turn")
    completion = messages[last_user + 1 :]
    if not any(m.get("role") == "assistant" for m in completion):
        raise ValueError(f"row {row_id!r}: no assistant message after the last user message")
    return messages[: last_user + 1], completion


def build_sft_records(rows: list[dict[str, Any]], loss_on: LossOn = "last_turn") -> list[dict[str, Any]]:
    """Turn SFT rows into TRL records.

    Args:
        rows: ``{"id": str, "messages": [OpenAI messages], "tools": [{"type": "function", "function":
            {"name", "description", "parameters"}}]}``.
        loss_on: see :class:`SFTConfigSpec`.

    Returns:
        ``{"messages": [...], "tools": json-str}`` (all_assistant) or ``{"prompt": [...], "completion":
        [...], "tools": json-str}`` (last_turn), messages normalized by
        :func:`~envfactory_assets.tooluse.chat_template.normalize_messages`.

    Raises:
        ValueError: empty ``rows``, a row without an assistant message, or (last_turn) without a user
            message before its last assistant turn; malformed tool-call arguments.
    """
    if not rows:
        raise ValueError("no SFT rows")
    records = []
    for row in rows:
        row_id = str(row.get("id", "?"))
        messages = normalize_messages(row["messages"])
        if not any(m.get("role") == "assistant" for m in messages):
            raise ValueError(f"row {row_id!r}: no assistant message to learn from")
        tools = json.dumps(row.get("tools") or [], ensure_ascii=False)
        if loss_on == "last_turn":
            prompt, completion = _split_last_turn(messages, row_id)
            records.append({"prompt": prompt, "completion": completion, "tools": tools})
        else:
            records.append({"messages": messages, "tools": tools})
    return records


def build_sft_dataset(rows: list[dict[str, Any]], loss_on: LossOn = "last_turn") -> Any:
    """``datasets.Dataset`` of :func:`build_sft_records` with ``Json()`` message columns (no dict merging).

    Raises:
        ValueError: see :func:`build_sft_records`.
    """
    from datasets import Dataset, Features, Json, Value

    records = build_sft_records(rows, loss_on)
    columns = ["messages"] if loss_on == "all_assistant" else ["prompt", "completion"]
    features = Features({**{c: Json() for c in columns}, "tools": Value("string")})
    return Dataset.from_list(records, features=features)


def trl_config_kwargs(out_dir: Path, config: SFTConfigSpec, plan: DevicePlan | None = None) -> dict[str, Any]:
    """Keyword arguments of TRL's ``SFTConfig`` for ``config`` on ``plan`` (the device and precision flags
    among them; ``plan`` None: :func:`select_device` of ``config.device``). A plain dict because constructing
    ``SFTConfig`` for a CUDA plan initialises the device. ``out_dir`` is the trainer's own folder: its
    resumable checkpoints go there every ``config.save_steps`` steps
    (:func:`~envfactory_assets.training.resume.checkpointing_kwargs`)."""
    plan = plan or select_device(config.device)
    return dict(  # noqa: C408 - the keyword form of the config call it feeds
        **checkpointing_kwargs(config.save_steps, out_dir),
        max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.per_device_train_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        # TRL refuses max_length with padding_free and no packing (it would not truncate); train_sft truncates
        max_length=None if config.padding_free else config.max_length,
        seed=config.seed,
        data_seed=config.seed,
        assistant_only_loss=True,
        completion_only_loss=config.loss_on == "last_turn",
        packing=False,  # packing would change how many conversations a step holds; padding-free keeps that
        padding_free=config.padding_free,
        use_cpu=plan.use_cpu,
        bf16=plan.bf16,  # mixed precision over float32 master weights (base_model.py, "Device and precision", says why)
        fp16=plan.fp16,
        activation_checkpointing=False,  # TRL defaults to True; for a 135M model on CPU it only costs time
        report_to="none",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def _trl_config(out_dir: Path, config: SFTConfigSpec, plan: DevicePlan | None = None) -> Any:
    """TRL's ``SFTConfig`` of :func:`trl_config_kwargs` (built without loading a model or training)."""
    from trl import SFTConfig

    return SFTConfig(**trl_config_kwargs(out_dir, config, plan))


def _truncated(prepared: Any, max_length: int) -> Any:
    """TRL's own preparation with ``max_length`` (which it skips when padding-free): keep the first
    ``max_length`` tokens of each example, then drop examples left without a loss token."""
    cut = prepared.map(lambda r: {"input_ids": r["input_ids"][:max_length], "labels": r["labels"][:max_length]})
    return cut.filter(lambda r: any(label != -100 for label in r["labels"]))


def _step_timer() -> Any:
    """A ``TrainerCallback`` recording the wall time (s) of each optimizer step in ``.seconds``."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(round(time.perf_counter() - self._start, 3))

    return StepTimer()


def train_sft(
    rows: list[dict[str, Any]],
    base_model_dir: Path,
    out_dir: Path,
    config: SFTConfigSpec | None = None,
    *,
    num_threads: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune the model in ``base_model_dir`` on ``rows`` and save it to ``out_dir``.

    Args:
        rows: SFT rows, see :func:`build_sft_records`.
        base_model_dir: local HF model directory (e.g. from ``resolve_base_model``); its tokenizer gets the
            tool chat template and a distinct pad token before training.
        out_dir: receives ``model.safetensors``, config, tokenizer files and :data:`TRAINING_CONFIG_FILE`.
        config: :class:`SFTConfigSpec` (defaults if None).
        num_threads: torch threads while training; None = free cores (see ``threads.py``). An execution
            detail, deliberately not part of :class:`SFTConfigSpec`.
        progress: called as ``progress(optimizer steps done, max_steps)`` after every step.

    Every ``config.save_steps`` optimizer steps a resumable checkpoint (transformers' ``Trainer`` checkpoint:
    weights, optimizer, scheduler, RNG states, step) is written to ``<out_dir>.resume/sft-<key>``, the key a
    hash of the rows, the settings that change the result, the base weights, the chat template and the
    library versions (:mod:`~envfactory_assets.training.resume`). A call that finds a complete checkpoint
    there continues from it and ends with the weights and metrics of a run never stopped (timings and thread
    counts aside); the folder is removed when training finishes.

    Returns:
        ``{"train_loss": float (mean of the per-step losses over the whole run, nats; a resumed run included),
        "final_loss": float (last logged step),
        "loss_history": [float per step], "steps": int, "seconds": float (wall time of ``train()``),
        "seconds_per_step": float, "cpu_seconds": float (process CPU time of ``train()``, all threads: the
        figure that survives a shared machine), "step_seconds": [float per optimizer step of this call (after
        a resume: the steps it ran); the first ones include warm-up], "threads": int,
        "device"/"dtype"/"bf16"/"fp16" (the resolved plan),
        "examples": int (rows), "train_tokens": int (templated tokens in the
        prepared dataset), "loss_tokens": int (tokens carrying loss)}``.

    Raises:
        ValueError: bad rows (see :func:`build_sft_records`), every example masked out by truncation, or
            ``device: cuda`` without a visible CUDA device.
    """
    config = config or SFTConfigSpec()
    plan = select_device(config.device)  # before anything is loaded: a refused 'cuda' fails fast
    out_dir = Path(out_dir)
    base_model_dir = Path(base_model_dir)
    dataset = build_sft_dataset(rows, config.loss_on)

    force_offline()
    import torch
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    base_hash = model_hash(base_model_dir)
    template_hash = hashlib.sha256(TOOL_CHAT_TEMPLATE.encode()).hexdigest()
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}
    key = run_key(
        {"rows": rows, "spec": result_settings(config), "base": base_hash, "template": template_hash, **versions}
    )
    trainer_dir = run_dir(out_dir, "sft", key)
    resume_from = last_complete_checkpoint(trainer_dir)

    transformers.set_seed(config.seed)
    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    model = AutoModelForCausalLM.from_pretrained(base_model_dir, dtype=torch.float32)
    prepare_tokenizer(tokenizer, model)

    governor = ThreadGovernor(num_threads)
    timer = _step_timer()
    trainer = SFTTrainer(
        model=model,
        args=_trl_config(trainer_dir, config, plan),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[governor_callback(governor), timer, resume_callback()]
        + ([step_progress_callback(progress)] if progress is not None else []),
    )
    if config.padding_free:
        trainer.train_dataset = _truncated(trainer.train_dataset, config.max_length)
    prepared = trainer.train_dataset
    if len(prepared) == 0:
        raise ValueError("every example was masked out (max_length too small?)")
    train_tokens = sum(len(ids) for ids in prepared["input_ids"])
    loss_tokens = sum(sum(label != -100 for label in labels) for labels in prepared["labels"])

    with governor:
        started, cpu_started = time.perf_counter(), time.process_time()
        output = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    # the log history comes back with a checkpoint; the trainer's own training_loss covers this call's steps only
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    train_loss = sum(losses) / len(losses) if losses else float(output.training_loss)

    trainer.save_model(str(out_dir))
    tokenizer.save_pretrained(out_dir)
    finish_run(trainer_dir)
    metrics = {
        "train_loss": float(train_loss),
        "final_loss": float(losses[-1]) if losses else float(train_loss),
        "loss_history": [float(x) for x in losses],
        "steps": int(output.global_step),
        "seconds": round(seconds, 3),
        "seconds_per_step": round(seconds / max(1, output.global_step), 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "step_seconds": timer.seconds,
        "threads": governor.history[0],
        **governor.summary(),
        **plan.as_dict(),
        "examples": len(rows),
        "train_tokens": int(train_tokens),
        "loss_tokens": int(loss_tokens),
    }
    record = {
        "spec": dataclasses.asdict(config),
        "base_model_dir": str(base_model_dir),
        "base_model_sha256": base_hash,
        "chat_template_sha256": template_hash,
        "row_ids": [str(row.get("id")) for row in rows],
        "metrics": metrics,
        "versions": versions,
    }
    (out_dir / TRAINING_CONFIG_FILE).write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    return metrics
