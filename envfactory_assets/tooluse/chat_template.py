"""Compact Hermes/Qwen-style tool chat template (ChatML turns) and message normalization.

The template source is ``tool_chat_template.jinja`` next to this module.

Layout (ChatML markers ``<|im_start|>`` / ``<|im_end|>``, which are single special tokens in SmolLM2):

- system turn: the system message (or :data:`DEFAULT_SYSTEM_PROMPT`) and, when tools are given, one
  compact line per tool: ``- name(arg: type, optional?: type): description`` (description cut to its first
  line and at most 100 characters). Parameter descriptions and nested schemas are not rendered: on CPU,
  SFT speed is set by prompt length (see ``docs/design.md``, "Paper settings and measured facts").
- assistant turn: optional text, then one ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` per
  call, then ``<|im_end|>``. Content, calls and ``<|im_end|>`` sit inside ``{% generation %}`` markers,
  which TRL 1.16 ``SFTTrainer(assistant_only_loss=True)`` needs (``return_assistant_tokens_mask``) and which
  put the stop token in the loss (TRL's ``is_chat_template_stop_token_trained`` check).
- tool results: consecutive ``tool`` messages are grouped into one ``user`` turn of
  ``<tool_response>...</tool_response>`` blocks, as in Qwen2.5's template.
- generation prompt: ``<|im_start|>assistant\\n`` (exactly the prefix an assistant turn renders with, so the
  prompt of a prompt/completion split is a token prefix of the full conversation).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
"""System text used when the conversation has no system message (kept in sync with the .jinja file)."""

TEMPLATE_FILE = Path(__file__).with_name("tool_chat_template.jinja")
TOOL_CHAT_TEMPLATE = TEMPLATE_FILE.read_text(encoding="utf-8")
"""The tool chat template (Jinja source, rendered by transformers' sandboxed environment)."""

GENERATION_PROMPT = "<|im_start|>assistant\n"
"""What ``add_generation_prompt=True`` appends."""
END_OF_TURN = "<|im_end|>"
"""Ends every turn; added to the generation eos ids by ``base_model.prepare_tokenizer``."""


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return a deep copy of OpenAI-format ``messages`` in the canonical form the template renders.

    - assistant ``tool_calls[*].function.arguments`` given as a JSON string are parsed into a dict, so
      every row renders its arguments with the same ``tojson`` spacing (an empty string becomes ``{}``);
    - ``content`` that is ``None`` becomes ``""``; a tool message's non-string content is JSON-encoded.

    Args:
        messages: list of ``{"role", "content", ["tool_calls"], ["tool_call_id"], ["name"]}`` dicts.

    Returns:
        A new list; the input is not modified.

    Raises:
        ValueError: a tool call's ``arguments`` string is not JSON or does not decode to an object.
    """
    out = copy.deepcopy(list(messages))
    for message in out:
        if message.get("content") is None:
            message["content"] = ""
        if message.get("role") == "tool" and not isinstance(message["content"], str):
            message["content"] = json.dumps(message["content"], ensure_ascii=False)
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            arguments = function.get("arguments")
            if arguments is None or arguments == "":
                function["arguments"] = {}
            elif isinstance(arguments, str):
                try:
                    decoded = json.loads(arguments)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"tool call {function.get('name')!r}: arguments are not JSON: {exc}") from exc
                if not isinstance(decoded, dict):
                    raise ValueError(f"tool call {function.get('name')!r}: arguments must be a JSON object")
                function["arguments"] = decoded
    return out


def install_chat_template(tokenizer: Any) -> Any:
    """Set :data:`TOOL_CHAT_TEMPLATE` as ``tokenizer.chat_template`` and return the tokenizer (mutated)."""
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    return tokenizer


def render_chat(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> str:
    """Render ``messages`` (+ OpenAI function ``tools``) with the tool template, without a tokenizer.

    Uses transformers' own sandboxed Jinja renderer (``render_jinja_template``), i.e. exactly what
    ``tokenizer.apply_chat_template(..., tokenize=False)`` produces with this template installed.

    Returns:
        The prompt text (str).
    """
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[normalize_messages(messages)],
        tools=tools,
        chat_template=TOOL_CHAT_TEMPLATE,
        add_generation_prompt=add_generation_prompt,
    )
    return rendered[0]
