"""Figures of generated values on a store, before and after regenerating them with this checkout's generator.

Usage: ``python scripts/measure_values.py STORE.duckdb [--labels FILE]``

- before: the stored values: the seeded values of the built environments' ``valid`` states and the generated
  tool-call arguments of the passed refined trajectories
  (:func:`envfactory_assets.quality.value_semantics.coverage_figures`);
- after: the same fields, each value drawn anew by :class:`envfactory_assets.envgen.values.ValueFactory` (seeded
  per environment or trajectory) with the field's schema, table and description, then judged the same way;
- with ``--labels``: the check against the hand-labelled pairs (agreement, coverage, random words caught).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import zlib

import duckdb

from envfactory_assets.envgen.environment_dict import as_environment
from envfactory_assets.envgen.values import ValueFactory
from envfactory_assets.quality.value_semantics import (
    check_value,
    coverage_figures,
    environment_values,
    generated_arguments,
)
from envfactory_assets.store.db import read_rows


def label_agreement(pairs: list[dict]) -> dict:
    """The check against hand labels: a pass reads ``fits``, a fail reads its defect, unknown abstains."""
    rows = []
    for p in pairs:
        j = check_value(p["field"], p["schema"], p["value"], p.get("description", ""))
        said = {"pass": "fits", "fail": j.defect, "unknown": "unknown"}[j.verdict]
        rows.append((p, said))
    covered = [(p, s) for p, s in rows if s != "unknown"]
    exact = sum(p["label"] == s for p, s in covered)
    good_bad = sum((p["label"] == "fits") == (s == "fits") for p, s in covered)
    kind_pairs = [p for p in pairs if p["kind"] != "none"]
    return {
        "pairs": len(pairs),
        "covered_by_check": len(covered),
        "unknown_to_check": len(rows) - len(covered),
        "agreement_exact_of_covered": round(exact / len(covered), 4) if covered else None,
        "agreement_fits_vs_not_of_covered": round(good_bad / len(covered), 4) if covered else None,
        "hand_random_words": sum(p["label"] == "random word" for p in pairs),
        "check_random_words": sum(s == "random word" for _p, s in rows),
        "random_words_caught": sum(p["label"] == "random word" and s == "random word" for p, s in rows),
        "hand_bad_missed_as_unknown": [
            (p["field"], p["value"], p["label"]) for p, s in rows if s == "unknown" and p["label"] != "fits"
        ],
        "disagreements": [(p["field"], p["value"], p["label"], s) for p, s in covered if p["label"] != s],
        "hand_kind_fields": len(kind_pairs),
        "hand_random_word_share_of_kind_fields": round(
            sum(p["label"] == "random word" for p in kind_pairs) / len(kind_pairs), 4
        )
        if kind_pairs
        else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--labels")
    args = parser.parse_args(argv)
    con = duckdb.connect(args.store, read_only=True)
    envs = {r["env_id"]: as_environment(r) for r in read_rows(con, "environments", "status = 'built'")}
    refined = read_rows(con, "refined_trajectories", "status = 'passed'")
    tables = {(e, t["name"]): t.get("table", "") for e, env in envs.items() for t in env["tools"]}
    out: dict = {}

    seeded = [(e, item) for e, env in envs.items() for item in environment_values(env)]
    out["seeded_before"] = coverage_figures(item for _e, item in seeded)
    regenerated = []
    factories: dict[str, ValueFactory] = {}
    for e, (field, schema, _value, desc) in seeded:
        values = factories.setdefault(e, ValueFactory(zlib.crc32(e.encode())))
        regenerated.append((field, schema, values.value(field, schema, "", desc), desc))
    out["seeded_after"] = coverage_figures(regenerated)

    arguments = generated_arguments(refined, envs)
    items = [(a["field"], a["schema"], a["value"], a["description"]) for a in arguments]
    out["arguments_before"] = coverage_figures(items)
    again = []
    factories = {}
    for a in arguments:
        values = factories.setdefault(a["trajectory_id"], ValueFactory(zlib.crc32(a["trajectory_id"].encode())))
        if isinstance(a["value"], bool) or "enum" in a["schema"]:
            value = a["value"]  # decided by the spec, not by what the field is
        else:
            table = tables.get((a["env_id"], a["tool"]), "")
            value = values.value(a["field"], a["schema"], table, a["description"], future=True)
        again.append((a["field"], a["schema"], value, a["description"]))
    out["arguments_after"] = coverage_figures(again)
    if args.labels:
        with open(args.labels) as fh:
            out["hand_labels"] = label_agreement(json.load(fh)["pairs"])
    print(json.dumps(out, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
