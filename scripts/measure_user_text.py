"""Spec identifiers in user text on a store, stored and regenerated with this checkout's writers.

Usage: ``python scripts/measure_user_text.py STORE.duckdb [--chains 150] [--seed 0] [--show 10] [--dump FILE]``

- stored: :func:`envfactory_assets.quality.conversation_text.user_text_figures` over the store's passed refined
  trajectories with the parameters of their environments, as the ``user_text_without_spec_identifiers`` check
  reads them (absent when the store has no refined trajectories yet);
- regenerated: ``--chains`` tool chains of the store drawn with ``--seed`` are executed into raw trajectories
  and refined with the default settings (programmatic solver and simulated user) by this checkout, then
  judged the same way (``--chains 0``: the stored figures only); ``--show`` passed conversations are printed
  whole after the figures;
- ``--dump``: the regenerated refined rows as JSON, to read or compare.

Prints one JSON object, then the conversations.
"""

from __future__ import annotations

import argparse
import json
import random

import duckdb

from envfactory_assets.catalog.environments import passed_environments
from envfactory_assets.graph.stage import graph_from_store_rows
from envfactory_assets.quality.conversation_text import spec_identifiers, spoken_names, user_text_figures
from envfactory_assets.store.db import Store, read_rows
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver
from envfactory_assets.synth.stage import raw_trajectory_rows, refined_trajectory_rows
from envfactory_assets.synth.trajectories.execution import SynthConfig
from envfactory_assets.synth.trajectories.simulated_user import ProgrammaticUser, providable_flags


def _conversation(row: dict, parameters: dict[str, list[str]]) -> str:
    named = [p for e in row["env_ids"] for p in spoken_names(parameters.get(e, []))]
    lines = [f"## {row['id']} ({', '.join(row['env_ids'])})"]
    for i, turn in enumerate(row["turns"]):
        found = spec_identifiers(turn.get("query") or "", named)
        lines.append(f"[turn {i}] USER: {turn.get('query')}" + (f"   <-- {found}" if found else ""))
        for m in turn.get("clarification") or []:
            said = m.get("content") or ""
            found = spec_identifiers(said, named) if m.get("role") == "user" else []
            lines.append(f"    {m.get('role', '?').upper()}: {said}" + (f"   <-- {found}" if found else ""))
        calls = ", ".join(c["name"] for c in turn.get("calls") or [])
        lines.append(f"    (calls: {calls})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--chains", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=10)
    parser.add_argument("--dump")
    args = parser.parse_args(argv)
    envs = passed_environments(Store(args.store)).environments
    parameters = {e: [p for t in env["tools"] for p in t["input_schema"]["properties"]] for e, env in envs.items()}
    con = duckdb.connect(args.store, read_only=True)
    out: dict = {}
    stored = read_rows(con, "refined_trajectories", "status = 'passed'")
    if stored:
        out["stored"] = user_text_figures(stored, parameters, examples=30)
    graph = graph_from_store_rows(
        read_rows(con, "tool_graph_nodes"), read_rows(con, "tool_graph_parameters"), read_rows(con, "tool_graph_edges")
    )
    chains = [c for c in read_rows(con, "tool_chains", "status = 'passed'") if set(c["env_ids"]) <= set(envs)]
    con.close()
    if args.chains <= 0:  # the stored rows only
        print(json.dumps(out, indent=1, ensure_ascii=False))
        return 0
    sample = random.Random(args.seed).sample(chains, min(args.chains, len(chains)))
    raw = [r for r in raw_trajectory_rows(sample, graph, envs, SynthConfig()) if r["status"] == "passed"]
    rows = refined_trajectory_rows(
        raw,
        envs,
        ProgrammaticSolver(ask=True),
        CalibrationConfig(),
        user=ProgrammaticUser(),
        providable=providable_flags(graph),
    )
    passed = [r for r in rows if r["status"] == "passed"]
    out["regenerated"] = {"chains": len(sample), "raw_passed": len(raw), "refined_passed": len(passed)}
    out["regenerated"].update(user_text_figures(passed, parameters, examples=30))
    if args.dump:
        with open(args.dump, "w") as fh:
            json.dump(rows, fh, default=str)
    print(json.dumps(out, indent=1, ensure_ascii=False))
    for row in random.Random(args.seed + 1).sample(passed, min(args.show, len(passed))):
        print()
        print(_conversation(row, parameters))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
