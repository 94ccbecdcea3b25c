"""One object per GRPO rollout slot whose public methods are exactly one task's tools.

:func:`environment_class` generates a class from a task's OpenAI function tools: one public method per tool,
with a keyword-only signature, annotations and a Google-style docstring derived from the tool's JSON Schema,
plus ``reset(**row)`` (the contract TRL 1.16's ``GRPOTrainer(environment_factory=...)`` uses: objects are
reused across batches, ``reset`` receives the dataset row and rebuilds all state). Everything else is private
(leading underscore), so introspecting the public methods yields the tools and nothing else: no reward, no
verification tool. Calls go to a :class:`~envfactory_assets.tooluse.task_episode.TaskEpisode` opened on the
row's initial state, which holds every environment the task involves, so each rollout has its own state.
"""

from __future__ import annotations

import inspect
import json
import keyword
from collections.abc import Mapping
from typing import Any

from envfactory_assets.runtime.canonical import canonical_json
from envfactory_assets.tooluse.reward import RewardBreakdown
from envfactory_assets.tooluse.task_episode import TaskEpisode, TaskRunner
from envfactory_assets.tooluse.tool_calls import parse_tool_calls

RESERVED_NAMES = frozenset({"reset"})
"""Public names that are not tools (TRL's environment contract)."""

_JSON_TYPES = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}


class _Omitted:
    """Default of an optional tool argument the caller left out (distinct from an explicit ``None``)."""

    _instance: _Omitted | None = None

    def __new__(cls) -> _Omitted:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "OMITTED"


OMITTED = _Omitted()


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise ValueError(f"tool {str(tool)[:80]!r}: not an OpenAI function tool with a name")
    params = fn.get("parameters")
    if params is not None and not (
        isinstance(params, Mapping)
        and isinstance(params.get("properties") or {}, Mapping)
        and isinstance(params.get("required") or [], list)
    ):
        raise ValueError(
            f"tool {fn['name']!r}: parameters must be a JSON Schema object whose properties is an "
            f"object and required a list, got {str(params)[:80]!r}"
        )
    if fn.get("description") is not None and not isinstance(fn.get("description"), str):
        raise ValueError(f"tool {fn['name']!r}: description must be text, got {type(fn['description']).__name__}")
    return fn


def _annotation(schema: Any) -> Any:
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(kind, str):
        return _JSON_TYPES.get(kind, Any)
    if isinstance(kind, list):
        types = [_JSON_TYPES[k] for k in kind if k in _JSON_TYPES]
        if types:
            union = types[0]
            for t in types[1:]:
                union = union | t
            return union
    return Any


def tool_signature(tool: Mapping[str, Any]) -> inspect.Signature:
    """Keyword-only signature of a tool: required parameters first (no default), then optional ones
    (default :data:`OMITTED`), each annotated with the Python type of its JSON Schema ``type``.

    Raises:
        ValueError: the tool has no name, its parameters are not a schema object, or a parameter name is not
            an ASCII Python identifier (or is a keyword, or ``self``).
    """
    fn = _function(tool)
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    required = set(params.get("required") or [])
    out = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)]
    for name in sorted(props, key=lambda n: (n not in required, list(props).index(n))):
        if not name.isidentifier() or keyword.iskeyword(name) or not name.isascii():
            raise ValueError(f"tool {fn['name']!r}: parameter {name!r} is not an ASCII Python identifier")
        if name == "self":
            raise ValueError(f"tool {fn['name']!r}: a parameter named 'self' clashes with the method's own self")
        out.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if name in required else OMITTED,
                annotation=_annotation(props[name]),
            )
        )
    return inspect.Signature(out, return_annotation=str)


def _docstring(fn: Mapping[str, Any]) -> str:
    props = (fn.get("parameters") or {}).get("properties") or {}
    lines = [(fn.get("description") or fn["name"]).strip() or fn["name"]]
    if props:
        lines += ["", "Args:"]
        for name, schema in props.items():
            text = (schema.get("description") if isinstance(schema, Mapping) else None) or name
            if isinstance(schema, Mapping) and schema.get("enum"):
                text += f" (one of {', '.join(json.dumps(v) for v in schema['enum'])})"
            lines.append(f"    {name}: {' '.join(str(text).split())}")
    lines += ["", "Returns:", "    The tool's result as JSON text, or an error object."]
    return "\n".join(lines)


def _tool_method(fn: Mapping[str, Any]) -> Any:
    name = fn["name"]
    signature = tool_signature({"function": fn})

    def method(self: TaskEnvironment, /, **arguments: Any) -> str:
        signature.bind(self, **arguments)  # TypeError on unknown or missing arguments, as for a plain method
        return self._call(name, {k: v for k, v in arguments.items() if v is not OMITTED})

    method.__name__ = method.__qualname__ = name
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__doc__ = _docstring(fn)
    method.__annotations__ = {p.name: p.annotation for p in list(signature.parameters.values())[1:]}
    method.__annotations__["return"] = str
    return method


class TaskEnvironment:
    """Base of the generated classes: the episode plumbing, all private, plus ``reset``.

    Args:
        runner: the :class:`TaskRunner` whose sandbox worker has (or will load) the task's environments.
    """

    _tool_names: frozenset[str] = frozenset()

    def __init__(self, runner: TaskRunner) -> None:
        self._runner = runner
        self._episode: TaskEpisode | None = None
        self._row: Mapping[str, Any] | None = None

    def reset(self, **row: Any) -> None:
        """Start a new rollout of ``row`` (an ``rl_dataset`` row): closes the previous episode and opens one on
        a fresh copy of the row's initial state. Returns None (no text is appended to the prompt).

        Raises:
            ValueError: the row's tools are not the tools this class was generated for.
            KeyError: the row uses an environment the runner does not have.
        """
        names = {_function(t)["name"] for t in row.get("tools") or []}
        if names != set(self._tool_names):
            raise ValueError(
                f"rl row {row.get('id', '?')}: its tools {sorted(names)[:5]}... are not the tools of "
                f"{type(self).__name__}"
            )
        self._close()
        self._row = row
        self._episode = self._runner.episode(row)

    def _call(self, name: str, arguments: Any) -> str:
        """Execute one parsed call in this rollout's episode (unknown tools count as malformed there)."""
        if self._episode is None:
            raise RuntimeError("reset(**row) must be called before any tool")
        return self._episode.call(name, arguments)

    def _dispatch(self, name: str, arguments: Any) -> str:
        """Route a parsed call: through the tool's method when the name is one of this task's tools and the
        arguments bind to its signature; otherwise straight to the episode, which records the call (wrong
        arguments are executed and answered with the environment's validation error) or counts it as
        malformed (unknown name, arguments not an object). A name is never looked up outside the tool set,
        so text such as ``__import__`` or ``os.system`` reaches no Python attribute."""
        if name in self._tool_names and isinstance(arguments, Mapping):
            try:
                return getattr(self, name)(**arguments)
            except TypeError:
                pass
        return self._call(name, arguments)

    def _add_malformed(self, n: int) -> None:
        if self._episode is None:
            raise RuntimeError("reset(**row) must be called before counting malformed calls")
        self._episode.add_malformed(n)

    def _add_reply(self, text: str) -> None:
        if self._episode is None:
            raise RuntimeError("reset(**row) must be called before recording a reply")
        self._episode.add_reply(text)

    def _reward(self) -> RewardBreakdown:
        if self._episode is None:
            raise RuntimeError("reset(**row) must be called before scoring")
        return self._episode.reward()

    def _close(self) -> None:
        if self._episode is not None:
            self._episode.close()
            self._episode = None


_CLASSES: dict[bytes, type[TaskEnvironment]] = {}


def environment_class(tools: list[Mapping[str, Any]]) -> type[TaskEnvironment]:
    """The :class:`TaskEnvironment` subclass whose public methods are exactly ``tools`` (cached per tool set).

    Raises:
        ValueError: a tool name is reserved (``reset``), private (leading underscore), not an ASCII identifier
            (``ｒｅｓｅｔ`` in full-width letters would sit next to ``reset``) or repeated; or a parameter is
            not usable (see :func:`tool_signature`).
    """
    key = canonical_json(list(tools))
    if key in _CLASSES:
        return _CLASSES[key]
    methods: dict[str, Any] = {}
    for tool in tools:
        fn = _function(tool)
        name = fn["name"]
        if (
            name in RESERVED_NAMES
            or name.startswith("_")
            or not name.isidentifier()
            or not name.isascii()
            or keyword.iskeyword(name)
        ):
            raise ValueError(f"tool name {name!r} cannot be a public method (reserved, private or not an identifier)")
        if name in methods:
            raise ValueError(f"tool {name!r} appears twice")
        methods[name] = _tool_method(fn)
    cls = type("TaskTools", (TaskEnvironment,), {**methods, "_tool_names": frozenset(methods)})
    _CLASSES[key] = cls
    return cls


def public_methods(obj: Any) -> list[str]:
    """Names of the public functions of ``obj``'s class, the way TRL lists an environment's tools."""
    return [n for n, _ in inspect.getmembers(type(obj), predicate=inspect.isfunction) if not n.startswith("_")]


def execute_tool_text(environment: TaskEnvironment, text: str) -> tuple[list[tuple[str, str]], int]:
    """Parse one model turn and execute its calls in ``environment`` (the rollout's own episode).

    Tool-call blocks that do not parse are counted as malformed calls in the episode (format penalty) and
    never executed; calls to names outside the task's tools are refused by the episode (also malformed); the
    text outside the blocks is recorded as the turn's reply (the reward reads it: an empty response earns 0).

    Returns:
        ``([(tool name, result text), ...] in call order, number of unparseable blocks)``.
    """
    parsed = parse_tool_calls(text)
    environment._add_reply(parsed.content)
    if parsed.format_errors:
        environment._add_malformed(parsed.format_errors)
    results = [(c["name"], environment._dispatch(c["name"], c["arguments"])) for c in parsed.calls]
    return results, parsed.format_errors


def rollout_reward(environment: TaskEnvironment) -> RewardBreakdown:
    """The hybrid reward of the rollout held by ``environment`` (its episode's :meth:`TaskEpisode.reward`), from the
    calls made through its tool methods and the episode's saved final states, never from a tool's result text.

    Raises:
        InvalidReward: the reward is not a finite number in ``[0, MAX_REWARD]``.
    """
    return environment._reward()
