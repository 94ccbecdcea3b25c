"""Replies for every model role of the pipeline, a function of the request alone: a stand-in model for tests and
benchmarks (a :class:`~envfactory_assets.llm.testing.FakeChatServer` responder).

A reply depends only on the request's messages, never on the order requests arrive in, so a stage run with
several requests in flight must give the rows of a sequential run. The role is read from the system message
(the role name is not sent): the query writer keeps the draft (``{"query": draft}``), the refiner rewrites
with ``implicit_reference`` and ``refiner_suffix`` appended, the solver sends the calls ``gold`` holds for the
query and then a short answer (a query ``gold`` lacks gets an answer with no call: unsolved), the simulated
user refuses, the code writer and reviser send ``sources[env_id]``, and the graph's roles add nothing.
``refuse_share`` of the query writer's and refiner's requests (chosen by a hash of the request) get a reply
that is not JSON, so their retries are exercised too.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from envfactory_assets.synth.trajectories.simulated_user import REFUSAL
from envfactory_assets.tooluse.tool_calls import tool_call_text

#: What the solver answers once its calls have run (and for a query it has no calls for).
DONE = "Done."
UNKNOWN = "I cannot do that with these tools."


def _share(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 2**32


class RoleReplies:
    """The responder: ``RoleReplies(gold, sources)(request_body) -> reply text``.

    Args:
        gold: ``{query text: [{"name", "arguments"}, ...]}``, the calls that solve each query.
        sources: ``{env_id: module source}`` for the code writer and reviser.
        refuse_share: share (0..1) of query-writer and refiner requests answered with a reply that is not JSON.
        refiner_suffix: text the refiner appends to the query it is given (stripped again before the solver
            looks the query up in ``gold``).
    """

    def __init__(
        self,
        gold: dict[str, list[dict[str, Any]]] | None = None,
        sources: dict[str, str] | None = None,
        refuse_share: float = 0.0,
        refiner_suffix: str = " Thanks.",
    ) -> None:
        self.gold, self.sources = dict(gold or {}), dict(sources or {})
        self.refuse_share, self.refiner_suffix = refuse_share, refiner_suffix

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body.get("messages") or []
        system = str(messages[0].get("content") or "") if messages else ""
        user = str(messages[1].get("content") or "") if len(messages) > 1 else ""
        key = json.dumps(messages, sort_keys=True)
        if system.startswith("You write the message a user sends"):
            if _share(key) < self.refuse_share:
                return "{not json"
            return json.dumps({"query": json.loads(user)["draft"]})
        if system.startswith("You refine the message"):
            if _share(key) < self.refuse_share:
                return "{not json"
            return json.dumps(
                {"operator": "implicit_reference", "query": json.loads(user)["request"] + self.refiner_suffix}
            )
        if system.startswith("You are a tool-using assistant"):
            return self._solve(messages)
        if system.startswith("You are a user talking"):
            return REFUSAL
        if system.startswith("You write the Python module"):
            env_id = json.loads(re.search(r"```json\n(.*?)\n```", user, re.S).group(1))["env_id"]
            return "```python\n" + self.sources.get(env_id, "") + "\n```"
        if "dependency graph" in system:
            return json.dumps({"edges": []})
        if "user could plausibly state" in system:
            return json.dumps({"flags": {}})
        return json.dumps({"keep": []})

    def _solve(self, messages: list[dict[str, Any]]) -> str:
        last = str(messages[-1].get("content") or "")
        if messages[-1].get("role") == "user" and last.startswith("<tool_response>"):
            return DONE
        query = last.replace(self.refiner_suffix, "") if self.refiner_suffix else last
        calls = self.gold.get(query) or self.gold.get(last)
        if not calls:
            return UNKNOWN
        return tool_call_text(calls)


def gold_of(turns: Any) -> dict[str, list[dict[str, Any]]]:
    """``{query: calls}`` of every query a turn was asked by (``query``, ``query_raw`` and a rejected refined
    query), over ``turns`` (raw or refined trajectory turns)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for t in turns:
        calls = [{"name": c["name"], "arguments": c["arguments"]} for c in t["calls"]]
        for field in ("query", "query_raw", "query_refined_rejected"):
            if t.get(field):
                out.setdefault(t[field], calls)
    return out
