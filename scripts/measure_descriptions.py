"""How many tools and parameters of the default selection's environments have a description under a sentence
(:func:`envfactory_assets.envgen.descriptions.is_sentence`), before and after a change to the builder.

The environments are built offline as the ``environments`` stage builds them without a model backend
(:func:`envfactory_assets.envgen.stage.programmatic_environment`), from the default selection that
``scripts/measure_value_fallbacks.py`` makes (:func:`measure_value_fallbacks.chosen_resources`: the OpenAPI
corpus scanned with the default domains and size limit, the MCP tool lists saved under ``HOME/mcp_tool_lists``,
the default ``per_domain``).

Usage::

    PYTHONPATH=. python scripts/measure_descriptions.py CORPUS_API_DIR --home HOME --before /work/main
        [--cache resources.json] [--json OUT]

``--before TREE`` builds the same environments in a subprocess with ``PYTHONPATH=TREE``; both trees' tools are
judged by this checkout's :func:`is_sentence`. Prints, per tree, the tools and the input parameters (and the
output properties) whose description is under a sentence, those of MCP tools apart (an MCP server's own short
description is kept), and 10 tools and 10 input parameters whose description changed, drawn with
``random.Random(20261207)``, with their descriptions before and after.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path
from typing import Any

# run as a script, this folder is on sys.path: the sibling script shares its offline build
from measure_value_fallbacks import before_after_parser, chosen_resources, tree_records

SEED = 20261207


def tool_records(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each built environment's tools as ``{"env", "name", "kind", "table", "mcp", "description", "inputs",
    "outputs"}`` (``inputs``/``outputs``: ``{property: description}`` of the input schema, and of the output
    schema and its ``items``)."""
    from envfactory_assets.envgen.stage import programmatic_environment

    try:  # the builder before the change has no derived descriptions
        from envfactory_assets.envgen.descriptions import table_things, tool_sentence
    except ImportError:
        table_things = None
    out: list[dict[str, Any]] = []
    for resource in resources:
        path = Path(resource["corpus_root"]) / resource["path"]
        try:
            env = programmatic_environment(resource, path)
        except Exception as exc:  # a document the builder refuses has no tools, as in the stage
            print(f"{resource['resource_key']}: {type(exc).__name__}: {exc}"[:200], file=sys.stderr)
            continue
        things = table_things(env["tools"]) if table_things else {}
        for tool in env["tools"]:
            outs: dict[str, Any] = {}
            schema = tool.get("output_schema") or {}
            for holder in (schema, schema.get("items") if isinstance(schema.get("items"), dict) else None):
                for k, v in ((holder or {}).get("properties") or {}).items():
                    outs[k] = v.get("description") if isinstance(v, dict) else None
            out.append(
                {
                    "env": env["env_id"],
                    "name": tool["name"],
                    "kind": tool["kind"],
                    "table": tool["table"],
                    "operation_id": (tool.get("operation") or {}).get("operation_id"),
                    "mcp": (tool.get("operation") or {}).get("method") == "MCP",
                    "description": tool.get("description"),
                    "derived": bool(things) and tool.get("description") == tool_sentence(tool, things[tool["table"]]),
                    "inputs": {
                        k: v.get("description") for k, v in (tool["input_schema"].get("properties") or {}).items()
                    },
                    "outputs": outs,
                }
            )
    return out


def figures(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts of descriptions under a sentence among tools, input parameters and output properties."""
    from envfactory_assets.envgen.descriptions import is_sentence

    def short(text: Any, *names: Any) -> bool:
        return not is_sentence(text if isinstance(text, str) else None, names)

    def one_word_or_name(t: dict[str, Any]) -> bool:
        text = t["description"] or ""
        plain = re.sub(r"[^a-z0-9]", "", text.lower())
        names = {re.sub(r"[^a-z0-9]", "", (n or "").lower()) for n in (t["name"], t["operation_id"])}
        return len(text.split()) <= 1 or plain in names

    def part(rows: list[dict[str, Any]]) -> dict[str, int]:
        return {
            "tools": len(rows),
            "tools_under_sentence": sum(short(t["description"], t["name"], t["operation_id"]) for t in rows),
            "tools_one_word_or_name": sum(one_word_or_name(t) for t in rows),
            "inputs": sum(len(t["inputs"]) for t in rows),
            "inputs_under_sentence": sum(
                short(d, k, k.replace("_", " ")) for t in rows for k, d in t["inputs"].items()
            ),
            "outputs": sum(len(t["outputs"]) for t in rows),
            "outputs_under_sentence": sum(
                short(d, k, k.replace("_", " ")) for t in rows for k, d in t["outputs"].items()
            ),
        }

    return {
        "environments": len({t["env"] for t in tools}),
        "openapi": part([t for t in tools if not t["mcp"]]),
        "mcp": part([t for t in tools if t["mcp"]]),
    }


def changed(before: list[dict[str, Any]], after: list[dict[str, Any]], n: int = 10) -> dict[str, Any]:
    """``n`` tools whose description differs between the trees and was derived (:func:`tool_sentence`), and ``n``
    input parameters whose description differs, drawn with ``random.Random(SEED)``; how many tools changed, and
    of those how many took the spec's description instead of a summary that was no sentence."""
    old = {(t["env"], t["name"]): t for t in before}
    tools, params = [], []
    for t in after:
        b = old.get((t["env"], t["name"]))
        if b is None:
            continue
        if b["description"] != t["description"]:
            tools.append(
                {
                    "env": t["env"],
                    "tool": t["name"],
                    "derived": t["derived"],
                    "before": b["description"],
                    "after": t["description"],
                }
            )
        for k, d in t["inputs"].items():
            if b["inputs"].get(k) != d:
                params.append(
                    {"env": t["env"], "tool": t["name"], "parameter": k, "before": b["inputs"].get(k), "after": d}
                )
    rng = random.Random(SEED)
    derived = [t for t in tools if t["derived"]]
    return {
        "tools_changed": len(tools),
        "tools_derived": len(derived),
        "tools_from_spec_description": len(tools) - len(derived),
        "inputs_changed": len(params),
        "tools": rng.sample(derived, min(n, len(derived))),
        "inputs": rng.sample(params, min(n, len(params))),
    }


def main(argv: list[str] | None = None) -> int:
    args = before_after_parser(__doc__.splitlines()[0], "the builder").parse_args(argv)
    resources = chosen_resources(args.corpus, args.home, args.cache)
    if args.records:
        args.records.write_text(json.dumps(tool_records(resources), default=str))
        return 0
    out: dict[str, Any] = {"selected": len(resources)}
    after = tool_records(resources)
    if args.before:
        before = tree_records(Path(__file__), args.corpus, resources, args.cache, args.before)
        out["before"] = figures(before)
        out["after"] = figures(after)
        out["changed"] = changed(before, after)
    else:
        out["after"] = figures(after)
    text = json.dumps(out, indent=1, ensure_ascii=False, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
