"""Draw (field, value) pairs of generated tool-call arguments from a store, for labelling by hand.

Usage: ``python scripts/draw_value_pairs.py STORE.duckdb OUT.json [--seed 36] [--n 100]``

Population: every scalar argument value the user gave (provenance ``{"source": "user"}``) in the tool calls of
the current passed ``refined_trajectories`` rows
(:func:`envfactory_assets.quality.value_semantics.generated_arguments`), leaving out booleans and values of a
field with an ``enum`` (the spec decides those). The population is ordered by (trajectory id, turn, call,
field) and ``random.Random(seed).sample`` draws ``n`` occurrences, so a field appears as often as a reader
of the data meets it. The output holds how the pairs were drawn and one row per pair with an empty label
for a person to fill in.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

import duckdb

from envfactory_assets.envgen.environment_dict import as_environment
from envfactory_assets.quality.value_semantics import generated_arguments
from envfactory_assets.store.db import read_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--n", type=int, default=100)
    args = parser.parse_args(argv)
    con = duckdb.connect(args.store, read_only=True)
    envs = {r["env_id"]: as_environment(r) for r in read_rows(con, "environments", "status = 'built'")}
    refined = read_rows(con, "refined_trajectories", "status = 'passed'")
    population = [
        a
        for a in generated_arguments(refined, envs)
        if not isinstance(a["value"], bool) and a["value"] is not None and "enum" not in a["schema"]
    ]
    population.sort(key=lambda a: (a["trajectory_id"], a["turn"], a["call"], a["field"]))
    drawn = random.Random(args.seed).sample(population, args.n)
    doc = {
        "drawn": {
            "store": "default run of main (envfactory run, default settings), copied after it finished",
            "population": "scalar tool-call argument values with provenance source 'user' in current passed "
            "refined_trajectories; booleans, nulls and enum fields left out; ordered by (trajectory id, turn, "
            "call, field)",
            "population_size": len(population),
            "trajectories": len(refined),
            "method": f"random.Random({args.seed}).sample(population, {args.n})",
            "seed": args.seed,
            "labels": "fits | random word | placeholder | wrong kind, with the kind the field implies "
            "('none' when the name and description imply no kind narrower than free text)",
        },
        "pairs": [
            {
                "env_id": a["env_id"],
                "tool": a["tool"],
                "field": a["field"],
                "schema": {k: v for k, v in a["schema"].items() if k != "description"},
                "description": a["description"],
                "value": a["value"],
                "label": "",
                "kind": "",
            }
            for a in drawn
        ],
    }
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    print(f"drew {args.n} of {len(population)} values from {len(refined)} trajectories", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
