"""Run a policy's tool calls for one RL task in the sandbox and score them with the hybrid reward.

One :class:`TaskRunner` owns a long-lived :class:`~envfactory_assets.runtime.sandbox.SandboxWorker` with
the environments' code loaded once; each task (an ``rl_dataset`` row) gets its own episode opened on a
deep copy of the row's initial state, so rollouts never share state (docs/design.md,
Runtime: many episodes inside one worker, not one process per episode). GRPO rollouts and evaluations
both go through :meth:`TaskEpisode.call`, so training and evaluation execute tool calls the same way.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from envfactory_assets.runtime.canonical import canonical_json, state_hash
from envfactory_assets.runtime.errors import SandboxError
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker
from envfactory_assets.tooluse.reward import RewardBreakdown, hybrid_reward, valid_reward
from envfactory_assets.tooluse.tool_calls import inert_tags

MAX_RESULT_CHARS = 2000


def _tool_names(tools: Iterable[Mapping[str, Any]]) -> set[str]:
    names = set()
    for tool in tools:
        fn = tool.get("function", tool)
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


def result_text(result: Mapping[str, Any]) -> str:
    """A sandbox call result as the text the model sees: the tool's output as JSON, or
    ``{"error": type, "message": ...}``, with its tags made inert (:func:`~.tool_calls.inert_tags`), cut at
    :data:`MAX_RESULT_CHARS`."""
    if result.get("ok"):
        text = json.dumps(result.get("output"), ensure_ascii=False, sort_keys=True)
    else:
        error = result.get("error") or {}
        text = json.dumps(
            {"error": error.get("type", "error"), "message": error.get("message", "")}, ensure_ascii=False
        )
    text = inert_tags(text)
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "...(truncated)"


class ArgumentsTooLarge(ValueError):
    """A call's arguments past the size bound :meth:`TaskEpisode.call` was given: ``size`` and ``limit`` in
    bytes of JSON. The call counted as malformed and did not run."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"the call's arguments are {size} bytes as JSON, past max_argument_bytes={limit}; the call did not run "
            "and counts as malformed"
        )
        self.size = size
        self.limit = limit


class TaskEpisode:
    """One rollout of one RL task: calls go to the task's own episode in the worker.

    Attributes:
        row: the ``rl_dataset`` row (``env_ids``, ``tools``, ``gold_calls``, ``masked_arguments``,
            ``initial_state``, ``final_state``).
        calls: every well-formed call executed so far, ``[{"name", "arguments"}]``, in order.
        n_malformed: calls refused before execution (unknown tool, arguments not an object) plus any the
            caller reports with :meth:`add_malformed` (text that did not parse as a call).
        replies: the text of each assistant turn outside its tool-call blocks, as the caller reports it with
            :meth:`add_reply` (the reward reads their join, :attr:`reply`).
    """

    def __init__(self, worker: SandboxWorker, row: Mapping[str, Any]) -> None:
        self.row = row
        self._worker = worker
        self._tools = _tool_names(row["tools"])
        self.calls: list[dict[str, Any]] = []
        self.n_malformed = 0
        self.replies: list[str] = []
        self._lost = False
        self._episode: str | None = worker.open_episode(copy.deepcopy(row["initial_state"]))

    def call(self, name: str, arguments: Any, max_argument_bytes: int | None = None) -> str:
        """Execute one tool call and return its result as text for the conversation.

        Args:
            name: the tool's name.
            arguments: the call's arguments (a JSON object).
            max_argument_bytes: when given, the largest the arguments may be as JSON, bytes (a server's bound
                on what one client's call may hand the sandbox).

        Returns a JSON text: the tool's output, or ``{"error": type, "message": ...}`` when the tool
        failed, the tool is not offered by this task, or the arguments are not a JSON object or not plain JSON
        (an integer past 64 bits, NaN or an infinity, nesting past the encoder's depth): the last ones count as
        malformed calls and are not executed.

        Raises:
            ArgumentsTooLarge: the arguments are past ``max_argument_bytes`` as JSON; the call counts as
                malformed and did not run.
        """
        if name not in self._tools:
            self.n_malformed += 1
            return json.dumps({"error": "unknown_tool", "message": f"no tool named {str(name)[:80]!r}"})
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            self.n_malformed += 1
            return json.dumps({"error": "invalid_arguments", "message": "arguments must be a JSON object"})
        try:
            # the reward and the worker read the arguments as canonical JSON: a model's integer past 64 bits, NaN
            # or nesting past the encoder's depth is a malformed call, not a crash of the rollout or its reward
            size = len(canonical_json(dict(arguments)))
        except (TypeError, ValueError, RecursionError) as exc:
            self.n_malformed += 1
            message = f"arguments are not plain JSON ({str(exc)[:120]}); the call did not run"
            return json.dumps({"error": "invalid_arguments", "message": message})
        if max_argument_bytes is not None and size > max_argument_bytes:
            self.n_malformed += 1
            raise ArgumentsTooLarge(size, max_argument_bytes)
        self.calls.append({"name": name, "arguments": dict(arguments)})
        if self._episode is None or self._lost:
            return json.dumps({"error": "episode_lost", "message": "the environment is no longer available"})
        try:
            result = self._worker.call(self._episode, name, dict(arguments))
        except SandboxError as exc:
            self._lost = True
            return json.dumps({"error": "episode_lost", "message": str(exc)[:500]})
        if not result.get("ok") and (result.get("error") or {}).get("episode_lost"):
            self._lost = True
        return result_text(result)

    @property
    def lost(self) -> bool:
        """Whether the episode is gone (its worker died, restarted or discarded it): known from the sandbox's own
        answer, never from a tool's output text, which may say anything."""
        return self._lost

    def add_malformed(self, n: int = 1) -> None:
        """Count ``n`` malformed calls found by the caller's parser (never executed)."""
        if n < 0:
            raise ValueError(f"add_malformed: n must be >= 0, got {n}")
        self.n_malformed += n

    def add_reply(self, text: str) -> None:
        """Record the text of one assistant turn outside its tool-call and reasoning blocks (may be empty).

        Raises:
            ValueError: ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise ValueError(f"add_reply: text must be a string, got {type(text).__name__}")
        self.replies.append(text)

    @property
    def reply(self) -> str:
        """Every non-blank reply recorded so far, stripped and joined by a newline ("" when none)."""
        return "\n".join(r.strip() for r in self.replies if r.strip())

    def final_states(self) -> dict[str, Any] | None:
        """``{env_id: saved state}`` of the episode now, or None when the episode was lost."""
        if self._episode is None or self._lost:
            return None
        try:
            return self._worker.save(self._episode)
        except SandboxError:
            self._lost = True
            return None

    def final_state_hashes(self) -> dict[str, str]:
        """``{env_id: state hash}`` of the episode now; empty when the episode was lost."""
        saved = self.final_states()
        return {} if saved is None else {env_id: state_hash(state) for env_id, state in saved.items()}

    def reward(self) -> RewardBreakdown:
        """The hybrid reward of the calls made so far against the row's gold calls and final state.

        Raises:
            InvalidReward: the reward is not a finite number in ``[0, MAX_REWARD]`` (never passed on).
        """
        gold = {env_id: state_hash(state) for env_id, state in self.row["final_state"].items()}
        breakdown = hybrid_reward(
            self.row["gold_calls"],
            self.calls,
            self.final_state_hashes(),
            gold,
            masked_arguments=self.row.get("masked_arguments") or (),
            n_malformed=self.n_malformed,
            executed_calls=self.row.get("executed_calls") or (),
        )
        valid_reward(breakdown.reward, f"the reward of rl row {self.row.get('id', '?')!r}")
        return breakdown

    def close(self) -> None:
        """Free the episode in the worker (idempotent)."""
        if self._episode is not None:
            self._worker.close_episode(self._episode)
            self._episode = None


class TaskRunner:
    """A sandbox worker with the environments of many RL tasks loaded, handing out :class:`TaskEpisode`.

    Args:
        environments: ``{env_id: environment dict}`` (at least the ``source`` of every env id the tasks use).
        limits: sandbox limits of the worker (default :class:`SandboxLimits`).

    Raises:
        KeyError: from :meth:`episode` when a row uses an env id not in ``environments``.
        SandboxError: an environment's code is rejected, or a row's initial state does not load.
    """

    def __init__(self, environments: Mapping[str, Mapping[str, Any]], limits: SandboxLimits | None = None) -> None:
        self._environments = environments
        self._worker = SandboxWorker(limits or SandboxLimits())
        self._loaded: set[str] = set()

    def __enter__(self) -> TaskRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def episode(self, row: Mapping[str, Any]) -> TaskEpisode:
        """Open a fresh episode on the row's initial state (loading its environments on first use)."""
        for env_id in row["env_ids"]:
            if env_id not in self._environments:
                raise KeyError(f"rl row {row.get('id', '?')}: environment {env_id!r} is not available")
            if env_id not in self._loaded:  # the worker itself re-loads them after a restart
                self._worker.load_environment(
                    env_id,
                    self._environments[env_id]["source"],
                    origin=self._environments[env_id].get("origin", "untrusted"),
                )
                self._loaded.add(env_id)
        return TaskEpisode(self._worker, row)

    def close(self) -> None:
        """Stop the worker process."""
        self._worker.close()
