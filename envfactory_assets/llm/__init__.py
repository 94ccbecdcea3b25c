"""Model backends for the paper's LLM roles (plain Python, no Dagster).

- :class:`ChatBackend`: the protocol (``complete(messages, role=, max_tokens=, temperature=) -> Completion``).
- :class:`OpenAICompatibleBackend`: any OpenAI-compatible endpoint, with retries, a SQLite response
  cache, a token budget and bounded concurrency.
- :class:`TransformersBackend`: a local Hugging Face model folder, greedy ``generate``, no downloads.

The programmatic builder (no model) stays the pipeline's default; these back the model-written code
path in :mod:`envfactory_assets.envgen.model_builder` and :mod:`envfactory_assets.envgen.revision`.
"""

from envfactory_assets.llm.base import (
    BackendConfigError,
    BudgetExceeded,
    ChatBackend,
    ChatRequest,
    Completion,
    EndpointUnreachable,
    LLMError,
    MalformedReply,
    RequestRejected,
    concurrency_of,
    estimate_prompt_tokens,
    estimate_tokens,
    request_key,
)
from envfactory_assets.llm.cache import ResponseCache
from envfactory_assets.llm.openai_backend import OpenAICompatibleBackend
from envfactory_assets.llm.transformers_backend import TransformersBackend

__all__ = [
    "BackendConfigError",
    "BudgetExceeded",
    "ChatBackend",
    "ChatRequest",
    "Completion",
    "EndpointUnreachable",
    "LLMError",
    "MalformedReply",
    "OpenAICompatibleBackend",
    "RequestRejected",
    "ResponseCache",
    "TransformersBackend",
    "concurrency_of",
    "estimate_prompt_tokens",
    "estimate_tokens",
    "request_key",
]
