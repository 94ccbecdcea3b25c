"""Dry run of the ``environments`` stage: the model calls and tokens a model backend would spend.

Nothing is sent to a model. Each selected resource is built by the programmatic builder (as the stage
does before the model writes the code), the code writer's real request is assembled, and the backend's
own ``estimate`` (the OpenAI-compatible client: cache look-up, chars/4 prompt tokens) counts it.
The tool writer's request for each operation of a document the rules do not map is assembled the same way.
Revisions depend on verification results, so they are given as a worst case: ``max_revisions`` reviser
calls per uncached draft, each prompt holding the environment and a previous reply of ``max_tokens``
tokens (the failure list it would also carry is not counted).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envfactory_assets.envgen.builder import MAX_RESOURCES
from envfactory_assets.envgen.model_builder import (
    CODE_WRITER_ROLE,
    DEFAULT_MAX_TOKENS,
    code_writer_messages,
    reviser_messages,
)
from envfactory_assets.envgen.model_tools import TOOL_WRITER_ROLE, tool_reviser_messages, tool_writer_messages
from envfactory_assets.llm.base import ChatRequest, estimate_prompt_tokens


def _drafts_estimate(backend: Any, requests: Sequence[ChatRequest]) -> dict[str, int]:
    if hasattr(backend, "estimate"):
        return dict(backend.estimate(requests))
    return {
        "calls": len(requests),
        "prompt_tokens_est": sum(estimate_prompt_tokens(r.messages) for r in requests),
        "cached": 0,
        "max_completion_tokens": sum(r.max_tokens for r in requests),
    }


def _with_revisions(
    backend: Any, requests: Sequence[ChatRequest], reviser_prompt: int, max_revisions: int, max_tokens: int
) -> tuple[dict[str, int], dict[str, int]]:
    """``(drafts, revisions_worst_case)`` of first ``requests`` whose revision prompts total ``reviser_prompt``
    tokens (one revision each): ``max_revisions`` revisions per draft that is really sent."""
    drafts = _drafts_estimate(backend, requests)
    share = drafts["calls"] / len(requests) if requests else 0.0  # revisions only follow drafts that are really sent
    revisions = {
        "calls": drafts["calls"] * max_revisions,
        "prompt_tokens_est": round(reviser_prompt * share) * max_revisions,
        "max_completion_tokens": drafts["calls"] * max_revisions * max_tokens,
    }
    return drafts, revisions


def estimate_environments(
    resources: list[dict[str, Any]],
    backend: Any,
    max_revisions: int,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    resource_cap: int | None = MAX_RESOURCES,
) -> dict[str, Any]:
    """Estimated model usage of building ``resources`` (``source_resources`` rows) with ``backend``, at most
    ``resource_cap`` tables per environment (None: no cap; the ``environments`` setting ``max_resources``).

    ``backend`` None means the programmatic builder: no calls. Returns
    ``{"environments", "unbuildable", "unmapped_operations", "drafts": {calls, cached, prompt_tokens_est,
    max_completion_tokens}, "revisions_worst_case": {calls, prompt_tokens_est, max_completion_tokens},
    "tool_drafts", "tool_revisions_worst_case", "total_worst_case": {calls, tokens}}``: ``drafts`` are the code
    writer's requests, ``tool_drafts`` the tool writer's, one per operation of an OpenAPI document the rules do not
    map (their prompts hold the programmatic module; the model's own module is not known before the run). Tokens
    are estimates: chars/4 for prompts, ``max_tokens`` per completion.
    """
    from envfactory_assets.envgen.stage import operations_to_write, programmatic_environment

    envs, unbuildable, operations = [], [], []
    for resource in resources:
        path = Path(resource["corpus_root"]) / resource["path"]
        try:
            env = programmatic_environment(resource, path, resource_cap)
            ops = operations_to_write(resource, path, resource_cap)
        except Exception as exc:  # the stage turns these into build_failed rows without calling a model
            unbuildable.append(f"{resource['resource_key']}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        envs.append(env)
        operations += [(env, op) for op in ops]
    zero = {"calls": 0, "cached": 0, "prompt_tokens_est": 0, "max_completion_tokens": 0}
    if backend is None:
        no_revisions = {k: 0 for k in zero if k != "cached"}
        return {
            "environments": len(envs),
            "unbuildable": unbuildable,
            "unmapped_operations": len(operations),
            "drafts": zero,
            "revisions_worst_case": no_revisions,
            "tool_drafts": zero,
            "tool_revisions_worst_case": no_revisions,
            "total_worst_case": {"calls": 0, "tokens": 0},
        }
    placeholder = "#" * (4 * max_tokens)
    drafts, revisions = _with_revisions(
        backend,
        [
            ChatRequest(code_writer_messages(env), role=CODE_WRITER_ROLE, max_tokens=max_tokens, temperature=0.0)
            for env in envs
        ],
        sum(estimate_prompt_tokens(reviser_messages(env, placeholder, [])) for env in envs),
        max_revisions,
        max_tokens,
    )
    tool_drafts, tool_revisions = _with_revisions(
        backend,
        [
            ChatRequest(tool_writer_messages(env, op), role=TOOL_WRITER_ROLE, max_tokens=max_tokens, temperature=0.0)
            for env, op in operations
        ],
        sum(estimate_prompt_tokens(tool_reviser_messages(env, op, placeholder, [])) for env, op in operations),
        max_revisions,
        max_tokens,
    )
    parts = (drafts, revisions, tool_drafts, tool_revisions)
    return {
        "environments": len(envs),
        "unbuildable": unbuildable,
        "unmapped_operations": len(operations),
        "drafts": drafts,
        "revisions_worst_case": revisions,
        "tool_drafts": tool_drafts,
        "tool_revisions_worst_case": tool_revisions,
        "total_worst_case": {
            "calls": sum(p["calls"] for p in parts),
            "tokens": sum(p["prompt_tokens_est"] + p["max_completion_tokens"] for p in parts),
        },
    }


def format_estimate(estimate: dict[str, Any], backend_name: str) -> str:
    """The estimate as a few plain-text lines for the CLI."""
    d, r, t = estimate["drafts"], estimate["revisions_worst_case"], estimate["total_worst_case"]
    td, tr = estimate["tool_drafts"], estimate["tool_revisions_worst_case"]
    lines = [
        f"environments stage, model backend {backend_name}: {estimate['environments']} environments "
        f"({len(estimate['unbuildable'])} unbuildable, no model call)"
    ]
    if backend_name == "programmatic":
        lines.append("programmatic builder: 0 model calls, 0 tokens")
        return "\n".join(lines)
    lines += [
        f"first drafts: {d['calls']} calls ({d['cached']} answered by the cache), "
        f"~{d['prompt_tokens_est']:,} prompt tokens, at most {d['max_completion_tokens']:,} completion tokens",
        f"revisions (worst case): {r['calls']} calls, ~{r['prompt_tokens_est']:,} prompt tokens, "
        f"at most {r['max_completion_tokens']:,} completion tokens",
        f"tools of {estimate['unmapped_operations']} operations the rules do not map: {td['calls']} calls "
        f"({td['cached']} answered by the cache), ~{td['prompt_tokens_est']:,} prompt tokens; revisions (worst "
        f"case): {tr['calls']} calls, ~{tr['prompt_tokens_est']:,} prompt tokens",
        f"total (worst case): {t['calls']} calls, ~{t['tokens']:,} tokens",
    ]
    return "\n".join(lines)
