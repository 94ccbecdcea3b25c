"""GRPO rollouts through TRL 1.16's own tool loop: ``GRPOTrainer(environment_factory={name: factory})``.

TRL's contract (``trl/trainer/grpo_trainer.py``): each factory returns an object whose public methods are
tools and whose ``reset(**dataset_row)`` starts a rollout; TRL renders each prompt with the tools of its
environment, samples, parses the completion with the tokenizer's ``response_template``, calls the methods
and appends their results, for ``max_tool_calling_iterations`` rounds. Three gaps between that contract and
our rows, and how this module closes each:

(a) Tools per factory, ours per row: a dict ``environment_factory`` keyed by tool set
    (:func:`tool_set_name`, a hash of the row's tools), each dataset row carrying the ``environment`` column
    TRL routes by (TRL then renders and parses each prompt with that environment's tools only). The factory's
    ``reset`` finds the full ``rl_dataset`` row from the task id on the prompt (the dataset holds only the
    prompt and the route).
(b) Schema detail lost when TRL renders tools from Python signatures (transformers' ``get_json_schema``:
    required properties first, no enums, array items, nested objects, formats or bounds): the prompt's first
    message carries the row's own tool schemas under :data:`TOOL_SCHEMAS_KEY` and the trainer's tokenizer gets
    :data:`TRAINING_CHAT_TEMPLATE`, the project template preceded by one statement that renders those
    schemas in place of the signature-derived ones. A prompt therefore renders to exactly the tokens the
    ``rollout_func`` path renders (tested). The saved checkpoint keeps the plain template.
(c) TRL sees a call only when the whole turn parses (one bad block turns the turn into plain content and
    nothing runs), calls a method with ``**arguments`` (a wrong name raised ``TypeError`` before reaching the
    environment), answers unknown names itself, and never executes the calls of the last round. Here the
    tool methods take any arguments and hand them to the episode, which executes them (the environment
    answers wrong arguments with its validation error) and records them; the reward function first settles
    each rollout (:func:`settle_rollout`): every assistant turn's reply text is recorded, a final turn whose
    calls TRL did not run is executed the way the ``rollout_func`` path executes its last round
    (:func:`~envfactory_assets.tooluse.task_environment.execute_tool_text` on the raw text, so its malformed blocks are
    counted), and calls TRL refused itself (unknown name, arguments not an object) go to the episode, which
    counts them as malformed. Only then is the guarded reward computed from the episode
    (:func:`~envfactory_assets.training.training_reward.training_reward`); model text is parsed, never read
    as a score.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from envfactory_assets.runtime.canonical import canonical_json
from envfactory_assets.tooluse.chat_template import TOOL_CHAT_TEMPLATE
from envfactory_assets.tooluse.task_environment import TaskEnvironment, environment_class, execute_tool_text
from envfactory_assets.tooluse.task_episode import TaskRunner

TOOL_SCHEMAS_KEY = "tool_schemas"
"""Key on a prompt's first message holding the row's OpenAI function tools (rendered by
:data:`TRAINING_CHAT_TEMPLATE`, never by the project template, which ignores unknown message keys)."""

TRAINING_CHAT_TEMPLATE = (
    "{%- if messages and messages[0]." + TOOL_SCHEMAS_KEY + " is defined and messages[0]." + TOOL_SCHEMAS_KEY + " -%}"
    "{%- set tools = messages[0]." + TOOL_SCHEMAS_KEY + " -%}"
    "{%- endif -%}" + TOOL_CHAT_TEMPLATE
)
"""The project template with the row's own tool schemas taking the place of the ``tools`` TRL derives from
method signatures (Jinja's ``if`` opens no scope, so the ``set`` reaches the whole template)."""

RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}
"""transformers' ``response_template`` for the project template's assistant turn (text, then
``<tool_call>{json}</tool_call>`` blocks, then ``<|im_end|>``): TRL 1.16's ``qwen3_template`` without the
``<think>`` field, which our template never renders. TRL's ``add_response_schema`` sets one only for the chat
templates it knows."""


def tool_set_name(tools: list[Mapping[str, Any]]) -> str:
    """The ``environment`` name of a tool set: ``"tools_"`` + the first 16 hex digits of the sha256 of its
    canonical JSON (the same key :func:`environment_class` caches classes by)."""
    return "tools_" + hashlib.sha256(canonical_json(list(tools))).hexdigest()[:16]


class TrlTaskEnvironment(TaskEnvironment):
    """Base of the classes handed to TRL: ``reset`` takes TRL's dataset row (``prompt`` and whatever other
    columns) and opens an episode on the full ``rl_dataset`` row named by the prompt's task id.

    Args:
        runner: the :class:`TaskRunner` holding the rows' environments.
        rows: ``{row id: rl_dataset row}``.
        task_id_key: the first prompt message's key naming the row
            (:data:`~envfactory_assets.training.grpo.TASK_ID_KEY`).
    """

    def __init__(self, runner: TaskRunner, rows: Mapping[str, Mapping[str, Any]], task_id_key: str) -> None:
        super().__init__(runner)
        self._rows = rows
        self._task_id_key = task_id_key
        self._trl_calls = 0

    def reset(self, **columns: Any) -> None:
        """Start a rollout of the row whose id the first prompt message carries. Returns None (TRL appends
        nothing to the prompt).

        Raises:
            KeyError: the prompt names no known row.
            ValueError: the row's tools are not this class's tools.
        """
        prompt = columns.get("prompt") or [{}]
        task_id = prompt[0].get(self._task_id_key)
        if task_id not in self._rows:
            raise KeyError(f"GRPO prompt without a known {self._task_id_key!r}: {str(task_id)[:80]}")
        self._trl_calls = 0
        super().reset(**self._rows[task_id])

    def _trl_call(self, name: str, arguments: dict[str, Any]) -> str:
        self._trl_calls += 1
        return self._call(name, arguments)


def _trl_method(base: Any) -> Any:
    """A tool method TRL can call with any keyword arguments: they reach the episode unchecked (its
    environment validates them), with the signature and docstring of ``base`` for TRL's schema rendering."""
    name = base.__name__

    def method(self: TrlTaskEnvironment, /, **arguments: Any) -> str:
        return self._trl_call(name, arguments)

    method.__name__ = method.__qualname__ = name
    method.__signature__ = base.__signature__  # type: ignore[attr-defined]
    method.__doc__ = base.__doc__
    method.__annotations__ = dict(base.__annotations__)
    return method


_TRL_CLASSES: dict[type[TaskEnvironment], type[TrlTaskEnvironment]] = {}


def trl_environment_class(tools: list[Mapping[str, Any]]) -> type[TrlTaskEnvironment]:
    """The :class:`TrlTaskEnvironment` subclass whose public methods are exactly ``tools`` plus ``reset``
    (cached per tool set).

    Raises:
        ValueError: a tool that cannot be a method (see :func:`environment_class`).
    """
    base = environment_class(tools)
    if base not in _TRL_CLASSES:
        methods = {name: _trl_method(getattr(base, name)) for name in base._tool_names}
        _TRL_CLASSES[base] = type("TrlTaskTools", (TrlTaskEnvironment,), {**methods, "_tool_names": base._tool_names})
    return _TRL_CLASSES[base]


def environment_factories(
    rows: list[Mapping[str, Any]], runner: TaskRunner | None, task_id_key: str, created: list[TrlTaskEnvironment]
) -> dict[str, Callable[[], TrlTaskEnvironment]]:
    """TRL's dict ``environment_factory``: ``{tool_set_name(tools): factory}`` over the distinct tool sets of
    ``rows``, each factory returning a new object of that tool set's class on ``runner`` (and appending it to
    ``created``, so that the caller can close their episodes); with ``runner`` None the factories are only
    for checking the rows (their objects could open no episode).

    Raises:
        ValueError: a row's tools cannot be methods (see :func:`environment_class`), or a method's signature
            and docstring are not something transformers' ``get_json_schema`` reads (TRL calls it on every
            prompt; failing here names the row instead of failing mid-run).
    """
    from transformers.utils import get_json_schema

    by_id = {r["id"]: r for r in rows}
    factories: dict[str, Callable[[], TrlTaskEnvironment]] = {}
    for row in rows:
        name = tool_set_name(row["tools"])
        if name not in factories:
            cls = trl_environment_class(row["tools"])
            for tool in sorted(cls._tool_names):
                try:
                    get_json_schema(getattr(cls, tool))
                except Exception as exc:  # transformers raises its own parsing exceptions
                    raise ValueError(
                        f"rl row {row['id']}: tool {tool!r} cannot be rendered by TRL ({type(exc).__name__}: {exc})"
                    ) from exc

            def factory(cls: type[TrlTaskEnvironment] = cls) -> TrlTaskEnvironment:
                created.append(cls(runner, by_id, task_id_key))
                return created[-1]

            factories[name] = factory
    return factories


def routed_prompt(row: Mapping[str, Any], prompt: list[dict[str, Any]]) -> dict[str, Any]:
    """One dataset row for the ``environment_factory`` path: ``{"prompt": prompt with the row's tool schemas
    on its first message, "environment": tool_set_name(row tools)}``."""
    first = {**prompt[0], TOOL_SCHEMAS_KEY: list(row["tools"])}
    return {"prompt": [first, *prompt[1:]], "environment": tool_set_name(row["tools"])}


def settle_rollout(environment: TrlTaskEnvironment, completion: list[Mapping[str, Any]]) -> tuple[int, int]:
    """Record in ``environment``'s episode what TRL's tool loop left out of it (see the module docstring, (c)):
    each assistant turn's reply text, the calls TRL refused itself (as malformed there), and the calls of a
    final turn TRL did not execute (executed now; unparsed blocks counted as malformed).

    Args:
        environment: the rollout's environment, after TRL's tool loop.
        completion: TRL's completion messages of that rollout (assistant turns and the tool messages TRL
            appended after them), in order.

    Returns:
        ``(calls executed in the episode over the whole rollout, malformed calls counted over the rollout)``.
    """
    episode = environment._episode
    if episode is None:
        raise RuntimeError("settle_rollout: the environment was never reset")
    executed_by_trl = 0  # calls of turns TRL answered with tool messages that reached a method
    turns = [(i, m) for i, m in enumerate(completion) if m.get("role") == "assistant"]
    for position, (index, message) in enumerate(turns):
        answered = index + 1 < len(completion) and completion[index + 1].get("role") == "tool"
        calls = [c.get("function", c) for c in message.get("tool_calls") or []]
        reaching = [
            c for c in calls if c.get("name") in environment._tool_names and isinstance(c.get("arguments"), Mapping)
        ]
        refused = [c for c in calls if c not in reaching]
        last = position == len(turns) - 1
        ran = answered or (last and environment._trl_calls > executed_by_trl and bool(reaching))
        if not calls and last:
            execute_tool_text(environment, str(message.get("content") or ""))
            continue
        environment._add_reply(str(message.get("content") or ""))
        for call in refused:
            environment._call(str(call.get("name")), call.get("arguments"))
        if ran:
            executed_by_trl += len(reaching)
        else:
            for call in reaching:
                environment._call(call["name"], dict(call["arguments"]))
    return len(episode.calls), episode.n_malformed
