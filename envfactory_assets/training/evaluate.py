"""Tool-call validity of a checkpoint: greedy generation with the tool template, parsed and schema-checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envfactory_assets.training.base_model import force_offline, prepare_tokenizer
from envfactory_assets.training.chat_template import normalize_messages
from envfactory_assets.training.tool_calls import parse_tool_calls, validate_call

SAMPLES_KEPT = 3


def tool_call_validity(
    model_dir: Path,
    prompts: list[dict[str, Any]],
    max_new_tokens: int = 96,
    seed: int = 0,
) -> dict[str, Any]:
    """Share of prompts whose greedy completion holds at least one tool call that parses and validates.

    Args:
        model_dir: local HF model directory (base or SFT checkpoint); the tool template and a distinct pad
            token are installed on its tokenizer if missing.
        prompts: ``[{"messages": [...up to the user turn...], "tools": [OpenAI function tools]}]``.
        max_new_tokens: generation budget per prompt (tokens).
        seed: passed to ``transformers.set_seed`` (greedy decoding is deterministic anyway).

    Returns:
        ``{"valid": int, "total": int, "share": valid/total, "samples": [first 3 raw outputs (str)],
        "calls": int (parsed calls), "valid_calls": int, "format_errors": int, "seconds": float}``.
        A prompt counts as valid when :func:`parse_tool_calls` finds a call for which
        :func:`validate_call` reports no error.

    Raises:
        ValueError: ``prompts`` is empty.
    """
    if not prompts:
        raise ValueError("no prompts to evaluate")
    force_offline()
    import time

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.set_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prepare_tokenizer(tokenizer, model)

    started = time.perf_counter()
    valid = calls = valid_calls = format_errors = 0
    samples: list[str] = []
    for prompt in prompts:
        tools = prompt.get("tools") or []
        inputs = tokenizer.apply_chat_template(
            normalize_messages(prompt["messages"]),
            tools=tools,
            add_generation_prompt=True,
            return_dict=True,
            return_tensors="pt",
        )
        with torch.inference_mode():
            output = model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
        text = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        if len(samples) < SAMPLES_KEPT:
            samples.append(text)
        parsed = parse_tool_calls(text)
        format_errors += parsed.format_errors
        calls += len(parsed.calls)
        good = sum(1 for call in parsed.calls if not validate_call(call, tools))
        valid_calls += good
        valid += good > 0
    total = len(prompts)
    return {
        "valid": valid,
        "total": total,
        "share": valid / total,
        "samples": samples,
        "calls": calls,
        "valid_calls": valid_calls,
        "format_errors": format_errors,
        "seconds": round(time.perf_counter() - started, 3),
    }
