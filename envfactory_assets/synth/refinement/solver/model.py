"""A solver played by a model: any :class:`~envfactory_assets.llm.ChatBackend` in the ``"solver"`` role, its tool
calls parsed by :func:`envfactory_assets.tooluse.tool_calls.parse_tool_calls`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envfactory_assets.synth.refinement.solver.base import Attempt, SolverView, ToolCaller


class ModelSolver:
    """A solver backed by any :class:`~envfactory_assets.llm.ChatBackend` (role ``"solver"``).

    The system message lists the tools as JSON and asks for Hermes-style ``<tool_call>{...}</tool_call>``
    blocks; each reply's calls are executed and their results returned as ``<tool_response>`` messages,
    until a reply has no call or ``max_steps`` replies were made. The attempt's seed is written into the
    system message so cached replies of different attempts do not coincide.
    """

    name = "model"

    def __init__(self, backend: Any, *, max_steps: int = 6, max_tokens: int = 512, temperature: float = 0.7) -> None:
        self.backend, self.max_steps, self.max_tokens, self.temperature = backend, max_steps, max_tokens, temperature

    def attempt(self, view: SolverView, call_tool: ToolCaller, seed: int) -> Attempt:
        from envfactory_assets.tooluse.tool_calls import parse_tool_calls

        system = (
            "You are a tool-using assistant. Tools (JSON):\n"
            + json.dumps([dict(t) for t in view.tools])
            + '\nTo call a tool, reply with <tool_call>{"name": ..., "arguments": {...}}</tool_call>. '
            "When the request is done, reply with a short answer and no tool call.\n"
            f"(attempt {seed})"
        )
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        messages += [_as_text_message(m) for m in view.messages if m.get("role") != "system"]
        attempt = Attempt()
        for _ in range(self.max_steps):
            reply = self.backend.complete(
                messages, role="solver", max_tokens=self.max_tokens, temperature=self.temperature
            )
            parsed = parse_tool_calls(reply.text)
            messages.append({"role": "assistant", "content": reply.text})
            if not parsed.calls:
                attempt.answer = parsed.content
                if not attempt.calls and parsed.content.rstrip().endswith("?"):
                    attempt.question = parsed.content.strip()  # asks the user before acting
                break
            results = []
            for call in parsed.calls:
                res = call_tool(call["name"], call["arguments"])
                record = {"name": call["name"], "arguments": call["arguments"], "ok": bool(res.get("ok"))}
                record["output" if res.get("ok") else "error"] = (
                    res.get("output") if res.get("ok") else res.get("error")
                )
                attempt.calls.append(record)
                results.append(
                    json.dumps(res.get("output") if res.get("ok") else {"error": res.get("error")}, ensure_ascii=False)
                )
            messages.append(
                {"role": "user", "content": "".join(f"<tool_response>{r}</tool_response>" for r in results)}
            )
        return attempt


def _as_text_message(m: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI message with ``tool_calls``/``tool`` role as plain text (Hermes tags) for any chat backend."""
    if m.get("role") == "tool":
        return {"role": "user", "content": f"<tool_response>{m.get('content', '')}</tool_response>"}
    if m.get("tool_calls"):
        blocks = "".join(
            "<tool_call>"
            + json.dumps({"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"] or "{}")})
            + "</tool_call>"
            for c in m["tool_calls"]
        )
        return {"role": "assistant", "content": (m.get("content") or "") + blocks}
    return {"role": m["role"], "content": m.get("content") or ""}
