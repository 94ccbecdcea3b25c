"""Function-name masking of SFT rows: every tool name replaced by a neutral token, so that only the tool's
description and parameter schema say what it does.

Method: Hammer (Lin et al., "Hammer: Robust Function-Calling for On-Device Language Models via Function
Masking", arXiv 2410.04587) trains on rows whose function names are replaced by meaningless strings, so that a
small model learns to pick a tool by its description rather than by a name that happens to match the request;
it reports the gain on benchmarks whose tool names it never saw (BFCL among them). Here a masked row keeps the
same conversation, descriptions and schemas; only the names change, to ``fn_1``, ``fn_2``, ... (valid OpenAI
function names, ``^[a-zA-Z0-9_-]{1,64}$``).

A name is replaced wherever it occurs as a whole identifier (not inside a longer one such as ``get_book_id``,
which is another word): in the tool list, every assistant tool call, every tool message's ``name``, the text of
every message (system, user, assistant, tool results) and the tool descriptions and schemas, so the row stays
consistent with itself and the original name appears nowhere in it.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable
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
    reruns give the same tokens. A token that already occurs in the row as an identifier is skipped.

    Raises:
        ValueError: as :func:`tool_names`.
    """
    names = tool_names(row)
    order = sorted(names)
    random.Random(_unit_hash("name_order", key)).shuffle(order)
    present = set(re.findall(rf"{_START}{MASK_PREFIX}\d+{_END}", json.dumps(row)))
    mapping: dict[str, str] = {}
    n = 0
    for name in order:
        n += 1
        while f"{MASK_PREFIX}{n}" in present:
            n += 1
        mapping[name] = f"{MASK_PREFIX}{n}"
    return mapping


def _replace(value: Any, pattern: re.Pattern[str], mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        return pattern.sub(lambda m: mapping[m.group(0)], value)
    if isinstance(value, list):
        return [_replace(v, pattern, mapping) for v in value]
    if isinstance(value, dict):
        return {_replace(k, pattern, mapping): _replace(v, pattern, mapping) for k, v in value.items()}
    return value


def rename_tools(row: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """A copy of ``row`` with every name of ``mapping`` replaced by its value wherever it occurs as a whole
    identifier in ``messages`` and ``tools`` (strings and object keys, the JSON-string arguments of calls and the
    tool results included); the other fields are kept as they are.

    Args:
        row: ``{"messages": [...], "tools": [...], ...}`` in OpenAI chat format.
        mapping: ``{name: replacement}``; empty returns a copy of ``row``.
    """
    if not mapping:
        return {**row}
    pattern = _pattern(mapping)
    return {
        **row,
        "messages": _replace(row.get("messages") or [], pattern, mapping),
        "tools": _replace(row.get("tools") or [], pattern, mapping),
    }


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


def names_in(text: str, names: Iterable[str]) -> list[str]:
    """The ``names`` that occur in ``text`` as whole identifiers (what :func:`mask_names` replaces), sorted."""
    names = [n for n in names if n]
    if not names:
        return []
    return sorted(set(_pattern(names).findall(text)))
