"""Function-name masking of SFT rows: every tool name replaced by a neutral token, so that only the tool's
description and parameter schema say what it does.

Method: Hammer (Lin et al., "Hammer: Robust Function-Calling for On-Device Language Models via Function
Masking", arXiv 2410.04587) trains on rows whose function names are replaced by meaningless strings, so that a
small model learns to pick a tool by its description rather than by a name that happens to match the request;
it reports the gain on benchmarks whose tool names it never saw (BFCL among them). Here a masked row keeps the
same conversation, descriptions and schemas; only the names change, to ``fn_1``, ``fn_2``, ... (valid OpenAI
function names, ``^[a-zA-Z0-9_-]{1,64}$``).

Where a name is replaced:

- in every place that names a tool: the tool list, every assistant tool call, every tool message's ``name``;
- and, for a name that reads as code (:func:`code_like`: ``get_book``, ``listBooks``, ``v2search``), wherever it
  occurs as a whole identifier in the row's text: message contents (system, user, assistant, tool results),
  call arguments, tool descriptions and schemas. A name inside a longer identifier (``get_book`` in
  ``get_book_id``) is another word and stays.

A name of letters only (a tool called ``dock`` or ``complete``; the default run has both) is not replaced in
text: there it is the word ("Identifier of the dock.", "complete the project"), which the description needs,
and it no more points at one tool than the description does. Without a dictionary an all-lower-case run-on name
(``userorderslist``) counts as such a word too; in the default run's SFT rows no such name occurs in any text.
So no masked row holds a real name in a tool's place, nor a code-like name anywhere (:func:`leaked_names`).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable, Iterator
from typing import Any

MASK_PREFIX = "fn_"
"""Neutral tokens are ``fn_<n>``, n from 1."""

# a tool name is an identifier: a match must not continue an identifier on either side; a JSON escape such as
# ``\n`` right before it (a tool result or arguments held as a JSON string) ends the identifier before it
_IDENTIFIER_CHAR = r"A-Za-z0-9_"
_START = rf"(?:(?<![{_IDENTIFIER_CHAR}])|(?<=\\[nrtbf]))"
_END = rf"(?![{_IDENTIFIER_CHAR}])"


def _unit_hash(kind: str, key: str) -> int:
    return int(hashlib.sha256(f"{kind}\x00{key}".encode()).hexdigest()[:16], 16)


def check_mask_share(share: Any) -> float:
    """``share`` as a float when it is a number in [0, 1].

    Raises:
        ValueError: ``share`` is a bool, not a number, NaN or outside [0, 1].
    """
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
        raise ValueError(f"name masking: share={share!r}, expected a number in [0, 1]")
    return float(share)


def is_masked(key: str, share: float) -> bool:
    """Whether the row keyed ``key`` (its source trajectory's id) is masked: a stable hash of the key, salted so
    the choice is independent of the SFT/RL split (:func:`~envfactory_assets.synth.datasets.rows.split_of`
    hashes the same id), falls below ``share``. ``share`` 0 masks nothing, 1 every row.

    Raises:
        ValueError: ``key`` is not a string, or ``share`` as in :func:`check_mask_share`.
    """
    share = check_mask_share(share)
    if not isinstance(key, str):
        raise ValueError(f"name masking: row key must be a string, got {type(key).__name__}")
    return _unit_hash("name_mask", key) / 2**64 < share


def tool_names(row: dict[str, Any]) -> list[str]:
    """Every tool name of an SFT row (``{"messages", "tools"}``, OpenAI format), without repeats: the tool list's
    in its order, then names that only calls or tool messages carry.

    Raises:
        ValueError: a tool, tool call or tool message without a non-empty string name.
    """
    names: list[str] = []

    def add(name: Any, where: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name masking: {where} has no tool name (got {name!r})")
        if name not in names:
            names.append(name)

    for i, tool in enumerate(row.get("tools") or []):
        add((tool.get("function") or tool).get("name"), f"tool {i}")
    for i, message in enumerate(row.get("messages") or []):
        for call in message.get("tool_calls") or []:
            add((call.get("function") or call).get("name"), f"a tool call of message {i}")
        if message.get("role") == "tool" and "name" in message:
            add(message["name"], f"tool message {i}")
    return names


def _pattern(names: Iterable[str]) -> re.Pattern[str]:
    # longest first, so a name that is a prefix of another (get_book, get_book_cover) never cuts the longer one
    ordered = sorted(set(names), key=lambda n: (-len(n), n))
    body = "|".join(re.escape(n) for n in ordered)
    return re.compile(rf"{_START}(?:{body}){_END}")


def name_mapping(row: dict[str, Any], key: str) -> dict[str, str]:
    """``{original tool name: neutral token}`` for ``row``: the tokens ``fn_1``, ``fn_2``, ... go to the names in
    an order shuffled by a stable hash of ``key``, so a token says nothing about a tool's place in the list, and
    reruns give the same tokens. A token that already occurs in the row's messages or tools as an identifier is
    skipped.

    Raises:
        ValueError: as :func:`tool_names`.
    """
    names = tool_names(row)
    order = sorted(names)
    random.Random(_unit_hash("name_order", key)).shuffle(order)
    content = json.dumps([row.get("messages") or [], row.get("tools") or []])
    present = set(re.findall(rf"{_START}{MASK_PREFIX}\d+{_END}", content))
    mapping: dict[str, str] = {}
    n = 0
    for name in order:
        n += 1
        while f"{MASK_PREFIX}{n}" in present:
            n += 1
        mapping[name] = f"{MASK_PREFIX}{n}"
    return mapping


def code_like(name: str) -> bool:
    """Whether a tool name reads as code rather than as a word: it holds ``_``, ``-``, a digit or a capital
    after a lower-case letter (``get_book``, ``listBooks``); ``dock`` or ``complete`` do not."""
    return bool(re.search(r"[_\-0-9]|[a-z][A-Z]", name))


# Keys of the chat format and JSON Schema keywords that read as code: a tool that happens to share one's name
# must not rename the message or schema structure itself.
_FORMAT_KEYS = frozenset(
    {
        "tool_calls",
        "tool_call_id",
        "additionalProperties",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "multipleOf",
        "anyOf",
        "oneOf",
        "allOf",
        "patternProperties",
    }
)


def _replace(value: Any, pattern: re.Pattern[str], mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        return pattern.sub(lambda m: mapping[m.group(0)], value)
    if isinstance(value, list):
        return [_replace(v, pattern, mapping) for v in value]
    if isinstance(value, dict):
        return {
            (k if k in _FORMAT_KEYS else _replace(k, pattern, mapping)): _replace(v, pattern, mapping)
            for k, v in value.items()
        }
    return value


def _name_slots(row: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The objects whose ``name`` names a tool: each tool's function, each call's function, each tool message."""
    for tool in row.get("tools") or []:
        yield tool.get("function") or tool
    for message in row.get("messages") or []:
        for call in message.get("tool_calls") or []:
            yield call.get("function") or call
        if message.get("role") == "tool" and "name" in message:
            yield message


def rename_tools(row: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """A copy of ``row`` with the names of ``mapping`` replaced by their values: in every place that names a tool,
    and, for a :func:`code_like` name, wherever it occurs as a whole identifier in ``messages`` and ``tools``
    (strings and object keys, the JSON-string arguments of calls and the tool results included); the other
    fields are kept as they are.

    Args:
        row: ``{"messages": [...], "tools": [...], ...}`` in OpenAI chat format.
        mapping: ``{name: replacement}``; empty returns a copy of ``row``.
    """
    in_text = {k: v for k, v in mapping.items() if code_like(k)}
    pattern = _pattern(in_text) if in_text else None

    def copy(value: Any) -> Any:
        return _replace(value, pattern, in_text) if pattern is not None else json.loads(json.dumps(value))

    out = {**row, "messages": copy(row.get("messages") or []), "tools": copy(row.get("tools") or [])}
    # the slots are in the same places in both: text replacement changes strings and keys, never the structure
    for before, after in zip(_name_slots(row), _name_slots(out), strict=True):
        after["name"] = mapping.get(before.get("name"), before.get("name"))
    return out


def mask_names(row: dict[str, Any], key: str) -> dict[str, Any]:
    """A copy of the SFT ``row`` with every tool name replaced by its :func:`name_mapping` token
    (:func:`rename_tools`); a row without tool names is returned as it is (copied).

    Args:
        row: ``{"messages": [...], "tools": [...], ...}`` in OpenAI chat format.
        key: the stable key the tokens are shuffled by (the row's source trajectory id).

    Raises:
        ValueError: as :func:`tool_names`.
    """
    return rename_tools(row, name_mapping(row, key))


def leaked_names(row: dict[str, Any], names: Iterable[str]) -> list[str]:
    """Which of ``names`` (the real tool names of a row before masking) a masked ``row`` still shows: any of them
    in a place that names a tool, and a :func:`code_like` one anywhere in its messages and tools as a whole
    identifier (sorted; empty when masking hid them all)."""
    names = {n for n in names if isinstance(n, str) and n}
    found = {slot.get("name") for slot in _name_slots(row)} & names
    in_text = [n for n in names if code_like(n)]
    if in_text:
        text = json.dumps([row.get("messages") or [], row.get("tools") or []], ensure_ascii=False)
        found |= set(_pattern(in_text).findall(text))
    return sorted(found)
