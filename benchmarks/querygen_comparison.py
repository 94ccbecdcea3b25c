"""The paper's QueryGen played by a local model against the programmatic writer, on the same chains.

From a store that holds ``tool_chains`` (and the environments and tool graph they were sampled on), e.g. a
default run's ``envfactory.duckdb``, ``--n`` passed chains are drawn with ``--seed`` and written into raw
trajectories twice: by the programmatic query writer, and by the model query writer
(:class:`~envfactory_assets.synth.refinement.model_querygen.ModelQueryWriter`) on a local model directory through the
transformers backend (:class:`~envfactory_assets.llm.transformers_backend.TransformersBackend`). Both are then
refined and calibrated with the same settings and the programmatic solver: the programmatic run with the
programmatic refiner, the model run with the model refiner
(:class:`~envfactory_assets.synth.refinement.model_querygen.ModelRefiner`).
The model is SmolLM2-135M-Instruct by default, materialized from its packaged GGUF
(:func:`~envfactory_assets.training.base_model.resolve_base_model`) into ``--models`` (nothing is downloaded).

The store is only read (a read-only connection), so a live run's store can be given. Usage::

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.querygen_comparison --store /path/to/envfactory.duckdb --n 50

(one torch thread: on a shared 2-core machine the default two threads made generation several times slower;
``docs/querygen.md`` has the measurement and a run's output).

Prints a Markdown section: the share of model replies refused and why, the share of model-written raw queries
that calibration reverted to the programmatic text (no solve attempt passed them) and of model refinements
reverted, the share of kept turns carrying the model's text, the model's requests, tokens and wall time per
stage, the data-realism figures of both runs side by side
(:func:`~envfactory_assets.synth.refinement.report.query_statistics`,
:func:`~envfactory_assets.synth.refinement.report.future_identifier_figures`, per-turn accuracy), and three example
turns from each run. ``--out`` also writes it to a file.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from envfactory_assets.catalog.environments import passed_environments
from envfactory_assets.graph.stage import graph_from_store_rows
from envfactory_assets.store.db import Store, read_rows
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.refinement.model_querygen import ModelQueryWriter, ModelRefiner, role_outcomes
from envfactory_assets.synth.refinement.report import future_identifier_figures, query_statistics
from envfactory_assets.synth.refinement.solver.programmatic import ProgrammaticSolver
from envfactory_assets.synth.stage import raw_trajectory_rows, refined_trajectory_rows
from envfactory_assets.synth.trajectories.execution import SynthConfig
from envfactory_assets.synth.trajectories.simulated_user import ProgrammaticUser, providable_flags

DEFAULT_MODELS = Path("/tmp/envfactory-querygen/models")


class ReadOnlyStore:
    """The ``read`` of a :class:`~envfactory_assets.store.db.Store` over a read-only connection (the store's own
    ``read`` opens it for writing, which a store another process holds, or one not ours, should not be)."""

    def __init__(self, path: Path) -> None:
        self.store = Store(path)

    def read(self, table: str, where: str = "", params: list[Any] | None = None) -> list[dict[str, Any]]:
        """Current rows of ``table`` (see :meth:`~envfactory_assets.store.db.Store.read`)."""
        with self.store.connect(read_only=True) as con:
            return read_rows(con, table, where, params, True)


def load(path: Path, n: int, seed: int) -> dict[str, Any]:
    """Environments, tool graph and ``n`` passed topology chains (all of whose environments passed) drawn with
    ``random.Random(seed)`` from the store at ``path``.

    Raises:
        FileNotFoundError: no store at ``path``. ValueError: fewer than ``n`` such chains.
    """
    store = ReadOnlyStore(path)
    envs = passed_environments(store).environments  # type: ignore[arg-type]
    graph = graph_from_store_rows(
        store.read("tool_graph_nodes"), store.read("tool_graph_parameters"), store.read("tool_graph_edges")
    )
    chains = [
        c
        for c in store.read("tool_chains", "status = 'passed' AND sampler = 'topology'")
        if all(e in envs for e in c["env_ids"])
    ]
    if len(chains) < n:
        raise ValueError(
            f"--store {path} holds {len(chains)} passed topology chains on passed environments, fewer than --n {n}"
        )
    chains.sort(key=lambda c: c["id"])
    picked = random.Random(seed).sample(chains, n)
    needed = {e for c in picked for e in c["env_ids"]}
    return {"envs": {e: envs[e] for e in needed}, "graph": graph, "chains": picked}


def run_side(
    data: dict[str, Any], backend: Any, synth: SynthConfig, cal: CalibrationConfig, max_tokens: int = 96
) -> dict[str, Any]:
    """Raw trajectories of ``data["chains"]``, then their refined rows; ``backend`` None = programmatic roles.

    Returns ``{"raw", "refined", "wall_s": {"raw_trajectories", "refined_trajectories"}, "usage"}`` (``usage``:
    the backend's counters per stage, {} without one). ``max_tokens``: the longest reply asked of the model."""
    writer = (
        ModelQueryWriter(backend, attempts=synth.query_writer_attempts, max_tokens=max_tokens)
        if backend is not None
        else None
    )
    refiner = (
        ModelRefiner(backend, attempts=cal.refiner_attempts, max_tokens=max_tokens) if backend is not None else None
    )
    usage: dict[str, Any] = {}
    started = time.monotonic()
    raw = raw_trajectory_rows(
        data["chains"], data["graph"], data["envs"], synth, writer=writer, progress=_progress("raw")
    )
    wall = {"raw_trajectories": round(time.monotonic() - started, 1)}
    if backend is not None:
        usage["raw_trajectories"] = backend.usage()
    passed = [r for r in raw if r["status"] == "passed"]
    started = time.monotonic()
    refined = refined_trajectory_rows(
        passed,
        data["envs"],
        ProgrammaticSolver(ask=cal.conversational_share > 0),
        cal,
        user=ProgrammaticUser() if cal.conversational_share > 0 else None,
        providable=providable_flags(data["graph"]) if cal.conversational_share > 0 else None,
        refiner=refiner,
        progress=_progress("refined"),
    )
    wall["refined_trajectories"] = round(time.monotonic() - started, 1)
    if backend is not None:
        total = backend.usage()
        usage["refined_trajectories"] = {
            k: total.get(k, 0) - usage["raw_trajectories"].get(k, 0)
            for k in ("calls", "prompt_tokens", "completion_tokens", "generate_s")
        }
    return {"raw": raw, "refined": refined, "wall_s": wall, "usage": usage}


def _progress(stage: str):
    def report(done: int, total: int) -> None:
        if done == total or done % 2 == 0:
            print(f"  {stage}: {done}/{total}", flush=True)

    return report


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "0/0"


def _reason(text: str) -> str:
    """A refusal reason without its particulars (the values and names it quotes)."""
    for cue in (
        "not one JSON object",
        'no "query" field',
        "is not one of",
        "empty or not a string",
        "longer than",
        "names a tool",
        "cannot know yet",
    ):
        if cue in text:
            return cue
    return text[:40]


def role_figures(side: dict[str, Any]) -> dict[str, Any]:
    """Refusals, reverts and kept-text shares of the model roles of one run."""
    raw_turns = [t for r in side["raw"] for t in r["turns"]]
    kept = [t for r in side["refined"] for t in r["turns"]]
    out: dict[str, Any] = {}
    for role, turns in (("query_writer", raw_turns), ("refiner", kept)):
        records = [t[role] for t in turns if isinstance(t.get(role), dict)]
        # a request was refused or accepted; a turn with every attempt refused asked `attempts` times
        refused = sum(len(r["refusals"]) for r in records)
        accepted = sum(1 for r in records if r["outcome"] != "fallback")
        out[role] = {
            "turns": len(records),
            "requests": refused + accepted,
            "refused": refused,
            "all_refused_turns": sum(1 for r in records if r["outcome"] == "fallback"),
            "reasons": dict(Counter(_reason(x["reason"]) for r in records for x in r["refusals"]).most_common()),
        }
    out["query_writer"]["kept_turns"] = role_outcomes(kept, "query_writer")
    model_ops = [o for t in kept for o in t["operators"] if o.get("obtainable_from") == "model refiner"]
    out["refiner"]["rewrites"] = len(model_ops)
    out["refiner"]["rewrites_reverted"] = sum(1 for o in model_ops if o.get("reverted"))
    out["refiner"]["kept_turns"] = role_outcomes(kept, "refiner")
    out["refiner"]["kept_with_model_text"] = sum(
        1
        for t in kept
        for o in t["operators"]
        if o.get("obtainable_from") == "model refiner" and not o.get("reverted") and o["query_after"] == t["query"]
    )
    return out


def realism(side: dict[str, Any]) -> dict[str, Any]:
    """The data-realism figures of one run's refined rows (passed ones), and its yield."""
    rows = side["refined"]
    passed = [r for r in rows if r["status"] == "passed"]
    turns = [t for r in passed for t in r["turns"]]
    return {
        "raw_passed": sum(1 for r in side["raw"] if r["status"] == "passed"),
        "refined_passed": len(passed),
        "refined_failed_reasons": dict(Counter(x.split(":")[0][:50] for r in rows for x in r["reasons"])),
        "refined": query_statistics(rows),
        "raw": query_statistics(rows, field="query_raw"),
        "future_identifiers": future_identifier_figures(rows),
        "mean_accuracy": round(sum(t["accuracy"] for t in turns) / len(turns), 3) if turns else 0.0,
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def examples(side: dict[str, Any], n: int = 3) -> list[str]:
    """Table lines of the first ``n`` kept turns of passed rows: raw query, refined query, roles' outcomes."""
    lines = ["| raw query | refined query | writer / refiner | accuracy |", "|---|---|---|---|"]
    turns = [t for r in side["refined"] if r["status"] == "passed" for t in r["turns"]][:n]
    for t in turns:
        roles = " / ".join((t.get(k) or {}).get("outcome", "programmatic") for k in ("query_writer", "refiner"))
        lines.append(f"| {_cell(t['query_raw'])} | {_cell(t['query'])} | {roles} | {t['accuracy']:.2f} |")
    return lines


def markdown(prog: dict[str, Any], model: dict[str, Any], meta: dict[str, Any]) -> str:
    """The Markdown section of one comparison."""
    roles = role_figures(model)
    rp, rm = realism(prog), realism(model)
    qw, rf = roles["query_writer"], roles["refiner"]
    kept = sum(len(r["turns"]) for r in model["refined"])
    lines = [
        f"Measured on {meta['machine']} at commit `{meta['commit']}`: `{meta['command']}` "
        f"({meta['n']} chains drawn with seed {meta['seed']} from `{meta['store']}`; model "
        f"`{meta['model']}` through the transformers backend on CPU, greedy, max_tokens {meta['max_tokens']}, "
        f"{meta['attempts']} requests per turn and role at most; calibration k = {meta['k']}, the "
        f"programmatic solver, the default conversational share).",
        "",
        "**The model's roles**",
        "",
        "| | query writer | refiner |",
        "|---|---|---|",
        f"| turns asked | {qw['turns']} | {rf['turns']} |",
        f"| requests refused | {_share(qw['refused'], qw['requests'])} | {_share(rf['refused'], rf['requests'])} |",
        f"| turns with every reply refused (programmatic text kept) | {_share(qw['all_refused_turns'], qw['turns'])} "
        f"| {_share(rf['all_refused_turns'], rf['turns'])} |",
        f"| refusal reasons | {_cell(', '.join(f'{k}: {v}' for k, v in qw['reasons'].items()) or '-')} "
        f"| {_cell(', '.join(f'{k}: {v}' for k, v in rf['reasons'].items()) or '-')} |",
        f"| kept turns by outcome | {qw['kept_turns'] or '-'} | {rf['kept_turns'] or '-'} |",
        f"| accepted text reverted by calibration (unsolvable) | "
        f"{_share(qw['kept_turns'].get('reverted', 0), qw['turns'] - qw['all_refused_turns'])} of raw queries written "
        f"| {_share(rf['rewrites_reverted'], rf['rewrites'])} of rewrites |",
        f"| kept turns whose text is the model's | {_share(qw['kept_turns'].get('model', 0), kept)} (raw query) "
        f"| {_share(rf['kept_with_model_text'], kept)} (refined query) |",
        "",
        "**Cost**",
        "",
        "| run | stage | wall s | model requests | prompt tokens | completion tokens | generation s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, side in (("programmatic", prog), ("model", model)):
        for stage in ("raw_trajectories", "refined_trajectories"):
            u = side["usage"].get(stage, {})
            lines.append(
                f"| {name} | {stage} | {side['wall_s'][stage]} | {u.get('calls', 0)} | "
                f"{u.get('prompt_tokens', 0)} | {u.get('completion_tokens', 0)} | {u.get('generate_s', 0):.0f} |"
            )
    lines += [
        "",
        "**Data realism** (passed refined rows; 3-grams scaled to 1,000 queries, so compare equal sizes)",
        "",
        "| figure | programmatic | model |",
        "|---|---|---|",
    ]
    figures = [
        ("raw trajectories passed", lambda r: r["raw_passed"]),
        ("refined trajectories passed", lambda r: r["refined_passed"]),
        ("kept turns", lambda r: r["refined"]["queries"]),
        ("distinct 3-grams per 1,000 refined queries", lambda r: r["refined"]["distinct_trigrams_per_1000"]),
        ("distinct 3-grams per 1,000 raw queries", lambda r: r["raw"]["distinct_trigrams_per_1000"]),
        ("literal identifier share, refined", lambda r: r["refined"]["literal_identifier_share"]),
        ("literal identifier share, raw", lambda r: r["raw"]["literal_identifier_share"]),
        ("words per refined query", lambda r: r["refined"]["mean_words"]),
        ("words per raw query", lambda r: r["raw"]["mean_words"]),
        ("refined differs from raw", lambda r: r["refined"]["refined_differs_share"]),
        ("turns quoting a future identifier", lambda r: r["future_identifiers"]["share"]),
        ("mean per-turn accuracy", lambda r: r["mean_accuracy"]),
        ("per-turn accuracy", lambda r: r["refined"]["accuracy_distribution"]),
        ("refined rows' failure reasons", lambda r: r["refined_failed_reasons"] or "-"),
    ]
    lines += [f"| {label} | {_cell(str(get(rp)))} | {_cell(str(get(rm)))} |" for label, get in figures]
    lines += [
        "",
        "**Example turns, programmatic run**",
        "",
        *examples(prog),
        "",
        "**Example turns, model run**",
        "",
        *examples(model),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    """Run the comparison and print (and with ``--out`` write) its Markdown section."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="envfactory.duckdb with tool_chains (read only)")
    parser.add_argument("--n", type=int, default=50, help="chains to write trajectories from")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model",
        default="smollm2-135m-instruct",
        help="a local HF model directory, or smollm2-135m-instruct (the packaged GGUF)",
    )
    parser.add_argument("--models", type=Path, default=DEFAULT_MODELS, help="where the GGUF is materialized")
    parser.add_argument("--attempts", type=int, default=2, help="model requests per turn and role")
    # a query in a JSON object fits in 96 tokens; a 135M model on 2 CPU cores generates tens of tokens a
    # second, so a longer limit mostly pays for rambling
    parser.add_argument("--max-tokens", type=int, default=96, help="longest reply asked of the model")
    parser.add_argument("--k", type=int, default=4, help="solve attempts per turn")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from envfactory_assets.llm.transformers_backend import TransformersBackend
    from envfactory_assets.training.base_model import resolve_base_model

    model_dir = resolve_base_model(args.model, args.models)
    data = load(args.store, args.n, args.seed)
    print(f"{len(data['chains'])} chains on {len(data['envs'])} environments; model {model_dir}", flush=True)
    cal = CalibrationConfig(k=args.k, workers=1)
    prog = run_side(data, None, SynthConfig(), cal)
    print(f"programmatic: {prog['wall_s']}", flush=True)
    backend = TransformersBackend(model_dir)
    model = run_side(
        data,
        backend,
        SynthConfig(query_writer="model", query_writer_attempts=args.attempts),
        CalibrationConfig(k=args.k, workers=1, refiner="model", refiner_attempts=args.attempts),
        args.max_tokens,
    )
    print(f"model: {model['wall_s']}", flush=True)
    commit = (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).resolve().parent
        ).stdout.strip()
        or "unknown"
    )
    meta = {
        "machine": f"{platform.machine()} Linux, {os.cpu_count()} cores (shared)",
        "commit": commit,
        "command": "python -m benchmarks.querygen_comparison " + " ".join(argv if argv is not None else sys.argv[1:]),
        "n": args.n,
        "seed": args.seed,
        "store": args.store,
        "model": args.model,
        "attempts": args.attempts,
        "k": args.k,
        "max_tokens": args.max_tokens,
    }
    text = markdown(prog, model, meta)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
