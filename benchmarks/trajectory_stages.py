"""Benchmark of the trajectory stages on the two small fixture environments (no store, no Dagster).

Samples ``--chains`` topology chains, executes them (raw trajectories), calibrates them (k solve attempts
per turn, raw and refined query) and builds the datasets, each stage in one long-lived sandbox worker;
prints wall seconds and per-item rates. Usage::

    .venv/bin/python -m benchmarks.trajectory_stages --chains 200 --k 4
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import orjson

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.graph.build import build_tool_graph, tools_from_environments
from envfactory_assets.graph.embeddings import MiniLMEmbedder
from envfactory_assets.sources.scan import inspect_file
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.stage import dataset_rows, raw_trajectory_rows, refined_trajectory_rows
from envfactory_assets.synth.trajectories.execution import SynthConfig
from envfactory_assets.synth.trajectories.simulated_user import ProgrammaticUser, providable_flags

FIXTURES = Path(__file__).resolve().parents[1] / "envfactory_assets_tests" / "fixtures" / "openapi"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=200)
    parser.add_argument("--k", type=int, default=4)
    args = parser.parse_args()
    envs = {}
    for name in ("bookshop.json", "calendar & tasks.json"):
        resource = inspect_file(FIXTURES / name, FIXTURES)
        env = build_environment(resource.as_row(), orjson.loads((FIXTURES / name).read_bytes()))
        envs[env["env_id"]] = env
    graph = build_tool_graph(tools_from_environments(envs.values()), MiniLMEmbedder())
    t0 = time.perf_counter()
    chains = [
        {"id": f"chain{i}", "tools": c.to_dict(), "domains": ["ecommerce_retail"]}
        for i, c in enumerate(sample_chains(graph, args.chains, "bench", SamplerConfig(min_tools=3)))
    ]
    t1 = time.perf_counter()
    raw = [r for r in raw_trajectory_rows(chains, graph, envs, SynthConfig()) if r["status"] == "passed"]
    t2 = time.perf_counter()
    config = CalibrationConfig(k=args.k)
    # as the refined_trajectories asset: the offline simulated user answers the conversational turns
    conversational = config.conversational_share > 0
    refined = refined_trajectory_rows(
        raw,
        envs,
        config=config,
        user=ProgrammaticUser() if conversational else None,
        providable=providable_flags(graph) if conversational else None,
    )
    t3 = time.perf_counter()
    ok = [r for r in refined if r["status"] == "passed"]
    sft, rl, rejected = dataset_rows(ok, envs, 1622 / 2575)
    t4 = time.perf_counter()
    turns = sum(r["n_turns"] for r in refined)
    print(f"chains {len(chains)}: sample {t1 - t0:.2f} s")
    print(f"raw trajectories {len(raw)}: {t2 - t1:.2f} s ({(t2 - t1) / max(len(raw), 1) * 1000:.1f} ms each)")
    print(
        f"calibration k={args.k}: {len(refined)} trajectories, {turns} turns, {t3 - t2:.2f} s "
        f"({(t3 - t2) / max(turns, 1) * 1000:.1f} ms per turn)"
    )
    print(f"datasets: {len(sft)} SFT, {len(rl)} RL, {len(rejected)} rejected: {t4 - t3:.2f} s")


if __name__ == "__main__":
    main()
