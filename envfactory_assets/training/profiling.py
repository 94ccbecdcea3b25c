"""Where an SFT step's tokens go: tokens per conversation, the tool block's share, the loss tokens' share,
and the padding a batch of random conversations carries. Measured numbers are in docs/training.md."""

from __future__ import annotations

import random
import statistics
from typing import Any

from envfactory_assets.tooluse.chat_template import render_chat


def sft_token_profile(
    examples: list[dict[str, Any]], tokenizer: Any, batch_size: int = 2, draws: int = 200, seed: int = 0
) -> dict[str, Any]:
    """Token counts of SFT ``examples`` (``{"messages", "tools"}``) rendered with the tool template.

    Args:
        examples: the training examples (after the stage's cut and tool restriction).
        tokenizer: the policy's tokenizer (only used to count tokens).
        batch_size: conversations per micro-batch, for the padding estimate.
        draws: random orders averaged for the padding estimate (the trainer shuffles).
        seed: seed of those orders.

    Returns:
        ``{"examples", "tokens_mean", "tokens_max", "tool_block_mean" (the system turn with the tool list),
        "tool_block_share", "last_turn_share" (tokens after the last user message: what ``loss_on:
        last_turn`` trains on), "padding_share_random" (pad tokens / padded batch tokens over random
        batches), "padding_share_sorted" (the same with length-sorted batches), "tokens_per_step_padded",
        "tokens_per_step_padding_free"}``.

    Raises:
        ValueError: no examples or ``batch_size`` < 1.
    """
    if not examples or batch_size < 1:
        raise ValueError("sft_token_profile needs examples and batch_size >= 1")

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    total, tools, last = [], [], []
    for e in examples:
        messages = e["messages"]
        total.append(count(render_chat(messages, e["tools"])))
        tools.append(count(render_chat([], e["tools"])))
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        last.append(total[-1] - count(render_chat(messages[: last_user + 1], e["tools"], add_generation_prompt=True)))

    def padding(order: list[int]) -> tuple[int, int]:
        pad = padded = 0
        for i in range(0, len(order), batch_size):
            batch = [total[j] for j in order[i : i + batch_size]]
            pad += max(batch) * len(batch) - sum(batch)
            padded += max(batch) * len(batch)
        return pad, padded

    rng = random.Random(seed)
    shares = []
    for _ in range(draws):
        order = list(range(len(total)))
        rng.shuffle(order)
        pad, padded = padding(order)
        shares.append(pad / padded)
    pad_sorted, padded_sorted = padding(sorted(range(len(total)), key=total.__getitem__))
    mean_share = statistics.fmean(shares)
    return {
        "examples": len(examples),
        "tokens_mean": round(statistics.fmean(total), 1),
        "tokens_max": max(total),
        "tool_block_mean": round(statistics.fmean(tools), 1),
        "tool_block_share": round(sum(tools) / sum(total), 3),
        "last_turn_share": round(sum(last) / sum(total), 3),
        "padding_share_random": round(mean_share, 3),
        "padding_share_sorted": round(pad_sorted / padded_sorted, 3),
        "tokens_per_step_padding_free": round(batch_size * statistics.fmean(total), 1),
        "tokens_per_step_padded": round(batch_size * statistics.fmean(total) / (1 - mean_share), 1),
    }
