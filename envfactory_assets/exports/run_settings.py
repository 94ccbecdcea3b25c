"""The settings of the dataset exports (``verl_export``, ``sharegpt_export``, ``hf_dataset_export``).

Each default and help text is stated once, in a field's metadata; the Dagster run config and
docs/configuration.md are generated from :class:`ExportRunSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass

from envfactory_assets.config_checks import non_blank_string, setting
from envfactory_assets.training.base_model import SMOLLM2_SPEC


@dataclass(frozen=True)
class ExportRunSpec:
    """Which rows are exported, by the licences of their environments' sources, and the base model whose
    context the Hugging Face rows fit. A blank entry of ``allowed_licences`` is refused by
    :func:`~envfactory_assets.exports.stage.build_exports` before anything is written (the one place that check
    is stated).

    Raises:
        SettingError: (a ValueError) ``context_model`` is blank.
    """

    allowed_licences: tuple[str, ...] = setting(
        (),
        "licence names (as in source_resources.license_name, case-insensitive, or their SPDX ids) whose rows "
        "are exported; 'unspecified' names sources that state no licence; empty exports every row.",
    )
    context_model: str = setting(
        SMOLLM2_SPEC,
        "the base model whose tokenizer counts and whose max_position_embeddings bounds each hf_sft row "
        "(rows over it are split at turn boundaries or dropped, counted in the manifest): "
        "'smollm2-135m-instruct' (8,192 tokens) or a local Hugging Face model directory; set it to the "
        "checkpoints' base_model when that is another model.",
    )

    def __post_init__(self) -> None:
        non_blank_string("exports", "context_model", self.context_model, "a model name or a model directory")
