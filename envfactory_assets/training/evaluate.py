"""Tool-call validity of a checkpoint: greedy generation with the tool template, parsed and schema-checked."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from envfactory_assets.tooluse.chat_template import normalize_messages
from envfactory_assets.tooluse.tool_calls import parse_tool_calls, validate_call
from envfactory_assets.training.base_model import force_offline, prepare_tokenizer
from envfactory_assets.training.threads import torch_threads

SAMPLES_KEPT = 3


def _generate(model: Any, tokenizer: Any, prompts: list[dict[str, Any]], max_new_tokens: int,
              batch_size: int) -> list[str]:
    """Greedy completions (decoded without special tokens), left-padded batches, in prompt order."""
    import torch

    encoded = [
        tokenizer.apply_chat_template(
            normalize_messages(p["messages"]), tools=p.get("tools") or [], add_generation_prompt=True,
            return_dict=True,
        )["input_ids"]
        for p in prompts
    ]
    tokenizer.padding_side = "left"
    texts: list[str] = []
    for start in range(0, len(encoded), batch_size):
        batch = tokenizer.pad([{"input_ids": ids} for ids in encoded[start : start + batch_size]],
                              padding=True, return_tensors="pt")
        with torch.inference_mode():
            output = model.generate(
                **batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
        new_tokens = output[:, batch["input_ids"].shape[1] :]
        texts.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    return texts


def tool_call_validity(
    model_dir: Path,
    prompts: list[dict[str, Any]],
    max_new_tokens: int = 96,
    seed: int = 0,
    *,
    batch_size: int = 8,
    num_threads: int | None = None,
) -> dict[str, Any]:
    """Share of prompts whose greedy completion holds at least one tool call that parses and validates.

    Args:
        model_dir: local HF model directory (base or SFT checkpoint); the tool template and a distinct pad
            token are installed on its tokenizer if missing.
        prompts: ``[{"messages": [...up to the user turn...], "tools": [OpenAI function tools]}]``.
        max_new_tokens: generation budget per prompt (tokens).
        seed: passed to ``transformers.set_seed`` (greedy decoding is deterministic anyway).
        batch_size: prompts generated together (left padding); fewer, larger steps are much faster on CPU.
        num_threads: torch threads during generation; None = free cores (see ``threads.py``).

    Returns:
        ``{"valid": int, "total": int, "share": valid/total, "samples": [first 3 raw outputs (str)],
        "calls": int (parsed calls), "valid_calls": int, "format_errors": int, "seconds": float
        (generation wall time), "threads": int}``. A prompt counts as valid when :func:`parse_tool_calls`
        finds a call for which :func:`validate_call` reports no error.

    Raises:
        ValueError: ``prompts`` is empty or ``batch_size`` < 1.
    """
    if not prompts:
        raise ValueError("no prompts to evaluate")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    force_offline()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.set_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prepare_tokenizer(tokenizer, model)

    started = time.perf_counter()
    with torch_threads(num_threads) as threads:
        texts = _generate(model, tokenizer, prompts, max_new_tokens, batch_size)
    seconds = time.perf_counter() - started

    valid = calls = valid_calls = format_errors = 0
    for prompt, text in zip(prompts, texts, strict=True):
        parsed = parse_tool_calls(text)
        tools = prompt.get("tools") or []
        good = sum(1 for call in parsed.calls if not validate_call(call, tools))
        format_errors += parsed.format_errors
        calls += len(parsed.calls)
        valid_calls += good
        valid += good > 0
    total = len(prompts)
    return {
        "valid": valid,
        "total": total,
        "share": valid / total,
        "samples": texts[:SAMPLES_KEPT],
        "calls": calls,
        "valid_calls": valid_calls,
        "format_errors": format_errors,
        "seconds": round(seconds, 3),
        "threads": threads,
    }
