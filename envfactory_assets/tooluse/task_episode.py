"""Run a policy's tool calls for one RL task in the sandbox and score them with the hybrid reward.

One :class:`TaskRunner` owns a long-lived :class:`~envfactory_assets.runtime.sandbox.SandboxWorker` with
the environments' code loaded once; each task (an ``rl_dataset`` row) is opened once on its initial state,
and every rollout gets its own fork of it (copy-on-write in the worker), so rollouts never share state
(docs/design.md, Runtime: many episodes inside one worker, not one process per episode). Final states are
hashed inside the worker; a state equal to the task's gold one (replayed once from its executed calls) or to
its initial one takes that state's hash, computed once, without being saved. GRPO rollouts and evaluations
both go through :meth:`TaskEpisode.call`, so training and evaluation execute tool calls the same way.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from envfactory_assets.runtime.canonical import canonical_json, state_hash
from envfactory_assets.runtime.errors import EpisodeLost, SandboxError
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


@dataclasses.dataclass
class OpenedTask:
    """A task opened in the worker once, for all its rollouts.

    Attributes:
        base: the episode on the row's initial state; never called, only forked.
        reference: the episode on the task's gold final state (the base replayed with the row's executed calls),
            or None; never called again.
        gold_hashes: ``{env_id: state hash}`` of the row's final state.
        initial_hashes: ``{env_id: state hash}`` of the row's initial state.
    """

    base: str
    reference: str | None
    gold_hashes: dict[str, str]
    initial_hashes: dict[str, str]


def open_task(
    worker: SandboxWorker, row: Mapping[str, Any], hashes: tuple[dict[str, str], dict[str, str]] | None = None
) -> OpenedTask:
    """Open ``row``'s base episode and its reference (see :class:`OpenedTask`) in ``worker``.

    Args:
        worker: the worker the task's environments are loaded in.
        row: an ``rl_dataset`` row (``initial_state``, ``executed_calls``, and ``final_state`` unless ``hashes``).
        hashes: ``(gold final, initial)`` ``{env_id: state hash}`` when the caller has them already (a server
            computes them once per task); by default they are computed from the row's states.

    Raises:
        SandboxError: the initial state does not load (a replayed call that fails only leaves no reference).
    """
    base = worker.open_episode(row["initial_state"], shared=True)
    reference: str | None = None
    calls = row.get("executed_calls") or ()
    if calls:
        reference = worker.fork(base)
        try:
            for call in calls:
                result = worker.call(reference, call["name"], call.get("arguments") or {})
                if not result.get("ok") and (result.get("error") or {}).get("episode_lost"):
                    reference = None
                    break
        except (SandboxError, KeyError, TypeError):
            if reference is not None:
                worker.close_episode(reference)
            reference = None
    if hashes is None:
        hashes = (
            {env_id: state_hash(state) for env_id, state in row["final_state"].items()},
            {env_id: state_hash(state) for env_id, state in row["initial_state"].items()},
        )
    return OpenedTask(base=base, reference=reference, gold_hashes=dict(hashes[0]), initial_hashes=dict(hashes[1]))


class OpenedTasks:
    """The tasks opened in one worker for their rollouts (:class:`OpenedTask`), the least recently used closed past
    ``capacity``: every rollout of an opened task is a fork of its base, and its gold and initial hashes are
    computed once. :class:`TaskRunner` and ``serve-openenv``'s session pool each keep one per worker.

    Args:
        worker: the worker (its environments loaded by the caller).
        capacity: how many tasks stay opened (two episodes each); 0 opens every rollout on its initial state.

    Raises:
        ValueError: ``capacity`` < 0.
    """

    def __init__(self, worker: SandboxWorker, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"OpenedTasks: capacity must be >= 0, got {capacity}")
        self._worker = worker
        self._capacity = capacity
        self._tasks: collections.OrderedDict[Any, OpenedTask] = collections.OrderedDict()

    def episode(
        self,
        row: Mapping[str, Any],
        key: Any,
        hashes: tuple[dict[str, str], dict[str, str]] | None = None,
    ) -> TaskEpisode:
        """A rollout of ``row``: a fork of its opened task (opened now on first use, and again when the worker
        restarted since), or, with no ``key`` or no capacity, an episode opened on its initial state.

        Args:
            row: the ``rl_dataset`` row (as :func:`open_task` reads it).
            key: what names the task's content (a row edited under the same id needs another key), or None.
            hashes: as :func:`open_task`.

        Raises:
            SandboxError: as :func:`open_task`.
        """
        if key is None or not self._capacity:
            return TaskEpisode(self._worker, row)
        task = self._tasks.get(key)
        if task is not None:
            self._tasks.move_to_end(key)
            try:
                return TaskEpisode(self._worker, row, task)
            except EpisodeLost:  # the worker restarted: open the task again
                self.forget(key)
        task = open_task(self._worker, row, hashes)
        self._tasks[key] = task
        while len(self._tasks) > self._capacity:
            self.forget(next(iter(self._tasks)))
        return TaskEpisode(self._worker, row, task)

    def __len__(self) -> int:
        """How many tasks are opened now."""
        return len(self._tasks)

    def forget(self, key: Any) -> None:
        """Close the opened task ``key`` (a no-op when it is not opened); its rollouts go on."""
        task = self._tasks.pop(key, None)
        if task is None:
            return
        self._worker.close_episode(task.base)
        if task.reference is not None:
            self._worker.close_episode(task.reference)


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

    def __init__(self, worker: SandboxWorker, row: Mapping[str, Any], task: OpenedTask | None = None) -> None:
        self.row = row
        self._worker = worker
        self._task = task
        self._tools = _tool_names(row["tools"])
        self.calls: list[dict[str, Any]] = []
        self.n_malformed = 0
        self.replies: list[str] = []
        self._lost = False
        if task is None:
            self._episode: str | None = worker.open_episode(copy.deepcopy(row["initial_state"]))
        else:
            self._episode = worker.fork(task.base)

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
        """``{env_id: state hash}`` of the episode now, computed in the worker; empty when the episode was lost."""
        if self._episode is None or self._lost:
            return {}
        task = self._task
        references = [] if task is None else [r for r in (task.reference, task.base) if r is not None]
        try:
            return self._worker.state_hashes(self._episode, references)
        except EpisodeLost as exc:
            if exc.episode_id in references and self._worker.is_open(self._episode):
                if exc.episode_id == task.reference:
                    task.reference = None
                    return self.final_state_hashes()
                return self._worker.state_hashes(self._episode, [r for r in references if r != exc.episode_id])
            self._lost = True
            return {}
        except SandboxError:
            self._lost = True
            return {}

    @property
    def gold_state_hashes(self) -> dict[str, str]:
        """``{env_id: state hash}`` of the row's gold final state (computed once per task)."""
        if self._task is not None:
            return self._task.gold_hashes
        return {env_id: state_hash(state) for env_id, state in self.row["final_state"].items()}

    @property
    def initial_state_hashes(self) -> dict[str, str]:
        """``{env_id: state hash}`` of the row's initial state (computed once per task)."""
        if self._task is not None:
            return self._task.initial_hashes
        return {env_id: state_hash(state) for env_id, state in self.row["initial_state"].items()}

    def reward(self) -> RewardBreakdown:
        """The hybrid reward of the calls made so far against the row's gold calls and final state.

        Raises:
            InvalidReward: the reward is not a finite number in ``[0, MAX_REWARD]`` (never passed on).
        """
        breakdown = hybrid_reward(
            self.row["gold_calls"],
            self.calls,
            self.final_state_hashes(),
            self.gold_state_hashes,
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
        open_tasks: how many tasks stay opened in the worker for their next rollouts (:class:`OpenedTask`: two
            episodes each); the least recently used is closed past it. A row without a string ``id`` is not
            kept: each of its episodes is opened on its initial state.

    Raises:
        KeyError: from :meth:`episode` when a row uses an env id not in ``environments``.
        SandboxError: an environment's code is rejected, or a row's initial state does not load.
    """

    def __init__(
        self, environments: Mapping[str, Mapping[str, Any]], limits: SandboxLimits | None = None, open_tasks: int = 32
    ) -> None:
        if open_tasks < 0:
            raise ValueError(f"TaskRunner: open_tasks must be >= 0, got {open_tasks}")
        self._environments = environments
        self._worker = SandboxWorker(limits or SandboxLimits())
        self._loaded: set[str] = set()
        self._open_tasks = open_tasks
        self._tasks = OpenedTasks(self._worker, open_tasks)

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
        return self._tasks.episode(row, self._task_key(row))

    def _task_key(self, row: Mapping[str, Any]) -> tuple[str, str] | None:
        """The row's id and a fingerprint of its states (a row edited under the same id is another task)."""
        if not self._open_tasks or not isinstance(row.get("id"), str) or "final_state" not in row:
            return None
        try:
            content = orjson.dumps([row["initial_state"], row["final_state"], row.get("executed_calls")])
        except TypeError:
            return None
        return row["id"], hashlib.blake2b(content, digest_size=16).hexdigest()

    def close(self) -> None:
        """Stop the worker process."""
        self._worker.close()
