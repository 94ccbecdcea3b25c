"""In-process core of the sandbox worker: compiled environments, episodes and tool calls.

Runs inside the worker process (:mod:`.worker`), which adds the process limits, the per-request
alarm and the wire protocol. Plain Python, usable in-process for debugging trusted code only: the
engine itself enforces no time or memory limits.

Each episode gets its *own* execution of every environment module (a fresh namespace), so module
level objects (caches, counters) can never leak between episodes or forks.

Forks share state: the first fork of an episode runs ``load(save(state))`` as a fork always did and freezes
the result (:mod:`.cow_state`); every later fork of the unchanged episode starts from a copy-on-write view of
that frozen state, so it copies only what it touches and its rows are never validated again. Any code that
runs on the episode's state (a tool call, ``save``) drops the frozen state, and the next fork makes a new one.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import itertools
import os
import re
import secrets
import types
from collections.abc import Callable
from typing import Any

import orjson

from envfactory_assets.runtime.canonical import canonical_json, refuse_non_finite, state_hash
from envfactory_assets.runtime.cow_state import Snapshot, fork_view, freeze, plain, same_value
from envfactory_assets.runtime.errors import ErrorType, PreconditionFailed
from envfactory_assets.runtime.namespace_template import NamespaceTemplate, make_template
from envfactory_assets.runtime.restricted import module_proxy, restricted_builtins
from envfactory_assets.runtime.saved_tables import saved_items
from envfactory_assets.runtime.static_check import static_check

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$")
CONTRACT_FUNCTIONS = ("load", "save")
MAX_MESSAGE_CHARS = 2000
# Strict JSON for tool outputs: datetimes, dataclasses and dict/list/str/int subclasses are refused.
_STRICT_JSON = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


class CallTimedOut(BaseException):
    """Raised inside user code by the worker's alarm when a request's time budget is spent.

    A BaseException so that ``except Exception`` in environment code does not swallow it.
    """


class OperationError(Exception):
    """A request failed as a whole; becomes ``{"ok": false, "error": as_dict()}`` on the wire.

    Args:
        error_type: e.g. ``"environment_rejected"``, ``"state_rejected"``, ``"unknown_episode"``.
        message: human-readable reason.
        **details: extra JSON fields (``env_id``, ``violations``, ``cause``...).
    """

    def __init__(self, error_type: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.details = details

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.error_type, "message": self.message, **self.details}


@dataclasses.dataclass(frozen=True)
class CompiledEnvironment:
    """An accepted environment module, compiled once and executed once per episode."""

    env_id: str
    code: types.CodeType
    filename: str
    module_name: str
    tool_names: tuple[str, ...]
    template: NamespaceTemplate | None = None  # builds a fresh namespace without executing the module


@dataclasses.dataclass
class EnvironmentInstance:
    """One environment inside one episode: its own module namespace and in-memory state.

    Attributes:
        view_of: the frozen state ``state`` is a copy-on-write view of.
        fork_source: what a fork of this instance starts from (``load(save(state))``, frozen), kept while no
            code has run on ``state`` since it was made.
        exact_hash: :func:`.canonical.state_hash` of ``save(state)``, kept likewise.
        kept_items: the pieces of ``save(state)``'s canonical encoding (:mod:`.saved_tables`) of an episode used
            as a comparison's reference, kept likewise (``[]``: they do not apply to this state).
    """

    env: CompiledEnvironment
    load: Callable[[Any], Any]
    save: Callable[[Any], Any]
    tools: dict[str, Callable[..., Any]]
    state: Any = None
    view_of: Snapshot | None = None
    fork_source: Snapshot | None = None
    exact_hash: str | None = None
    kept_items: list[bytes] | None = None

    def touched(self) -> None:
        """Code ran on ``state``: what was derived from it may no longer hold."""
        self.fork_source = None
        self.exact_hash = None
        self.kept_items = None


@dataclasses.dataclass
class Episode:
    """Environments opened together; tool names resolve across them."""

    instances: dict[str, EnvironmentInstance]
    tool_owner: dict[str, str | None]  # tool name -> env_id; None when several envs define it


def _text(exc: BaseException) -> str:
    try:
        if isinstance(exc, KeyError) and len(exc.args) == 1:
            text = str(exc.args[0])
        else:
            text = str(exc)
    except Exception:  # a user-defined __str__ may fail
        text = ""
    text = text or type(exc).__name__
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


def _user_line(exc: BaseException, filename: str) -> int | None:
    """Line of the deepest traceback frame that belongs to the environment's code, if any."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _no_proxy(name: str) -> Any:
    raise ImportError(f"module {name!r} is not proxied without the Python guards")


def _is_tool_function(value: Any, module_name: str) -> bool:
    if not isinstance(value, types.FunctionType) or value.__module__ != module_name:
        return False
    code = value.__code__
    return code.co_argcount >= 1 and code.co_varnames[0] == "state"


def _encode_json(value: Any) -> bytes:
    """Strict JSON bytes; raises TypeError naming the offending type."""
    try:
        return orjson.dumps(value, default=plain, option=_STRICT_JSON)
    except orjson.JSONEncodeError as exc:
        raise TypeError(str(exc)) from None


class Engine:
    """Holds compiled environments and open episodes; one method per protocol operation.

    Args:
        deadline_passed: returns True once the current request's time budget is spent (set by the
            worker's alarm). Checked after user code returns, to catch code that swallowed
            :class:`CallTimedOut`.
        python_guards: run the static check and the restricted builtins (the default). False runs
            the code with the real builtins and no check: only for proving that the OS layer alone
            contains hostile code (the containment test); never for real environments.
    """

    def __init__(self, deadline_passed: Callable[[], bool] = lambda: False, *, python_guards: bool = True) -> None:
        self.python_guards = python_guards
        self.environments: dict[str, CompiledEnvironment] = {}
        self.episodes: dict[str, Episode] = {}
        self._deadline_passed = deadline_passed
        self._episode_counter = itertools.count(1)
        self._episode_salt = secrets.token_hex(4)
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "load_env": self._op_load_env,
            "open_episode": self._op_open_episode,
            "call": self._op_call,
            "save": self._op_save,
            "state_hash": self._op_state_hash,
            "fork": self._op_fork,
            "state_hashes": self._op_state_hashes,
            "close": self._op_close,
            "ping": self._op_ping,
        }

    # -- dispatch -----------------------------------------------------------------------------
    def dispatch(self, op: Any, request: dict[str, Any]) -> Any:
        """Run one request; returns the ``result`` value or raises :class:`OperationError`."""
        handler = self._handlers.get(op) if isinstance(op, str) else None
        if handler is None:
            raise OperationError("bad_request", f"unknown operation {op!r}")
        return handler(request)

    @staticmethod
    def _field(request: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
        value = request.get(name)
        if not isinstance(value, kind):
            raise OperationError("bad_request", f"field {name!r} is missing or has the wrong type")
        return value

    def _op_load_env(self, request: dict[str, Any]) -> Any:
        tool_names = request.get("tool_names")
        if tool_names is not None and not (
            isinstance(tool_names, list) and all(isinstance(t, str) for t in tool_names)
        ):
            raise OperationError("bad_request", "tool_names must be a list of strings or null")
        tools = self.load_env(self._field(request, "env_id", str), self._field(request, "source", str), tool_names)
        return {"tools": tools}

    def _op_open_episode(self, request: dict[str, Any]) -> Any:
        shared = request.get("shared", False)
        if not isinstance(shared, bool):
            raise OperationError("bad_request", "field 'shared' must be a boolean")
        return {"episode_id": self.open_episode(self._field(request, "states", dict), shared=shared)}

    def _op_call(self, request: dict[str, Any]) -> Any:
        return self.call(
            self._field(request, "episode_id", str),
            self._field(request, "tool", str),
            request.get("arguments") if request.get("arguments") is not None else {},
        )

    def _op_save(self, request: dict[str, Any]) -> Any:
        return self.save(self._field(request, "episode_id", str))

    def _op_state_hash(self, request: dict[str, Any]) -> Any:
        return self.state_hash(self._field(request, "episode_id", str))

    def _op_fork(self, request: dict[str, Any]) -> Any:
        return {"episode_id": self.fork(self._field(request, "episode_id", str))}

    def _op_state_hashes(self, request: dict[str, Any]) -> Any:
        references = request.get("references", [])
        if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
            raise OperationError("bad_request", "field 'references' must be a list of episode ids")
        return {"hashes": self.state_hashes(self._field(request, "episode_id", str), references)}

    def _op_close(self, request: dict[str, Any]) -> Any:
        return {"closed": self.close(self._field(request, "episode_id", str))}

    def _op_ping(self, request: dict[str, Any]) -> Any:
        return {"pid": os.getpid(), "environments": sorted(self.environments), "episodes": len(self.episodes)}

    # -- environments -------------------------------------------------------------------------
    def load_env(self, env_id: str, source: str, tool_names: list[str] | None = None) -> list[str]:
        """Check, compile and trial-execute an environment module; replaces any earlier version.

        Returns:
            The exposed tool names, in definition order (``tool_names`` when given).

        Raises:
            OperationError: ``environment_rejected`` with ``env_id`` and ``violations``.
        """
        if not env_id or len(env_id) > 200:
            raise OperationError("bad_request", "env_id must be 1-200 characters")
        violations = static_check(source) if self.python_guards else []
        if violations:
            raise self._rejected(env_id, violations)
        filename = f"<env {env_id}>"
        module_name = f"envfactory_env.{env_id}"
        try:
            code = compile(source, filename, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:  # static_check parsed it; be safe anyway
            raise self._rejected(env_id, [f"compile failed: {exc}"]) from None
        draft = CompiledEnvironment(env_id, code, filename, module_name, ())
        try:
            namespace = self._execute(draft)
            again = self._execute(draft)
        except CallTimedOut:
            raise self._rejected(env_id, ["module execution exceeded the time limit"]) from None
        except BaseException as exc:  # noqa: BLE001 - any failure of untrusted code is a rejection
            line = _user_line(exc, filename)
            where = f"line {line}: " if line else ""
            raise self._rejected(
                env_id, [f"{where}module execution failed: {type(exc).__name__}: {_text(exc)}"]
            ) from None
        if self._deadline_passed():
            raise self._rejected(env_id, ["module execution exceeded the time limit"])
        problems = [
            f"missing function {name}(...) required by the module contract"
            for name in CONTRACT_FUNCTIONS
            if not isinstance(namespace.get(name), types.FunctionType)
        ]
        if tool_names is None:
            exposed = [
                name
                for name, value in namespace.items()
                if name not in CONTRACT_FUNCTIONS
                and not name.startswith("_")
                and TOOL_NAME_PATTERN.match(name)
                and _is_tool_function(value, module_name)
            ]
        else:
            exposed = list(dict.fromkeys(tool_names))
            for name in exposed:
                if name in CONTRACT_FUNCTIONS or not TOOL_NAME_PATTERN.match(name):
                    problems.append(f"invalid tool name {name!r}")
                elif not _is_tool_function(namespace.get(name), module_name):
                    problems.append(f"tool {name!r} is not defined as def {name}(state, ...)")
        if problems:
            raise self._rejected(env_id, problems)
        template = make_template(namespace, again, module_proxy if self.python_guards else _no_proxy)
        self.environments[env_id] = dataclasses.replace(draft, tool_names=tuple(exposed), template=template)
        return exposed

    @staticmethod
    def _rejected(env_id: str, violations: list[str]) -> OperationError:
        return OperationError("environment_rejected", "; ".join(violations), env_id=env_id, violations=violations)

    def _execute(self, env: CompiledEnvironment) -> dict[str, Any]:
        scope = restricted_builtins() if self.python_guards else dict(vars(builtins))
        scope["PreconditionFailed"] = PreconditionFailed
        namespace: dict[str, Any] = {"__name__": env.module_name, "__builtins__": scope}
        exec(env.code, namespace)  # noqa: S102 - checked code, restricted builtins, worker limits
        return namespace

    def _instance(self, env: CompiledEnvironment, saved_state: Any) -> EnvironmentInstance:
        """Execute the module afresh and ``load`` the saved state into it.

        Raises:
            OperationError: ``state_rejected`` with ``env_id`` and ``cause``.
        """
        try:
            instance = self._namespace(env)
            state = instance.load(saved_state)
        except CallTimedOut:
            raise self._state_rejected(env, "timeout", "load() exceeded the time limit") from None
        except MemoryError:
            raise self._state_rejected(env, "memory", "load() ran out of memory") from None
        except BaseException as exc:  # noqa: BLE001
            raise self._state_rejected(env, "exception", f"{type(exc).__name__}: {_text(exc)}") from None
        if self._deadline_passed():
            raise self._state_rejected(env, "timeout", "load() exceeded the time limit")
        if not isinstance(state, dict):
            raise self._state_rejected(env, "contract", f"load() returned {type(state).__name__}, not dict")
        instance.state = state
        return instance

    def _namespace(self, env: CompiledEnvironment) -> EnvironmentInstance:
        """A fresh execution of the module, with no state yet (raises what the module's code raises)."""
        namespace = env.template.instantiate() if env.template is not None else self._execute(env)
        return EnvironmentInstance(
            env=env,
            load=namespace["load"],
            save=namespace["save"],
            tools={name: namespace[name] for name in env.tool_names},
        )

    @staticmethod
    def _state_rejected(env: CompiledEnvironment, cause: str, message: str) -> OperationError:
        return OperationError("state_rejected", message, env_id=env.env_id, cause=cause)

    # -- episodes -----------------------------------------------------------------------------
    def open_episode(self, states: dict[str, Any], *, shared: bool = False) -> str:
        """Open an episode from ``{env_id: saved_state}``; returns its id.

        ``shared``: forks of the episode, while it is unchanged, start from its state as loaded (a
        copy-on-write view of it, frozen now) rather than from ``load(save(state))``: what opening each
        of them from the same saved states would give, at the cost of a fork.

        Raises:
            OperationError: ``bad_request`` (empty), ``unknown_environment``, ``state_rejected``.
        """
        if not states:
            raise OperationError("bad_request", "states must name at least one environment")
        instances: dict[str, EnvironmentInstance] = {}
        for env_id, saved_state in states.items():
            env = self.environments.get(env_id)
            if env is None:
                raise OperationError("unknown_environment", f"environment {env_id!r} is not loaded", env_id=env_id)
            instances[env_id] = self._instance(env, saved_state)
        if shared:
            for instance in instances.values():
                source = freeze(instance.state)
                if source is not None:
                    instance.state, instance.view_of, instance.fork_source = fork_view(source), source, source
        return self._register(instances)

    def _register(self, instances: dict[str, EnvironmentInstance]) -> str:
        owners: dict[str, str | None] = {}
        for env_id, instance in instances.items():
            for name in instance.env.tool_names:
                owners[name] = None if name in owners else env_id
        episode_id = f"ep{next(self._episode_counter)}-{self._episode_salt}"
        self.episodes[episode_id] = Episode(instances, owners)
        return episode_id

    def _episode(self, episode_id: str) -> Episode:
        episode = self.episodes.get(episode_id)
        if episode is None:
            raise OperationError("unknown_episode", f"episode {episode_id!r} is not open", episode_id=episode_id)
        return episode

    def close(self, episode_id: str) -> bool:
        """Forget an episode; returns whether it was open."""
        return self.episodes.pop(episode_id, None) is not None

    def close_all(self, episode_ids: Any) -> None:
        """Forget every episode of ``episode_ids`` (a request's ``close`` field: episodes the parent closed since its
        last request to this worker; None when there are none).

        Raises:
            OperationError: ``bad_request`` when it is not a list of strings (nothing is closed then).
        """
        if episode_ids is None:
            return
        if not isinstance(episode_ids, list) or not all(isinstance(e, str) for e in episode_ids):
            raise OperationError("bad_request", "field 'close' must be a list of episode ids")
        for episode_id in episode_ids:
            self.episodes.pop(episode_id, None)

    def _saved(self, env_id: str, instance: EnvironmentInstance) -> tuple[Any, bytes]:
        """``save(state)`` and its canonical encoding (:func:`.canonical.canonical_json`), which checks it is plain
        JSON as the state hash reads it (no NaN or infinity either); raises ``environment_fault``."""
        instance.touched()
        try:
            saved = instance.save(instance.state)
            encoded = canonical_json(saved)
        except CallTimedOut:
            raise self._fault(env_id, "timeout", "save() exceeded the time limit") from None
        except MemoryError:
            raise self._fault(env_id, "memory", "save() ran out of memory") from None
        except TypeError as exc:
            raise self._fault(env_id, "not_serializable", f"save() returned non-JSON: {exc}") from None
        except BaseException as exc:  # noqa: BLE001
            raise self._fault(env_id, "exception", f"save() raised {type(exc).__name__}: {_text(exc)}") from None
        if self._deadline_passed():
            raise self._fault(env_id, "timeout", "save() exceeded the time limit")
        return saved, encoded

    def _encoding(self, env_id: str, instance: EnvironmentInstance) -> bytes:
        """``canonical_json(save(state))``: from :meth:`_kept_items` where they apply, else by running ``save``
        (:meth:`_saved`)."""
        items = self._kept_items(env_id, instance)
        return self._saved(env_id, instance)[1] if items is None else b",".join(items)

    def _kept_items(self, env_id: str, instance: EnvironmentInstance) -> list[bytes] | None:
        """Pieces of ``canonical_json(save(state))`` for the table layout's ``save``, from the rows' kept encodings
        (:func:`.saved_tables.saved_items`), or None when that does not apply. No environment code runs, so what
        was derived from the state (its fork source, its hash) still holds."""
        try:
            items = saved_items(instance.save, instance.state, instance.view_of)
        except CallTimedOut:
            raise self._fault(env_id, "timeout", "save() exceeded the time limit") from None
        except MemoryError:
            raise self._fault(env_id, "memory", "save() ran out of memory") from None
        return None if self._deadline_passed() else items

    @staticmethod
    def _fault(env_id: str, cause: str, message: str) -> OperationError:
        return OperationError("environment_fault", message, env_id=env_id, cause=cause)

    def save(self, episode_id: str) -> dict[str, Any]:
        """``{env_id: saved_state}`` as pre-encoded canonical JSON fragments."""
        episode = self._episode(episode_id)
        return {
            env_id: orjson.Fragment(self._encoding(env_id, instance)) for env_id, instance in episode.instances.items()
        }

    def state_hash(self, episode_id: str) -> str:
        """:func:`.canonical.state_hash` of ``{env_id: saved_state}`` for the whole episode."""
        episode = self._episode(episode_id)
        # each state's canonical encoding as it is: the whole is then the canonical encoding of the mapping
        parts = {env_id: orjson.Fragment(self._encoding(env_id, inst)) for env_id, inst in episode.instances.items()}
        return state_hash(parts)

    def fork(self, episode_id: str) -> str:
        """Open an independent copy: in fresh module instances, the state ``load(deep copy of save(state))``
        would give. The first fork of an episode computes exactly that and freezes it; later forks of the
        unchanged episode start from a copy-on-write view of the frozen state (:mod:`.cow_state`). A state that
        cannot be frozen (objects, sets, one container reachable twice) is loaded afresh for every fork.

        Raises:
            OperationError: ``unknown_episode``; ``environment_fault`` when ``save`` fails or ``load``
            refuses the state ``save`` produced.
        """
        episode = self._episode(episode_id)
        instances = {env_id: self._forked(env_id, instance) for env_id, instance in episode.instances.items()}
        return self._register(instances)

    def _forked(self, env_id: str, instance: EnvironmentInstance) -> EnvironmentInstance:
        source = instance.fork_source
        if source is not None:
            try:
                fork = self._namespace(instance.env)
            except CallTimedOut:
                raise self._fault(env_id, "timeout", "module execution exceeded the time limit") from None
            except BaseException as exc:  # any failure: the module ran when the environment was loaded
                raise self._fault(env_id, "exception", f"module execution failed: {_text(exc)}") from None
            fork.state, fork.view_of = fork_view(source), source
            return fork
        copied = orjson.loads(orjson.dumps(self._saved(env_id, instance)[0], default=plain))
        try:
            fork = self._instance(instance.env, copied)
        except OperationError as exc:
            raise self._fault(
                env_id, exc.details.get("cause", "exception"), f"load() refused save() output: {exc.message}"
            ) from None
        source = freeze(fork.state)
        if source is not None:
            instance.fork_source = source
            fork.state, fork.view_of = fork_view(source), source
        return fork

    def state_hashes(self, episode_id: str, references: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
        """``{env_id: state hash}``: :func:`.canonical.state_hash` of each environment's ``save(state)``.

        Args:
            episode_id: the episode.
            references: open episodes over some of the same environments, never called (a task's gold final
                state, its initial state). An environment whose state has the same value as a reference's
                (:func:`.cow_state.same_value`: a pass over what a fork of the same task changed) has that
                reference's hash, computed once; only the others are saved and hashed.

        Raises:
            OperationError: ``unknown_episode``, ``environment_fault`` (``save`` failed).
        """
        episode = self._episode(episode_id)
        others = [self._episode(reference_id) for reference_id in references]
        hashes: dict[str, str] = {}
        for env_id, instance in episode.instances.items():
            if instance.exact_hash is not None:  # nothing ran on the state since
                hashes[env_id] = instance.exact_hash
                continue
            items = self._kept_items(env_id, instance)
            for other in others:
                gold = other.instances.get(env_id)
                if gold is not None and self._same_state(env_id, instance, items, gold):
                    hashes[env_id] = self._reference_hash(env_id, gold)
                    break
            else:
                if items is None:
                    hashes[env_id] = self._exact_hash(env_id, instance)
                else:
                    instance.exact_hash = hashes[env_id] = hashlib.sha256(b",".join(items)).hexdigest()
        return hashes

    def _same_state(
        self, env_id: str, instance: EnvironmentInstance, items: list[bytes] | None, reference: EnvironmentInstance
    ) -> bool:
        """Whether ``instance``'s state is found to save as ``reference``'s does. With both kept items
        (:meth:`_kept_items`; ``items`` are the instance's): whether they are equal, a pass in C over pieces that
        are mostly the same objects (an unequal answer only costs the exact hash). Else by value
        (:func:`.cow_state.same_value`), which implies equal saves."""
        if items is not None:
            kept = self._reference_items(env_id, reference)
            if kept:
                return items == kept
        return same_value(instance.state, reference.state)

    def _reference_items(self, env_id: str, reference: EnvironmentInstance) -> list[bytes]:
        """:meth:`_kept_items` of a reference, kept while nothing runs on its state (``[]`` when they do not
        apply)."""
        if reference.kept_items is None:
            reference.kept_items = self._kept_items(env_id, reference) or []
        return reference.kept_items

    def _reference_hash(self, env_id: str, reference: EnvironmentInstance) -> str:
        """The reference's exact hash, read from its rows' kept encodings where :mod:`.saved_tables` applies, else
        saved from a plain copy of its state: saving the state itself would make every row the reference's own,
        and later comparisons would no longer find them shared. A state
        holding NaN or an infinity (which the copy would turn into null) is saved as it is, so ``save`` meets it
        as it would without the copy."""
        if reference.exact_hash is None:
            items = self._reference_items(env_id, reference)  # reads the state without copying what it shares
            if items:
                reference.exact_hash = hashlib.sha256(b",".join(items)).hexdigest()
                return reference.exact_hash
            try:
                encoded = orjson.dumps(reference.state, default=plain)
                if b"null" in encoded:
                    refuse_non_finite(reference.state)
                copied = orjson.loads(encoded)
            except (TypeError, orjson.JSONDecodeError):
                return self._exact_hash(env_id, reference)
            sacrificial = dataclasses.replace(reference, state=copied)
            reference.exact_hash = self._exact_hash(env_id, sacrificial)
        return reference.exact_hash

    def _exact_hash(self, env_id: str, instance: EnvironmentInstance) -> str:
        if instance.exact_hash is None:
            digest = hashlib.sha256(self._encoding(env_id, instance)).hexdigest()
            instance.exact_hash = digest  # after _saved, which forgets what was derived from the state
        return instance.exact_hash

    # -- tool calls ---------------------------------------------------------------------------
    def call(self, episode_id: str, tool: str, arguments: Any) -> dict[str, Any]:
        """Run one tool call.

        Args:
            episode_id: an open episode.
            tool: a tool name, or ``"env_id.tool"`` when several environments define it.
            arguments: the JSON object of keyword arguments.

        Returns:
            ``{"ok": True, "output": <JSON fragment>}`` or
            ``{"ok": False, "error": {"type", "message", "exception"?, "line"?, "episode_lost"?}}``
            with types from :class:`.errors.ErrorType`. On ``timeout``/``memory`` the episode is
            discarded (its state may be half-updated and depends on where the call was stopped).

        Raises:
            OperationError: ``unknown_episode``.
        """
        episode = self._episode(episode_id)
        if not isinstance(arguments, dict):
            return _call_error(ErrorType.BAD_ARGUMENTS, "arguments must be a JSON object")
        resolved = self._resolve_tool(episode, tool)
        if isinstance(resolved, dict):
            return resolved
        instance, function = resolved
        filename = instance.env.filename
        instance.touched()
        try:
            output = function(instance.state, **arguments)
        except CallTimedOut:
            return self._discard(episode_id, ErrorType.TIMEOUT, f"tool {tool!r} exceeded the time limit")
        except MemoryError:
            return self._discard(episode_id, ErrorType.MEMORY, f"tool {tool!r} ran out of memory")
        except TypeError as exc:
            # No deeper traceback frame: raised while binding the arguments, not inside the tool.
            binding = exc.__traceback__ is not None and exc.__traceback__.tb_next is None
            error_type = ErrorType.BAD_ARGUMENTS if binding else ErrorType.TOOL_ERROR
            message = _text(exc) if binding else f"TypeError: {_text(exc)}"
            return _call_error(error_type, message, exc, filename)
        except PreconditionFailed as exc:
            return _call_error(ErrorType.PRECONDITION_FAILED, _text(exc), exc, filename)
        except ValueError as exc:
            return _call_error(ErrorType.BAD_ARGUMENTS, _text(exc), exc, filename)
        except LookupError as exc:
            return _call_error(ErrorType.NOT_FOUND, _text(exc), exc, filename)
        except BaseException as exc:  # noqa: BLE001 - a bug in the environment code
            return _call_error(ErrorType.TOOL_ERROR, f"{type(exc).__name__}: {_text(exc)}", exc, filename)
        if self._deadline_passed():  # the tool swallowed CallTimedOut and carried on
            return self._discard(episode_id, ErrorType.TIMEOUT, f"tool {tool!r} exceeded the time limit")
        try:
            encoded = _encode_json(output)
        except TypeError as exc:
            return _call_error(ErrorType.OUTPUT_NOT_SERIALIZABLE, f"tool {tool!r} returned non-JSON: {exc}")
        return {"ok": True, "output": orjson.Fragment(encoded)}

    def _resolve_tool(
        self, episode: Episode, tool: str
    ) -> tuple[EnvironmentInstance, Callable[..., Any]] | dict[str, Any]:
        if tool in episode.tool_owner:
            env_id = episode.tool_owner[tool]
            if env_id is None:
                owners = sorted(e for e, i in episode.instances.items() if tool in i.tools)
                return _call_error(
                    ErrorType.AMBIGUOUS_TOOL,
                    f"tool {tool!r} exists in {owners}; call it as 'env_id.{tool}'",
                )
            instance = episode.instances[env_id]
            return instance, instance.tools[tool]
        env_id, _, name = tool.rpartition(".")
        instance = episode.instances.get(env_id) if env_id else None
        if instance is not None and name in instance.tools:
            return instance, instance.tools[name]
        return _call_error(ErrorType.UNKNOWN_TOOL, f"no tool named {tool!r} in this episode")

    def _discard(self, episode_id: str, error_type: ErrorType, message: str) -> dict[str, Any]:
        self.episodes.pop(episode_id, None)
        return {"ok": False, "error": {"type": str(error_type), "message": message, "episode_lost": True}}


def _call_error(
    error_type: ErrorType, message: str, exc: BaseException | None = None, filename: str | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"type": str(error_type), "message": message}
    if exc is not None:
        error["exception"] = type(exc).__name__
        line = _user_line(exc, filename) if filename else None
        if line is not None:
            error["line"] = line
    return {"ok": False, "error": error}
