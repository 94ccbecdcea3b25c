"""The paper's hybrid reward for one RL task: trace match plus final-state match, minus penalties.

Source: EnvFactory (arXiv 2605.18703), RL reward, as summarized in docs/design.md ("Reward and task episodes"):

    reward = max(0, 0.5 * trace + 0.5 * state - length_penalty - format_penalty)

- ``trace`` is 1.0 iff every gold call is matched by a distinct predicted call with the same name and
  the same value for every argument that is not masked (in any order, so independent calls made together
  in one assistant message match in whatever order they were written; extra calls are allowed here and
  paid for by the length penalty), else 0.0.
- ``state`` is the share of the task's environments whose final state equals the gold final state.
- ``length_penalty`` is 0.05 per predicted call that matched no gold call, capped at 0.5; a call the turn
  itself executed (``executed_calls``: a read the gold left out because the answer does not need its result,
  such as a look-up before acting) is never charged, so replaying the turn's own calls earns the maximum.
- a task whose gold is no call (an abstention task) pays 1.0 for no call and 0.0 for any call.
- ``format_penalty`` is 0.05 per malformed call (a tool-call block that did not parse into a call, or a
  call to a tool the task does not offer, or arguments that are not a JSON object), capped at 0.5.

Training uses :func:`guarded_reward`: the same formula with four rules that close loopholes GRPO found
(measured: in the default run every GRPO prompt was a read such as ``list_keys()`` or ``get_pools(limit=10)``
with ``limit`` masked, so ``{"name": ..., "arguments": {}}`` matched the trace, the untouched state matched
the gold state, a full 1.0 was paid, and the GRPO checkpoint then called tools with empty arguments on
every external task):

- a call with empty or default arguments (nothing left once masked names and values equal to the schema's
  ``default`` are dropped) to a tool whose gold call has *arguments that matter* (required by the schema,
  not masked, not the default: :func:`arguments_that_matter`) makes the whole reward 0;
- on a turn that changes no state (gold final state equal to the initial one, every read), the state half
  is paid only with the trace: an untouched state proves nothing there, and paying it made doing nothing,
  or calling the wrong read, worth half of a right answer;
- on a turn whose gold has no calls (an abstention row: the right answer is a reply that declines or asks,
  and no call), any call or malformed call block fails the trace (the paper's "every gold call matched" is
  vacuous there and would pay a call 0.95), and so does a response without reply text;
- an empty response (no call, no malformed call block, no reply text once tool-call and reasoning blocks are
  removed) earns 0 on every row: it answers nothing, and without this rule it earned the maximum on an
  abstention row and part of the state half on a row whose gold leaves one of its environments unchanged.

:func:`hybrid_reward` stays the paper's formula, unchanged, for the evaluation and the exports.

Pure functions on JSON values: no model, no environment, no Dagster. The environment side (running the
predicted calls to get final states) is :mod:`envfactory_assets.tooluse.task_episode`.

Reward integrity: every input above is the episode's own record (the calls the caller parsed from the model's
own text, the final states the sandbox saved and the caller hashed, the gold from the dataset); nothing a tool
returned is an input, so a tool whose output says ``"reward": 1.0`` or ``"done": true`` changes nothing, and
the reply is read only for whether it is empty. The range of every reward here is ``[0, MAX_REWARD]``;
:func:`valid_reward` refuses anything else where a reward is handed out.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from envfactory_assets.runtime.canonical import canonical_json

TRACE_WEIGHT = 0.5
STATE_WEIGHT = 0.5
PENALTY_PER_CALL = 0.05
PENALTY_CAP = 0.5
MAX_REWARD = TRACE_WEIGHT + STATE_WEIGHT
"""What a complete answer earns: every gold call matched, the gold state reached, nothing charged."""


class InvalidReward(ValueError):
    """A reward that is not a finite number in ``[0, MAX_REWARD]``: refused, never clamped or passed on."""


def valid_reward(value: Any, what: str) -> float:
    """``value`` as a float when it is a finite number in ``[0, MAX_REWARD]``: the one check every interface
    that hands out a reward (GRPO's reward function, the TRL task environment, the verl export's
    ``compute_score``, the OpenEnv server) runs on the reward it is about to return.

    Args:
        value: the reward a reward function produced.
        what: where it came from (the interface and the task), quoted in the error.

    Raises:
        InvalidReward: ``value`` is not a number, not finite, or outside ``[0, MAX_REWARD]`` (a reward outside
            its range would train on a scale no one chose; a clamped one would hide the fault that made it).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidReward(f"{what}: a reward must be a number, got {type(value).__name__} {value!r}")
    try:
        number = float(value)  # numpy scalars are Real; an int past float's range raises here
    except (OverflowError, ValueError) as exc:
        raise InvalidReward(f"{what}: a reward must be a finite number in [0, {MAX_REWARD}], got {value!r}") from exc
    if not math.isfinite(number) or not 0.0 <= number <= MAX_REWARD:
        raise InvalidReward(f"{what}: a reward must be a finite number in [0, {MAX_REWARD}], got {value!r}")
    return number


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward of one rollout and the terms it was made from.

    Attributes:
        reward: the final reward in [0, 1].
        trace: 1.0 when every gold call was matched, else 0.0.
        state: share in [0, 1] of environments whose final state equals the gold one.
        matched_gold: for each gold call (in gold order), whether a predicted call matched it.
        n_extra: predicted calls that matched no gold call.
        n_malformed: malformed calls counted against the format penalty.
        length_penalty: ``min(0.5, 0.05 * n_extra)``.
        format_penalty: ``min(0.5, 0.05 * n_malformed)``.
    """

    reward: float
    trace: float
    state: float
    matched_gold: tuple[bool, ...]
    n_extra: int
    n_malformed: int
    length_penalty: float
    format_penalty: float

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        d = asdict(self)
        d["matched_gold"] = list(self.matched_gold)
        return d


#: Integral floats below this magnitude are compared as integers (2**63: the signed 64-bit range of
#: :func:`~envfactory_assets.runtime.canonical.canonical_json`).
_INT_FLOAT_LIMIT = 2.0**63


def _json_numbers(value: Any) -> Any:
    """``value`` with every integral float written as the integer it equals (``12.0`` -> ``12``, nested too),
    so values compare as JSON numbers do (JSON has one number type; ``12`` and ``12.0`` are one value). Booleans
    stay booleans: JSON's ``true`` is no number, though Python's ``True == 1``."""
    if type(value) is float and value.is_integer() and abs(value) < _INT_FLOAT_LIMIT:
        return int(value)
    if type(value) is dict:  # other mappings stay as they are, for canonical_json to refuse
        return {k: _json_numbers(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return [_json_numbers(v) for v in value]
    return value


def json_value_key(value: Any) -> bytes:
    """The bytes two JSON values share exactly when they are the same JSON value: the canonical JSON of
    ``value`` with integral floats as integers (:func:`_json_numbers`).

    Raises:
        TypeError: ``value`` is not plain JSON (:func:`~envfactory_assets.runtime.canonical.canonical_json`).
    """
    return canonical_json(_json_numbers(value))


def _call_key(call: Mapping[str, Any], masked: frozenset[str]) -> tuple[str, bytes]:
    """What two calls must share to match: the name and the JSON value of the unmasked arguments
    (:func:`json_value_key`: ``12`` matches ``12.0``, ``true`` never matches ``1``)."""
    arguments = call.get("arguments") or {}
    if not isinstance(arguments, Mapping):
        raise ValueError(f"call {call.get('name')!r}: arguments must be a JSON object, got {type(arguments).__name__}")
    kept = {k: v for k, v in arguments.items() if k not in masked}
    return str(call.get("name")), json_value_key(kept)


def match_calls(
    gold_calls: Sequence[Mapping[str, Any]],
    predicted_calls: Sequence[Mapping[str, Any]],
    masked_arguments: Sequence[str] = (),
    executed_calls: Sequence[Mapping[str, Any]] = (),
) -> tuple[list[bool], int]:
    """Match predicted calls to gold calls one-to-one.

    Two calls match when their names are equal and their arguments are equal after dropping the masked
    argument names from both sides. Matching is an equality of keys, so greedy assignment in gold order is
    a maximum matching.

    Args:
        gold_calls: ``[{"name": str, "arguments": dict}, ...]``.
        predicted_calls: the same shape; each one can match at most one gold call.
        masked_arguments: argument names whose values do not matter (e.g. ``limit``, ``page``).
        executed_calls: the calls the turn itself executed (gold calls among them); each one the gold calls do
            not account for excuses one predicted call with the same key from ``n_extra``.

    Returns:
        ``(matched, n_extra)``: one bool per gold call, and how many predicted calls matched nothing and were
        not excused.

    Raises:
        ValueError: a call's ``arguments`` is not a JSON object.
    """
    masked = frozenset(masked_arguments)
    unused: dict[tuple[str, bytes], int] = {}
    for call in predicted_calls:
        key = _call_key(call, masked)
        unused[key] = unused.get(key, 0) + 1
    matched = []
    for call in gold_calls:
        key = _call_key(call, masked)
        if unused.get(key, 0) > 0:
            unused[key] -= 1
            matched.append(True)
        else:
            matched.append(False)
    # the executed calls left once the gold calls are taken out of them (multiset difference)
    excused: dict[tuple[str, bytes], int] = {}
    for call in executed_calls:
        key = _call_key(call, masked)
        excused[key] = excused.get(key, 0) + 1
    for call in gold_calls:
        key = _call_key(call, masked)
        if excused.get(key, 0) > 0:
            excused[key] -= 1
    return matched, sum(max(0, n - excused.get(key, 0)) for key, n in unused.items())


def state_match(final_state_hashes: Mapping[str, str], gold_state_hashes: Mapping[str, str]) -> float:
    """Share of the gold environments whose final state hash equals the gold one.

    Args:
        final_state_hashes: ``{env_id: sha256 hex}`` of the rollout's final states; an environment missing
            here counts as not matching.
        gold_state_hashes: ``{env_id: sha256 hex}`` of the gold final states (see
            :func:`envfactory_assets.runtime.canonical.state_hash`).

    Raises:
        ValueError: ``gold_state_hashes`` is empty.
    """
    if not gold_state_hashes:
        raise ValueError("gold_state_hashes is empty: a task must involve at least one environment")
    same = sum(1 for env_id, h in gold_state_hashes.items() if final_state_hashes.get(env_id) == h)
    return same / len(gold_state_hashes)


def _check_count(value: Any, name: str) -> None:
    """Refuse a count that is not a whole number >= 0 (a bool, a float, NaN, a negative number): it would pass
    a NaN or a fraction into the penalty instead of failing."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be a whole number >= 0 (a count of calls), got {value!r}")


def hybrid_reward(
    gold_calls: Sequence[Mapping[str, Any]],
    predicted_calls: Sequence[Mapping[str, Any]],
    final_state_hashes: Mapping[str, str],
    gold_state_hashes: Mapping[str, str],
    *,
    masked_arguments: Sequence[str] = (),
    n_malformed: int = 0,
    executed_calls: Sequence[Mapping[str, Any]] = (),
) -> RewardBreakdown:
    """The paper's reward for one rollout (formula in the module docstring).

    Args:
        gold_calls: the task's essential gold calls, ``[{"name", "arguments"}]``.
        predicted_calls: every well-formed call the policy made in the rollout, in order.
        final_state_hashes: ``{env_id: hash}`` after executing ``predicted_calls`` on the task's initial state.
        gold_state_hashes: ``{env_id: hash}`` of the gold final state.
        masked_arguments: argument names excluded from the trace comparison.
        n_malformed: calls that could not be parsed or executed as calls (see module docstring).
        executed_calls: the calls the turn executed (the row's ``executed_calls``); never charged as extra.

    Returns:
        A :class:`RewardBreakdown`; ``reward`` is in [0, 1].

    Raises:
        ValueError: ``n_malformed`` is not a whole number >= 0 (a bool, a float, NaN, negative), a call's
            arguments are not an object, or no gold state.
    """
    _check_count(n_malformed, "n_malformed")
    matched, n_extra = match_calls(gold_calls, predicted_calls, masked_arguments, executed_calls)
    # a task whose gold is no call (abstention): any call is the wrong answer, even one that leaves the
    # state as it was, so it earns nothing
    called_when_none_wanted = not gold_calls and bool(predicted_calls or n_malformed)
    trace = 1.0 if all(matched) and not called_when_none_wanted else 0.0
    state = state_match(final_state_hashes, gold_state_hashes)
    length_penalty = min(PENALTY_CAP, PENALTY_PER_CALL * n_extra)
    format_penalty = min(PENALTY_CAP, PENALTY_PER_CALL * n_malformed)
    reward = (
        0.0
        if called_when_none_wanted
        else max(0.0, TRACE_WEIGHT * trace + STATE_WEIGHT * state - length_penalty - format_penalty)
    )
    return RewardBreakdown(
        reward=round(reward, 10),
        trace=trace,
        state=state,
        matched_gold=tuple(matched),
        n_extra=n_extra,
        n_malformed=n_malformed,
        length_penalty=length_penalty,
        format_penalty=format_penalty,
    )


def _tool_schema(tools: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    """The ``parameters`` schema of tool ``name`` in OpenAI function ``tools`` ({} when absent)."""
    for tool in tools:
        fn = tool.get("function", tool)
        if isinstance(fn, Mapping) and fn.get("name") == name:
            params = fn.get("parameters")
            return params if isinstance(params, Mapping) else {}
    return {}


def _is_default(schema: Mapping[str, Any], name: str, value: Any) -> bool:
    prop = (schema.get("properties") or {}).get(name)
    return isinstance(prop, Mapping) and "default" in prop and json_value_key(prop["default"]) == json_value_key(value)


def arguments_that_matter(
    call: Mapping[str, Any], tools: Sequence[Mapping[str, Any]], masked_arguments: Sequence[str] = ()
) -> dict[str, Any]:
    """The arguments of a (gold) ``call`` whose value a solver must get right: required by the tool's JSON
    schema in ``tools``, not in ``masked_arguments``, and not equal to the schema's ``default``.

    Returns:
        ``{argument name: value}`` (empty for a call such as ``list_keys()`` or ``get_pools(limit=10)``).
    """
    schema = _tool_schema(tools, str(call.get("name")))
    required = set(schema.get("required") or [])
    arguments = call.get("arguments") or {}
    return {
        k: v
        for k, v in arguments.items()
        if k in required and k not in masked_arguments and not _is_default(schema, k, v)
    }


def is_empty_call(
    call: Mapping[str, Any], tools: Sequence[Mapping[str, Any]], masked_arguments: Sequence[str] = ()
) -> bool:
    """True when ``call`` passes nothing but masked arguments and values equal to the schema defaults
    (``{}``, ``{"limit": 10}`` with ``limit`` masked, ``{"page": 1}`` where 1 is the default)."""
    schema = _tool_schema(tools, str(call.get("name")))
    arguments = call.get("arguments")
    if not isinstance(arguments, Mapping):
        return True
    return not any(k not in masked_arguments and not _is_default(schema, k, v) for k, v in arguments.items())


def empty_argument_calls(
    gold_calls: Sequence[Mapping[str, Any]],
    predicted_calls: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    masked_arguments: Sequence[str] = (),
) -> int:
    """How many ``predicted_calls`` are empty or default (:func:`is_empty_call`) while a gold call of the
    same tool has arguments that matter (:func:`arguments_that_matter`)."""
    needs = {str(g.get("name")) for g in gold_calls if arguments_that_matter(g, tools, masked_arguments)}
    return sum(1 for c in predicted_calls if str(c.get("name")) in needs and is_empty_call(c, tools, masked_arguments))


def guarded_reward(
    gold_calls: Sequence[Mapping[str, Any]],
    predicted_calls: Sequence[Mapping[str, Any]],
    final_state_hashes: Mapping[str, str],
    gold_state_hashes: Mapping[str, str],
    initial_state_hashes: Mapping[str, str],
    tools: Sequence[Mapping[str, Any]],
    *,
    masked_arguments: Sequence[str] = (),
    n_malformed: int = 0,
    executed_calls: Sequence[Mapping[str, Any]] = (),
    reply: str,
) -> RewardBreakdown:
    """The reward GRPO trains on, and every exported or served reward: :func:`hybrid_reward`'s shape
    (``0.5 * trace + 0.5 * state`` minus the same penalties) with the four rules of the module docstring.

    Args:
        gold_calls, predicted_calls, final_state_hashes, gold_state_hashes, masked_arguments, n_malformed,
        executed_calls: as in :func:`hybrid_reward`.
        initial_state_hashes: ``{env_id: hash}`` of the task's initial state (a turn whose gold state equals
            it changes nothing).
        tools: the task's OpenAI function tools (their schemas say which arguments are required and their
            defaults).
        reply: the response's text outside its tool-call and reasoning blocks (every assistant turn of the
            rollout; :attr:`~envfactory_assets.tooluse.tool_calls.ParseResult.content` of each). Required, so
            that no caller scores a response without looking at its words: on an abstention row they are
            the whole answer.

    Returns:
        A :class:`RewardBreakdown` whose ``trace`` and ``state`` are the guarded terms; ``reward`` is 0.0 when
        :func:`empty_argument_calls` is nonzero or the response is empty.

    Raises:
        ValueError: as :func:`hybrid_reward`.
    """
    paper = hybrid_reward(
        gold_calls,
        predicted_calls,
        final_state_hashes,
        gold_state_hashes,
        masked_arguments=masked_arguments,
        n_malformed=n_malformed,
        executed_calls=executed_calls,
    )
    if not isinstance(reply, str):
        raise ValueError(f"reply must be the response's text, got {type(reply).__name__}")
    answered = bool(reply.strip())
    empty_response = not predicted_calls and not n_malformed and not answered
    # where no call is wanted, a malformed call block is a call too, and the reply is the answer
    trace = paper.trace if gold_calls else float(not predicted_calls and not n_malformed and answered)
    changes_state = any(initial_state_hashes.get(e) != h for e, h in gold_state_hashes.items())
    state = paper.state if changes_state else paper.state * trace
    reward = max(0.0, TRACE_WEIGHT * trace + STATE_WEIGHT * state - paper.length_penalty - paper.format_penalty)
    if empty_response or empty_argument_calls(gold_calls, predicted_calls, tools, masked_arguments):
        reward = 0.0
    return RewardBreakdown(
        reward=round(reward, 10),
        trace=trace,
        state=state,
        matched_gold=paper.matched_gold,
        n_extra=paper.n_extra,
        n_malformed=paper.n_malformed,
        length_penalty=paper.length_penalty,
        format_penalty=paper.format_penalty,
    )
