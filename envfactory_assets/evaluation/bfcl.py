"""BFCL v3 multi-turn base, executed by our own safe executor and scored like BFCL's official checker.

Source of tasks, function docs and the 8 stateful API classes: the installed ``bfcl-eval`` wheel
(``bfcl_eval/data/BFCL_v4_multi_turn_base.json`` with ``possible_answer/`` ground truth, the
``multi_turn_func_doc/*.json`` docs and ``eval_checker/multi_turn_eval/func_source_code``). The wheel
names the file ``v4``; the multi-turn base category is the one introduced with BFCL v3.

How the official checker scores (``bfcl_eval/eval_checker/multi_turn_eval/multi_turn_checker.py``), and
what we do the same way:

- model and ground truth each run on their own instances of the involved classes, loaded with the task's
  ``initial_config`` and kept across the task's turns;
- after every turn whose ground truth is not empty: the model must have produced a call in that turn; the
  public attributes (``vars()`` without ``_`` names) of every model instance must equal the ground-truth
  instance's; every ground-truth execution result of the turn must appear (unordered, with multiplicity)
  among all the model's execution results so far. A task is valid only if every turn passes.

Where we differ, on purpose:

- The official executor builds a Python string per call and runs ``eval`` on it, keeping instances in
  ``globals()``. We never evaluate text: model calls come from our JSON tool-call parser; ground-truth
  calls (Python call syntax) are parsed with :mod:`ast` and their arguments read with
  ``ast.literal_eval`` on literal nodes only. A call may only name a documented public method of an
  involved class offered to this task (``excluded_function`` removed); anything else is refused with an
  error result and counted as malformed. Instances are fresh per task.
- The instances do not live in the evaluating process: each task's model-side and ground-truth-side
  instances live in a worker process of their own (:mod:`.bfcl_worker`), started in the OS sandbox
  (bubblewrap, when it can start: read-only interpreter, virtualenv and package, private ``/tmp``, no
  network) with rlimits and a seccomp filter (:mod:`.bfcl_sandbox`). Each model call has a wall-clock
  limit (:class:`.bfcl_sandbox.ExecutorSettings`, default 2 s): one that overruns it, such as
  ``round_number(number=5, decimal_places=-10**7)`` (22 s in one C call), answers the model with an error
  text, changes nothing, and the task goes on in a fresh worker restored by replaying the task's calls.
  The decimal context and mpmath's precision are reset before every call, and no process-global
  change reaches another task (the official executor runs every task in one process, so
  ``square_root`` leaves the decimal precision it was given to everything after it). The state check
  runs inside the worker, on the real objects, with the code below (:func:`_states_equal`).
- Arguments are bounded before a call runs (:func:`check_argument_bounds`): integers within the I-JSON
  safe range (|n| <= 2**53 - 1, RFC 7493) and the MathAPI arguments whose cost grows without limit
  (``power``'s exponent, the decimal ``precision`` of ``square_root``/``logarithm``) within
  :data:`ARGUMENT_BOUNDS`. The official executor runs them as given, so one model answer such as
  ``power(base=10, exponent=10**7)`` or ``logarithm(..., precision=10**7)`` stalls the whole evaluation in a
  single C-level computation. Those are refused up front (a malformed call, no worker restart); the
  per-call time limit above catches what the bounds miss. Every ground-truth argument is far inside them.
- The model sees our compact tool chat template (JSON ``<tool_call>`` blocks), not BFCL's prompt with
  Python-call output; long-context and irrelevance variants are not run (base category only).
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.resources
import inspect
import json
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from envfactory_assets.decontam.benchmarks import read_jsonl
from envfactory_assets.evaluation.bfcl_sandbox import (
    BFCLWorkerProcess,
    ExecutorSettings,
    RemoteError,
    WorkerLost,
    WorkerStartFailed,  # noqa: F401 - raised through BFCLEpisode, importable from here
    isolation_for_bfcl,
)
from envfactory_assets.evaluation.task_draw import draw_block

CATEGORY = "multi_turn_base"
BENCHMARK = "bfcl_v3_multi_turn_base"
STATELESS_CLASSES = frozenset({"MathAPI"})
"""Classes BFCL builds without loading a scenario (``constants/executable_backend_config.py``)."""
_JSON_TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "any": "string",
    "int": "integer",
    "list": "array",
    "bool": "boolean",
    "str": "string",
}


class UnsafeCall(ValueError):
    """A call that the executor refuses to run (not a documented public method, or non-literal code)."""


MAX_SAFE_INTEGER = 2**53 - 1
"""Largest integer magnitude accepted in a call's arguments (I-JSON, RFC 7493 section 2.2)."""
ARGUMENT_BOUNDS: dict[str, dict[str, int]] = {
    "power": {"exponent": 1000},
    "square_root": {"precision": 1000},
    "logarithm": {"precision": 1000},
}
"""``{function: {argument: largest |value|}}`` for MathAPI arguments whose running time grows with their
value (big-integer power, ``decimal``/``mpmath`` precision). The largest such value in BFCL's multi-turn
ground truth is a precision of 10."""


def _numbers(value: Any, depth: int = 0) -> Any:
    if depth > 100:
        raise UnsafeCall("arguments are nested more than 100 levels deep")
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _numbers(item, depth + 1)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _numbers(item, depth + 1)


def check_argument_bounds(name: str, args: list[Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse arguments whose value alone could make a BFCL function run for minutes.

    Raises:
        UnsafeCall: an integer beyond :data:`MAX_SAFE_INTEGER`, an argument of :data:`ARGUMENT_BOUNDS`
            beyond its bound, or nesting deeper than 100 levels.
    """
    for number in _numbers([args, dict(kwargs)]):
        if isinstance(number, int) and abs(number) > MAX_SAFE_INTEGER:
            raise UnsafeCall(f"{name}: integer argument {str(number)[:30]}... is beyond +-2**53-1")
    for argument, bound in ARGUMENT_BOUNDS.get(name, {}).items():
        value = kwargs.get(argument)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > bound:
            raise UnsafeCall(f"{name}: {argument}={value:g} is beyond the executor's bound of {bound}")


def check_call(name: Any, args: list[Any] | None, kwargs: Any, offered: Collection[str]) -> None:
    """Refuse a call before it runs: ``name`` must be in ``offered``, ``kwargs`` an object with string keys
    (or None), and the arguments within :func:`check_argument_bounds`.

    Raises:
        UnsafeCall: naming the reason.
    """
    if not isinstance(name, str) or name not in offered:
        raise UnsafeCall(f"no offered function named {str(name)[:80]!r}")
    if kwargs is not None and (not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs)):
        raise UnsafeCall(f"{name}: arguments must be an object with string keys")
    check_argument_bounds(name, list(args or []), dict(kwargs or {}))


@dataclass(frozen=True)
class BFCLTask:
    """One BFCL multi-turn entry with its ground truth.

    Attributes:
        id: e.g. ``"multi_turn_base_0"``.
        turns: user messages, one list per turn (the file's ``question``).
        initial_config: ``{class_name: scenario}``.
        involved_classes: class names, e.g. ``["GorillaFileSystem", "TwitterAPI"]``.
        excluded_functions: function names not offered in this task.
        ground_truth: one list of Python-call strings per turn.
    """

    id: str
    turns: list[list[dict[str, Any]]]
    initial_config: dict[str, Any]
    involved_classes: list[str]
    excluded_functions: list[str]
    ground_truth: list[list[str]]


def _bfcl_files() -> Any:
    try:
        return importlib.resources.files("bfcl_eval")
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "bfcl-eval is not installed (pip install --no-deps bfcl-eval)", name="bfcl_eval"
        ) from exc


def load_tasks(n: int | None = None, draw: int = 0) -> list[BFCLTask]:
    """BFCL multi-turn base tasks from the installed wheel, ``n`` of them in a stable order.

    With ``n`` set, tasks are taken in order of sha256 of their id (a fixed, content-independent sample
    spread over all API classes; ``draw`` k is the k-th block of ``n``, disjoint from every other draw:
    :func:`~envfactory_assets.evaluation.task_draw.draw_block`); ``None`` returns all 200 in file order.

    Raises:
        ModuleNotFoundError: ``bfcl-eval`` is not installed.
        ValueError: ``n`` is negative (slicing would have taken all but ``-n`` tasks), a data file is not
            JSON lines, or a task has no ground truth.
    """
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise ValueError(f"load_tasks: n={n!r} must be a whole number >= 0 or None (all tasks)")
    root = _bfcl_files() / "data"
    name = f"BFCL_v4_{CATEGORY}.json"
    entries = read_jsonl(root / name)
    answers = {a["id"]: a["ground_truth"] for a in read_jsonl(root / "possible_answer" / name)}
    tasks = []
    for e in entries:
        if e["id"] not in answers:
            raise ValueError(f"{name}: task {e['id']} has no ground truth in possible_answer/{name}")
        tasks.append(
            BFCLTask(
                e["id"],
                e["question"],
                e.get("initial_config") or {},
                list(e["involved_classes"]),
                list(e.get("excluded_function") or []),
                answers[e["id"]],
            )
        )
    if n is not None or draw:
        tasks = draw_block(tasks, lambda t: t.id, n, draw, "BFCL multi-turn")
    return tasks


def _class_modules() -> dict[str, str]:
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    return CLASS_FILE_PATH_MAPPING


def _doc_files() -> dict[str, str]:
    from bfcl_eval.constants.executable_backend_config import (
        MULTI_TURN_FUNC_DOC_FILE_MAPPING,
    )

    return MULTI_TURN_FUNC_DOC_FILE_MAPPING


def _json_schema(schema: Any) -> Any:
    """BFCL's parameter schema with its Python type names mapped to JSON Schema types."""
    if isinstance(schema, list):
        return [_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _json_schema(v) for k, v in schema.items()}
    if isinstance(out.get("type"), str):
        out["type"] = _JSON_TYPES.get(out["type"], out["type"])
    return out


def task_tools(task: BFCLTask) -> list[dict[str, Any]]:
    """OpenAI function tools of the task's involved classes, without its excluded functions.

    Raises:
        KeyError: an involved class has no function doc in the wheel.
    """
    docs_dir = _bfcl_files() / "data" / "multi_turn_func_doc"
    files = _doc_files()
    tools = []
    for cls in task.involved_classes:
        if cls not in files:
            raise KeyError(f"BFCL task {task.id}: no function doc for class {cls!r}")
        for doc in read_jsonl(docs_dir / files[cls]):
            if doc["name"] in task.excluded_functions:
                continue
            tools.append(
                {
                    "type": "function",
                    "function": {
                        "name": doc["name"],
                        "description": doc.get("description", ""),
                        "parameters": _json_schema(doc.get("parameters") or {"type": "object", "properties": {}}),
                    },
                }
            )
    return tools


def parse_python_call(text: str) -> tuple[str, list[Any], dict[str, Any]]:
    """``"mv(source='a', destination='b')"`` -> ``("mv", [], {"source": "a", "destination": "b"})``.

    Parsed with :func:`ast.parse` in ``eval`` mode; the callee must be a bare name and every argument a
    literal (``ast.literal_eval`` on the node), so nothing in ``text`` is ever executed.

    Raises:
        UnsafeCall: not a single call of a bare name with literal arguments (attribute access, nested
            calls, ``*args``/``**kwargs``, names, comprehensions...).
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise UnsafeCall(f"not a call: {text[:120]!r} ({exc.msg})") from exc
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise UnsafeCall(f"not a call of a bare function name: {text[:120]!r}")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise UnsafeCall(f"**kwargs are not allowed: {text[:120]!r}")
            kwargs[kw.arg] = ast.literal_eval(kw.value)
    except (ValueError, TypeError, SyntaxError, RecursionError) as exc:
        raise UnsafeCall(f"arguments must be literals: {text[:120]!r}") from exc
    return node.func.id, args, kwargs


def _result_text(value: Any) -> str:
    """A method's return value as text, the way the official executor converts it."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class SafeExecutor:
    """Fresh instances of a task's involved classes and a dispatcher restricted to their offered methods.

    Runs in the worker process (:mod:`.bfcl_worker`); used directly in this process it has no time limit
    and shares this process's globals (the decimal context), so evaluations go through :class:`BFCLEpisode`.

    Args:
        task: the BFCL task (initial config, involved classes, excluded functions).

    Attributes:
        instances: ``{class_name: instance}``, owned by this executor only.
        results: every execution result text, in call order.
    """

    def __init__(self, task: BFCLTask) -> None:
        modules = _class_modules()
        offered = {t["function"]["name"] for t in task_tools(task)}
        self.instances: dict[str, Any] = {}
        self._methods: dict[str, Any] = {}
        for cls_name in task.involved_classes:
            cls = getattr(importlib.import_module(modules[cls_name]), cls_name)
            instance = cls()
            if cls_name not in STATELESS_CLASSES:
                instance._load_scenario(copy.deepcopy(task.initial_config.get(cls_name, {})), long_context=False)
            self.instances[cls_name] = instance
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_") and name in offered:
                    self._methods[name] = method
        self.results: list[str] = []

    def execute(self, name: Any, args: list[Any] | None = None, kwargs: Mapping[str, Any] | None = None) -> str:
        """Run one call and return its result text (errors become ``"Error during execution: ..."``).

        Raises:
            UnsafeCall: ``name`` is not an offered public method of an involved class, ``kwargs`` is
                not an object with string keys, or an argument is out of bounds
                (:func:`check_argument_bounds`). Nothing runs in that case.
        """
        check_call(name, args, kwargs, self._methods)
        try:
            text = _result_text(self._methods[name](*(args or []), **dict(kwargs or {})))
        except Exception as exc:  # noqa: BLE001 - a failing call is a result, as in the official executor
            text = f"Error during execution: {exc}"
        self.results.append(text)
        return text

    def state(self) -> dict[str, dict[str, Any]]:
        """``{class_name: {public attribute: value}}`` (what the official state checker compares)."""
        return {c: {k: v for k, v in vars(i).items() if not k.startswith("_")} for c, i in self.instances.items()}


def _states_equal(model: SafeExecutor, gold: SafeExecutor) -> tuple[bool, list[str]]:
    diffs = []
    for cls_name, gold_instance in gold.instances.items():
        model_instance = model.instances[cls_name]
        for attr, value in vars(gold_instance).items():
            if not attr.startswith("_") and getattr(model_instance, attr, None) != value:
                diffs.append(f"{cls_name}.{attr}")
    return not diffs, diffs


def _unordered_subset(needed: list[str], have: list[str]) -> list[str]:
    pool = list(have)
    missing = []
    for item in needed:
        if item in pool:
            pool.remove(item)
        else:
            missing.append(item)
    return missing


class _RemoteSide:
    """One side of an episode (the model's or the ground truth's instances), which lives in the worker.

    Attributes:
        results: every execution result text of this side, in call order (kept in this process).
    """

    def __init__(self, episode: BFCLEpisode, side: str) -> None:
        self._episode = episode
        self._side = side
        self.results: list[str] = []

    def state(self) -> dict[str, Any]:
        """A JSON view of ``{class_name: {public attribute: value}}``, nested objects as
        ``{"__type__": name, public attributes...}`` (diagnostics; the state check itself compares the
        real objects inside the worker)."""
        return self._episode._state_view(self._side)


class _Broken(Exception):
    """The task's state could not be restored in a fresh worker."""


class BFCLEpisode:
    """One model's run of one BFCL task: model calls on fresh instances, checked after each turn.

    The instances (model side and ground-truth side) live in a worker process of their own
    (:mod:`.bfcl_worker`, started in the OS sandbox by :mod:`.bfcl_sandbox`), one per task, so no
    process-global change a call makes (the decimal context, mpmath's precision, module-level objects)
    reaches another task, and a call that overruns ``settings.call_timeout_s`` can be stopped: the
    worker is killed, the call's result is an error text (``"Error during execution: ..."``, as BFCL's
    executor reports exceptions; it counts as an executed call, not a malformed one, and changes no
    state), and a fresh worker gets the task's state back by **replaying** the task's logged requests
    (its successful model calls and the ground-truth turns run so far, in their order). Replay is exact
    for BFCL's classes: they load from the task's ``initial_config`` and their only randomness is a
    ``random.Random`` per instance seeded from it (``MessageAPI``, ``TravelAPI``, ``TradingBot``,
    ``VehicleControlAPI``), so the same calls give the same state and the same results (checked on
    every replay; a difference is warned about). Reloading the public attributes would lose those
    generators' positions (the next generated id would differ from the ground truth's).

    Calls are checked here first (:func:`check_call`), so a refused call never reaches the worker.
    If the state cannot be restored (the fresh worker also overruns), the task is scored invalid with
    the reason in ``error``.

    ``score()`` returns ``{"valid": 0.0|1.0, "reward": same, "turns_passed": int, "n_turns": int,
    "error": first failure or None, "n_malformed": int, "n_timeouts": int}``; ``reward`` is what the
    evaluation averages (BFCL's accuracy is the share of valid tasks).

    Args:
        task: the BFCL task.
        settings: the worker's limits; default :meth:`ExecutorSettings.from_env`.

    Raises:
        WorkerStartFailed: (from the first call or ``end_turn``) the worker did not start.
    """

    def __init__(self, task: BFCLTask, settings: ExecutorSettings | None = None) -> None:
        self.task = task
        self.settings = settings or ExecutorSettings.from_env()
        self._offered = frozenset(t["function"]["name"] for t in task_tools(task))
        self.model = _RemoteSide(self, "model")
        self.gold = _RemoteSide(self, "gold")
        self.n_malformed = 0
        self.n_timeouts = 0
        self.worker_starts = 0
        self.replay_mismatches = 0
        self._turn_calls = 0
        self._turns_passed = 0
        self._error: str | None = None
        self._broken: str | None = None
        self._closed = False
        self._log: list[tuple[str, dict[str, Any], Any]] = []  # (op, fields, result) of requests that changed state
        self._isolation = isolation_for_bfcl()
        self._worker: BFCLWorkerProcess | None = None
        self._initialized = False
        self._spawn()

    @property
    def contained(self) -> bool:
        """Whether the worker runs inside bubblewrap."""
        return self._isolation.contained

    @property
    def worker(self) -> BFCLWorkerProcess | None:
        """The current worker process (None between a loss and the next start)."""
        return self._worker

    def restart(self) -> None:
        """Kill the worker now; the next request restores the task's state in a fresh one by replay (what
        a call that overruns its time limit causes)."""
        if self._closed:
            raise RuntimeError(f"BFCL episode of {self.task.id} is closed")
        self._lose_worker()

    # -- the worker ------------------------------------------------------------------------------
    def _spawn(self) -> None:
        worker = BFCLWorkerProcess(self.settings, self._isolation)
        worker.spawn()
        self.worker_starts += 1
        self._worker, self._initialized = worker, False

    def _lose_worker(self) -> None:
        if self._worker is not None:
            self._worker.kill()
        self._worker, self._initialized = None, False
        if not self._closed:
            self._spawn()  # starts now, restored on next use

    def _ready_worker(self) -> BFCLWorkerProcess:
        """The worker, started and holding the task's current state (restored by replay if needed).

        Raises:
            _Broken: the state could not be restored (two fresh workers lost during replay).
            WorkerStartFailed: a worker did not start.
        """
        if self._closed:
            raise RuntimeError(f"BFCL episode of {self.task.id} is closed")
        if self._broken is not None:
            raise _Broken(self._broken)
        if self._worker is not None and self._worker.exited():  # died between requests: not the next call's fault
            self._lose_worker()
        problem = ""
        for _attempt in range(2):
            if self._worker is None:
                self._spawn()
            worker = self._worker
            assert worker is not None
            if self._initialized:
                return worker
            try:
                self._restore(worker)
                self._initialized = True
                return worker
            except WorkerLost as exc:
                problem = f"{exc.kind}: {exc.message}"
                self._lose_worker()
            except RemoteError as exc:
                problem = f"{exc.type}: {exc}"
                self._lose_worker()
        raise _Broken(f"could not restore the task's state in a fresh worker ({problem})")

    def _restore(self, worker: BFCLWorkerProcess) -> None:
        task = {
            "id": self.task.id,
            "involved_classes": list(self.task.involved_classes),
            "excluded_functions": list(self.task.excluded_functions),
        }
        worker.request(
            "init",
            {"task": task, "initial_config_json": json.dumps(self.task.initial_config)},
            self.settings.startup_timeout_s,
        )
        mismatches = 0
        for op, fields, recorded in self._log:
            if worker.request(op, fields, self._budget(op, fields)) != recorded:
                mismatches += 1
        if mismatches:
            self.replay_mismatches += mismatches
            warnings.warn(
                f"BFCL task {self.task.id}: replaying {len(self._log)} requests into a fresh worker "
                f"gave {mismatches} different result(s)",
                RuntimeWarning,
                stacklevel=4,
            )

    def _budget(self, op: str, fields: Mapping[str, Any]) -> float:
        if op == "gold":
            return self.settings.call_timeout_s * max(1, len(fields["calls"]))
        return self.settings.call_timeout_s

    def _request(self, op: str, fields: dict[str, Any]) -> Any:
        """A request that does not come from the model (ground truth, checks, views): when the worker is
        lost, the state is restored in a fresh one and the request retried once.

        Raises:
            _Broken: the request or the restore failed twice.
            UnsafeCall: a ground-truth call was refused.
            RuntimeError: the worker answered with an internal error.
        """
        problem = ""
        for _attempt in range(2):
            worker = self._ready_worker()
            try:
                return worker.request(op, fields, self._budget(op, fields))
            except WorkerLost as exc:
                problem = f"{exc.kind}: {exc.message}"
                self._lose_worker()
            except RemoteError as exc:
                if exc.type == "unsafe_call":
                    raise UnsafeCall(str(exc)) from None
                raise RuntimeError(f"BFCL worker failed on {op} for {self.task.id}: {exc.error}") from None
        raise _Broken(f"{op} failed twice ({problem})")

    def _break(self, reason: str) -> None:
        if self._broken is None:
            self._broken = reason
            warnings.warn(
                f"BFCL task {self.task.id}: {reason}; the task is scored invalid", RuntimeWarning, stacklevel=4
            )
        if self._error is None:
            self._error = f"executor: {reason}"
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def _state_view(self, side: str) -> dict[str, Any]:
        try:
            return json.loads(self._request("state", {"side": side})["state_json"])
        except _Broken as exc:
            raise RuntimeError(f"BFCL task {self.task.id}: no state ({exc})") from None

    # -- the episode interface ---------------------------------------------------------------------
    def call(self, name: str, arguments: Any) -> str:
        """Execute a parsed model call; a refused call returns an error text and counts as malformed.

        A call that overruns the time limit, or kills the worker, returns an error text and leaves the
        task's state as it was before the call.
        """
        kwargs = {} if arguments is None else arguments
        try:
            check_call(name, None, kwargs, self._offered)
            try:
                arguments_json = json.dumps(dict(kwargs))
            except (TypeError, ValueError) as exc:
                raise UnsafeCall(f"{name}: arguments are not JSON ({exc})") from None
        except UnsafeCall as exc:
            self.n_malformed += 1
            return f"Error during execution: refused: {exc}"
        fields = {"name": name, "arguments_json": arguments_json}
        try:
            worker = self._ready_worker()
            result = worker.request("call", fields, self.settings.call_timeout_s)
        except _Broken as exc:
            self._break(str(exc))
            text = f"Error during execution: the executor lost this task's state ({exc})"
        except WorkerLost as exc:
            self._lose_worker()
            if exc.kind == "timeout":
                self.n_timeouts += 1
                text = (
                    f"Error during execution: {name} did not finish within {self.settings.call_timeout_s:g} s "
                    "(the executor's time limit per call); it was stopped and changed nothing"
                )
            else:
                text = f"Error during execution: {name} stopped the executor ({exc.message}); it changed nothing"
        except RemoteError as exc:  # e.g. out of memory while encoding the result: state unknown, restore it
            self._lose_worker()
            text = f"Error during execution: {name} failed in the executor ({exc.type}: {exc}); it changed nothing"
        else:
            if "refused" in result:
                self.n_malformed += 1
                return f"Error during execution: refused: {result['refused']}"
            self._log.append(("call", fields, result))
            text = json.loads(result["text_json"])
        self.model.results.append(text)
        self._turn_calls += 1
        return text

    def add_malformed(self, n: int = 1) -> None:
        self.n_malformed += n

    def end_turn(self, turn_index: int) -> None:
        """Run the turn's ground truth and apply the official per-turn checks (first failure is kept)."""
        calls_this_turn, self._turn_calls = self._turn_calls, 0
        if turn_index >= len(self.task.ground_truth):
            return
        texts = list(self.task.ground_truth[turn_index])
        for text in texts:
            parse_python_call(text)  # an unparsable ground truth raises here, before anything runs
        if self._broken is not None:
            return
        gold_results: list[str] = []
        try:
            if texts:
                fields = {"calls": texts}
                result = self._request("gold", fields)
                self._log.append(("gold", fields, result))
                gold_results = json.loads(result["texts_json"])
                self.gold.results += gold_results
            if self._error is not None or not texts:
                return
            if calls_this_turn == 0:
                self._error = f"turn {turn_index}: no call executed"
                return
            check = self._request("check", {})
        except _Broken as exc:
            self._break(str(exc))
            return
        if not check["same"]:
            self._error = f"turn {turn_index}: state differs in {', '.join(check['diffs'][:5])}"
            return
        missing = _unordered_subset(gold_results, self.model.results)
        if missing:
            self._error = f"turn {turn_index}: {len(missing)} ground-truth results missing"
            return
        self._turns_passed += 1

    def score(self) -> dict[str, Any]:
        n_turns = len(self.task.ground_truth)
        valid = float(self._error is None and self._turns_passed == sum(1 for t in self.task.ground_truth if t))
        return {
            "valid": valid,
            "reward": valid,
            "turns_passed": self._turns_passed,
            "n_turns": n_turns,
            "error": self._error,
            "n_malformed": self.n_malformed,
            "n_timeouts": self.n_timeouts,
        }

    def close(self) -> None:
        """Kill the worker (the instances go with it). Idempotent."""
        self._closed = True
        if self._worker is not None:
            self._worker.kill()
            self._worker = None


def ground_truth_calls(task: BFCLTask) -> list[list[dict[str, Any]]]:
    """The task's ground truth as JSON tool calls, one list per turn: ``[[{"name", "arguments"}]]``.

    Positional arguments are bound to parameter names with :func:`inspect.signature` of the method.

    Raises:
        UnsafeCall: a ground-truth string is not a literal call; TypeError: arguments do not bind.
    """
    modules = _class_modules()
    methods = {}
    for cls_name in task.involved_classes:
        cls = getattr(importlib.import_module(modules[cls_name]), cls_name)
        methods.update(
            {n: m for n, m in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_")}
        )
    turns = []
    for turn in task.ground_truth:
        calls = []
        for text in turn:
            name, args, kwargs = parse_python_call(text)
            if name not in methods:
                raise UnsafeCall(f"BFCL task {task.id}: ground truth calls unknown function {name!r}")
            bound = inspect.signature(methods[name]).bind(None, *args, **kwargs)
            arguments = dict(bound.arguments)
            arguments.pop(next(iter(arguments)))  # self
            calls.append({"name": name, "arguments": arguments})
        turns.append(calls)
    return turns
