"""Benchmark of the ``refined_trajectories`` stage on a store's own raw trajectories.

Calibrates the same sample of passed raw trajectories three ways, in one run so the ratios hold on a
shared machine: the reference path (every attempt re-reads the tool list, one process), the tool list read
once (one process), and the tool list read once in ``--workers`` processes (0: one per core). Asserts that
all three give the same rows (ids and contents) and prints wall seconds, trajectories per second and the
ratio to the reference. Usage (a store that has ``raw_trajectories``, e.g. after ``envfactory run``)::

    .venv/bin/python -m benchmarks.refinement --store ~/.envfactory/envfactory.duckdb --n 300

Prints a Markdown table; ``benchmarks.run`` puts it into ``docs/BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path
from typing import Any

from envfactory_assets import catalog
from envfactory_assets.graph.stage import graph_from_store_rows
from envfactory_assets.store.db import Store
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.refinement.calibrate_pool import resolve_workers
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver
from envfactory_assets.synth.stage import refined_trajectory_rows
from envfactory_assets.synth.trajectories.simulated_user import ProgrammaticUser, providable_flags


def sample(store: Store, n: int, seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, dict], Any]:
    """``(raw trajectories, environments, providable flags)``: ``n`` passed raw trajectories of ``store``
    drawn with ``seed``, whose environments are all still passed.

    Raises:
        ValueError: the store has no passed raw trajectory.
    """
    envs = catalog.passed_environments(store, None).environments
    raw = [r for r in store.read("raw_trajectories", "status = 'passed'") if all(e in envs for e in r["env_ids"])]
    if not raw:
        raise ValueError(f"{store.path}: no passed raw trajectories; run `envfactory run` first")
    random.Random(seed).shuffle(raw)
    graph = graph_from_store_rows(
        store.read("tool_graph_nodes"), store.read("tool_graph_parameters"), store.read("tool_graph_edges")
    )
    return raw[:n], envs, providable_flags(graph)


def measure(raw: list[dict[str, Any]], envs: dict[str, dict], flags: Any, workers: int) -> list[dict[str, Any]]:
    """One row per path: ``{"path", "processes", "seconds", "per_s", "ratio", "rows"}`` (the reference first)."""
    paths = [
        ("reference: tool list read per attempt, 1 process", False, 1),
        ("tool list read once, 1 process", True, 1),
        (f"tool list read once, {workers or 'one per core'} processes", True, workers),
    ]
    out = []
    for label, reuse, n_workers in paths:
        config = CalibrationConfig(workers=n_workers)
        started = time.perf_counter()
        rows = refined_trajectory_rows(
            raw,
            envs,
            ProgrammaticSolver(ask=True, reuse_tool_reading=reuse),
            config,
            user=ProgrammaticUser(),
            providable=flags,
        )
        seconds = time.perf_counter() - started
        out.append(
            {
                "path": label,
                "processes": resolve_workers(n_workers, len(raw)),
                "seconds": seconds,
                "per_s": len(raw) / seconds,
                "rows": rows,
            }
        )
    reference = json.dumps(out[0]["rows"], sort_keys=True, default=str)
    for result in out:
        result["ratio"] = out[0]["seconds"] / result["seconds"]
        if json.dumps(result["rows"], sort_keys=True, default=str) != reference:
            raise AssertionError(f"{result['path']}: rows differ from the reference path's")
    return out


def markdown(results: list[dict[str, Any]], n: int, store: Path) -> str:
    """The results as a Markdown table with the command and the sample."""
    turns = sum(r["n_turns"] for r in results[0]["rows"])
    lines = [
        f"`python -m benchmarks.refinement --store {store.name} --n {n}`: {n} passed raw trajectories "
        f"({turns} refined turns kept), k = {CalibrationConfig.k}, conversational share "
        f"{CalibrationConfig.conversational_share}; rows identical on every path (asserted).",
        "",
        "| path | processes | wall s | trajectories/s | speed-up |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['path']} | {r['processes']} | {r['seconds']:.1f} | {r['per_s']:.2f} | {r['ratio']:.2f}x |"
        for r in results
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store",
        type=Path,
        default=Path(os.environ.get("ENVFACTORY_HOME", Path.home() / ".envfactory")) / "envfactory.duckdb",
    )
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    raw, envs, flags = sample(Store(args.store), args.n)
    print(markdown(measure(raw, envs, flags, args.workers), len(raw), args.store))


if __name__ == "__main__":
    main()
