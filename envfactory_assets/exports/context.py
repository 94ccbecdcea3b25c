"""Hugging Face SFT rows that fit the base model's context: counted in the model's tokens as training renders
them, and a row over the context split at turn boundaries or dropped.

A row is counted as :func:`~envfactory_assets.tooluse.chat_template.render_chat` renders it (the project's tool
chat template, the text SFT trains on) and tokenized by the base model's tokenizer without added special tokens
(the template writes its own). A row over ``max_tokens`` is cut between turns: a turn is a user message with
everything up to the next user message (clarification, tool calls, tool results and the closing reply), so
every part ends on an assistant message. Parts are filled greedily, in order, each with the row's system
message and tools; a part after the first starts its conversation at its first turn (the turns before it are
in the earlier parts). A row one of whose turns does not fit on its own (with the system message and tools) is
dropped: no cut inside a turn leaves a valid row. Nothing here imports a model library: the caller passes the
counting function (:func:`tokenizer_limit` builds one from a model directory).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TokenCounter = Callable[[list[dict[str, Any]], list[dict[str, Any]]], int]
"""``count(messages, tools)``: tokens of a row rendered by the chat template."""


@dataclass(frozen=True)
class ContextLimit:
    """The context HF rows must fit: ``model`` (a name for the manifest and card), ``max_tokens`` (the model's
    maximum sequence length) and ``count`` (a :data:`TokenCounter` in that model's tokens).

    Raises:
        ValueError: ``max_tokens`` is not a whole number >= 1.
    """

    model: str
    max_tokens: int
    count: TokenCounter

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(
                f"context limit of {self.model}: max_tokens must be a whole number >= 1, got {self.max_tokens!r}"
            )


def tokenizer_limit(model_dir: Path, model: str) -> ContextLimit:
    """The :class:`ContextLimit` of the Hugging Face model in ``model_dir``: its tokenizer counts the rendered
    rows, its config's ``max_position_embeddings`` is ``max_tokens`` (SmolLM2-135M: 8,192).

    Raises:
        ValueError: the config states no ``max_position_embeddings``.
    """
    from transformers import AutoConfig, AutoTokenizer

    from envfactory_assets.tooluse.chat_template import render_chat

    config = AutoConfig.from_pretrained(model_dir)
    max_tokens = getattr(config, "max_position_embeddings", None)
    if not isinstance(max_tokens, int):
        raise ValueError(f"base model {model} ({model_dir}): its config states no max_position_embeddings")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def count(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        return len(tokenizer(render_chat(messages, tools or None), add_special_tokens=False)["input_ids"])

    return ContextLimit(model, max_tokens, count)


def turns_of(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """``(head, turns)``: the messages before the first user message (the system message) and one list per
    turn, each starting at a user message and running to the next one."""
    head: list[dict[str, Any]] = []
    turns: list[list[dict[str, Any]]] = []
    for message in messages:
        if message.get("role") == "user":
            turns.append([message])
        elif turns:
            turns[-1].append(message)
        else:
            head.append(message)
    return head, turns


def fit_record(record: dict[str, Any], limit: ContextLimit) -> tuple[list[dict[str, Any]], str]:
    """``record`` (an HF row: ``id``, ``messages``, ``tools``, ...) as rows within ``limit``, each with its
    token count in ``n_tokens``.

    Returns:
        ``(rows, outcome)``: ``([record], "kept")`` when it fits; ``(parts, "split")`` with the parts (ids
        ``<id>_part<k>``, ``source_id`` the row's id) when it was cut at turn boundaries; ``([], "dropped")``
        when a turn alone does not fit or a part would not end on an assistant message.
    """
    tools = list(record.get("tools") or [])
    messages = list(record["messages"])
    n = limit.count(messages, tools)
    if n <= limit.max_tokens:
        return [{**record, "source_id": record["id"], "n_tokens": n}], "kept"
    head, turns = turns_of(messages)
    if not turns or any(not turn or turn[-1].get("role") != "assistant" for turn in turns):
        return [], "dropped"
    parts: list[tuple[list[dict[str, Any]], int]] = []
    current: list[list[dict[str, Any]]] = []
    current_n = 0
    for turn in turns:
        grown = limit.count(head + [m for t in current for m in t] + turn, tools)
        if grown <= limit.max_tokens:
            current, current_n = current + [turn], grown
            continue
        if not current:
            return [], "dropped"  # this turn alone is over the context
        parts.append(([m for t in current for m in t], current_n))
        alone = limit.count(head + turn, tools)
        if alone > limit.max_tokens:
            return [], "dropped"
        current, current_n = [turn], alone
    parts.append(([m for t in current for m in t], current_n))
    return [
        {**record, "id": f"{record['id']}_part{k}", "source_id": record["id"], "messages": head + body, "n_tokens": n}
        for k, (body, n) in enumerate(parts, start=1)
    ], "split"


def fit_records(records: Sequence[dict[str, Any]], limit: ContextLimit) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Every record through :func:`fit_record`.

    Returns:
        ``(rows, counts)``; ``counts`` = ``{"kept", "split", "dropped"}`` (source rows by outcome) and
        ``"parts"`` (rows written for the split ones).
    """
    rows: list[dict[str, Any]] = []
    counts = {"kept": 0, "split": 0, "dropped": 0, "parts": 0}
    for record in records:
        fitted, outcome = fit_record(record, limit)
        counts[outcome] += 1
        if outcome == "split":
            counts["parts"] += len(fitted)
        rows += fitted
    return rows, counts
