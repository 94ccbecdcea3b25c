"""Child process of ``test_resume``: runs one training or evaluation job on the one-layer model and, when the job
names a stop point, holds still there (writing the job's ``ready`` file) so that the test can kill it with
SIGKILL at exactly that point. ``python -m envfactory_assets_tests.resume_worker JOB.json``; the result is
written to the job's ``result`` file as JSON.

Pinned to one core, so that every run (stopped, resumed, never stopped) uses one torch thread and the same
floating-point sums: the thread count is a measured choice (``training/threads.py``) and more threads change
the order of a reduction.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

CRM_TOOL_NAMES = ("list_companies", "get_company", "create_company")


def _hold(job: dict[str, Any], point: list[Any]) -> None:
    """At the job's stop point, say so and wait to be killed."""
    if job.get("stop_at") == point:
        Path(job["ready"]).write_text(json.dumps(point), encoding="utf-8")
        time.sleep(3600)


def _progress(job: dict[str, Any], stage: str):
    return lambda done, _total: _hold(job, [stage, done])


def sft_rows(n: int) -> list[dict[str, Any]]:
    from envfactory_assets_tests.test_training_sft import crm_row

    return [crm_row(i) for i in range(n)]


def grpo_task() -> tuple[dict[str, Any], dict[str, Any]]:
    """``(an RL row deleting the first book of the bookshop fixture, the bookshop environment)``; the row's gold
    final state comes from executing its gold call."""
    from envfactory_assets.envgen.tools import openai_tool
    from envfactory_assets.tooluse.task_episode import TaskRunner
    from envfactory_assets_tests.fixture_environments import build_fixture_environment

    bookshop = build_fixture_environment("bookshop.json")
    env_id = bookshop["env_id"]
    initial = {env_id: copy.deepcopy(bookshop["initial_states"][0]["state"])}
    book_id = initial[env_id]["tables"]["books"][0]["book_id"]
    row = {
        "id": "rl_resume_0",
        "env_ids": [env_id],
        "tools": [openai_tool(t) for t in bookshop["tools"]],
        "prompt": [{"role": "user", "content": f"Please delete book {book_id}."}],
        "gold_calls": [{"name": "delete_book", "arguments": {"book_id": book_id}}],
        "masked_arguments": ["limit"],
        "initial_state": initial,
        "split": "train",
        "turn_index": 0,
    }
    with TaskRunner({env_id: bookshop}) as runner:
        episode = runner.episode({**row, "final_state": initial})
        episode.call("delete_book", {"book_id": book_id})
        final = episode.final_states()
        episode.close()
    return {**row, "final_state": final}, bookshop


def _grpo_spec(job: dict[str, Any]):
    from envfactory_assets.training.grpo import GRPOConfigSpec

    return GRPOConfigSpec(
        max_steps=job["grpo_steps"],
        save_steps=job["save_steps"],
        num_generations=2,
        prompts_per_step=1,
        max_completion_length=12,
        max_tool_calling_iterations=1,
        device="cpu",
    )


def _sft_spec(job: dict[str, Any]):
    from envfactory_assets.training.sft import SFTConfigSpec

    return SFTConfigSpec(
        max_steps=job["sft_steps"],
        save_steps=job["save_steps"],
        per_device_train_batch_size=1,
        max_length=512,
        device="cpu",
    )


def _weights(path: Path) -> str:
    from envfactory_assets.training.base_model import model_hash

    return model_hash(path)


def run_sft(job: dict[str, Any]) -> dict[str, Any]:
    from envfactory_assets.training.sft import train_sft

    out = Path(job["out"])
    metrics = train_sft(
        sft_rows(4), Path(job["model"]), out, _sft_spec(job), num_threads=1, progress=_progress(job, "sft")
    )
    return {"metrics": metrics, "weights": _weights(out)}


def run_grpo(job: dict[str, Any]) -> dict[str, Any]:
    from envfactory_assets.training.grpo import train_grpo

    row, bookshop = grpo_task()
    second = {**row, "id": "rl_resume_1", "prompt": [{"role": "user", "content": "Remove that book, please."}]}
    out = Path(job["out"])
    metrics = train_grpo(
        [row, second],
        {bookshop["env_id"]: bookshop},
        Path(job["model"]),
        out,
        _grpo_spec(job),
        num_threads=1,
        progress=_progress(job, "grpo"),
    )
    return {"metrics": metrics, "weights": _weights(out)}


class _Holding:
    """The real policy of one model, holding still (for the kill) at its ``hold_at``-th ``generate`` call."""

    def __init__(self, inner: Any, job: dict[str, Any], label: str, calls: list[str]) -> None:
        self.inner, self.job, self.label, self.calls = inner, job, label, calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, conversations: Any, seed: int, **kwargs: Any) -> Any:
        self.calls.append(self.label)
        _hold(self.job, ["evaluation", self.label, self.calls.count(self.label)])
        return self.inner.generate(conversations, seed, **kwargs)


def evaluate(job: dict[str, Any], rows: list[dict[str, Any]], calls: list[str]) -> list[dict[str, Any]]:
    """The ``evaluations`` asset's models (base, do-nothing, each checkpoint) on one BFCL single-turn task per
    category under two seeds, each (model, benchmark, seed) result stored in a :class:`ResultCache` in ``out``."""
    from envfactory_assets.evaluation.model_policy import DoNothingPolicy, Policy, SamplingSpec
    from envfactory_assets.evaluation.run import (
        BASE,
        EvalSpec,
        ModelRef,
        ResultCache,
        do_nothing_model,
        evaluate_models,
    )

    spec = EvalSpec(
        n_synthetic=0,
        n_bfcl=0,
        n_bfcl_single_turn=1,
        seeds=(0, 1),
        single_turn_prose_stop_tokens=8,
        sampling=SamplingSpec(max_new_tokens=8, device="cpu"),
    )
    models = [ModelRef(BASE, BASE, job["model"], model_hash=_weights(Path(job["model"]))), do_nothing_model()]
    models += [
        ModelRef(
            r["id"],
            r["stage"],
            r["path"],
            r["id"],
            model_hash=_weights(Path(r["path"])),
            parent=r["parent_checkpoint_id"],
        )
        for r in rows
    ]

    def load(model: Any) -> Any:
        inner = DoNothingPolicy() if model.stage == "do_nothing" else Policy(Path(model.path), spec.sampling, 1)
        return _Holding(inner, job, model.label, calls)

    cache = ResultCache(Path(job["out"]) / "eval_cache")
    return evaluate_models(models, [], {}, spec, log=lambda _: None, num_threads=1, cache=cache, load_policy=load)


def run_stages(job: dict[str, Any]) -> dict[str, Any]:
    """The ``checkpoints`` asset's sequence without Dagster (the SFT stage, the GRPO stage from it, the rows
    'stored' in ``out/stored.json``, and only then the kept stage rows cleared), then :func:`evaluate`."""
    from envfactory_assets.training.resume import forget_stopped_runs
    from envfactory_assets.training.stage import clear_kept_rows, grpo_checkpoint, train_checkpoint

    out = Path(job["out"])
    stored = out / "stored.json"
    logs: list[str] = []
    if stored.is_file():  # the checkpoints 'asset' had finished: a re-run starts at the evaluation
        rows = json.loads(stored.read_text(encoding="utf-8"))
    else:
        row, bookshop = grpo_task()
        sft = [{**r, "env_ids": [bookshop["env_id"]], "split": "train"} for r in sft_rows(4)]
        first = train_checkpoint(
            sft,
            [row],
            job["model"],
            out / "models",
            out,
            _sft_spec(job),
            4,
            0,
            "v-sft",
            log=logs.append,
            progress=_progress(job, "sft"),
            keep_rows=True,
        )
        _hold(job, ["between"])
        second = grpo_checkpoint(
            first,
            [row],
            {bookshop["env_id"]: bookshop},
            out,
            _grpo_spec(job),
            1,
            "v-rl",
            log=logs.append,
            progress=_progress(job, "grpo"),
            keep_rows=True,
        )
        rows = json.loads(json.dumps([first, second]))  # as the store gives them back
        tmp = out / "stored.json.tmp"
        tmp.write_text(json.dumps(rows), encoding="utf-8")
        os.replace(tmp, stored)
        clear_kept_rows(rows)
        forget_stopped_runs(out)
    calls: list[str] = []
    evaluations = evaluate(job, rows, calls)
    weights = {r["id"]: _weights(Path(r["path"])) for r in rows}
    return {"rows": rows, "weights": weights, "logs": logs, "evaluations": evaluations, "generated_for": calls}


JOBS = {"sft": run_sft, "grpo": run_grpo, "stages": run_stages}


def main(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[job.get("core", 0) % len(cores)]})
    result = JOBS[job["kind"]](job)
    Path(job["result"]).write_text(json.dumps(result, sort_keys=True), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
