"""The evaluation score of a synthetic task: task success, a score that doing nothing cannot earn.

Why a second score: the paper's hybrid reward (:mod:`envfactory_assets.tooluse.reward`, kept for GRPO) pays
half its weight for the final state equal to the gold state. On a read-only turn the gold final state *is*
the initial state, so a policy that calls nothing earns 0.5 there; and a call whose arguments are empty or
default can be cheaper to find than the right one. Public reports found the same false positive in
tau2-bench's read-only tasks. Task success is binary per task:

    success = 1  iff  every gold call is covered  and  every environment's final state equals the gold one

- A gold call is *covered* by a distinct predicted call with the same tool name and, for every argument the
  gold call passes that is not masked (``masked_arguments``: paging and limits, whose values do not
  matter), an equal value (JSON equality, with ``3`` equal to ``3.0``). Extra arguments and extra calls are
  allowed; a write among the extra calls shows up in the state.
- A read-only turn (final state = initial state) is therefore scored by its gold reads with their
  arguments: a policy that never calls scores 0, and so does one calling the gold tools with ``{}`` when
  the gold calls pass arguments that matter. A state-changing turn needs the state *and* the calls.
- A task without gold calls (the right answer is not to call) succeeds when no call was made and the state
  is unchanged.

Pure functions on JSON values, like the reward: no model, no environment, no Dagster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from envfactory_assets.runtime.canonical import canonical_json

#: Bumped when the definition above changes, so cached results scored the old way are not reused.
SCORE_VERSION = 1


@dataclass(frozen=True)
class TaskSuccess:
    """The evaluation score of one synthetic task and what it was made from.

    Attributes:
        success: 1.0 when every gold call is covered and the final state matches, else 0.0.
        calls_covered: share in [0, 1] of gold calls covered by a predicted call (1.0 when there is none).
        state_match: 1.0 when every gold environment's final state hash equals the gold one, else 0.0.
        read_only: True when the gold final state equals the initial state.
        n_calls: well-formed predicted calls.
    """

    success: float
    calls_covered: float
    state_match: float
    read_only: bool
    n_calls: int

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


def _normalized(value: Any) -> Any:
    """``value`` with every number as a float (a model writing ``3`` for a gold ``3.0`` made the same call)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _normalized(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    return value


def _same(predicted: Any, gold: Any) -> bool:
    try:
        value = canonical_json(_normalized(predicted))
    except TypeError:  # a predicted value that is no JSON value (NaN, an infinity) equals no gold value
        return False
    return value == canonical_json(_normalized(gold))


def covers(gold_call: Mapping[str, Any], predicted_call: Mapping[str, Any], masked: frozenset[str]) -> bool:
    """True when ``predicted_call`` has the gold call's name and an equal value for every unmasked gold argument.

    Raises:
        TypeError: the gold call's ``arguments`` is not a JSON object.
    """
    if predicted_call.get("name") != gold_call.get("name"):
        return False
    gold_args = gold_call.get("arguments") or {}
    if not isinstance(gold_args, Mapping):
        raise TypeError(f"gold call {gold_call.get('name')!r}: arguments must be a JSON object")
    args = predicted_call.get("arguments") or {}
    if not isinstance(args, Mapping):
        return False
    return all(name in args and _same(args[name], value) for name, value in gold_args.items() if name not in masked)


def covered_gold_calls(
    gold_calls: Sequence[Mapping[str, Any]],
    predicted_calls: Sequence[Mapping[str, Any]],
    masked_arguments: Sequence[str] = (),
) -> list[bool]:
    """For each gold call, whether a distinct predicted call covers it (:func:`covers`).

    Coverage is not an equality of keys (a predicted call with extra arguments may cover several gold calls
    that differ only in them), so the one-to-one assignment is a maximum bipartite matching (augmenting
    paths; calls per turn are few).
    """
    masked = frozenset(masked_arguments)
    edges = [[j for j, p in enumerate(predicted_calls) if covers(g, p, masked)] for g in gold_calls]
    owner: dict[int, int] = {}  # predicted index -> gold index

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(gold_calls)):
        augment(i, set())
    matched = set(owner.values())
    return [i in matched for i in range(len(gold_calls))]


def task_success(
    gold_calls: Sequence[Mapping[str, Any]],
    predicted_calls: Sequence[Mapping[str, Any]],
    final_state_hashes: Mapping[str, str],
    gold_state_hashes: Mapping[str, str],
    initial_state_hashes: Mapping[str, str],
    *,
    masked_arguments: Sequence[str] = (),
) -> TaskSuccess:
    """Task success of one rollout (definition in the module docstring).

    Args:
        gold_calls: the task's essential gold calls, ``[{"name", "arguments"}]``.
        predicted_calls: every well-formed call the policy made, in order.
        final_state_hashes: ``{env_id: hash}`` after the policy's calls; a missing environment (a lost
            episode) does not match.
        gold_state_hashes: ``{env_id: hash}`` of the gold final state.
        initial_state_hashes: ``{env_id: hash}`` of the task's initial state (says whether it is read-only).
        masked_arguments: argument names whose values do not matter.

    Returns:
        A :class:`TaskSuccess`.

    Raises:
        ValueError: ``gold_state_hashes`` is empty.
        TypeError: a gold call's arguments are not an object.
    """
    if not gold_state_hashes:
        raise ValueError("gold_state_hashes is empty: a task must involve at least one environment")
    state = float(all(final_state_hashes.get(e) == h for e, h in gold_state_hashes.items()))
    read_only = all(initial_state_hashes.get(e) == h for e, h in gold_state_hashes.items())
    if gold_calls:
        covered = covered_gold_calls(gold_calls, predicted_calls, masked_arguments)
        share = sum(covered) / len(covered)
        success = float(all(covered) and state == 1.0)
    else:  # abstention: the right answer is no call at all
        share = 1.0
        success = float(not predicted_calls and state == 1.0)
    return TaskSuccess(
        success=success, calls_covered=share, state_match=state, read_only=read_only, n_calls=len(predicted_calls)
    )
