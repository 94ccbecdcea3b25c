"""One environment episode in its own sandbox worker: the state behind one MCP session (stdio: one server run)."""

from __future__ import annotations

import asyncio
import copy
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from envfactory_assets.runtime.errors import EpisodeLost, SandboxError
from envfactory_assets.runtime.sandbox import SandboxLimits, SandboxWorker


class EnvironmentSession:
    """An environment loaded into a :class:`SandboxWorker` with one open episode.

    Calls go to that episode, so the state persists from call to call. After every successful call
    of a tool that is not read-only, the state is saved here; when a call loses the episode (it timed
    out, ran out of memory or crashed the worker), the episode is reopened from that saved state, so
    the session goes on with the state it had before the failed call.

    Args:
        environment: the Environment dict (docs/design.md).
        initial_state: the saved state the episode starts from.
        limits: sandbox limits; defaults to :class:`SandboxLimits()`.
    """

    def __init__(
        self, environment: dict[str, Any], initial_state: dict[str, Any], limits: SandboxLimits | None = None
    ) -> None:
        self.env_id: str = environment["env_id"]
        self._source: str = environment["source"]
        self._origin: str = environment.get("origin", "untrusted")
        self._tool_names = [tool["name"] for tool in environment["tools"]]
        self._read_only = {tool["name"]: bool(tool.get("read_only")) for tool in environment["tools"]}
        self._limits = limits
        self._snapshot = copy.deepcopy(initial_state)
        self._lock = threading.Lock()
        self._worker: SandboxWorker | None = None
        self._episode: str | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def open(self) -> None:
        """Start the worker, load the environment and open the episode on the initial state.

        Raises:
            EnvironmentRejected, StateRejected, WorkerCrashed: the environment or its state cannot run.
        """
        with self._lock:
            if self._worker is None:
                self._worker = SandboxWorker(self._limits)
                self._worker.load_environment(self.env_id, self._source, self._tool_names, origin=self._origin)
            if self._episode is None:
                self._episode = self._worker.open_episode({self.env_id: copy.deepcopy(self._snapshot)})

    def close(self) -> None:
        """Kill the worker; the episode's state is gone. Safe to call twice."""
        with self._lock:
            worker, self._worker, self._episode = self._worker, None, None
        if worker is not None:
            worker.close()

    def __enter__(self) -> EnvironmentSession:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def worker_pid(self) -> int | None:
        """Process id of the sandbox worker, or None when none runs."""
        return self._worker.pid if self._worker is not None else None

    # -- operations -----------------------------------------------------------------------------
    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call ``tool`` in the episode.

        Returns:
            ``{"ok": True, "output": ...}`` or ``{"ok": False, "error": {"type", "message", ...}}`` as
            :meth:`SandboxWorker.call`; an error that lost the episode also says whether the state
            was restored (``"state_restored"``).
        """
        with self._lock:
            try:
                episode = self._ensure_episode()
                result = self._worker.call(episode, tool, arguments)
            except EpisodeLost:
                self._episode = None
                result = {
                    "ok": False,
                    "error": {
                        "type": "episode_lost",
                        "episode_lost": True,
                        "message": "the episode was lost before the call ran",
                    },
                }
            except SandboxError as exc:
                self._episode = None
                return {"ok": False, "error": {"type": "sandbox", "message": str(exc)}}
            error = result.get("error") if not result.get("ok") else None
            if error is not None and error.get("episode_lost"):
                self._episode = None
                error = dict(error)
                try:
                    self._ensure_episode()
                except SandboxError as exc:
                    error["state_restored"] = False
                    error["message"] += f"; the session state could not be restored ({exc}), the next call retries"
                else:
                    error["state_restored"] = True
                    error["message"] += "; the session state was restored to what it was before this call"
                return {"ok": False, "error": error}
            if result.get("ok") and not self._read_only.get(tool, False):
                self._take_snapshot()
            return result

    def saved_state(self) -> dict[str, Any]:
        """The episode's current saved state (``{"tables": ..., "meta": ...}``).

        Raises:
            SandboxError: the worker could not save the state.
        """
        with self._lock:
            episode = self._ensure_episode()
            return self._worker.save(episode)[self.env_id]

    # -- plumbing -------------------------------------------------------------------------------
    def _ensure_episode(self) -> str:
        if self._worker is None:
            raise SandboxError("the environment session is not open")
        if self._episode is None or not self._worker.is_open(self._episode):
            self._episode = None
            self._episode = self._worker.open_episode({self.env_id: copy.deepcopy(self._snapshot)})
        return self._episode

    def _take_snapshot(self) -> None:
        try:
            self._snapshot = self._worker.save(self._episode)[self.env_id]
        except SandboxError as exc:  # a verified environment saves; keep serving with the older snapshot
            print(
                f"envfactory serve-env: could not save the state of {self.env_id!r} after a call: {exc}",
                file=sys.stderr,
            )


class SessionEpisode:
    """One MCP session's episode: an :class:`EnvironmentSession` whose worker is started (when this is made),
    called and stopped on a thread of this session's own.

    A sandbox worker dies with the *thread* that started it (bubblewrap's ``--die-with-parent`` is the kernel's
    parent-death signal, which follows threads); anyio's worker threads, where ``anyio.to_thread`` runs blocking
    calls, end after 10 s idle once another blocking call starts, and a worker started on one would be killed
    with it. This thread lives as long as the session. Its methods are for an asyncio event loop (``aclose``,
    ``call``) or any other thread (``close``).

    Args:
        session_id: the MCP session id (names the thread).
        environment: the Environment dict.
        start_state: the saved state the episode starts from.
        limits: sandbox limits of the worker.
    """

    def __init__(
        self, session_id: str, environment: dict[str, Any], start_state: dict[str, Any], limits: SandboxLimits | None
    ) -> None:
        self.session_id = session_id
        self.session = EnvironmentSession(environment, start_state, limits)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"serve-env-{session_id[:8]}")
        self.opened: Future[None] = self._thread.submit(self.session.open)
        self._closed = False

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """:meth:`EnvironmentSession.call` on this session's thread, once the worker has started; a worker that
        could not start is an ``episode_start_failed`` error result, a call after the session ended a
        ``session_ended`` one. An error that lost the episode (its worker died: ``episode_lost`` true) also
        names this session (``session_id``): the worker is this session's alone, so no other session saw it."""
        try:
            await asyncio.wrap_future(self.opened)
        except Exception as exc:  # the error result below says what failed
            return {
                "ok": False,
                "error": {
                    "type": "episode_start_failed",
                    "message": f"the environment could not start in the sandbox: {type(exc).__name__}: {exc}",
                },
            }
        try:
            future = self._thread.submit(self.session.call, name, arguments)
        except RuntimeError:  # the executor is shut down: the session has ended
            return {"ok": False, "error": {"type": "session_ended", "message": "this MCP session has ended"}}
        result = await asyncio.wrap_future(future)
        error = result.get("error") if not result.get("ok") else None
        if isinstance(error, dict) and error.get("episode_lost"):
            result = {**result, "error": {**error, "session_id": self.session_id}}
        return result

    async def aclose(self) -> None:
        """Stop the worker (after any call already queued) and let the thread end."""
        future = self._stop()
        if future is not None:
            await asyncio.wrap_future(future)

    def close(self, timeout: float | None = 10.0) -> None:
        """:meth:`aclose` from a thread that is not an event loop's."""
        future = self._stop()
        if future is not None:
            future.result(timeout)

    def _stop(self) -> Future[None] | None:
        if self._closed:
            return None
        self._closed = True
        future = self._thread.submit(self.session.close)
        self._thread.shutdown(wait=False)  # the thread ends once the close has run
        return future

    @property
    def worker_pid(self) -> int | None:
        """Process id of the sandbox worker, or None when none runs (yet, or any more)."""
        return self.session.worker_pid
