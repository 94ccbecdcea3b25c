"""Benchmark of the model-backed stages as more requests are in flight: the raw query writer
(``raw_trajectories``), the model solver and refiner (``refined_trajectories``) and the code writer
(``environments``), against a local OpenAI-compatible stub that answers every request after ``--delay`` seconds.

The stub (:class:`~envfactory_assets.llm.testing.FakeChatServer` answering with
:class:`~envfactory_assets.synth.stub_roles.RoleReplies`) runs in its own process on 127.0.0.1, answers at most
``--max-requests`` requests and stops by itself after ``--lifetime`` seconds, so its CPU time is not the
pipeline's. Its replies depend on the request alone: the query writer keeps the draft, the refiner appends a
word, the solver sends the calls that solve the query (taken from a programmatic calibration of the same
trajectories) and then answers, the code writer sends the programmatic module. Each stage runs on the fixture
corpus at every concurrency of ``--levels`` (the backend's ``max_concurrency``; no response cache, so every
level sends every request), and its rows must equal those of concurrency 1 (asserted). Usage::

    .venv/bin/python -m benchmarks.model_concurrency

Prints a Markdown table; ``benchmarks.run --model-concurrency`` puts it into ``docs/BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envfactory_assets.envgen.stage import environment_row, environment_rows
from envfactory_assets.graph.build import build_tool_graph, tools_from_environments
from envfactory_assets.graph.embeddings import HashingEmbedder
from envfactory_assets.llm.openai_backend import OpenAICompatibleBackend
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.refinement.model_querygen import ModelQueryWriter, ModelRefiner
from envfactory_assets.synth.refinement.solver.model import ModelSolver
from envfactory_assets.synth.sampling.sampler import SamplerConfig
from envfactory_assets.synth.stage import chain_rows, raw_trajectory_rows, refined_trajectory_rows
from envfactory_assets.synth.stub_roles import RoleReplies, gold_of
from envfactory_assets.synth.trajectories.execution import SynthConfig

FIXTURES = Path(__file__).resolve().parents[1] / "envfactory_assets_tests" / "fixtures" / "openapi"
LEVELS = (1, 2, 4, 8, 16)
#: Solve attempts per turn here (the paper's 4 doubles the requests and the run time, not the ratios).
K = 2


def _serve(replies: RoleReplies, delay_s: float, max_requests: int, lifetime_s: float, conn: Any) -> None:
    """The stub's process: serve until told to stop or until ``lifetime_s`` has passed."""
    with FakeChatServer(
        responder=replies, delay_s=delay_s, max_requests=max_requests, lifetime_s=lifetime_s, keep_alive=True
    ) as server:
        conn.send(server.base_url)
        conn.poll(lifetime_s)
        conn.send(len(server.requests))


class Stub:
    """The stub server in a spawned process (a context manager): ``base_url``, then ``requests`` once stopped."""

    def __init__(self, replies: RoleReplies, delay_s: float, max_requests: int, lifetime_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(replies, delay_s, max_requests, lifetime_s, child), daemon=True
        )
        self.lifetime_s, self.base_url, self.requests = lifetime_s, "", 0

    def __enter__(self) -> Stub:
        self._process.start()
        if not self._conn.poll(60):
            raise RuntimeError("the stub server did not start within 60 s")
        self.base_url = self._conn.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.send("stop")
        if self._conn.poll(10):
            self.requests = self._conn.recv()
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()


def fixtures(n_chains: int, copies: int = 8) -> dict[str, Any]:
    """What the stages run on: resources of the fixture corpus, environments, chains, raw trajectories, and the
    stub's replies (the solving calls of every query a programmatic calibration asks, the modules). The
    environment stage writes each buildable document ``copies`` times, each under its own key, so it has
    more environments than threads."""
    scanned = scan_rows(FIXTURES)[0]
    built = [environment_row(r) for r in scanned]
    resources = [
        {**r, "resource_key": f"{r['resource_key']}_{i}", "id": f"{r['id']}-{i}"}
        for r, b in zip(scanned, built, strict=False)
        if b["status"] == "built"
        for i in range(copies)
    ]
    sources = {row["env_id"]: row["source"] for row in map(environment_row, resources)}
    envs = {
        r["env_id"]: {
            "env_id": r["env_id"],
            "domain": r["domain"],
            "origin": "template",
            **{k: r[k] for k in ("tools", "tables", "state_schema", "source", "initial_states", "seed_data")},
        }
        for r in built
        if r["status"] == "built"
    }
    graph = build_tool_graph(tools_from_environments(envs.values()), HashingEmbedder())
    chains = [
        c
        for c in chain_rows(
            graph,
            envs,
            {e: f"ver-{e}" for e in envs},
            n_chains,
            "concurrency-bench",
            "topology",
            SamplerConfig(min_tools=3),
        )
        if c["status"] == "passed"
    ]
    raws = [r for r in raw_trajectory_rows(chains, graph, envs, SynthConfig(min_turns=2)) if r["status"] == "passed"]
    programmatic = refined_trajectory_rows(
        raws, envs, config=CalibrationConfig(k=K, conversational_share=0.0, workers=1)
    )
    replies = RoleReplies(
        gold_of([t for r in programmatic for t in r["turns"]] + [t for r in raws for t in r["turns"]]), sources
    )
    return {"resources": resources, "envs": envs, "graph": graph, "chains": chains, "raws": raws, "replies": replies}


def stages(data: dict[str, Any]) -> list[tuple[str, int, str, Callable[[Any], list[dict[str, Any]]]]]:
    """``(stage, items, item name, run(backend) -> rows)`` of each model-backed stage."""
    synth = SynthConfig(min_turns=2, query_writer="model")
    cal = CalibrationConfig(k=K, conversational_share=0.0, refiner="model", workers=1)
    return [
        (
            "raw_trajectories (query writer)",
            len(data["chains"]),
            "trajectories",
            lambda b: raw_trajectory_rows(
                data["chains"], data["graph"], data["envs"], synth, writer=ModelQueryWriter(b)
            ),
        ),
        (
            "refined_trajectories (solver, refiner)",
            len(data["raws"]),
            "trajectories",
            lambda b: refined_trajectory_rows(data["raws"], data["envs"], ModelSolver(b), cal, refiner=ModelRefiner(b)),
        ),
        (
            "environments (code writer)",
            len(data["resources"]),
            "environments",
            lambda b: environment_rows(data["resources"], b, max_revisions=1),
        ),
    ]


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(data: dict[str, Any], base_url: str, levels: tuple[int, ...]) -> list[dict[str, Any]]:
    """One row per stage and concurrency: wall and CPU seconds (this process and its sandbox workers), requests."""
    out = []
    for stage, n, item, run in stages(data):
        reference = None
        for level in levels:
            backend = OpenAICompatibleBackend(base_url, "stub", max_retries=0, max_concurrency=level, timeout_s=60)
            cpu, started = _cpu(), time.perf_counter()
            rows = run(backend)
            wall, cpu = time.perf_counter() - started, _cpu() - cpu
            calls = backend.usage()["calls"]
            backend.close()
            text = json.dumps(rows, sort_keys=True, default=str)
            if reference is None:
                reference = text
            elif text != reference:
                raise AssertionError(f"{stage}: rows at max_concurrency={level} differ from max_concurrency=1")
            out.append(
                {
                    "stage": stage,
                    "items": n,
                    "item": item,
                    "concurrency": level,
                    "seconds": wall,
                    "requests": calls,
                    "cpu_ms_per_request": 1000 * cpu / max(calls, 1),
                    "requests_per_item": calls / max(n, 1),
                }
            )
        first = next(r for r in out if r["stage"] == stage)
        for r in out:
            if r["stage"] == stage:
                r["speedup"] = first["seconds"] / r["seconds"]
    return out


def markdown(results: list[dict[str, Any]], delay_s: float) -> str:
    """The results as a Markdown table, with the command."""
    lines = [
        f"`python -m benchmarks.model_concurrency`: a local stub answering every request after "
        f"{delay_s * 1000:.0f} ms; the fixture corpus (`envfactory_assets_tests/fixtures/openapi`; each "
        f"buildable document written 8 times under its own key for the environments), k = {K}, no response "
        "cache; rows identical at every concurrency (asserted). CPU is this process's and its sandbox "
        "workers' (user + system), the stub's excluded.",
        "",
        "| stage | items | max_concurrency | wall s | speed-up | requests | requests per item | CPU ms per request |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['stage']} | {r['items']} {r['item']} | {r['concurrency']} | {r['seconds']:.1f} | "
        f"{r['speedup']:.2f}x | {r['requests']} | {r['requests_per_item']:.1f} | {r['cpu_ms_per_request']:.1f} |"
        for r in results
    ]
    return "\n".join(lines)


def run(
    levels: tuple[int, ...] = LEVELS,
    n_chains: int = 24,
    delay_s: float = 0.2,
    max_requests: int = 50_000,
    lifetime_s: float = 1800.0,
) -> str:
    """Build the fixtures, start the stub, measure every stage at every level; the Markdown table."""
    data = fixtures(n_chains)
    with Stub(data["replies"], delay_s, max_requests, lifetime_s) as stub:
        results = measure(data, stub.base_url, levels)
    return markdown(results, delay_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="max_concurrency values, comma-separated")
    parser.add_argument("--chains", type=int, default=24, help="chains sampled (the passed ones are synthesized)")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the stub holds each reply")
    parser.add_argument("--max-requests", type=int, default=50_000, help="the stub answers 503 beyond this many")
    parser.add_argument("--lifetime", type=float, default=1800.0, help="seconds after which the stub stops itself")
    args = parser.parse_args()
    print(run(tuple(int(x) for x in args.levels.split(",")), args.chains, args.delay, args.max_requests, args.lifetime))


if __name__ == "__main__":
    main()
