"""The chat-backend contract shared by every model backend, and its errors.

A backend plays one of the paper's LLM roles (``code_writer``, ``reviser``, ...): it takes OpenAI-style
chat messages and returns a :class:`Completion`. Backends are plain Python (no Dagster); the Dagster
resource that picks one lives in ``envfactory_assets.defs``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

#: One chat message: ``{"role": "system" | "user" | "assistant", "content": str}``.
Message = Mapping[str, Any]


class LLMError(RuntimeError):
    """Base class of every backend error."""


class BackendConfigError(LLMError, ValueError):
    """A backend setting is missing or wrong; the message names the setting (e.g. ``base_url``)."""


class BudgetExceeded(LLMError):
    """A call would take the backend past its ``token_budget``; raised before the call is made.

    Attributes:
        budget: the configured ``token_budget`` (tokens).
        used: tokens already spent (prompt + completion, cached calls excluded) or reserved by calls
            in flight.
        needed: the estimate for the refused call (prompt estimate + ``max_tokens``).
    """

    def __init__(self, budget: int, used: int, needed: int, role: str = "") -> None:
        self.budget, self.used, self.needed = budget, used, needed
        super().__init__(
            f"token_budget exceeded{' for role ' + repr(role) if role else ''}: {used} tokens used or reserved "
            f"+ {needed} estimated for this call > token_budget={budget}; raise token_budget or reuse the "
            f"response cache (cache_path)"
        )


class EndpointUnreachable(LLMError):
    """The endpoint did not answer (connection error, timeout, 429 or 5xx) after every retry."""


class MalformedReply(LLMError):
    """The endpoint answered HTTP 200 with something that is not a chat completion (a body that is not JSON,
    no ``choices``, no message, content that is not a string) on every attempt. Never cached."""


class RequestRejected(LLMError):
    """The endpoint refused the request with a 4xx other than 429 (not retried).

    Attributes:
        status: the HTTP status code.
    """

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Completion:
    """One reply of a backend.

    Attributes:
        text: the assistant message content ("" if the model returned none).
        prompt_tokens: prompt tokens as reported by the endpoint (or estimated as chars/4 when it
            reports none).
        completion_tokens: completion tokens, same rule.
        cached: True when the reply came from the response cache (no request was sent, no tokens spent).
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False


@dataclass(frozen=True)
class ChatRequest:
    """One request of a batch (:meth:`OpenAICompatibleBackend.complete_many`, ``estimate``).

    Attributes:
        messages: the chat messages.
        role: the EnvGen role asking (``code_writer``, ``reviser``...): bookkeeping only, not sent.
        max_tokens: most completion tokens.
        temperature: sampling temperature (0.0 = greedy, the reproducible default).
    """

    messages: Sequence[Message]
    role: str = "default"
    max_tokens: int = 1024
    temperature: float = 0.0


@runtime_checkable
class ChatBackend(Protocol):
    """What EnvGen needs from a model: one chat completion per call.

    ``complete(messages, role=..., max_tokens=..., temperature=0.0) -> Completion``. Implementations
    raise :class:`BudgetExceeded`, :class:`EndpointUnreachable`, :class:`MalformedReply`,
    :class:`RequestRejected` or :class:`BackendConfigError` (all :class:`LLMError`), never a client
    library's own exception.
    """

    def complete(
        self, messages: Sequence[Message], *, role: str, max_tokens: int, temperature: float = 0.0
    ) -> Completion: ...


def concurrency_of(backend: Any) -> int:
    """Requests ``backend`` serves at once: its ``max_concurrency`` (an OpenAI-compatible endpoint: the
    setting; a model loaded in this process: 1), or 1 for None or a backend that declares none. Stages that
    ask a model run this many conversations in threads.

    Raises:
        BackendConfigError: ``max_concurrency`` is not a whole number >= 1.
    """
    if backend is None:
        return 1
    value = getattr(backend, "max_concurrency", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BackendConfigError(f"{type(backend).__name__}.max_concurrency={value!r} must be a whole number >= 1")
    return value


def estimate_tokens(text: str) -> int:
    """Rough token count of ``text``: ``ceil(len(text) / 4)`` (characters per token of English/code)."""
    return -(-len(text) // 4)


def estimate_prompt_tokens(messages: Sequence[Message]) -> int:
    """Estimated prompt tokens of ``messages``: chars/4 of every content, plus 4 per message of framing."""
    total = 0
    for m in messages:
        content = m.get("content") or ""
        if not isinstance(content, str):
            content = json.dumps(content, sort_keys=True, ensure_ascii=False)
        total += estimate_tokens(content) + 4
    return total


def canonical_request(model: str, messages: Sequence[Message], params: Mapping[str, Any]) -> str:
    """Canonical JSON (sorted keys, no spaces, UTF-8) of one request: what the cache key hashes."""
    body = {"model": model, "messages": [dict(m) for m in messages], "params": dict(params)}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(model: str, messages: Sequence[Message], params: Mapping[str, Any]) -> str:
    """sha256 hex of :func:`canonical_request`: the response-cache key."""
    return hashlib.sha256(canonical_request(model, messages, params).encode()).hexdigest()
