"""Training stage: base model, SFT, GRPO with the environment reward, the checkpoint stage and tool-call
validity on held-out prompts (the chat template and parser it re-exports live in ``tooluse``).

Plain Python (no Dagster). Importing this package is cheap: torch, transformers, TRL and datasets are
imported inside the functions that need them. Nothing is downloaded; models load with ``HF_HUB_OFFLINE=1``.
"""

from envfactory_assets.tooluse.chat_template import (
    TOOL_CHAT_TEMPLATE,
    install_chat_template,
    normalize_messages,
    render_chat,
)
from envfactory_assets.tooluse.tool_calls import (
    ParseResult,
    parse_tool_calls,
    validate_call,
)
from envfactory_assets.training.base_model import (
    SMOLLM2_SPEC,
    locate_smollm2_gguf,
    materialize_base_model,
    model_hash,
    prepare_tokenizer,
    resolve_base_model,
)
from envfactory_assets.training.evaluate import tool_call_validity
from envfactory_assets.training.grpo import GRPOConfigSpec, train_grpo
from envfactory_assets.training.sft import (
    SFTConfigSpec,
    build_sft_dataset,
    build_sft_records,
    train_sft,
)

__all__ = [
    "SMOLLM2_SPEC",
    "TOOL_CHAT_TEMPLATE",
    "GRPOConfigSpec",
    "ParseResult",
    "SFTConfigSpec",
    "build_sft_dataset",
    "build_sft_records",
    "install_chat_template",
    "locate_smollm2_gguf",
    "materialize_base_model",
    "model_hash",
    "normalize_messages",
    "parse_tool_calls",
    "prepare_tokenizer",
    "render_chat",
    "resolve_base_model",
    "tool_call_validity",
    "train_grpo",
    "train_sft",
    "validate_call",
]
