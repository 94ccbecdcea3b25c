"""Optimizer steps as progress: a transformers ``TrainerCallback`` that hands them to a plain callable, so the
Dagster layer can draw a bar without the trainers knowing about it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def step_progress_callback(progress: Callable[[int, int], None]) -> Any:
    """A ``TrainerCallback`` calling ``progress(optimizer steps done, steps planned)`` after every optimizer
    step (TrainerState's ``global_step`` and ``max_steps``; SFT and GRPO trainers both take it in
    ``callbacks``). With ``max_steps`` set, as both trainers here are, the last call has both equal."""
    from transformers import TrainerCallback

    class StepProgress(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            progress(state.global_step, state.max_steps)

    return StepProgress()
