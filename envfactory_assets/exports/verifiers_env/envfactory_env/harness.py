"""The harness: the model's tool-calling loop (:mod:`envfactory_env.agent_loop`), run as a program in the
rollout's runtime with this virtualenv's interpreter.

The program talks to the model through the rollout's interception endpoint (its key in the program's
environment, never in a file) (so verifiers records every turn
in the trace) and executes each tool call in the rollout's episode on the server; the task's reward ends that
episode afterwards (:mod:`envfactory_env.taskset`).
"""

from __future__ import annotations

import json
import sys

import verifiers.v1 as vf
from verifiers.v1.dialects.chat import message_to_wire

from envfactory_env.agent_loop import API_KEY_VARIABLE
from envfactory_env.taskset import EnvFactoryData, episode_id


class EnvFactoryHarnessConfig(vf.HarnessConfig):
    max_tool_rounds: int = 16
    """Model turns per rollout at most (each may call several tools); the server's step limit applies too."""


class EnvFactoryHarness(vf.Harness[EnvFactoryHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> vf.ProgramResult:
        if not isinstance(data, EnvFactoryData):
            raise TypeError(f"the envfactory-env harness plays envfactory-env tasks, not {type(data).__name__}")
        system_prompt, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [message_to_wire(m) for m in prompt or []]
        spec = {
            "model_url": endpoint,
            "model": ctx.model,
            "server_url": data.base_url,
            "episode_id": episode_id(trace),
            "messages": messages,
            "tools": data.tools,
            "max_tool_rounds": self.config.max_tool_rounds,
        }
        path = f".envfactory-rollout-{trace.id}.json"
        await runtime.write(path, json.dumps(spec).encode())
        # the key goes to the program's environment only, never into a file of the runtime (the program also
        # removes the spec once read)
        return await runtime.run_program(
            [sys.executable, "-m", "envfactory_env.agent_loop", path], {API_KEY_VARIABLE: secret}
        )
