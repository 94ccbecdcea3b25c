"""Benchmark of goal expansion and the conversational mode on the two small fixture environments.

Samples ``--chains`` topology chains, executes them, and calibrates the same raw trajectories three ways:
without goal expansion (the calibration as it was), with the defaults (goal expansion on), and with every
eligible turn asked conversationally (``conversational_share=1``, programmatic solver and simulated user).
Prints wall seconds, trajectories kept, expansions and clarifications kept/reverted, and whether every RL
row built from the conversational run replays exactly. Usage::

    .venv/bin/python -m benchmarks.conversation --chains 100 --k 4
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import orjson

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.graph.build import build_tool_graph, tools_from_environments
from envfactory_assets.graph.embeddings import MiniLMEmbedder
from envfactory_assets.sources.scan import inspect_file
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.stage import dataset_rows, raw_trajectory_rows, refined_trajectory_rows
from envfactory_assets.synth.trajectories.execution import SynthConfig
from envfactory_assets.synth.trajectories.simulated_user import ProgrammaticUser, providable_flags

FIXTURES = Path(__file__).resolve().parents[1] / "envfactory_assets_tests" / "fixtures" / "openapi"


def _operators(rows: list[dict]) -> dict[str, str]:
    kept = Counter(o["operator"] for r in rows for o in r["operators"] if not o.get("reverted"))
    reverted = Counter(o["operator"] for r in rows for t in r["turns"] for o in t["operators"] if o.get("reverted"))
    return {op: f"{kept[op]} kept / {reverted[op]} reverted" for op in ("goal_expansion", "user_clarification")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--k", type=int, default=4)
    args = parser.parse_args()
    envs = {}
    for name in ("bookshop.json", "calendar & tasks.json"):
        resource = inspect_file(FIXTURES / name, FIXTURES)
        env = build_environment(resource.as_row(), orjson.loads((FIXTURES / name).read_bytes()))
        envs[env["env_id"]] = env
    graph = build_tool_graph(tools_from_environments(envs.values()), MiniLMEmbedder())
    chains = [
        {"id": f"c{i}", "tools": c.to_dict(), "domains": ["bench"]}
        for i, c in enumerate(sample_chains(graph, args.chains, "bench-conv", SamplerConfig(min_tools=3)))
    ]
    raw = [r for r in raw_trajectory_rows(chains, graph, envs, SynthConfig()) if r["status"] == "passed"]
    flags = providable_flags(graph)
    runs = {
        "no expansion": (ProgrammaticSolver(), CalibrationConfig(k=args.k, goal_expansion=False), None),
        "default": (ProgrammaticSolver(), CalibrationConfig(k=args.k), None),
        "conversational": (
            ProgrammaticSolver(ask=True),
            CalibrationConfig(k=args.k, conversational_share=1.0),
            ProgrammaticUser(),
        ),
    }
    print(f"{len(raw)} raw trajectories, k={args.k}")
    for label, (solver, cfg, user) in runs.items():
        start = time.perf_counter()
        rows = refined_trajectory_rows(raw, envs, solver, cfg, user=user, providable=flags if user else None)
        seconds = time.perf_counter() - start
        passed = [r for r in rows if r["status"] == "passed"]
        clarified = sum(1 for r in passed for t in r["turns"] if t.get("clarification"))
        line = (
            f"{label:15s} {seconds:6.1f} s  passed {len(passed)}/{len(rows)}  turns {sum(r['n_turns'] for r in passed)}"
            f"  clarified turns {clarified}  {_operators(rows)}"
        )
        if label == "conversational":
            _, rl, rejected = dataset_rows(passed, envs, sft_share=0.0)
            line += f"  RL rows {len(rl)}, rejected on replay {len(rejected)}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
