"""Resumable training runs: where a stopped SFT or GRPO run keeps its periodic checkpoints, which of them a
re-run continues from, and the finished rows of a checkpoint stage that is not stored yet.

The checkpoints themselves are transformers' ``Trainer`` checkpoints (``save_steps``, ``checkpoint-N`` folders
holding the model, optimizer, scheduler, RNG states and ``trainer_state.json``; ``resume_from_checkpoint``
restores them and skips the batches already trained on). What this module adds:

- A run directory keyed by everything that determines the result (:func:`run_key`), under a root beside the
  output directory: a re-run with other inputs gets another key and never continues a foreign run.
- A completion marker (:data:`COMPLETE_FILE`) written atomically by :func:`resume_callback` after the trainer
  has written a whole checkpoint: ``Trainer`` writes ``checkpoint-N`` in place, so a process killed while
  saving leaves a folder that looks like a checkpoint but is not one; without the marker it is ignored and
  removed (:func:`last_complete_checkpoint`).
- Extra state a ``Trainer`` does not hold (GRPO's rollout counters) stored in the marker.
- :func:`save_stage_row` / :func:`load_stage_row`: a checkpoint stage that finished (its weights written, its
  row made) but whose row is not in the store yet, so that a run stopped between SFT and GRPO does not train
  SFT again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

RESUME_SUFFIX = ".resume"
"""Suffix of the folder beside an output directory that holds its runs' periodic checkpoints."""
COMPLETE_FILE = "resume_complete.json"
"""Written (atomically) into a ``checkpoint-N`` folder once the trainer has saved all of it."""
STAGE_ROW_FILE = "stage_row.json"
"""A finished stage's row, kept in the stage's resume folder until the row is stored."""
CHECKPOINT_PREFIX = "checkpoint-"
RESULT_NEUTRAL_SETTINGS = frozenset({"save_steps"})
"""Spec fields that change how a run is carried out, not what it computes: left out of run keys and content ids."""


def result_settings(spec: Any) -> dict[str, Any]:
    """``{field: value}`` of a settings dataclass without :data:`RESULT_NEUTRAL_SETTINGS`."""
    return {k: getattr(spec, k) for k in spec.__dataclass_fields__ if k not in RESULT_NEUTRAL_SETTINGS}


def run_key(parts: Mapping[str, Any]) -> str:
    """sha256 (hex, first 24 characters) of ``parts`` as canonical JSON (sorted keys; values JSON can write)."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def resume_root(out_dir: Path) -> Path:
    """The folder beside ``out_dir`` that holds its runs' resume state (``<out_dir>.resume``)."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + RESUME_SUFFIX)


def run_dir(out_dir: Path, stage: str, key: str) -> Path:
    """``<out_dir>.resume/<stage>-<key>``, created; other runs of ``stage`` there (other inputs written to the
    same ``out_dir``) are removed first, so the root holds at most one run per stage."""
    root = resume_root(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    here = root / f"{stage}-{key}"
    for other in root.glob(f"{stage}-*"):
        if other != here and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
    here.mkdir(exist_ok=True)
    return here


def _step(path: Path) -> int:
    try:
        return int(path.name[len(CHECKPOINT_PREFIX) :])
    except ValueError:
        return -1


def last_complete_checkpoint(directory: Path) -> Path | None:
    """The ``checkpoint-N`` folder with the highest N that holds :data:`COMPLETE_FILE`, or None. Folders without
    the marker (a save cut short) are removed: the trainer would otherwise write into them again, and its
    rotation, which keeps the newest, could delete the one being resumed from."""
    found = sorted((p for p in Path(directory).glob(f"{CHECKPOINT_PREFIX}*") if _step(p) >= 0), key=_step)
    complete = [p for p in found if (p / COMPLETE_FILE).is_file()]
    for path in found:
        if path not in complete:
            shutil.rmtree(path, ignore_errors=True)
    return complete[-1] if complete else None


def write_json_atomically(path: Path, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` through a temporary file in the same folder and a rename (a reader
    sees the old file or the whole new one, never part of it)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(value, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_resume_state(checkpoint: Path) -> dict[str, Any]:
    """The extra state stored with a complete checkpoint by :func:`resume_callback` (``{}`` when none)."""
    return json.loads((Path(checkpoint) / COMPLETE_FILE).read_text(encoding="utf-8")).get("extra") or {}


def resume_callback(extra_state: Callable[[], dict[str, Any]] | None = None) -> Any:
    """A transformers ``TrainerCallback`` that marks each checkpoint complete once the trainer has saved it
    (``on_save`` comes after ``_save_checkpoint`` returned), storing ``extra_state()`` (JSON) in the marker.
    It also skips the save a ``save_steps`` multiple would ask for at the last step: the finished model is saved
    by the caller and the run's folder removed right after, so that checkpoint would only cost time and disk."""
    from transformers import TrainerCallback

    class MarkComplete(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            # runs after transformers' DefaultFlowCallback, which set should_save from save_steps
            if state.max_steps and state.global_step >= state.max_steps:
                control.should_save = False

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"
            if folder.is_dir():
                extra = extra_state() if extra_state is not None else {}
                write_json_atomically(folder / COMPLETE_FILE, {"step": state.global_step, "extra": extra})

    return MarkComplete()


def checkpointing_kwargs(save_steps: int, directory: Path) -> dict[str, Any]:
    """Trainer arguments for a checkpoint every ``save_steps`` optimizer steps into ``directory``, the last one
    kept (0: no checkpoints)."""
    if save_steps == 0:
        return {"output_dir": str(directory), "save_strategy": "no"}
    return {
        "output_dir": str(directory),
        "save_strategy": "steps",
        "save_steps": save_steps,
        "save_total_limit": 1,  # rotation runs after a new checkpoint is whole, so one always survives a kill
        "save_only_model": False,
    }


def finish_run(directory: Path) -> None:
    """Remove a finished run's folder, and its root when nothing else is left in it."""
    directory = Path(directory)
    shutil.rmtree(directory, ignore_errors=True)
    try:
        directory.parent.rmdir()
    except OSError:
        pass  # another stage's run, or a stage row not stored yet, is still there


def save_stage_row(out_dir: Path, row: Mapping[str, Any]) -> None:
    """Keep a finished stage's row (JSON) in ``<out_dir>.resume`` until :func:`clear_stage_row`."""
    root = resume_root(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    write_json_atomically(root / STAGE_ROW_FILE, dict(row))


def load_stage_row(out_dir: Path) -> dict[str, Any] | None:
    """The row :func:`save_stage_row` kept for ``out_dir``, or None."""
    path = resume_root(out_dir) / STAGE_ROW_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # unreadable: the stage runs again


def clear_stage_row(out_dir: Path) -> None:
    """Forget the kept row of ``out_dir`` (its row is stored) and the resume folder when it is empty."""
    root = resume_root(out_dir)
    (root / STAGE_ROW_FILE).unlink(missing_ok=True)
    try:
        root.rmdir()
    except OSError:
        pass


def forget_stopped_runs(checkpoints_dir: Path) -> list[Path]:
    """Remove every resume folder (``*.resume``) left in ``checkpoints_dir`` and return them: called once a
    run's rows are stored, so runs stopped earlier with other inputs do not keep their checkpoints (a model,
    its optimizer state) on disk for good."""
    removed = [p for p in Path(checkpoints_dir).glob(f"*{RESUME_SUFFIX}") if p.is_dir()]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
