"""A chat backend for any OpenAI-compatible endpoint (OpenAI, vLLM, llama.cpp server, TGI, ...).

It adds what a pipeline needs around the ``openai`` client: its own retries with exponential backoff
(429, 5xx, connection errors; never other 4xx), token accounting from the response usage, a SQLite
response cache, a per-instance token budget checked before each call, and bounded concurrency for
batches.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from envfactory_assets.llm.base import (
    BackendConfigError,
    BudgetExceeded,
    ChatRequest,
    Completion,
    EndpointUnreachable,
    MalformedReply,
    Message,
    RequestRejected,
    canonical_request,
    estimate_prompt_tokens,
    estimate_tokens,
    request_key,
)
from envfactory_assets.llm.cache import ResponseCache

#: Seconds one request may take, and requests in flight at once, unless the caller says otherwise.
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_CONCURRENCY = 4


class OpenAICompatibleBackend:
    """Chat completions from an OpenAI-compatible HTTP endpoint.

    Args:
        base_url: the endpoint's API root, e.g. ``http://127.0.0.1:8000/v1`` (required).
        model: the model name the endpoint serves (required).
        api_key: bearer token; default ``$OPENAI_API_KEY``, else ``"none"`` (local servers ignore it).
        timeout_s: seconds one HTTP request may take before it counts as a connection failure.
        max_retries: retries after the first attempt for 429, 5xx and connection errors (0 = none).
        backoff_s: first backoff in seconds; attempt ``n`` waits ``backoff_s * 2**n`` (capped at
            ``max_backoff_s``), or the server's ``Retry-After`` when it is shorter than the cap.
        max_backoff_s: longest wait between attempts, seconds.
        max_concurrency: most requests in flight at once from this instance (``complete_many`` and
            concurrent ``complete`` callers share it).
        cache_path: SQLite file of the response cache; None disables caching.
        token_budget: most tokens (prompt + completion, cached replies excluded) this instance may
            spend; None = unlimited. A call is refused *before* it is sent when the tokens used so far,
            plus those reserved by calls in flight, plus its estimate (prompt chars/4 + ``max_tokens``)
            exceed the budget.

    Raises:
        BackendConfigError: a setting is missing or out of range (the message names it).
    """

    def __init__(
        self,
        base_url: str | None,
        model: str | None,
        api_key: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        cache_path: str | Path | None = None,
        token_budget: int | None = None,
    ) -> None:
        if not base_url or not str(base_url).strip():
            raise BackendConfigError(
                "OpenAICompatibleBackend: base_url is required (the endpoint's API root, e.g. http://127.0.0.1:8000/v1)"
            )
        if not str(base_url).startswith(("http://", "https://")):
            raise BackendConfigError(
                f"OpenAICompatibleBackend: base_url={base_url!r} must start with http:// or https://"
            )
        if not model or not str(model).strip():
            raise BackendConfigError("OpenAICompatibleBackend: model is required (the model name the endpoint serves)")
        if timeout_s <= 0:
            raise BackendConfigError(f"OpenAICompatibleBackend: timeout_s={timeout_s} must be positive")
        if max_retries < 0:
            raise BackendConfigError(f"OpenAICompatibleBackend: max_retries={max_retries} must be >= 0")
        if max_concurrency < 1:
            raise BackendConfigError(f"OpenAICompatibleBackend: max_concurrency={max_concurrency} must be >= 1")
        if token_budget is not None and token_budget <= 0:
            raise BackendConfigError(f"OpenAICompatibleBackend: token_budget={token_budget} must be positive or None")
        if backoff_s < 0 or max_backoff_s < 0:
            raise BackendConfigError("OpenAICompatibleBackend: backoff_s and max_backoff_s must be >= 0")
        import openai  # imported here so the package imports without the client installed

        self._openai = openai
        self.base_url = str(base_url).rstrip("/")
        self.model = str(model)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.max_concurrency = int(max_concurrency)
        self.token_budget = token_budget
        self.cache = ResponseCache(cache_path) if cache_path is not None else None
        key = api_key or os.environ.get("OPENAI_API_KEY") or "none"
        # Retries are ours (to count them and to honour the no-retry-on-4xx rule): the client's are off.
        self._client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout_s, max_retries=0)
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._lock = threading.Lock()
        self._used = 0  # tokens spent by finished calls
        self._reserved = 0  # tokens reserved by calls in flight
        self._stats = {"calls": 0, "cached": 0, "retries": 0, "prompt_tokens": 0, "completion_tokens": 0}
        self._by_role: dict[str, dict[str, int]] = {}
        self._in_flight: dict[str, threading.Event] = {}  # request keys being asked, when caching

    # ------------------------------------------------------------------------------------------ accounting

    @property
    def tokens_used(self) -> int:
        """Tokens (prompt + completion) spent by finished, uncached calls."""
        with self._lock:
            return self._used

    def usage(self) -> dict[str, Any]:
        """Counters so far: ``calls`` (HTTP calls that returned), ``cached`` (cache hits), ``retries``,
        ``prompt_tokens``, ``completion_tokens``, ``token_budget``, and ``by_role`` (the same per role)."""
        with self._lock:
            return {
                **self._stats,
                "token_budget": self.token_budget,
                "by_role": {r: dict(v) for r, v in self._by_role.items()},
            }

    def _params(self, max_tokens: int, temperature: float) -> dict[str, Any]:
        return {"max_tokens": int(max_tokens), "temperature": float(temperature)}

    def _reserve(self, needed: int, role: str) -> None:
        with self._lock:
            if self.token_budget is not None and self._used + self._reserved + needed > self.token_budget:
                raise BudgetExceeded(self.token_budget, self._used + self._reserved, needed, role)
            self._reserved += needed

    def _settle(self, reserved: int, completion: Completion | None, role: str) -> None:
        with self._lock:
            self._reserved -= reserved
            if completion is None:
                return
            spent = completion.prompt_tokens + completion.completion_tokens
            self._used += spent
            self._stats["calls"] += 1
            self._stats["prompt_tokens"] += completion.prompt_tokens
            self._stats["completion_tokens"] += completion.completion_tokens
            per = self._by_role.setdefault(role, {"calls": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0})
            per["calls"] += 1
            per["prompt_tokens"] += completion.prompt_tokens
            per["completion_tokens"] += completion.completion_tokens

    # ------------------------------------------------------------------------------------------- calls

    def complete(
        self, messages: Sequence[Message], *, role: str, max_tokens: int = 1024, temperature: float = 0.0
    ) -> Completion:
        """One chat completion (see :class:`~envfactory_assets.llm.base.ChatBackend`).

        Returns the cached reply (``cached=True``, no request, no tokens) when the same model, messages
        and parameters were answered before. A reply with empty content is returned (``text == ""``) but
        not cached, so the next call asks again.

        Safe to call from several threads: at most ``max_concurrency`` requests are in flight, and with a
        cache a request equal to one in flight waits for that one's reply instead of being sent again, so
        the replies and the cache are those of the same calls made one after another.

        Raises:
            BudgetExceeded: before sending, when the call could take the backend past ``token_budget``.
            RequestRejected: the endpoint answered 4xx other than 429 (not retried).
            EndpointUnreachable: connection errors, timeouts, 429 or 5xx on every one of the
                ``1 + max_retries`` attempts.
            MalformedReply: the last attempt got HTTP 200 with a body that is not a chat completion (not
                JSON, no ``choices``, no message, non-string content); such bodies are retried like 5xx.

        Every message names ``base_url``, ``model`` and the attempt (``attempt 2 of 5``).
        """
        if max_tokens < 1:
            raise BackendConfigError(f"max_tokens={max_tokens} must be >= 1")
        messages = [dict(m) for m in messages]
        params = self._params(max_tokens, temperature)
        key = request_key(self.model, messages, params)
        if self.cache is None:
            return self._fetch(messages, params, role, max_tokens)
        while True:
            hit = self.cache.get(key)
            if hit is not None:
                self._count_cached(role)
                return hit
            # One request per key at a time: a caller asking what another caller's request in flight asks
            # waits for its reply, as it would have found it in the cache had the two come one after the
            # other (two requests sent at once could get two different replies, and which one the cache
            # keeps would depend on which came back last).
            with self._lock:
                flight = self._in_flight.get(key)
                leader = flight is None
                if leader:
                    flight = self._in_flight[key] = threading.Event()
            if not leader:
                flight.wait()
                continue  # answered from the cache now; a failed or empty reply was not cached: ask again
            try:
                hit = self.cache.get(key)  # a leader that finished since this caller's look-up stored it
                if hit is not None:
                    self._count_cached(role)
                    return hit
                completion = self._fetch(messages, params, role, max_tokens)
                if completion.text:
                    self.cache.put(
                        key,
                        completion,
                        model=self.model,
                        role=role,
                        request=canonical_request(self.model, messages, params),
                    )
                return completion
            finally:
                with self._lock:
                    del self._in_flight[key]
                flight.set()

    def _count_cached(self, role: str) -> None:
        with self._lock:
            self._stats["cached"] += 1
            self._by_role.setdefault(role, {"calls": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0})[
                "cached"
            ] += 1

    def _fetch(self, messages: list[dict[str, Any]], params: dict[str, Any], role: str, max_tokens: int) -> Completion:
        """One request (budget reserved before, settled after), in one of the ``max_concurrency`` slots."""
        needed = estimate_prompt_tokens(messages) + int(max_tokens)
        self._reserve(needed, role)
        completion = None
        try:
            with self._slots:
                completion = self._send(messages, params, role)
        finally:
            self._settle(needed, completion, role)
        return completion

    def _send(self, messages: list[dict[str, Any]], params: dict[str, Any], role: str) -> Completion:
        openai = self._openai
        total = self.max_retries + 1
        where = f"base_url={self.base_url!r} (model={self.model!r})"
        last = ""
        malformed = False
        for attempt in range(1, total + 1):
            retry_after: float | None = None
            try:
                # The raw body, parsed here: the client's own parsing turns a non-JSON body into a bare
                # JSONDecodeError and a reply without choices into an empty completion.
                raw = self._client.chat.completions.with_raw_response.create(
                    model=self.model, messages=messages, **params
                )
                body = raw.content
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status != 429 and status < 500:
                    raise RequestRejected(
                        f"{self.base_url} refused the {role!r} request for model={self.model!r} with HTTP {status} "
                        f"on attempt {attempt} of {total}: {_error_message(exc)} (not retried; check model and "
                        f"max_tokens)",
                        status,
                    ) from exc
                last, malformed = f"attempt {attempt} of {total}: HTTP {status}: {_error_message(exc)}", False
                retry_after = _retry_after(exc)
            except openai.APIConnectionError as exc:  # includes APITimeoutError
                last, malformed = f"attempt {attempt} of {total}: {type(exc).__name__}: {exc}", False
            else:
                try:
                    return self._completion(body, messages)
                except _NotACompletion as exc:
                    last, malformed = f"attempt {attempt} of {total}: {exc}", True
            if attempt < total:
                wait = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
                if retry_after is not None:
                    wait = min(max(wait, retry_after), self.max_backoff_s)
                with self._lock:
                    self._stats["retries"] += 1
                time.sleep(wait)
        if malformed:
            raise MalformedReply(
                f"{where} sent no usable chat completion in {total} attempt(s) (max_retries={self.max_retries}); "
                f"last error: {last}"
            )
        raise EndpointUnreachable(
            f"{where} did not answer after {total} attempt(s) (max_retries={self.max_retries}, "
            f"timeout_s={self.timeout_s}); last error: {last}"
        )

    @staticmethod
    def _completion(body: bytes, messages: list[dict[str, Any]]) -> Completion:
        """The :class:`Completion` of a chat-completion response body.

        Raises:
            _NotACompletion: the body is not JSON, not an object, has no ``choices``, its first choice has
                no message, or the content is neither a string nor null.
        """
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
            raise _NotACompletion(f"the response body is not JSON ({exc}); it starts {body[:80]!r}") from None
        if not isinstance(data, dict):
            raise _NotACompletion(f"the response body is a JSON {type(data).__name__}, not a chat completion object")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            said = f" (it says: {_body_message(data)})" if data.get("error") else ""
            raise _NotACompletion(f"the reply has no choices{said}")
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        if not isinstance(message, dict):
            raise _NotACompletion("choices[0] has no message object")
        text = message.get("content")
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise _NotACompletion(f"choices[0].message.content is a JSON {type(text).__name__}, not a string")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        return Completion(
            text=text,
            prompt_tokens=prompt if _count(prompt) else estimate_prompt_tokens(messages),
            completion_tokens=completion if _count(completion) else estimate_tokens(text),
            cached=False,
        )

    def complete_many(self, requests: Sequence[ChatRequest], *, return_exceptions: bool = False) -> list[Any]:
        """Run ``requests`` with at most ``max_concurrency`` in flight; replies in request order.

        Args:
            requests: the batch.
            return_exceptions: put each failed request's :class:`LLMError` in its slot instead of
                raising the first one (after every request has finished).
        """

        def one(req: ChatRequest) -> Any:
            try:
                return self.complete(
                    req.messages, role=req.role, max_tokens=req.max_tokens, temperature=req.temperature
                )
            except Exception as exc:
                if return_exceptions:
                    return exc
                raise

        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(requests)), thread_name_prefix="llm") as pool:
            futures = [pool.submit(one, r) for r in requests]
            return [f.result() for f in futures]

    def estimate(self, requests: Sequence[ChatRequest]) -> dict[str, int]:
        """Dry run of a batch: nothing is sent.

        Returns:
            ``{"calls": requests that would be sent (not in the cache), "prompt_tokens_est": chars/4
            estimate of their prompts, "cached": requests the cache would answer, "max_completion_tokens":
            sum of their max_tokens}``.
        """
        calls = cached = prompt = most = 0
        for req in requests:
            key = request_key(
                self.model, [dict(m) for m in req.messages], self._params(req.max_tokens, req.temperature)
            )
            if self.cache is not None and key in self.cache:
                cached += 1
            else:
                calls += 1
                prompt += estimate_prompt_tokens(req.messages)
                most += req.max_tokens
        return {"calls": calls, "prompt_tokens_est": prompt, "cached": cached, "max_completion_tokens": most}

    def close(self) -> None:
        """Close the HTTP client and the cache."""
        self._client.close()
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> OpenAICompatibleBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OpenAICompatibleBackend(base_url={self.base_url!r}, model={self.model!r})"


class _NotACompletion(ValueError):
    """A 200 response whose body is not a usable chat completion; the message says what is wrong."""


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _body_message(body: dict[str, Any]) -> str:
    err = body.get("error", body)
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])[:300]
    return str(err)[:300]


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        return _body_message(body)
    return str(exc)[:300]


def _retry_after(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("retry-after")
    try:
        return max(float(value), 0.0) if value is not None else None
    except (TypeError, ValueError):
        return None
