"""Programmatic query writer and assistant summaries (the offline default of the paper's query writer).

The writer sees the executed calls (and so the hidden state), as in the paper's QueryGen: the raw
query states every argument literally; refinement (:mod:`envfactory_assets.synth.refine`) then turns
literals into implicit references.
"""

from __future__ import annotations

from typing import Any

from envfactory_assets.sources.names import singular


def words(name: str) -> str:
    """``"send_bulk"`` -> ``"send bulk"``."""
    return name.replace("_", " ").strip()


def literal(value: Any) -> str:
    """How a value is written in a user query: strings quoted, others as JSON-like text."""
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def describe_call(tool: dict[str, Any], key: str, args: dict[str, Any],
                  refs: dict[str, str] | None = None) -> str:
    """One imperative sentence asking for ``tool`` with ``args``.

    ``refs`` maps argument names to reference phrases ("the company you just created") that replace
    the literal; an argument mapped to ``""`` is omitted from the sentence.
    """
    refs = refs or {}
    table = words(tool["table"])
    thing = words(singular(tool["table"]))

    def val(name: str) -> str | None:
        if name in refs:
            return refs[name] or None
        return literal(args[name])

    kind = tool["kind"]
    if kind in ("get", "update", "delete"):
        target = val(key)
        subject = target if target and target.startswith(("the ", "that ", "this ", "it", "my ")) else (
            f"{thing} {target}" if target else f"that {thing}")
    fields = [(n, val(n)) for n in args if n not in (key, "limit")]
    fields = [(n, v) for n, v in fields if v]
    setting = ", ".join(f"{words(n)} {v}" for n, v in fields)
    if kind == "list":
        text = f"show me the {table}"
        if fields:
            text += " where " + " and ".join(f"{words(n)} is {v}" for n, v in fields)
        if "limit" in args and "limit" not in refs:
            text += f" (at most {args['limit']})"
        return text
    if kind == "get":
        return f"look up {subject} and tell me its details"
    if kind == "create":
        return f"create a new {thing}" + (f" with {setting}" if setting else "")
    if kind == "update":
        changes = ", ".join(f"{words(n)} to {v}" for n, v in fields)
        return f"change {subject}: set {changes}" if changes else f"update {subject}"
    return f"delete {subject}"


def join_sentences(parts: list[str]) -> str:
    """Join per-call requests into one natural user message."""
    if not parts:
        return ""
    text = parts[0][0].upper() + parts[0][1:]
    for i, part in enumerate(parts[1:], 1):
        text += (", then " if i < len(parts) - 1 else ", and then ") + part
    return text + "."


def summarize_call(tool: dict[str, Any], key: str, args: dict[str, Any], output: Any) -> str:
    """A short assistant sentence reporting one tool result."""
    thing = words(singular(tool["table"]))
    kind = tool["kind"]
    if kind == "list":
        return f"I found {output.get('total', 0)} {words(tool['table'])}"
    if kind == "get":
        label = next((output.get(k) for k in ("name", "title", "subject", "email") if isinstance(output.get(k), str)), None)
        return f"{thing} {output.get(key)}" + (f" is {label!r}" if label else " is retrieved")
    if kind == "create":
        return f"I created {thing} {output.get(key)}"
    if kind == "update":
        return f"I updated {thing} {output.get(key)}"
    return f"I deleted {thing} {args.get(key)}"
