"""The taskset: one task per RL row, scored by the server that runs its episode.

A rollout's episode lives on ``envfactory serve-openenv`` (``base_url``), named ``vf-<trace id>``: the task's
``setup`` opens it (``POST /reset``), the harness's agent loop steps each tool call in it, and the reward sends
the model's final answer (``POST /step``), which ends the episode and returns the reward the server computed
from the calls it executed and the state they left. The reward never passes through the model's program, so no
tool or model output can write it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from importlib import resources
from typing import Any

import httpx
import verifiers.v1 as vf

SERVER_ENV = "ENVFACTORY_OPENENV_URL"
"""Environment variable naming the ``serve-openenv`` server when ``base_url`` is not configured."""
DEFAULT_SERVER = "http://127.0.0.1:8000"
TIMEOUT_S = 60.0


def episode_id(trace: vf.Trace) -> str:
    """The server-side episode of ``trace``'s rollout."""
    return f"vf-{trace.id}"


async def server_post(base_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to the server; its JSON answer.

    Raises:
        RuntimeError: the server cannot be reached, or answered an error (its type and message are in the text).
    """
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
            response = await http.post(base_url.rstrip("/") + path, json=body)
    except httpx.HTTPError as exc:
        raise RuntimeError(
            f"cannot reach serve-openenv at {base_url} ({type(exc).__name__}: {exc}); start "
            f"`envfactory serve-openenv` there, or set base_url / ${SERVER_ENV} to where it runs"
        ) from exc
    if response.status_code != 200:
        raise RuntimeError(f"serve-openenv {path} answered {response.status_code}: {response.text[:2000]}")
    return response.json()


def verifiers_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages (a row's prompt) in verifiers' message shape: an assistant's ``tool_calls`` entries
    become ``{"id", "type", "name", "arguments"}`` (arguments as the JSON text the model emitted); the harness
    sends them back to the model in OpenAI's shape (``message_to_wire``)."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and calls:
            converted = []
            for i, call in enumerate(calls):
                function = call.get("function") or call
                arguments = function.get("arguments", "{}")
                converted.append(
                    {
                        "id": call.get("id") or f"call_{i}",
                        "type": "function",
                        "name": function["name"],
                        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                    }
                )
            message = {**message, "tool_calls": converted}
        out.append(message)
    return out


class EnvFactoryData(vf.TaskData):
    """One RL row: ``id`` is its task id, ``prompt`` the conversation up to the user's request, ``tools`` its
    OpenAI function tools; ``base_url`` the server that runs its episodes."""

    tools: list[dict[str, Any]]
    base_url: str
    split: str = "train"


class EnvFactoryTask(vf.Task[EnvFactoryData]):
    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """Open the rollout's episode of this task on the server."""
        await server_post(self.data.base_url, "/reset", {"task_id": self.data.id, "episode_id": episode_id(trace)})

    @vf.reward(weight=1.0)
    async def envfactory_reward(self, trace: vf.Trace) -> float:
        """The project's reward of the episode: the model's last reply is its final answer.

        Raises:
            RuntimeError: the server computed no reward (the episode was lost, or its reward was invalid).
        """
        answer = {"final_answer": trace.last_reply or "", "episode_id": episode_id(trace)}
        out = await server_post(self.data.base_url, "/step", {"action": answer})
        if out.get("reward") is None:
            raise RuntimeError(f"serve-openenv gave no reward for {self.data.id}: {out.get('observation', {})}")
        return float(out["reward"])


class EnvFactoryConfig(vf.TasksetConfig):
    base_url: str | None = None
    """The ``envfactory serve-openenv`` server (default: $ENVFACTORY_OPENENV_URL, else http://127.0.0.1:8000)."""
    split: str | None = None
    """Only the tasks of this split (``train`` or ``held_out``); all when unset."""


class EnvFactoryTaskset(vf.Taskset[EnvFactoryTask, EnvFactoryConfig]):
    def load(self) -> Iterator[EnvFactoryTask]:
        base_url = self.config.base_url or os.environ.get(SERVER_ENV) or DEFAULT_SERVER
        tasks_file = resources.files("envfactory_env").joinpath("tasks.jsonl")
        if not tasks_file.is_file():
            raise FileNotFoundError(
                "envfactory_env has no tasks.jsonl: install the package `envfactory export-verifiers` wrote, not its "
                "template"
            )
        text = tasks_file.read_text(encoding="utf-8")
        for line in text.splitlines():
            row = json.loads(line)
            if self.config.split is not None and row["split"] != self.config.split:
                continue
            data = EnvFactoryData(
                id=row["id"],
                name=row["id"],
                prompt=verifiers_messages(row["prompt"]),
                tools=row["tools"],
                base_url=base_url,
                split=row["split"],
            )
            yield EnvFactoryTask(data, self.config.task)


class EnvFactoryEnvConfig(vf.SingleAgentEnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The one seat. Its runtime is a local subprocess by default: the harness's program is this package, run
    with this virtualenv's interpreter, so a remote runtime would not have it."""


class EnvFactoryEnv(vf.Env[EnvFactoryEnvConfig]):
    """verifiers' single-agent episode (one rollout of one task), with :class:`EnvFactoryEnvConfig`'s defaults."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        await agents.agent.run(task)


def load_environment(**kwargs: Any) -> vf.Env:
    """This package's environment, as ``vf-eval envfactory-env`` builds it: ``kwargs`` are taskset settings
    (``base_url``, ``split``)."""
    return vf.load_environment(vf.resolve_env_config({"taskset": {"id": "envfactory-env", **kwargs}}))
