"""The tool class of the verl export: every entry of ``envfactory_tools.yaml`` names
``envfactory_tools.EnvFactoryTool``.

Point verl at the config (``actor_rollout_ref.rollout.multi_turn.tool_config_path=<export>/envfactory_tools.yaml``)
with the export folder on ``PYTHONPATH`` (the export writes a copy of this module there as ``envfactory_tools.py``,
next to ``environments.json`` and the ``verl_*.parquet`` files). Each verl row names its task in
``extra_info.tools_kwargs[<tool>].create_kwargs.task_id`` and its tools in ``extra_info.tool_selection``.

A call runs in the sandbox on the task's own episode (:class:`envfactory_assets.tooluse.task_episode.TaskEpisode`),
opened on a copy of the task's initial state, and answers with the tool's JSON output or error, as this
project's GRPO and evaluation do. verl's tool agent loop creates and releases a tool instance around every
call; where it passes the rollout's ``agent_data`` to ``execute`` (verl 0.9), every call of one rollout goes to
the same episode, so a later call sees what an earlier one changed, and rollouts never share one. Without
``agent_data`` (older verl) each call runs on a fresh copy of the initial state. The reward
(``envfactory_reward.py``) replays the response's calls from the initial state either way. Needs
``envfactory_assets`` installed where the tools run.
"""

from __future__ import annotations

import json
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from envfactory_assets.exports.verl_reward import (
    environments_path,
    episode_row,
    task_runner,
)

try:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import ToolResponse
except ImportError:  # verl not installed: the same contract, so the class can be used and tested without it

    @dataclass
    class ToolResponse:  # type: ignore[no-redef]
        """verl's tool response (text only here)."""

        text: str | None = None

    class BaseTool:  # type: ignore[no-redef]
        """verl's tool base: ``config`` and the OpenAI ``tool_schema`` (a dict here, a pydantic model in verl)."""

        def __init__(self, config: dict, tool_schema: Any) -> None:
            self.config = config
            self.tool_schema = tool_schema
            function = tool_schema["function"] if isinstance(tool_schema, dict) else tool_schema.function
            self.name = function["name"] if isinstance(function, dict) else function.name


TASK_FILES = ("verl_train.parquet", "verl_validation.parquet")
"""The export's verl rows; a task's environments, initial state and tools are read from its ground truth."""

_lock = threading.Lock()
_tasks: dict[Path, dict[str, dict[str, Any]]] = {}
_episodes: dict[int, Any] = {}  # id(agent_data) -> the rollout's episode, closed when agent_data is collected


def _folder() -> Path:
    return environments_path(Path(__file__).parent).parent


def task_ground_truth(task_id: str, folder: Path | None = None) -> dict[str, Any]:
    """The decoded ``reward_model.ground_truth`` of the verl row ``task_id`` (rows of :data:`TASK_FILES` in
    ``folder``, default the environments file's folder; read once per process).

    Raises:
        KeyError: no row has that id.
    """
    import pyarrow.parquet as pq

    folder = folder or _folder()
    with _lock:
        if folder not in _tasks:
            files = [folder / name for name in TASK_FILES if (folder / name).is_file()]
            # an empty split is written with no columns at all: nothing to read from it
            rows = [
                r
                for path in files
                if pq.ParquetFile(path).metadata.num_rows
                for r in pq.read_table(path, columns=["id", "reward_model"]).to_pylist()
            ]
            _tasks[folder] = {r["id"]: r["reward_model"]["ground_truth"] for r in rows}
        tasks = _tasks[folder]
    if task_id not in tasks:
        raise KeyError(f"verl tools: no task {task_id!r} in {folder} ({', '.join(TASK_FILES)})")
    truth = tasks[task_id]
    return json.loads(truth) if isinstance(truth, str) else truth


def _close(key: int) -> None:
    episode = _episodes.pop(key, None)
    if episode is not None:
        episode.close()


class EnvFactoryTool(BaseTool):
    """One tool of the export's environments for verl's tool agent loop (``config.type: native``).

    ``create(create_kwargs={"task_id": ...})`` names the task (a verl row id); ``execute`` runs the call with
    the model's arguments on the task's episode and returns ``(ToolResponse(text=JSON result), 0.0, {})``: the
    step reward is 0, the task's reward is ``envfactory_reward.compute_score``. A tool the task does not offer,
    or arguments that are not an object, answer with an error text, as in training.
    """

    def __init__(self, config: dict, tool_schema: Any) -> None:
        super().__init__(config, tool_schema)
        self._instances: dict[str, dict[str, Any]] = {}

    async def create(
        self, instance_id: str | None = None, create_kwargs: dict[str, Any] | None = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        """Remember the task of a new instance (``create_kwargs`` as the agent loop passes them, or flat
        keyword arguments as verl's older rollouts do).

        Raises:
            KeyError: no ``task_id`` given, or no row of the export has it.
        """
        task_id = (create_kwargs or {}).get("task_id") or kwargs.get("task_id")
        if not task_id:
            raise KeyError(
                f"verl tool {self.name}: create_kwargs has no task_id "
                "(extra_info.tools_kwargs of the export's rows carries it)"
            )
        instance_id = instance_id or str(uuid4())
        self._instances[instance_id] = {"task_id": task_id, "episode": None}
        task_ground_truth(task_id)  # an unknown task fails here, not at the first call
        return instance_id, ToolResponse()

    def _episode(self, instance: dict[str, Any], agent_data: Any) -> Any:
        def opened() -> Any:
            row = episode_row(task_ground_truth(instance["task_id"]), instance["task_id"])
            return task_runner(environments_path(_folder())).episode(row)

        if agent_data is None:  # no rollout to share with: this call's own episode, closed on release
            instance["episode"] = instance["episode"] or opened()
            return instance["episode"]
        key = id(agent_data)
        if key not in _episodes:
            _episodes[key] = opened()
            weakref.finalize(agent_data, _close, key)
        return _episodes[key]

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], agent_data: Any = None, **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Run this tool with ``parameters`` on the rollout's episode (see the module docstring).

        Raises:
            KeyError: ``instance_id`` was not created (or already released).
        """
        episode = self._episode(self._instances[instance_id], agent_data)
        return ToolResponse(text=episode.call(self.name, parameters)), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """0: the task's reward is computed from the whole response by ``envfactory_reward.compute_score``."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forget the instance; an episode of its own (no ``agent_data``) is closed with it."""
        instance = self._instances.pop(instance_id, None)
        if instance and instance["episode"] is not None:
            instance["episode"].close()
