"""The reward function of the verl export: ``compute_score`` as verl's ``custom_reward_function`` calls it.

Point verl at this file (``custom_reward_function.path=<export>/envfactory_reward.py``,
``custom_reward_function.name=compute_score``; the export writes a copy of this module there, next to
``environments.json``). For each rollout it parses the ``<tool_call>`` blocks of the response
(:func:`envfactory_assets.tooluse.tool_calls.parse_tool_calls`), replays the calls on a fresh copy of the
task's initial state in the sandbox (:class:`envfactory_assets.tooluse.task_episode.TaskRunner`) and scores
them with the reward this project's GRPO trains with (:func:`envfactory_assets.tooluse.reward.guarded_reward`,
as :func:`envfactory_assets.training.training_reward.training_reward` calls it, the text outside the
``<tool_call>`` blocks being the reply): an empty response, or a call with empty or default arguments where the
gold call needs arguments, scores 0; on an abstention row (no gold call) a reply without a call scores the
maximum and any call 0; the gold calls score
:data:`~envfactory_assets.tooluse.reward.MAX_REWARD`; the turn's own executed calls are never charged; a score
that is not a finite number in range is an error, never passed to verl. Replaying from the initial state makes the
score independent of how the rollout executed its tools, and of what they answered: verl's ``solution_str`` holds
the tool results too (the rollout's tool-response tokens, decoded with the rest), so ``<tool_response>`` blocks are
removed before parsing (:func:`~envfactory_assets.tooluse.tool_calls.without_tool_responses`), and a tool result
cannot close its block early (:func:`~envfactory_assets.tooluse.task_episode.result_text` escapes the tags in
it). Needs ``envfactory_assets`` installed where the reward runs.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from pathlib import Path
from typing import Any

ENVIRONMENTS_FILE = "environments.json"
"""``{env_id: {"source", "origin"}}`` of every environment the export's RL rows use, next to this module."""
ENVIRONMENTS_ENV = "ENVFACTORY_VERL_ENVIRONMENTS"
"""Environment variable naming another ``environments.json`` (when this module is used from the package)."""

_lock = threading.Lock()
_runners: dict[Path, Any] = {}


def environments_path(folder: Path | None = None) -> Path:
    """The environments file: :data:`ENVIRONMENTS_ENV` when set, else :data:`ENVIRONMENTS_FILE` in ``folder``
    (default: this module's folder, where the export puts both)."""
    return Path(os.environ.get(ENVIRONMENTS_ENV) or Path(folder or Path(__file__).parent) / ENVIRONMENTS_FILE)


def task_runner(path: Path | None = None) -> Any:
    """One sandbox worker per process and environments file (default :func:`environments_path`), with every
    environment of the file loaded on first use; stopped when the process exits.

    Raises:
        FileNotFoundError: the environments file cannot be read.
    """
    path = path or environments_path()
    with _lock:
        if path not in _runners:
            from envfactory_assets.tooluse.task_episode import TaskRunner

            try:
                environments = json.loads(path.read_text(encoding="utf-8"))
            except OSError as exc:
                raise FileNotFoundError(
                    f"verl export: cannot read the environments file {path} ({exc.strerror}); set {ENVIRONMENTS_ENV}"
                ) from None
            _runners[path] = TaskRunner(environments)
            atexit.register(_runners[path].close)
        return _runners[path]


def episode_row(ground_truth: dict[str, Any], row_id: str = "verl") -> dict[str, Any]:
    """The task row a :class:`~envfactory_assets.tooluse.task_episode.TaskEpisode` opens on, from a verl row's
    decoded ``reward_model.ground_truth``: its environments, initial state and offered tool names.

    Raises:
        KeyError: ``ground_truth`` lacks ``env_ids``, ``initial_state`` or ``tool_names``.
    """
    return {
        "id": row_id,
        "env_ids": ground_truth["env_ids"],
        "initial_state": ground_truth["initial_state"],
        "tools": [{"name": n} for n in ground_truth["tool_names"]],
    }


def score_calls(ground_truth: dict[str, Any], response: str, runner: Any = None) -> dict[str, Any]:
    """The training reward of the tool calls in ``response`` for the task described by ``ground_truth``.

    Args:
        ground_truth: the decoded ``reward_model.ground_truth`` of a verl row (``gold_calls``,
            ``executed_calls``, ``masked_arguments``, ``final_state_hashes``, ``env_ids``, ``tool_names``,
            ``tools`` (OpenAI function specs: which arguments are required and their defaults),
            ``initial_state``).
        response: the model's whole response text (every assistant turn of the rollout).
        runner: the :class:`~envfactory_assets.tooluse.task_episode.TaskRunner` to replay on; default
            :func:`task_runner` (the environments file next to this module).

    Returns:
        ``{"score", "trace", "state", "n_calls", "n_malformed"}``; ``score`` is in [0, 1].

    Raises:
        KeyError: ``ground_truth`` lacks a field, or names an environment ``environments.json`` lacks.
        ValueError: the score is not a finite number in ``[0, MAX_REWARD]``.
    """
    from envfactory_assets.runtime.canonical import state_hash
    from envfactory_assets.tooluse.reward import guarded_reward, valid_reward
    from envfactory_assets.tooluse.tool_calls import parse_tool_calls, without_tool_responses

    # verl decodes the whole rollout, the tool results inside it: only the model's own text is parsed
    parsed = parse_tool_calls(without_tool_responses(response or ""))
    episode = (runner or task_runner()).episode(episode_row(ground_truth))
    try:
        for call in parsed.calls:
            episode.call(call["name"], call["arguments"])
        episode.add_malformed(parsed.format_errors)
        initial = {e: state_hash(s) for e, s in ground_truth["initial_state"].items()}
        reward = guarded_reward(
            ground_truth["gold_calls"],
            episode.calls,
            episode.final_state_hashes(),
            ground_truth["final_state_hashes"],
            initial,
            ground_truth["tools"],
            masked_arguments=ground_truth.get("masked_arguments") or (),
            n_malformed=episode.n_malformed,
            executed_calls=ground_truth.get("executed_calls") or (),
            reply=parsed.content,
        )
    finally:
        episode.close()
    return {
        "score": valid_reward(
            reward.reward, f"verl compute_score (envfactory_reward.py), env_ids {ground_truth['env_ids']}"
        ),
        "trace": reward.trace,
        "state": reward.state,
        "n_calls": len(episode.calls),
        "n_malformed": episode.n_malformed,
    }


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str | dict[str, Any],
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's custom reward signature: the score dict of :func:`score_calls` (verl logs its other keys).

    ``ground_truth`` is the row's ``reward_model.ground_truth`` (a JSON string, or already decoded);
    ``data_source`` and ``extra_info`` are not needed.
    """
    truth = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    return score_calls(truth, solution_str)
