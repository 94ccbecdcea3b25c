"""The ``checkpoints`` stage: pick training rows and held-out prompts, run SFT, measure tool-call validity."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from envfactory_assets.store.ids import content_id
from envfactory_assets.training.base_model import model_hash, resolve_base_model
from envfactory_assets.training.chat_template import TOOL_CHAT_TEMPLATE
from envfactory_assets.training.evaluate import tool_call_validity
from envfactory_assets.training.sft import SFTConfigSpec, train_sft


CHARS_PER_TOKEN = 3.0  # rough, for JSON-heavy chat text with the SmolLM2 tokenizer


def _length(row: dict[str, Any]) -> int:
    return len(json.dumps(row["messages"])) + len(json.dumps(row["tools"]))


def first_turns(row: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """The row cut after its last whole turn that fits ``max_tokens`` (estimated from characters).

    A turn ends with the assistant's closing message, so the cut conversation still ends on an
    assistant turn (loss on the last turn stays meaningful). At least one turn is always kept.
    """
    budget = max_tokens * CHARS_PER_TOKEN - len(json.dumps(row["tools"]))
    messages = row["messages"]
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant" and not m.get("tool_calls")]
    keep = ends[0] if ends else len(messages) - 1
    for end in ends:
        if len(json.dumps(messages[: end + 1])) <= budget:
            keep = end
    return {**row, "messages": messages[: keep + 1]}


def restrict_tools(row: dict[str, Any], max_tools: int, needed: set[str] | None = None) -> dict[str, Any]:
    """Keep at most ``max_tools`` tools: every tool the row calls (or ``needed``), then distractors in a
    stable pseudo-random order (sha256 of row id and tool name). ``max_tools <= 0`` keeps all tools.

    The tool block dominates prompt length, and CPU training speed is set by prompt length.
    """
    if max_tools <= 0 or len(row["tools"]) <= max_tools:
        return row
    if needed is None:
        needed = {c["function"]["name"] for m in row["messages"] for c in m.get("tool_calls") or []}
    order = sorted(row["tools"], key=lambda t: (t["function"]["name"] not in needed,
                                                hashlib.sha256(f"{row.get('id')}/{t['function']['name']}".encode()).hexdigest()))
    keep = {t["function"]["name"] for t in order[: max(max_tools, len(needed))]}
    return {**row, "tools": [t for t in row["tools"] if t["function"]["name"] in keep]}


def training_examples(sft_rows: list[dict[str, Any]], max_rows: int, max_tokens: int = 1024,
                      max_tools: int = 0) -> list[dict[str, Any]]:
    """The ``max_rows`` shortest training examples: each SFT row cut after its last whole turn that fits
    (:func:`first_turns`) with its tools restricted (:func:`restrict_tools`). CPU speed is set by
    prompt length. Ties broken by id."""
    examples = []
    for r in sft_rows:
        row = {"id": r["id"], "messages": r["messages"], "tools": r["tools"]}
        examples.append(restrict_tools(first_turns(row, max_tokens), max_tools))
    return sorted(examples, key=lambda r: (_length(r), r["id"]))[:max_rows]


def held_out_prompts(rl_rows: list[dict[str, Any]], n: int, exclude_env_ids: set[str] | None = None,
                     max_tools: int = 0) -> list[dict[str, Any]]:
    """``n`` prompts from RL rows never used for SFT: first turns, shortest first, tools restricted as in
    training (:func:`restrict_tools`, the gold calls' tools always kept).

    Rows whose environments are in ``exclude_env_ids`` are skipped when enough others exist.
    """
    first = [r for r in rl_rows if r["turn_index"] == 0]
    preferred = [r for r in first if not (set(r["env_ids"]) & (exclude_env_ids or set()))]
    pool = preferred if len(preferred) >= n else first
    prompts = [restrict_tools({"id": r["id"], "messages": r["prompt"], "tools": r["tools"]}, max_tools,
                              {c["name"] for c in r["gold_calls"]}) for r in pool]
    return sorted(prompts, key=lambda p: (_length(p), p["id"]))[:n]


def checkpoint_id(dataset_version: str, base_hash: str, config: dict[str, Any], row_ids: list[str]) -> str:
    """Content id of a checkpoint: dataset version, base weights, chat template, training config and rows used."""
    template = hashlib.sha256(TOOL_CHAT_TEMPLATE.encode()).hexdigest()
    return content_id("ckpt", {"data": dataset_version, "base": base_hash, "template": template, "config": config,
                               "rows": sorted(row_ids)})


def train_checkpoint(sft_rows: list[dict[str, Any]], rl_rows: list[dict[str, Any]], base_model: str,
                     models_dir: Path, checkpoints_dir: Path, config: SFTConfigSpec, max_train_rows: int,
                     n_eval_prompts: int, dataset_version: str, log: Any = print,
                     max_tools: int = 0) -> dict[str, Any]:
    """Fine-tune ``base_model`` on the SFT rows and return a ``checkpoints`` row.

    Raises:
        ValueError: when there are no SFT rows to train on.
    """
    if not sft_rows:
        raise ValueError("sft_dataset is empty: nothing to train on")
    base_dir = resolve_base_model(base_model, models_dir)
    base_hash = model_hash(base_dir)
    examples = training_examples(sft_rows, max_train_rows, config.max_length, max_tools)
    by_id = {r["id"]: r for r in sft_rows}
    train_rows = [by_id[e["id"]] for e in examples]
    train_envs = {e for r in train_rows for e in r["env_ids"]}
    prompts = held_out_prompts(rl_rows, n_eval_prompts, train_envs, max_tools)
    cfg = {k: getattr(config, k) for k in config.__dataclass_fields__}
    ckpt = checkpoint_id(dataset_version, base_hash, {**cfg, "base_model": base_model, "max_tools": max_tools},
                         [r["id"] for r in train_rows])
    out_dir = checkpoints_dir / ckpt
    log(f"evaluating the base model on {len(prompts)} held-out prompts")
    before = tool_call_validity(base_dir, prompts) if prompts else {"share": None}
    log(f"training {ckpt} on {len(train_rows)} rows for {config.max_steps} steps")
    metrics = train_sft(examples, base_dir, out_dir, config)
    after = tool_call_validity(out_dir, prompts) if prompts else {"share": None}
    metrics.update({"valid_tool_calls_before": before, "valid_tool_calls_after": after,
                    "held_out_prompt_ids": [p["id"] for p in prompts]})
    return {"id": ckpt, "sft_dataset_version": dataset_version, "sft_dataset_ids": [r["id"] for r in train_rows],
            "base_model": base_model, "base_model_hash": base_hash, "config": cfg, "metrics": metrics,
            "path": str(out_dir)}
