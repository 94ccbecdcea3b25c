"""The model's tool-calling loop of one rollout: ``python -m envfactory_env.agent_loop SPEC.json``.

``SPEC.json`` (written by the harness, removed once read): ``model_url`` (the OpenAI-compatible base URL verifiers
intercepts, ending in ``/v1``), ``model``; ``server_url`` and ``episode_id`` (the rollout's episode on
``envfactory serve-openenv``); ``messages``, ``tools``, ``max_tool_rounds``. The model's key is the environment
variable :data:`API_KEY_VARIABLE`, never in the file. Each model turn that calls tools has
each call stepped in the episode (arguments that are not a JSON object are sent as a malformed call, which the
reward's format penalty counts) and the results appended as tool messages; the first turn without a call ends
the loop, its text being the final answer the reward sends.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

TIMEOUT_S = 300.0
#: The environment variable holding the key of ``model_url``.
API_KEY_VARIABLE = "ENVFACTORY_MODEL_API_KEY"


def step(http: httpx.Client, spec: dict[str, Any], action: dict[str, Any]) -> str:
    """Step ``action`` in the episode; the text the model sees (the result, or the error)."""
    response = http.post(
        spec["server_url"].rstrip("/") + "/step", json={"action": {**action, "episode_id": spec["episode_id"]}}
    )
    if response.status_code != 200:
        try:
            error = response.json().get("error")
        except ValueError:
            error = None
        return json.dumps({"error": error or f"HTTP {response.status_code}: {response.text[:2000]}"})
    observation = response.json()["observation"]
    if observation.get("error"):
        return json.dumps({"error": observation["error"]})
    return observation.get("result") or ""


def run(spec: dict[str, Any], api_key: str) -> None:
    messages = list(spec["messages"])
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(timeout=TIMEOUT_S) as http:
        for _ in range(spec["max_tool_rounds"]):
            body = {"model": spec["model"], "messages": messages, "tools": spec["tools"]}
            response = http.post(spec["model_url"].rstrip("/") + "/chat/completions", json=body, headers=headers)
            response.raise_for_status()
            message = response.json()["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            messages.append({k: v for k, v in message.items() if v is not None})
            if not calls:
                return
            for call in calls:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except json.JSONDecodeError:
                    arguments = None
                if isinstance(arguments, dict) and function.get("name"):
                    result = step(http, spec, {"tool_name": function["name"], "arguments": arguments})
                else:
                    result = step(http, spec, {"unparsed_call": json.dumps(function)[:4000]})
                messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": result})


def main(spec_path: str) -> None:
    """Read the spec, remove its file (nothing of the rollout stays in the runtime's folder), run the loop."""
    path = Path(spec_path)
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    finally:
        path.unlink(missing_ok=True)
    run(spec, os.environ.get(API_KEY_VARIABLE, ""))


if __name__ == "__main__":
    main(sys.argv[1])
