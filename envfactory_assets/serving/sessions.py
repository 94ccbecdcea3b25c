"""Many isolated episodes in one server process, over long-lived sandbox workers.

A :class:`SessionPool` holds the open episodes (sessions) of one server: each is one RL task's rollout on its
own copy of the task's initial state, opened in one of the pool's :class:`~envfactory_assets.runtime.sandbox.
SandboxWorker` sets (each keeps one worker process per environment, its trust domain, under bubblewrap,
seccomp and its control group), so episodes never share state and no episode starts a process of its own
(docs/design.md, Runtime: many episodes inside one worker). Each worker set opens a task once and keeps it for
the task's next episodes (``open_tasks`` of them, as the trainer's ``TaskRunner`` does): an episode is then a
copy-on-write fork of the task's base, its initial state loaded and validated once, and the task's gold and
initial state hashes are computed once.

- At most ``max_sessions`` episodes are open at once (default 256: GRPO's ``num_generations`` x a batch of
  32); one more is refused with a ``session_capacity`` error, and the caller may retry once one ends.
- An episode with no request for ``idle_timeout_s`` is closed (``episode_expired`` afterwards), by a reaper
  thread and before every open, so abandoned episodes never hold the cap.
- A worker process that dies (crash, kill, a limit) loses only the episodes with a part in it: their next
  step ends them with an ``episode_lost`` error and no reward; every other episode goes on, and the next
  episode of that environment starts a fresh process.

Each set's worker runs one request at a time (:class:`SandboxWorker`), so ``workers`` sets run that many tool
calls at once; episodes go to the set with the fewest open. Every request to a set runs on that set's own
long-lived thread: a worker process dies with the *thread* that started it (bubblewrap's ``--die-with-parent``
is the kernel's parent-death signal, which follows the starting thread), and a server's request threads come
and go (OpenEnv gives each WebSocket connection a thread of its own and ends it with the connection).
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from envfactory_assets.runtime.errors import SandboxError, WorkerCrashed
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker
from envfactory_assets.serving.errors import (
    BadRequest,
    EpisodeConflict,
    EpisodeDone,
    EpisodeExpired,
    EpisodeStartFailed,
    SessionCapacityError,
    UnknownEpisode,
)
from envfactory_assets.serving.outcome import Outcome, RewardFunction, episode_outcome, training_reward_of
from envfactory_assets.serving.serve_env_settings import SessionSettings
from envfactory_assets.serving.tasks import TaskSet
from envfactory_assets.tooluse.task_episode import ArgumentsTooLarge, OpenedTasks, TaskEpisode
from envfactory_assets.tooluse.tool_calls import parse_tool_calls

#: Ids of ended episodes remembered, so a late request says why its episode is gone.
_GONE_REMEMBERED = 10_000


@dataclasses.dataclass
class StepResult:
    """What one reset or step gives back (transport-free; the OpenEnv observation is made from it).

    Attributes:
        episode_id, task_id: the episode and its task.
        prompt, tools: on a reset, the task's conversation so far and its OpenAI function tools.
        step_count: tool calls and malformed calls so far.
        n_calls, n_malformed: well-formed calls executed, and malformed calls counted, so far.
        tool_name, result: the call and its result text, exactly as a policy sees it in training.
        error: ``{"type", "message"}`` when the step was not a plain tool result.
        done: the episode has ended (final answer, step limit, lost worker); ``end_reason`` says which.
        reward, reward_breakdown, state_diff: set when the episode ended with a reward.
    """

    episode_id: str
    task_id: str
    prompt: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    step_count: int = 0
    tool_name: str | None = None
    result: str | None = None
    error: dict[str, Any] | None = None
    n_calls: int = 0
    n_malformed: int = 0
    done: bool = False
    end_reason: str | None = None
    reward: float | None = None
    reward_breakdown: dict[str, Any] | None = None
    state_diff: dict[str, Any] | None = None


class Session:
    """One open episode: its task, its :class:`TaskEpisode` in one worker set, and its clock."""

    def __init__(self, episode_id: str, task_id: str, episode: TaskEpisode, shard: int, now: float) -> None:
        self.episode_id = episode_id
        self.task_id = task_id
        self.episode = episode
        self.shard = shard
        self.created_at = now
        self.last_used = now
        self.step_count = 0
        self.closed = False
        self.lock = threading.Lock()

    @property
    def row(self) -> Mapping[str, Any]:
        return self.episode.row


def _episode_id(value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 255 or not value.isprintable():
        raise BadRequest(f"episode_id must be 1-255 printable characters, got {str(value)[:80]!r}")
    return value


class SessionPool:
    """The open episodes of one server process.

    Args:
        tasks: the served tasks and their environments.
        settings: the cap, the idle timeout, the step and argument limits, the worker sets.
        limits: the sandbox limits of every worker (default :class:`SandboxLimits`).
        reward_fn: the reward of an ended episode (default: the training reward,
            :func:`~.outcome.training_reward_of`).
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        tasks: TaskSet,
        settings: SessionSettings | None = None,
        limits: SandboxLimits | None = None,
        reward_fn: RewardFunction = training_reward_of,
        clock: Any = time.monotonic,
    ) -> None:
        self.tasks = tasks
        self.settings = settings or SessionSettings()
        self._workers = [SandboxWorker(limits) for _ in range(self.settings.workers)]
        self._loaded: list[set[str]] = [set() for _ in self._workers]
        # each worker set's opened tasks: every episode of a task forks its base, as the trainer's TaskRunner does
        self._opened = [OpenedTasks(worker, self.settings.open_tasks) for worker in self._workers]
        # one long-lived thread per worker set runs every request to it (module docstring: parent-death signal)
        self._threads = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"serve-openenv-workers{i}")
            for i in range(len(self._workers))
        ]
        self._reward_fn = reward_fn
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._reserved: dict[str, int] = {}  # episode id -> worker set, while its episode opens
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._rng = random.Random()
        self._reaper: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------------
    def __enter__(self) -> SessionPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start_reaper(self) -> None:
        """Close idle episodes on a daemon thread, every quarter of the idle timeout (at most every 5 s)."""
        if self._reaper is not None:
            return
        interval = min(max(self.settings.idle_timeout_s / 4, 0.05), 5.0)

        def run() -> None:
            while not self._stop.wait(interval):
                self.expire_idle()

        self._reaper = threading.Thread(target=run, daemon=True, name="serve-openenv-reaper")
        self._reaper.start()

    def close(self) -> None:
        """Close every episode and stop every worker process. Safe to call twice."""
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join(timeout=10)
        with self._lock:
            self._closed = True
            self._sessions.clear()
        for worker in self._workers:
            worker.close()
        for thread in self._threads:
            thread.shutdown(wait=True)

    # -- introspection -------------------------------------------------------------------------------
    @property
    def open_count(self) -> int:
        """Episodes open now (and being opened)."""
        with self._lock:
            return len(self._sessions) + len(self._reserved)

    @property
    def opened_tasks(self) -> int:
        """Tasks opened in the worker sets for their next episodes (a task counts once per worker set)."""
        return sum(len(opened) for opened in self._opened)

    def worker_pids(self, episode_id: str) -> dict[str, int]:
        """``{env_id: process id}`` of the running worker processes an open episode has a part in."""
        session = self._get(episode_id)
        pids = self._workers[session.shard].pids
        return {e: pids[e] for e in session.row["env_ids"] if e in pids}

    def session(self, episode_id: str) -> Session:
        """The open episode ``episode_id``.

        Raises:
            UnknownEpisode, EpisodeExpired, EpisodeDone: no such open episode (the type says why).
        """
        return self._get(episode_id)

    # -- opening and closing -------------------------------------------------------------------------
    def open(
        self,
        task_id: str | None = None,
        seed: int | None = None,
        split: str | None = None,
        episode_id: str | None = None,
    ) -> StepResult:
        """Open an episode of ``task_id``, or of a task drawn with ``seed`` (among ``split``'s rows when given).

        Args:
            task_id: an ``rl_dataset`` row id.
            seed: draws the task when ``task_id`` is None (same seed, same task).
            split: ``"train"`` or ``"held_out"``, to draw from one split only.
            episode_id: the id the caller wants (default: a fresh random one).

        Returns:
            The :class:`StepResult` of the reset (step 0, with the task's ``prompt`` and ``tools``).

        Raises:
            UnknownTask, BadRequest: no such task, or bad arguments.
            EpisodeConflict: ``episode_id`` is open already.
            SessionCapacityError: ``max_sessions`` episodes are open.
            EpisodeStartFailed: the task's environments or initial state could not be loaded in the sandbox.
        """
        if task_id is None:
            task_id = self.tasks.sample(seed, split, self._rng)
        row = self.tasks.episode_row(task_id)
        eid = _episode_id(episode_id) if episode_id is not None else uuid.uuid4().hex
        self.expire_idle()
        with self._lock:
            if self._closed:
                raise EpisodeStartFailed("the server is shutting down")
            if eid in self._sessions or eid in self._reserved:
                raise EpisodeConflict(f"episode {eid[:80]!r} is open already; reset with another episode_id")
            held = len(self._sessions) + len(self._reserved)
            if held >= self.settings.max_sessions:
                raise SessionCapacityError(
                    f"this server holds {held} open episodes, its cap (max_sessions={self.settings.max_sessions}); "
                    "retry once an episode ends (final answer, close, or a closed connection) or start the server "
                    "with a larger --max-sessions",
                    open_episodes=held,
                    max_sessions=self.settings.max_sessions,
                )
            load = [0] * len(self._workers)
            for s in self._sessions.values():
                load[s.shard] += 1
            for shard in self._reserved.values():
                load[shard] += 1
            shard = min(range(len(load)), key=load.__getitem__)
            self._reserved[eid] = shard
            self._gone.pop(eid, None)
        try:
            episode = self._open_episode(shard, row)
        except BaseException:
            with self._lock:
                self._reserved.pop(eid, None)
            raise
        now = self._clock()
        with self._lock:  # the reservation becomes the session in one step: the cap never has a gap
            self._reserved.pop(eid, None)
            if not self._closed:
                self._sessions[eid] = Session(eid, task_id, episode, shard, now)
                return StepResult(eid, task_id, prompt=row["prompt"], tools=row["tools"])
        raise EpisodeStartFailed("the server is shutting down")  # its workers are stopped, the episode with them

    def _on(self, shard: int, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on worker set ``shard``'s own thread (module docstring), its result or its exception."""
        return self._threads[shard].submit(fn, *args).result()

    def _open_episode(self, shard: int, row: Mapping[str, Any]) -> TaskEpisode:
        worker = self._workers[shard]

        def open_in_worker() -> TaskEpisode:
            for env_id in row["env_ids"]:
                if env_id not in self._loaded[shard]:  # after a restart the worker re-loads it by itself
                    env = self.tasks.environments[env_id]
                    worker.load_environment(env_id, env["source"], origin=env.get("origin", "untrusted"))
                    self._loaded[shard].add(env_id)
            # a served task's row never changes, so its id names its content
            return self._opened[shard].episode(row, row["id"], self.tasks.state_hashes(row["id"]))

        failure: SandboxError
        try:
            return self._on(shard, open_in_worker)
        except WorkerCrashed as exc:
            failure = exc
            if exc.kind == "crash":
                # a worker that died while this episode opened (killed with the episodes it held) held nothing
                # of this one yet: one more try, on the fresh process the worker restarts as
                try:
                    return self._on(shard, open_in_worker)
                except SandboxError as again:
                    failure = again
        except SandboxError as exc:
            failure = exc
        raise EpisodeStartFailed(
            f"task {row.get('id')!r} could not start in the sandbox: {str(failure)[:500]}", task_id=row.get("id")
        ) from None

    def close_episode(self, episode_id: str, why: str = "closed") -> None:
        """Close an open episode and free its slot and its state in the worker; a no-op when it is not open."""
        with self._lock:
            session = self._sessions.pop(episode_id, None)
            if session is None:
                return
            self._forget(episode_id, why)
        with session.lock:
            self._close_session(session)

    def expire_idle(self) -> list[str]:
        """Close every episode idle for longer than ``idle_timeout_s`` (one in the middle of a step is not idle).

        Returns:
            The ids closed.
        """
        now = self._clock()
        with self._lock:
            stale = [
                s for s in self._sessions.values() if now - s.last_used > self.settings.idle_timeout_s and not s.closed
            ]
        expired = []
        for session in stale:
            if not session.lock.acquire(blocking=False):
                continue  # a step is running: it is in use
            try:
                if self._clock() - session.last_used <= self.settings.idle_timeout_s or session.closed:
                    continue
                with self._lock:
                    if self._sessions.get(session.episode_id) is not session:
                        continue
                    del self._sessions[session.episode_id]
                    self._forget(session.episode_id, "expired")
                self._close_session(session)
                expired.append(session.episode_id)
            finally:
                session.lock.release()
        return expired

    # -- steps ---------------------------------------------------------------------------------------
    def call(self, episode_id: str, tool_name: str, arguments: Any) -> StepResult:
        """Execute one tool call in the episode (an unknown tool, or arguments that are not a JSON object, are
        counted as malformed and not executed, as in training).

        Raises:
            UnknownEpisode, EpisodeExpired, EpisodeDone: the episode is not open.
        """
        return self._step(episode_id, lambda s: self._call(s, tool_name, arguments))

    def malformed(self, episode_id: str) -> StepResult:
        """Count one tool-call block the client's parser could not read (the format penalty); nothing runs."""

        def count(session: Session) -> StepResult:
            session.episode.add_malformed(1)
            return StepResult(
                session.episode_id,
                session.task_id,
                tool_name=None,
                error={"type": "malformed_call", "message": "counted as a malformed call; nothing was executed"},
            )

        return self._step(episode_id, count)

    def finish(self, episode_id: str, final_answer: str = "") -> StepResult:
        """End the episode with the final answer: score it and return the reward and the state diff.

        ``final_answer`` is the assistant's closing text; its words outside tool-call and reasoning blocks are
        the episode's reply (an episode with no call and no reply earns 0; on an abstention row the reply is
        the answer).
        """
        session = self._get(episode_id)
        with session.lock:
            self._check_open(session)
            session.last_used = self._clock()
            session.episode.add_reply(parse_tool_calls(str(final_answer)).content)
            return self._end(session, "final_answer", StepResult(session.episode_id, session.task_id))

    def _step(self, episode_id: str, action: Any) -> StepResult:
        session = self._get(episode_id)
        with session.lock:
            self._check_open(session)
            session.last_used = self._clock()
            out = action(session)
            session.step_count += 1
            out.step_count = session.step_count
            out.n_calls, out.n_malformed = len(session.episode.calls), session.episode.n_malformed
            if session.episode.lost:
                return self._end(session, "episode_lost", out)
            if session.step_count >= self.settings.max_steps:
                return self._end(session, "step_limit", out)
            return out

    def _call(self, session: Session, tool_name: Any, arguments: Any) -> StepResult:
        out = StepResult(session.episode_id, session.task_id, tool_name=str(tool_name)[:256])
        try:
            out.result = self._on(
                session.shard, session.episode.call, str(tool_name), arguments, self.settings.max_argument_bytes
            )
        except ArgumentsTooLarge as exc:
            out.error = {"type": "too_large", "message": str(exc)}
        return out

    def _end(self, session: Session, reason: str, out: StepResult) -> StepResult:
        """Score the episode (unless its worker was lost), close it and free its slot."""
        if reason == "episode_lost" or session.episode.lost:
            reason = "episode_lost"
            outcome = Outcome(
                None,
                error={
                    "type": "episode_lost",
                    "message": "the sandbox worker process of one of this episode's environments died or was "
                    "restarted; this episode ended without a reward (other episodes go on)",
                    "env_ids": list(session.row["env_ids"]),
                },
            )
        else:
            outcome = self._on(
                session.shard,
                episode_outcome,
                session.episode,
                self.tasks.state_hashes(session.task_id),
                self.tasks.environments,
                self._reward_fn,
            )
            if outcome.error is not None and outcome.error["type"] == "episode_lost":
                reason = "episode_lost"
        out.done = True
        out.end_reason = reason
        out.step_count = session.step_count
        out.n_calls, out.n_malformed = len(session.episode.calls), session.episode.n_malformed
        out.reward = outcome.reward
        out.reward_breakdown = outcome.breakdown
        out.state_diff = outcome.state_diff
        if outcome.error is not None:
            out.error = outcome.error
            if reason == "episode_lost":  # the client may hold many episodes: say which one was lost
                out.error = {**outcome.error, "episode_id": session.episode_id}
        with self._lock:
            if self._sessions.get(session.episode_id) is session:
                del self._sessions[session.episode_id]
            self._forget(session.episode_id, "ended")
        self._close_session(session)
        return out

    # -- plumbing ------------------------------------------------------------------------------------
    def _get(self, episode_id: Any) -> Session:
        if not isinstance(episode_id, str):
            raise BadRequest(f"episode_id must be a string, got {type(episode_id).__name__}")
        with self._lock:
            session = self._sessions.get(episode_id)
            if session is not None:
                return session
            why = self._gone.get(episode_id)
        shown = episode_id[:80]
        if why == "expired":
            raise EpisodeExpired(
                f"episode {shown!r} was closed after {self.settings.idle_timeout_s:g} s without a request; reset "
                "to start another"
            )
        if why == "ended":
            raise EpisodeDone(f"episode {shown!r} has ended; reset to start another")
        if why == "closed":
            raise UnknownEpisode(f"episode {shown!r} was closed; reset to start another")
        raise UnknownEpisode(f"no open episode has id {shown!r}; reset first")

    @staticmethod
    def _check_open(session: Session) -> None:
        if session.closed:
            raise EpisodeDone(f"episode {session.episode_id[:80]!r} has ended; reset to start another")

    def _forget(self, episode_id: str, why: str) -> None:
        """Remember why ``episode_id`` is gone (caller holds the pool lock)."""
        self._gone[episode_id] = why
        self._gone.move_to_end(episode_id)
        while len(self._gone) > _GONE_REMEMBERED:
            self._gone.popitem(last=False)

    def _close_session(self, session: Session) -> None:
        """Free the episode's state in its worker (caller holds the session's lock)."""
        session.closed = True
        try:
            self._on(session.shard, session.episode.close)
        except (SandboxError, RuntimeError):
            pass  # its worker is gone (or the pool is shut down): so is the state
