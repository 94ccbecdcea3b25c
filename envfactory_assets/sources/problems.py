"""What is wrong with a scanned file, said without quoting the file.

Rejection details are stored (``rejected_resources``), shown in the UI and in reports. The parsers' and
the JSON Schema validator's own messages quote the input: a YAML error prints the line it stopped at, a
schema error prints the offending value (for a text file that is its first few hundred bytes). These
helpers describe the problem by position and rule instead, so a detail never carries file content.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

# A quoted fragment of a parser message: either a grammar token ('<stream end>', ',', '\t', 'null'),
# kept, or text taken from the input (an alias, a tag, a key), replaced.
_QUOTED_RE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_GRAMMAR_WORDS = {"null", "true", "false"}
# A path element or property name shown as is; anything else is shown as a placeholder.
_IDENTIFIER_RE = re.compile(r"[A-Za-z0-9_.$@-]{1,64}")
_JSON_TYPES = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
    (type(None), "null"),
)


def _keep_grammar(match: re.Match[str]) -> str:
    inner = match.group(0)[1:-1]
    if (
        (inner.startswith("<") and inner.endswith(">") and len(inner) <= 24)
        or len(inner) <= 2
        or inner in _GRAMMAR_WORDS
    ):
        return match.group(0)
    return "'…'"


def redact_quoted(message: str) -> str:
    """``message`` with every quoted fragment that could be input text replaced by ``'…'``.

    Grammar tokens stay: ``'<stream end>'``-style names, one- or two-character fragments (``','``,
    ``'\\t'``) and the JSON words ``null``/``true``/``false``.
    """
    return _QUOTED_RE.sub(_keep_grammar, message)


def load_error_detail(exc: BaseException) -> str:
    """One line saying why a document did not parse, by position, without quoting the document.

    Args:
        exc: what :func:`~envfactory_assets.sources.scan.load_document` raised (a JSON decode error, a
            PyYAML error, :class:`~envfactory_assets.sources.safe_yaml.UnsafeYamlError`, RecursionError...).

    Returns:
        e.g. ``"not valid JSON at line 3, column 7: unexpected end of data"`` or ``"not valid YAML at line
        2, column 1: expected ',' or ']', but got '<stream end>'"``; never raises.
    """
    from envfactory_assets.sources.safe_yaml import UnsafeYamlError

    if isinstance(exc, json.JSONDecodeError):  # orjson's error is a subclass
        return f"not valid JSON at line {exc.lineno}, column {exc.colno}: {redact_quoted(str(exc.msg))[:200]}"
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = redact_quoted(exc.problem or exc.context or type(exc).__name__)
        return f"not valid YAML{where}: {problem[:200]}"
    if isinstance(exc, yaml.reader.ReaderError):
        return f"not valid YAML: unreadable character at byte {exc.position} ({str(exc.reason)[:100]})"
    if isinstance(exc, UnsafeYamlError):
        return f"refused YAML: {redact_quoted(str(exc))[:200]}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not valid text: undecodable byte at offset {exc.start} ({exc.reason})"
    if isinstance(exc, RecursionError):
        return "nested too deeply to parse"
    return f"could not be parsed ({type(exc).__name__})"


def _json_type(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def _names(values: Any) -> str:
    shown = [repr(v) if isinstance(v, str) and _IDENTIFIER_RE.fullmatch(v) else "'…'" for v in values]
    return ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")


def schema_error_where(error: Any) -> str:
    """The JSON path of a :class:`jsonschema.ValidationError` (``tools/1/name``; ``(top)`` for the root);
    elements that are not short identifiers or indexes show as ``…``."""
    parts = [str(p) if isinstance(p, int) or _IDENTIFIER_RE.fullmatch(str(p)) else "…" for p in error.absolute_path]
    return "/".join(parts) or "(top)"


def schema_error_detail(error: Any) -> str:
    """What rule a :class:`jsonschema.ValidationError` broke, from the schema's side only.

    The validator's own ``message`` starts with the offending value; this names the expected type, the
    missing or unexpected property names (identifiers only), the pattern, the bounds. Never raises.

    Returns:
        e.g. ``"should be of type 'object' (found string)"`` or ``"is missing the required property
        'input_schema'"``.
    """
    rule, expected, instance = error.validator, error.validator_value, error.instance
    if rule == "type":
        return f"should be of type {expected!r} (found {_json_type(instance)})"
    if rule == "required" and isinstance(instance, dict):
        missing = [p for p in expected if p not in instance]
        return f"is missing the required propert{'y' if len(missing) == 1 else 'ies'} {_names(missing)}"
    if rule == "additionalProperties" and isinstance(instance, dict):
        allowed = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extra = [k for k in instance if k not in allowed]
        return f"has properties the schema does not allow: {_names(extra)}"
    if rule == "const":
        return f"should be {expected!r}"
    if rule == "enum":
        return f"should be one of {expected!r}"
    if rule == "pattern":
        return f"does not match the pattern {expected!r}"
    bounds = {
        "minLength": "is shorter than {} characters",
        "maxLength": "is longer than {} characters",
        "minItems": "has fewer than {} items",
        "maxItems": "has more than {} items",
        "minProperties": "has fewer than {} properties",
        "maxProperties": "has more than {} properties",
        "minimum": "is less than {}",
        "maximum": "is more than {}",
    }
    if rule in bounds:
        return bounds[rule].format(expected)
    return f"breaks the schema rule {rule!r}"
