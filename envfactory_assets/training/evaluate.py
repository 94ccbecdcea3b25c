"""Tool-call validity of a checkpoint: greedy generation with the tool template, parsed and schema-checked;
and, from the same generations, the two shares that tell a collapse of GRPO from learning
(:func:`argument_shares`, :func:`collapse_problems`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from envfactory_assets.tooluse.answer_stop import answer_stop_criterion
from envfactory_assets.tooluse.chat_template import normalize_messages
from envfactory_assets.tooluse.reward import arguments_that_matter, is_empty_call
from envfactory_assets.tooluse.tool_calls import PROSE_STOP_TOKENS, parse_tool_calls, validate_call
from envfactory_assets.training.base_model import (
    force_offline,
    prepare_tokenizer,
    select_device,
)
from envfactory_assets.training.threads import torch_threads

SAMPLES_KEPT = 3
MAX_SHARE_RISE = 0.10
"""How much GRPO may raise either collapse share over its SFT parent (10 points) before the check fails."""
MIN_MEASURED = 5
"""Fewest calls (or no-call turns) behind a share before a rise of it counts: on 2 turns one changed answer is
a 50-point rise, which says nothing about the checkpoint (the default run holds out 8 prompts, of which 2
want no call); with fewer, the share is reported as not measured."""


def argument_shares(prompts: list[dict[str, Any]], texts: list[str]) -> dict[str, Any]:
    """Two collapse measures of a model's completions ``texts`` of held-out ``prompts`` (in order).

    - empty arguments: on prompts whose gold calls have arguments that matter
      (:func:`~envfactory_assets.tooluse.reward.arguments_that_matter`), the parsed calls to a tool that needs
      arguments (a gold call of that tool has arguments that matter, or its schema requires an unmasked one),
      and among them those with empty or default arguments (:func:`~envfactory_assets.tooluse.reward.is_empty_call`);
    - unwanted calls: among prompts whose gold has no call, those whose completion holds a tool call (a call
      that parses, or a ``<tool_call>`` block that does not).

    Args:
        prompts: ``[{"tools", "gold_calls", ["masked_arguments"]}]``; prompts without ``gold_calls`` are skipped.
        texts: one completion per prompt.

    Returns:
        ``{"argument_calls": int, "empty_argument_calls": int, "empty_argument_share": float or None (None
        when there was no such call), "no_call_turns": int, "unwanted_call_turns": int,
        "unwanted_call_share": float or None (None when no prompt wants no call)}``.

    Raises:
        ValueError: ``prompts`` and ``texts`` differ in length.
    """
    if len(prompts) != len(texts):
        raise ValueError(f"argument_shares: {len(prompts)} prompts but {len(texts)} completions")
    argument_calls = empty = no_call_turns = unwanted = 0
    for prompt, text in zip(prompts, texts, strict=True):
        if "gold_calls" not in prompt:
            continue
        gold, tools = prompt["gold_calls"], prompt.get("tools") or []
        masked = prompt.get("masked_arguments") or ()
        parsed = parse_tool_calls(text)
        if not gold:
            no_call_turns += 1
            unwanted += bool(parsed.calls or parsed.format_errors)
            continue
        needs = {g["name"] for g in gold if arguments_that_matter(g, tools, masked)}
        if not needs:
            continue
        for call in parsed.calls:
            required = set(_parameters(tools, call["name"]).get("required") or []) - set(masked)
            if call["name"] in needs or required:
                argument_calls += 1
                empty += is_empty_call(call, tools, masked)
    return {
        "argument_calls": argument_calls,
        "empty_argument_calls": empty,
        "empty_argument_share": empty / argument_calls if argument_calls else None,
        "no_call_turns": no_call_turns,
        "unwanted_call_turns": unwanted,
        "unwanted_call_share": unwanted / no_call_turns if no_call_turns else None,
    }


def _parameters(tools: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for tool in tools:
        fn = tool.get("function", tool)
        if fn.get("name") == name:
            return fn.get("parameters") or {}
    return {}


_MEASURES = (
    (
        "empty_argument_share",
        "argument_calls",
        "calls with empty or default arguments where the gold call has arguments that matter",
    ),
    ("unwanted_call_share", "no_call_turns", "turns with a call where none is wanted"),
)


def too_few_to_compare(grpo: dict[str, Any] | None, min_measured: int = MIN_MEASURED) -> list[str]:
    """The collapse shares of a GRPO checkpoint's :func:`argument_shares` measured on fewer than
    ``min_measured`` calls or turns, one sentence each; :func:`collapse_problems` leaves them out."""
    grpo = grpo or {}
    return [
        f"{what}: {grpo.get(count) or 0} measured (fewer than {min_measured})"
        for _key, count, what in _MEASURES
        if (grpo.get(count) or 0) < min_measured
    ]


def collapse_problems(
    sft: dict[str, Any] | None,
    grpo: dict[str, Any] | None,
    max_rise: float = MAX_SHARE_RISE,
    min_measured: int = MIN_MEASURED,
) -> list[str]:
    """Why a GRPO checkpoint collapsed relative to its SFT parent, from their :func:`argument_shares` (the
    ``valid_tool_calls_after`` metrics of each ``checkpoints`` row, which hold them).

    A share that could not be measured (None: no such call or turn) counts as 0, so a parent that made no
    argument-needing call and a child that calls with empty arguments is a rise of the child's full share.
    A share the child measured on fewer than ``min_measured`` calls or turns is not compared
    (:func:`too_few_to_compare`).

    Returns:
        One sentence per share that rose more than ``max_rise`` (empty list: no collapse).

    Raises:
        ValueError: ``grpo`` lacks the shares (a row written before they were measured).
    """
    grpo = grpo or {}
    sft = sft or {}
    problems = []
    for key, count, what in _MEASURES:
        if key not in grpo:
            raise ValueError(f"the GRPO checkpoint's metrics have no {key!r}: re-materialize checkpoints")
        if (grpo.get(count) or 0) < min_measured:
            continue
        before, after = sft.get(key) or 0.0, grpo[key] or 0.0
        if after - before > max_rise:
            problems.append(
                f"{what}: {after:.0%} after GRPO against {before:.0%} for its SFT parent "
                f"(a rise of {100 * (after - before):.0f} points, more than {100 * max_rise:.0f})"
            )
    return problems


def _generate(
    model: Any, tokenizer: Any, prompts: list[dict[str, Any]], max_new_tokens: int, batch_size: int
) -> list[str]:
    """Greedy completions (decoded without special tokens), left-padded batches, in prompt order; each stops
    once the calls it parses to can no longer change
    (:func:`~envfactory_assets.tooluse.answer_stop.answer_stop_criterion`: they are all this pass scores), so
    a batch does not run to the budget for one output's prose."""
    import torch

    encoded = [
        tokenizer.apply_chat_template(
            normalize_messages(p["messages"]),
            tools=p.get("tools") or [],
            add_generation_prompt=True,
            return_dict=True,
        )["input_ids"]
        for p in prompts
    ]
    tokenizer.padding_side = "left"
    texts: list[str] = []
    for start in range(0, len(encoded), batch_size):
        batch = tokenizer.pad(
            [{"input_ids": ids} for ids in encoded[start : start + batch_size]], padding=True, return_tensors="pt"
        ).to(model.device)
        stop = answer_stop_criterion(tokenizer, batch["input_ids"].shape[1], PROSE_STOP_TOKENS)
        with torch.inference_mode():
            output = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                stopping_criteria=[stop],
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
    device: str = "auto",
) -> dict[str, Any]:
    """Share of prompts whose greedy completion holds at least one tool call that parses and validates
    (prompts whose ``gold_calls`` is empty, where no call is wanted, are left out of it).

    Args:
        model_dir: local HF model directory (base or SFT checkpoint); the tool template and a distinct pad
            token are installed on its tokenizer if missing.
        prompts: ``[{"messages": [...up to the user turn...], "tools": [OpenAI function tools], ["gold_calls",
            "masked_arguments"] (for :func:`argument_shares`)}]``.
        max_new_tokens: generation budget per prompt (tokens).
        seed: passed to ``transformers.set_seed`` (greedy decoding is deterministic anyway).
        batch_size: prompts generated together (left padding); fewer, larger steps are much faster on CPU.
        num_threads: torch threads during generation; None = free cores (see ``threads.py``).
        device: ``auto``/``cpu``/``cuda`` (:func:`~envfactory_assets.training.base_model.select_device`; the
            weights are loaded in the plan's dtype, bf16 on a CUDA device that supports it).

    Returns:
        ``{"valid": int, "total": int (prompts that want a call), "share": valid/total (None when 0),
        "called": int (prompts that want a call whose completion holds a parsed call, valid or not),
        "call_rate": called/total (the must-call call rate; None when 0),
        "samples": [first 3 raw outputs (str)], "calls": int (parsed calls), "valid_calls": int,
        "format_errors": int, "seconds": float (generation wall time), "threads": int,
        "prose_stop_tokens": int (the stop rule of ``_generate``: shares measured under another are not
        comparable)}`` plus
        :func:`argument_shares` of the same completions. A prompt counts as valid when
        :func:`parse_tool_calls` finds a call for which :func:`validate_call` reports no error.

    Raises:
        ValueError: ``prompts`` is empty or ``batch_size`` < 1.
    """
    if not prompts:
        raise ValueError("no prompts to evaluate")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    plan = select_device(device)
    force_offline()
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.set_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=plan.torch_dtype()).to(plan.device).eval()
    prepare_tokenizer(tokenizer, model)

    started = time.perf_counter()
    with torch_threads(num_threads) as threads:
        texts = _generate(model, tokenizer, prompts, max_new_tokens, batch_size)
    seconds = time.perf_counter() - started

    valid = called = calls = valid_calls = format_errors = total = 0
    for prompt, text in zip(prompts, texts, strict=True):
        if prompt.get("gold_calls", True) == []:
            continue  # a turn whose right answer is no call: argument_shares scores it, validity cannot
        total += 1
        parsed = parse_tool_calls(text)
        tools = prompt.get("tools") or []
        good = sum(1 for call in parsed.calls if not validate_call(call, tools))
        format_errors += parsed.format_errors
        calls += len(parsed.calls)
        valid_calls += good
        valid += good > 0
        called += bool(parsed.calls)
    return {
        "valid": valid,
        "total": total,
        "share": valid / total if total else None,
        "called": called,
        "call_rate": called / total if total else None,
        "samples": texts[:SAMPLES_KEPT],
        "calls": calls,
        "valid_calls": valid_calls,
        "format_errors": format_errors,
        "seconds": round(seconds, 3),
        "threads": threads,
        "prose_stop_tokens": PROSE_STOP_TOKENS,  # the stop rule the outputs were generated under
        **argument_shares(prompts, texts),
    }


def collapse_report(rows: list[dict[str, Any]], max_rise: float = MAX_SHARE_RISE) -> dict[str, Any]:
    """:func:`collapse_problems` for every GRPO row among ``checkpoints`` ``rows``, against its parent row.

    A GRPO row measured on no held-out prompt (``n_eval_prompts: 0``) is reported as not measured, not as a
    failure, and so is each share measured on fewer than :data:`MIN_MEASURED` calls or turns; a row whose
    metrics lack the shares, or whose parent is missing, is a problem.

    Returns:
        ``{"passed": bool, "problems": [str], "shares": {grpo id: {"sft": {share: value}, "grpo": {...}}},
        "not_measured": [grpo id, or "grpo id: share: n measured (fewer than 5)"]}``.
    """
    by_id = {r["id"]: r for r in rows}
    problems: list[str] = []
    shares: dict[str, Any] = {}
    not_measured = []
    keys = ("empty_argument_share", "unwanted_call_share", "argument_calls", "no_call_turns")
    for row in rows:
        if row.get("stage") != "grpo":
            continue
        metrics = row.get("metrics") or {}
        if not metrics.get("held_out_prompt_ids"):
            not_measured.append(row["id"])
            continue
        parent = by_id.get(row.get("parent_checkpoint_id"))
        if parent is None:
            problems.append(f"{row['id']}: its SFT parent {row.get('parent_checkpoint_id')!r} is not a current row")
            continue
        sft = (parent.get("metrics") or {}).get("valid_tool_calls_after") or {}
        grpo = metrics.get("valid_tool_calls_after") or {}
        shares[row["id"]] = {"sft": {k: sft.get(k) for k in keys}, "grpo": {k: grpo.get(k) for k in keys}}
        try:
            problems += [f"{row['id']}: {p}" for p in collapse_problems(sft, grpo, max_rise)]
        except ValueError as exc:
            problems.append(f"{row['id']}: {exc}")
        else:
            not_measured += [f"{row['id']}: {note}" for note in too_few_to_compare(grpo)]
    return {"passed": not problems, "problems": problems, "shares": shares, "not_measured": not_measured}
