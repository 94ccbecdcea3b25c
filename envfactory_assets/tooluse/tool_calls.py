"""The one parser for tool calls in model output, and JSON-Schema validation of a parsed call.

Text is only ever decoded with :mod:`json` (no ``eval``, no ``ast.literal_eval``): a model output that
looks like code stays text.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_TOOL_CALL_OPEN = "<tool_call>"
_TOOL_CALL_CLOSE = "</tool_call>"
MAX_TOOL_CALL_BLOCKS = 128
"""Most ``<tool_call>`` blocks decoded in one output. A turn with more is degenerate (a model repeating a
tag); decoding every block of a megabyte of them made one output cost seconds. The rest of the output,
from the first block past the limit, is not decoded and counts as one format error."""
_SPACE_RE = re.compile(r"\s*")
# Reasoning blocks (Qwen3 / DeepSeek <think>, other <thinking>/<reasoning> variants). Calls inside them are
# drafts, not calls. An unclosed block runs to the end of the text.
_REASONING_RE = re.compile(r"<(think|thinking|reasoning)>.*?(?:</\1>|\Z)", re.DOTALL)
# A close tag with no opening tag: the template put the opening tag into the prompt (Qwen3 style).
_ORPHAN_REASONING_CLOSE_RE = re.compile(r"\A.*?</(?:think|thinking|reasoning)>", re.DOTALL)
_SPECIAL_TOKEN_RE = re.compile(r"<\|(?:im_end|im_start|endoftext|eot_id|end)\|>")
# A tool's result inside a decoded rollout (verl's solution_str holds the tool-response tokens too). An unclosed
# block (a response cut at its length limit) runs to the end of the text.
_TOOL_RESPONSE_RE = re.compile(r"<tool_response>.*?(?:</tool_response>|\Z)", re.DOTALL)
# The opening ``<`` of every tag a reader of model text acts on: call and response blocks, reasoning blocks and
# special tokens (``<|im_end|>``; a tokenizer reads that text as the special token itself).
_ACTIVE_TAG_RE = re.compile(r"<(?=/?(?:tool_call|tool_response|think|thinking|reasoning)>|\|)")


@dataclass(frozen=True)
class ParseResult:
    """Outcome of :func:`parse_tool_calls`.

    Attributes:
        calls: ``[{"name": str, "arguments": dict}, ...]`` in output order.
        format_errors: number of call blocks that could not be decoded into a call.
        content: the text left after removing call blocks, reasoning blocks and end-of-turn tokens, stripped.
    """

    calls: list[dict[str, Any]] = field(default_factory=list)
    format_errors: int = 0
    content: str = ""


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-standard JSON constant {token}")


def _finite_float(token: str) -> float:
    """A JSON number as a float; an overflowing literal such as ``1e999`` is refused rather than read as inf."""
    value = float(token)
    if not math.isfinite(value):
        raise ValueError(f"JSON number {token[:40]} is out of range")
    return value


def _decoder() -> json.JSONDecoder:
    return json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def _loads(text: str) -> Any:
    """``json.loads`` that rejects NaN/Infinity and overflowing numbers; raises ValueError (JSONDecodeError is
    one) or RecursionError."""
    return _decoder().decode(text)


def _unfence(text: str) -> str:
    """The body of a whole-text Markdown code fence (```` ```json ... ``` ````), else ``text`` unchanged.

    Plain string operations: a backtracking regex here took cubic time on a fence followed by thousands of
    blanks (a degenerate model output), so a single answer could stall an evaluation.
    """
    if len(text) < 6 or not text.startswith("```") or not text.endswith("```"):
        return text
    body = text[3:-3]
    if body.startswith("json"):
        body = body[4:]
    return body.strip()


def _as_call(obj: Any) -> dict[str, Any] | None:
    """Normalize a decoded call object to ``{"name", "arguments"}``; None if it is not a well-formed call.

    Accepted shapes: ``{"name", "arguments"|"parameters"}`` and OpenAI's
    ``{"type": "function", "function": {"name", "arguments"}}``; arguments may be an object, a JSON string
    holding an object, or absent/null/"" (empty arguments).
    """
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    arguments = obj.get("arguments", obj.get("parameters"))
    if arguments is None or arguments == "":
        arguments = {}
    elif isinstance(arguments, str):
        try:
            arguments = _loads(arguments)
        except (ValueError, RecursionError):
            return None
    if not isinstance(arguments, dict):
        return None
    return {"name": name.strip(), "arguments": arguments}


def _calls_from_values(values: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """Calls and the number of values that are not calls; a non-empty JSON array counts as its items."""
    calls, errors = [], 0
    flat = [item for value in values for item in (value if isinstance(value, list) and value else [value])]
    for value in flat:
        call = _as_call(value)
        if call is None:
            errors += 1
        else:
            calls.append(call)
    return calls, errors


def _parse_openai_json(text: str) -> tuple[list[dict[str, Any]], int] | None:
    """Parse a whole-text OpenAI-style JSON answer; None when the text is not call-shaped JSON.

    Call-shaped: ``{"tool_calls": [...]}``, a single call object (has ``name`` or ``function``), or a
    non-empty list of such objects. Fenced ```json blocks are unwrapped first.
    """
    text = _unfence(text)
    if not text.startswith(("{", "[")):
        return None
    try:
        value = _loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, dict) and "tool_calls" in value:
        entries = value["tool_calls"]
        if not isinstance(entries, list):
            return [], 1
        return _calls_from_values(entries)
    if isinstance(value, dict) and ("function" in value or ("name" in value and "arguments" in value)):
        return _calls_from_values([value])
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, dict) and ("function" in v or "name" in v) for v in value)
    ):
        return _calls_from_values(value)
    return None


class _TagFinder:
    """``str.find`` of the two tags from positions that only move forward, remembering the last answer.

    Without it, a block that is not JSON searched the rest of the text for a close tag that never comes:
    the whole text once per block.
    """

    def __init__(self, body: str) -> None:
        self.body = body
        self._found: dict[str, tuple[int, int]] = {}  # tag -> (searched from, found at or -1)

    def next(self, tag: str, index: int) -> int:
        """Position of the first ``tag`` at or after ``index``, -1 if none."""
        searched_from, found = self._found.get(tag, (len(self.body) + 1, -1))
        if index < searched_from or 0 <= found < index:
            found = self.body.find(tag, index)
            self._found[tag] = (index, found)
        return found


def _scan_block(body: str, start: int, tags: _TagFinder) -> tuple[list[Any] | None, int, str]:
    """Read the ``<tool_call>`` block whose opening tag ends at ``start``.

    The block's JSON values are decoded in place, so a close tag inside a JSON string (``"type
    </tool_call> to finish"``) belongs to the string. The block ends at the close tag after its last value
    (closed), or at the next opening tag or the end of the text (unclosed). When something other than JSON
    values and whitespace comes first, the block ends at the next tag after it: closed, it is a format
    error; unclosed, one leading JSON value is the call and the rest is text.

    Returns:
        ``(values, end, trailing text)``: ``values`` None for a format error; ``end`` where the text after
        the block starts; the trailing text (of an unclosed block) belongs to the content.
    """
    decoder = _decoder()
    values: list[Any] = []
    first_end = start
    index = _SPACE_RE.match(body, start).end()
    try:
        while True:
            if body.startswith(_TOOL_CALL_CLOSE, index):
                return (values or None), index + len(_TOOL_CALL_CLOSE), ""
            if index == len(body) or body.startswith(_TOOL_CALL_OPEN, index):
                return (values or None), index, ""
            value, index = decoder.raw_decode(body, index)
            if not values:
                first_end = index
            values.append(value)
            index = _SPACE_RE.match(body, index).end()
    except (ValueError, RecursionError):
        pass
    # Not JSON from ``index`` on: the text up to the next tag is part of the block.
    close = tags.next(_TOOL_CALL_CLOSE, index)
    opening = tags.next(_TOOL_CALL_OPEN, index)
    if close >= 0 and (opening < 0 or close < opening):
        return None, close + len(_TOOL_CALL_CLOSE), ""
    end = opening if opening >= 0 else len(body)
    if not values:
        return None, end, ""
    return values[:1], end, body[first_end:end]


def without_tool_responses(text: str) -> str:
    """``text`` without its ``<tool_response>...</tool_response>`` blocks: what is left of a decoded rollout is
    the model's own text. A tool's result must never be read as the model's calls or reply (a hostile tool could
    answer with the gold call); :func:`inert_tags` keeps a result from closing its block early.

    Raises:
        TypeError: ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected str, got {type(text).__name__}")
    return _TOOL_RESPONSE_RE.sub("", text)


def inert_tags(json_text: str) -> str:
    """JSON text (a tool's result as the model sees it) with the ``<`` of every tag a reader of model text acts on
    (``<tool_call>``, ``</tool_response>``, ``<think>``..., ``<|im_end|>``) written as the JSON escape
    ``\\u003c``: the same JSON value, but text that no parser or tokenizer reads as a tag, so a tool's result
    cannot forge a call, end its own response block, or an end-of-turn token. Only for JSON text, where ``<`` can
    appear only inside a string.
    """
    return _ACTIVE_TAG_RE.sub(r"\\u003c", json_text)


def tool_call_text(calls: list[dict[str, Any]]) -> str:
    """``calls`` (``[{"name", "arguments"}]``) as the ``<tool_call>`` blocks :func:`parse_tool_calls` reads: one
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` per call, in order ('' for no call)."""
    return "".join(
        _TOOL_CALL_OPEN + json.dumps({"name": c["name"], "arguments": c["arguments"]}) + _TOOL_CALL_CLOSE for c in calls
    )


def parse_tool_calls(text: str) -> ParseResult:
    """Extract tool calls from one model output.

    Handles Hermes/Qwen ``<tool_call>{...}</tool_call>`` blocks (several per output, several JSON objects
    per block, an unclosed final block, a close tag inside a JSON string value), ``<think>``/``<thinking>``/
    ``<reasoning>`` blocks (removed; calls inside them are ignored), trailing text, arguments as an object
    or a JSON string, and OpenAI-style JSON (``{"tool_calls": [{"type": "function", "function": {...}}]}``,
    a bare function object, or a list) when the whole output is that JSON.

    Time is linear in the length of ``text``: at most :data:`MAX_TOOL_CALL_BLOCKS` blocks are decoded; the
    text from the next opening tag on is dropped and adds one format error.

    Args:
        text: raw decoded model output (special tokens may or may not have been skipped).

    Returns:
        :class:`ParseResult`. Every ``<tool_call>`` block that does not decode to well-formed calls adds one
        to ``format_errors`` (and contributes no call). Plain text or non-call JSON is content, not an error.

    Raises:
        TypeError: ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected str, got {type(text).__name__}")
    body = _SPECIAL_TOKEN_RE.sub("", text)
    body = _REASONING_RE.sub("", body)
    body = _ORPHAN_REASONING_CLOSE_RE.sub("", body)

    if _TOOL_CALL_OPEN not in body:
        stripped = body.strip()
        parsed = _parse_openai_json(stripped)
        if parsed is not None:
            calls, errors = parsed
            return ParseResult(calls=calls, format_errors=errors, content="")
        return ParseResult(content=stripped.replace(_TOOL_CALL_CLOSE, "").strip())

    calls: list[dict[str, Any]] = []
    errors = 0
    content_parts: list[str] = []
    position = 0
    blocks = 0
    tags = _TagFinder(body)
    while True:
        opening = tags.next(_TOOL_CALL_OPEN, position)
        if opening < 0:
            content_parts.append(body[position:])
            break
        content_parts.append(body[position:opening])
        if blocks == MAX_TOOL_CALL_BLOCKS:
            errors += 1
            break
        blocks += 1
        values, position, trailing = _scan_block(body, opening + len(_TOOL_CALL_OPEN), tags)
        content_parts.append(trailing)
        if values is None:
            errors += 1
            continue
        block_calls, block_errors = _calls_from_values(values)
        if block_errors:
            errors += 1
            continue
        calls.extend(block_calls)
    content = "".join(content_parts).replace(_TOOL_CALL_CLOSE, "").strip()
    return ParseResult(calls=calls, format_errors=errors, content=content)


PROSE_STOP_TOKENS = 48
"""New tokens of plain prose after which a one-message answer that has opened no call is taken to be a text
answer (:func:`answer_is_complete`). A model that means to call a tool opens ``<tool_call>`` (or bare JSON)
at once or after a sentence; SmolLM2-135M's base model, asked a BFCL question, writes hundreds of tokens of
prose or code and never calls, and without this rule every batch ran to the category's full budget."""


def answer_is_complete(
    text: str, prose_tokens: int = PROSE_STOP_TOKENS, count_tokens: Callable[[str], int] | None = None
) -> bool:
    """Whether a one-message answer still being generated can no longer change the calls it parses to
    (:func:`parse_tool_calls`), so generation may stop there. Prose is counted outside reasoning blocks (an
    open one runs to the end of the text) and without end-of-turn tokens.

    Complete when either
    - it has called: every block decodes (a close tag inside a JSON string leaves the call open) and after
      the last ``</tool_call>`` come ``prose_tokens`` tokens of text, so a short separator between parallel
      calls ("2.", "and now the second:") does not end it;
    - or it is prose: ``prose_tokens`` tokens with no ``<tool_call>`` opened, not beginning like the
      whole-output JSON the parser also reads (``{``, ``[``, a code fence) or like a tag (``<``).

    Misses, by design: a call opened after that much prose (or after that much text following the calls),
    and a template that opens a reasoning block in the prompt (a later bare ``</think>`` makes everything
    before it reasoning; the project's template opens none). Only for answers scored by their calls alone
    (a single-turn benchmark, the checkpoint's validity pass): a text reply of a multi-turn episode may
    carry the facts a task asks for, and must not be cut.

    Args:
        text: the answer so far, special tokens included or not.
        prose_tokens: see :data:`PROSE_STOP_TOKENS`.
        count_tokens: tokens of a piece of text (the model's tokenizer); None estimates 4 characters a token.
    """
    count = count_tokens or (lambda piece: math.ceil(len(piece) / 4))
    body = _SPECIAL_TOKEN_RE.sub("", text)
    body = _ORPHAN_REASONING_CLOSE_RE.sub("", _REASONING_RE.sub("", body))
    if _TOOL_CALL_OPEN in body:
        closed = body.rfind(_TOOL_CALL_CLOSE)
        if closed < body.rfind(_TOOL_CALL_OPEN) or parse_tool_calls(body).format_errors:
            return False
        rest = body[closed + len(_TOOL_CALL_CLOSE) :].strip()
        return bool(rest) and count(rest) >= prose_tokens
    start = body.strip()
    if not start or start.startswith(("{", "[", "`", "<")):
        return False
    return count(start) >= prose_tokens


def _tool_name_and_schema(tool: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Name and parameter schema of an OpenAI function tool or of a design.md ``ToolSpec``."""
    function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    schema = function.get("parameters") or function.get("input_schema") or {"type": "object"}
    return function.get("name"), schema


def validate_call(call: dict[str, Any], tools: list[dict[str, Any]]) -> list[str]:
    """Check a parsed call against the available tools.

    Args:
        call: ``{"name": str, "arguments": dict}`` as produced by :func:`parse_tool_calls`.
        tools: OpenAI function tools ``{"type": "function", "function": {"name", "description",
            "parameters"}}`` or ``ToolSpec`` dicts (``name`` + ``input_schema``, see docs/design.md).

    Returns:
        Error messages; an empty list means the name exists and the arguments validate against the tool's
        JSON Schema (the draft named by ``$schema``, else Draft 2020-12, via :mod:`jsonschema`).
        An invalid tool schema is reported as an error rather than raised.
    """
    import jsonschema

    name = call.get("name")
    arguments = call.get("arguments")
    by_name = dict(_tool_name_and_schema(tool) for tool in tools)
    if name not in by_name:
        return [f"unknown tool {name!r}"]
    if not isinstance(arguments, dict):
        return [f"arguments of {name!r} are not an object"]
    schema = by_name[name]
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return [f"tool {name!r} has an invalid parameter schema: {exc.message}"]
    validator = validator_class(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    return [f"{name}: {'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]
