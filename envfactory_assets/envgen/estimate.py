"""Dry run of the ``environments`` stage: the model calls and tokens a model backend would spend.

Nothing is sent to a model. Each selected resource is built by the programmatic builder (as the stage
does before the model writes the code), the code writer's real request is assembled, and the backend's
own ``estimate`` (the OpenAI-compatible client: cache look-up, chars/4 prompt tokens) counts it.
Revisions depend on verification results, so they are given as a worst case: ``max_revisions`` reviser
calls per uncached draft, each prompt holding the environment and a previous module of ``max_tokens``
tokens (the failure list it would also carry is not counted).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envfactory_assets.envgen.model_builder import (
    CODE_WRITER_ROLE,
    DEFAULT_MAX_TOKENS,
    code_writer_messages,
    reviser_messages,
)
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


def estimate_environments(
    resources: list[dict[str, Any]], backend: Any, max_revisions: int, max_tokens: int = DEFAULT_MAX_TOKENS
) -> dict[str, Any]:
    """Estimated model usage of building ``resources`` (``source_resources`` rows) with ``backend``.

    ``backend`` None means the programmatic builder: no calls. Returns
    ``{"environments", "unbuildable", "drafts": {calls, cached, prompt_tokens_est, max_completion_tokens},
    "revisions_worst_case": {calls, prompt_tokens_est, max_completion_tokens}, "total_worst_case":
    {calls, tokens}}`` (tokens are estimates: chars/4 for prompts, ``max_tokens`` per completion).
    """
    from envfactory_assets.envgen.stage import programmatic_environment

    envs, unbuildable = [], []
    for resource in resources:
        try:
            envs.append(programmatic_environment(resource, Path(resource["corpus_root"]) / resource["path"]))
        except Exception as exc:  # the stage turns these into build_failed rows without calling a model
            unbuildable.append(f"{resource['resource_key']}: {type(exc).__name__}: {str(exc)[:120]}")
    zero = {"calls": 0, "cached": 0, "prompt_tokens_est": 0, "max_completion_tokens": 0}
    if backend is None:
        return {
            "environments": len(envs),
            "unbuildable": unbuildable,
            "drafts": zero,
            "revisions_worst_case": {k: 0 for k in zero if k != "cached"},
            "total_worst_case": {"calls": 0, "tokens": 0},
        }
    requests = [
        ChatRequest(code_writer_messages(env), role=CODE_WRITER_ROLE, max_tokens=max_tokens, temperature=0.0)
        for env in envs
    ]
    drafts = _drafts_estimate(backend, requests)
    share = drafts["calls"] / len(envs) if envs else 0.0  # revisions only follow drafts that are really sent
    placeholder = "#" * (4 * max_tokens)
    reviser_prompt = sum(estimate_prompt_tokens(reviser_messages(env, placeholder, [])) for env in envs)
    revisions = {
        "calls": drafts["calls"] * max_revisions,
        "prompt_tokens_est": round(reviser_prompt * share) * max_revisions,
        "max_completion_tokens": drafts["calls"] * max_revisions * max_tokens,
    }
    total_calls = drafts["calls"] + revisions["calls"]
    total_tokens = (
        drafts["prompt_tokens_est"]
        + drafts["max_completion_tokens"]
        + revisions["prompt_tokens_est"]
        + revisions["max_completion_tokens"]
    )
    return {
        "environments": len(envs),
        "unbuildable": unbuildable,
        "drafts": drafts,
        "revisions_worst_case": revisions,
        "total_worst_case": {"calls": total_calls, "tokens": total_tokens},
    }


def format_estimate(estimate: dict[str, Any], backend_name: str) -> str:
    """The estimate as a few plain-text lines for the CLI."""
    d, r, t = estimate["drafts"], estimate["revisions_worst_case"], estimate["total_worst_case"]
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
        f"total (worst case): {t['calls']} calls, ~{t['tokens']:,} tokens",
    ]
    return "\n".join(lines)
