"""Runs that resume: training killed with SIGKILL at stated points and started again ends with the weights and
rows of a run never stopped.

The end-to-end test runs the ``checkpoints`` asset's sequence (SFT stage, GRPO stage, rows stored) and the
``evaluations`` computation (a :class:`ResultCache`) in child processes
(:mod:`envfactory_assets_tests.resume_worker`) on the one-layer model, and kills the child at three points:
mid-SFT (after step 3, its checkpoint of step 2 written), between the models (SFT finished, GRPO not begun) and
mid-evaluation of one model (the SFT checkpoint's second seed). Each child is pinned to one core, so every run
sums in the same order and the weights can be compared bit for bit.

With the randomly initialized one-layer model every GRPO rollout earns reward 0, so GRPO's advantages and its
weight update are zero: the GRPO part checks the step count, logs, counters and rows of a resumed run; the
optimizer state's continuity is checked by SFT, through the same ``Trainer`` checkpointing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: A child's longest time to reach its stop point or to finish on 2 busy cores (imports alone take ~25 s there).
CHILD_TIMEOUT_S = 600
#: Metrics that time the run or count threads: a resumed run measures its own.
TIMING = {
    "seconds",
    "seconds_per_step",
    "cpu_seconds",
    "step_seconds",
    "threads",
    "threads_first",
    "threads_mean",
    "threads_changes",
    "cached",
    "units_reused",
}


def _job(work: Path, model: Path, stop_at: list[Any] | None, core: int = 0) -> dict[str, Any]:
    return {
        "kind": "stages",
        "model": str(model),
        "out": str(work / "out"),
        "result": str(work / "result.json"),
        "ready": str(work / "ready"),
        "sft_steps": 4,
        "grpo_steps": 2,
        "save_steps": 2,
        "stop_at": stop_at,
        "core": core,
    }


def _start(job: dict[str, Any], work: Path) -> subprocess.Popen:
    work.mkdir(parents=True, exist_ok=True)
    Path(job["ready"]).unlink(missing_ok=True)
    path = work / "job.json"
    path.write_text(json.dumps(job), encoding="utf-8")
    return subprocess.Popen(
        [sys.executable, "-m", "envfactory_assets_tests.resume_worker", str(path)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill_at_stop(proc: subprocess.Popen, job: dict[str, Any]) -> None:
    """Wait until the child holds at its stop point, then SIGKILL it."""
    ready = Path(job["ready"])
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not ready.is_file():
        if proc.poll() is not None:
            raise AssertionError(f"the child ended before {job['stop_at']}: {proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the child never reached {job['stop_at']}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _finish(proc: subprocess.Popen, job: dict[str, Any]) -> dict[str, Any]:
    _, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(Path(job["result"]).read_text(encoding="utf-8"))


def _without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def _comparable(result: dict[str, Any], out: str) -> dict[str, Any]:
    """``result`` without timings, its folder written as ``OUT`` and without evaluation row ids: the two runs
    work in two folders at once (to halve the test's time), and an evaluation row's id is a content id of its
    model's path; every checkpoint id, metric and score is compared."""
    text = json.dumps({k: result[k] for k in ("rows", "weights", "evaluations")}).replace(out, "OUT")
    same = _without_timing(json.loads(text))
    same["evaluations"] = [{k: v for k, v in r.items() if k != "id"} for r in same["evaluations"]]
    return same


@pytest.mark.slow
def test_a_run_killed_mid_sft_between_models_and_mid_evaluation_ends_with_the_rows_of_one_never_stopped(
    one_layer_model_dir, tmp_path
):
    whole_job = _job(tmp_path / "whole", one_layer_model_dir, None, core=1)
    whole_proc = _start(whole_job, tmp_path / "whole")  # the run never stopped, beside the stopped one

    work = tmp_path / "stopped"
    out = work / "out"
    # 1. mid-SFT: step 3 done, the checkpoint of step 2 written and marked complete
    job = _job(work, one_layer_model_dir, ["sft", 3])
    _kill_at_stop(_start(job, work), job)
    (sft_run,) = out.glob("*.resume/sft-*")
    assert [p.name for p in sft_run.glob("checkpoint-*")] == ["checkpoint-2"]
    # a save cut short by a kill: a checkpoint folder without its completion marker and with broken weights
    half = sft_run / "checkpoint-4"
    shutil.copytree(sft_run / "checkpoint-2", half)
    (half / "resume_complete.json").unlink()
    (half / "model.safetensors").write_bytes(b"\0" * 64)

    # 2. between the models: SFT continued from step 2 and finished; GRPO has not begun
    job = _job(work, one_layer_model_dir, ["between"])
    _kill_at_stop(_start(job, work), job)
    assert not sft_run.exists()  # a finished run's checkpoints are removed
    (kept,) = out.glob("*.resume/stage_row.json")
    sft_row = json.loads(kept.read_text(encoding="utf-8"))
    assert sft_row["metrics"]["steps"] == 4 and len(sft_row["metrics"]["loss_history"]) == 4
    sft_weights = Path(sft_row["path"]) / "model.safetensors"
    written = sft_weights.stat().st_mtime_ns

    # 3. mid-evaluation of one model: GRPO ran, the rows were stored, the SFT checkpoint's second seed begun
    job = _job(work, one_layer_model_dir, ["evaluation", sft_row["id"], 7])  # 5 categories per seed
    _kill_at_stop(_start(job, work), job)
    assert not list(out.glob("*.resume"))  # stored rows: nothing kept, no run left to resume
    assert sft_weights.stat().st_mtime_ns == written  # the kept SFT row was taken up, SFT not trained again
    cached = len(list((out / "eval_cache").glob("*.json")))
    assert cached == 5  # base and do-nothing under seeds 0 and 1, the SFT checkpoint under seed 0

    job = _job(work, one_layer_model_dir, None)
    resumed = _finish(_start(job, work), job)
    whole = _finish(whole_proc, whole_job)

    assert resumed["weights"] == whole["weights"]  # bit for bit
    assert [r["metrics"]["steps"] for r in resumed["rows"]] == [4, 2]
    same, whole_same = _comparable(resumed, job["out"]), _comparable(whole, whole_job["out"])
    assert same["rows"] == whole_same["rows"]
    assert same["evaluations"] == whole_same["evaluations"] and len(same["evaluations"]) == len(whole["evaluations"])
    # only what the cache lacked was computed: the SFT checkpoint's seed 1 and both seeds of the GRPO checkpoint
    grpo_id = resumed["rows"][1]["id"]
    assert sorted(set(resumed["generated_for"])) == sorted({sft_row["id"], grpo_id})
    assert resumed["generated_for"].count(sft_row["id"]) == 5


def test_a_foreign_run_and_a_checkpoint_cut_short_are_never_resumed(tmp_path):
    from envfactory_assets.training.resume import (
        COMPLETE_FILE,
        forget_stopped_runs,
        last_complete_checkpoint,
        run_dir,
        write_json_atomically,
    )

    out = tmp_path / "ckpt_x"
    first = run_dir(out, "sft", "key-a")
    for step in (2, 4):
        (first / f"checkpoint-{step}").mkdir()
    write_json_atomically(first / "checkpoint-2" / COMPLETE_FILE, {"step": 2, "extra": {}})
    (first / "checkpoint-4" / "model.safetensors").write_bytes(b"\0")  # a save a kill cut short
    assert last_complete_checkpoint(first) == first / "checkpoint-2"
    assert not (first / "checkpoint-4").exists()  # removed: a later save must not mix with it
    # other inputs written to the same folder: another key, and the stopped run of the old inputs is gone
    other = run_dir(out, "sft", "key-b")
    assert other != first and not first.exists() and last_complete_checkpoint(other) is None
    assert run_dir(out, "grpo", "key-c").is_dir() and other.is_dir()  # one run per stage, stages apart
    # once a run's rows are stored, stopped runs of any other inputs are removed too
    stopped_elsewhere = run_dir(tmp_path / "ckpt_y", "sft", "key-d")
    (tmp_path / "ckpt_x").mkdir()  # a finished checkpoint folder stays
    assert sorted(p.name for p in forget_stopped_runs(tmp_path)) == ["ckpt_x.resume", "ckpt_y.resume"]
    assert not stopped_elsewhere.exists() and (tmp_path / "ckpt_x").is_dir()


def test_save_steps_is_checked_and_changes_neither_the_checkpoint_id_nor_the_trainer_s_result_settings(tmp_path):
    from envfactory_assets.config_checks import SettingError
    from envfactory_assets.training import grpo, sft
    from envfactory_assets.training.resume import result_settings

    for spec, prefix in ((sft.SFTConfigSpec, "sft"), (grpo.GRPOConfigSpec, "grpo")):
        for bad in (-1, 1.5, True):
            with pytest.raises(SettingError, match="save_steps"):
                spec(save_steps=bad)
        assert result_settings(spec(save_steps=5)) == result_settings(spec(save_steps=0)), prefix
        assert "save_steps" not in result_settings(spec())
    args = sft.trl_config_kwargs(tmp_path, sft.SFTConfigSpec(save_steps=3, device="cpu"))
    assert (args["save_strategy"], args["save_steps"], args["save_total_limit"]) == ("steps", 3, 1)
    assert sft.trl_config_kwargs(tmp_path, sft.SFTConfigSpec(save_steps=0, device="cpu"))["save_strategy"] == "no"
    args = grpo.trl_config_kwargs(tmp_path, grpo.GRPOConfigSpec(save_steps=2, device="cpu"))
    assert (args["save_strategy"], args["save_steps"], args["output_dir"]) == ("steps", 2, str(tmp_path))


class _Stopped(Exception):
    pass


def test_sft_stopped_mid_run_continues_only_a_run_of_the_same_inputs(one_layer_model_dir, tmp_path):
    """Stopped after step 3 (its checkpoint of step 2 on disk), SFT with the same inputs continues to the weights of a
    run never stopped; with another learning rate it does not take up that checkpoint."""
    from envfactory_assets.training.base_model import model_hash
    from envfactory_assets.training.sft import SFTConfigSpec, train_sft
    from envfactory_assets_tests.resume_worker import sft_rows

    rows = sft_rows(3)
    spec = SFTConfigSpec(max_steps=4, save_steps=2, per_device_train_batch_size=1, max_length=512, device="cpu")
    other = SFTConfigSpec(**{**spec.__dict__, "learning_rate": 1e-3})

    def stop_after_3(done, _total):
        if done == 3:
            raise _Stopped

    def train(out, config, progress=None):
        return train_sft(rows, one_layer_model_dir, out, config, num_threads=1, progress=progress)

    whole = train(tmp_path / "whole", spec)
    whole_other = train(tmp_path / "whole_other", other)
    for config, expected, reference in ((spec, whole, "whole"), (other, whole_other, "whole_other")):
        out = tmp_path / f"stopped_{reference}"
        with pytest.raises(_Stopped):
            train(out, spec, stop_after_3)  # always stopped with the first settings
        assert len(list(out.parent.glob(f"{out.name}.resume/sft-*/checkpoint-2"))) == 1
        steps: list[int] = []
        resumed = train(out, config, lambda done, _total, seen=steps: seen.append(done))
        # the same inputs continue after the checkpoint of step 2; other inputs start again
        assert steps == ([3, 4] if config == spec else [1, 2, 3, 4])
        assert model_hash(out) == model_hash(tmp_path / reference)
        assert resumed["loss_history"] == expected["loss_history"] and resumed["steps"] == 4
        assert resumed["train_loss"] == expected["train_loss"]
        assert not out.with_name(out.name + ".resume").exists()  # finished: nothing left to resume


def test_grpo_stopped_mid_run_continues_with_its_rollout_counters_and_screened_prompts(one_layer_model_dir, tmp_path):
    """Stopped after step 3 (its checkpoint of step 2 on disk, with the rollout counters and the prompts screening
    chose), GRPO screens again, continues from step 2 and ends with the metrics and weights of a run never
    stopped (timings aside)."""
    from envfactory_assets.training.base_model import model_hash
    from envfactory_assets.training.grpo import GRPOConfigSpec, train_grpo
    from envfactory_assets.training.resume import read_resume_state
    from envfactory_assets_tests.resume_worker import grpo_task

    row, bookshop = grpo_task()
    candidates = [row, {**row, "id": "rl_resume_1", "prompt": [{"role": "user", "content": "Remove that book."}]}]
    spec = GRPOConfigSpec(
        max_steps=4,
        save_steps=2,
        num_generations=2,
        max_completion_length=12,
        max_tool_calling_iterations=1,
        device="cpu",
    )

    def train(out, progress=None):
        return train_grpo(
            candidates,
            {bookshop["env_id"]: bookshop},
            one_layer_model_dir,
            out,
            spec,
            num_threads=1,
            n_prompts=1,
            progress=progress,
        )

    def stop_after_3(done, _total):
        if done == 3:
            raise _Stopped

    whole = train(tmp_path / "whole")
    out = tmp_path / "stopped"
    with pytest.raises(_Stopped):
        train(out, stop_after_3)
    (saved,) = out.parent.glob("stopped.resume/grpo-*/checkpoint-2")
    state = read_resume_state(saved)
    assert state["prompt_ids"] == whole["prompt_ids"] and {"tool_calls", "malformed"} <= set(state)
    steps: list[int] = []
    resumed = train(out, lambda done, _total: steps.append(done))
    assert steps == [3, 4]  # continued after the checkpoint of step 2
    assert _without_timing(resumed) == _without_timing(whole) and resumed["steps"] == 4
    assert model_hash(out) == model_hash(tmp_path / "whole")
    assert not out.with_name("stopped.resume").exists()
