"""The revision loop of the model-backed builder: draft, verify by execution, revise from the failures.

The paper's code agent revises its code from test feedback; here the feedback is the deterministic
gate (:func:`envfactory_assets.envgen.verify.verify_environment`, sandboxed), and the loop stops as soon
as a draft passes, after ``max_revisions`` revisions, or when a revision does not improve on the
draft before it. One loop (:func:`revision_loop`) serves a whole module (:func:`build_with_revisions`) and a
single tool a model writes for an operation the rules do not map
(:func:`envfactory_assets.envgen.model_tools.write_tool`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from envfactory_assets.envgen.model_builder import (
    CODE_WRITER_ROLE,
    DEFAULT_MAX_TOKENS,
    REVISER_ROLE,
    code_writer_messages,
    extract_code,
    reviser_messages,
    with_source,
)
from envfactory_assets.envgen.verify import VerificationReport, verify_environment
from envfactory_assets.llm.base import BackendConfigError, ChatBackend, Completion, LLMError
from envfactory_assets.runtime.sandbox import SandboxLimits

STOP_PASSED = "passed"
STOP_MAX_REVISIONS = "max_revisions"
STOP_NO_IMPROVEMENT = "no improvement"
STOP_BACKEND_ERROR = "backend error"


@dataclass
class RevisionResult:
    """Outcome of :func:`build_with_revisions`.

    Attributes:
        environment: the Environment dict (docs/design.md) whose ``source`` passed verification, or,
            when none did, the best draft (fewest failed checks; a draft rejected by the static check
            ranks below any draft that ran). Its other fields are those of the input environment.
        status: ``"passed"`` or ``"failed"``.
        attempts: one dict per verified draft, in order: ``revision`` (0 = the code writer's draft),
            ``source``, ``report`` (the check dicts of :meth:`CheckResult.as_dict`), ``diff`` (unified
            diff against the previous attempt's source; "" for revision 0), ``failed_checks`` (int),
            ``status``, ``tokens`` (``{"prompt", "completion", "cached"}`` of the reply).
        stop_reason: ``"passed"``, ``"max_revisions"``, ``"no improvement"`` or ``"backend error"``.
        reasons: empty when passed; else why (the stop reason, then the failed checks of ``environment``).
    """

    environment: dict[str, Any]
    status: str
    attempts: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = ""
    reasons: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when ``status == "passed"``."""
        return self.status == "passed"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ``environment``, ``status``, ``stop_reason``, ``reasons``, ``attempts``."""
        return {
            "environment": self.environment,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "reasons": list(self.reasons),
            "attempts": list(self.attempts),
        }


#: Checks a draft fails before any of it runs (the static check; a model tool's spec and the names its code
#: defines): such a draft ranks below every draft that ran.
PRE_RUN_CHECKS = frozenset({"static_check", "tool_spec", "tool_code"})


def _badness(report: VerificationReport) -> tuple[int, int]:
    """Order of drafts, lower is better: (rejected before running?, failed checks)."""
    static_failed = any(c.check in PRE_RUN_CHECKS and not c.passed for c in report.checks)
    return (1 if static_failed else 0, sum(1 for c in report.checks if not c.passed))


def _diff(before: str, after: str, revision: int) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"revision_{revision - 1}.py",
            tofile=f"revision_{revision}.py",
        )
    )


def _attempt(
    revision: int, source: str, previous: str | None, report: VerificationReport, completion: Completion
) -> dict[str, Any]:
    return {
        "revision": revision,
        "source": source,
        "report": [c.as_dict() for c in report.checks],
        "diff": "" if previous is None else _diff(previous, source, revision),
        "failed_checks": sum(1 for c in report.checks if not c.passed),
        "status": report.status,
        "tokens": {
            "prompt": completion.prompt_tokens,
            "completion": completion.completion_tokens,
            "cached": completion.cached,
        },
    }


#: Revision rounds after the model's first version (verification failures fed back each time).
DEFAULT_MAX_REVISIONS = 3


@dataclass
class LoopOutcome:
    """What :func:`revision_loop` ends with: the passing draft, else the best one (fewest failed checks, a draft
    rejected before running ranking below any that ran; the first of equals), with its report, every attempt
    (the dicts of :class:`RevisionResult`), the stop reason and, after a backend error, its message."""

    draft: Any
    report: VerificationReport | None
    attempts: list[dict[str, Any]]
    stop_reason: str
    backend_error: str = ""

    @property
    def passed(self) -> bool:
        """True when the loop stopped at a draft that passed the gate."""
        return self.stop_reason == STOP_PASSED


def revision_loop(
    ask_draft: Callable[[], Completion],
    ask_revision: Callable[[Any, list[dict[str, Any]]], Completion],
    read: Callable[[str], Any],
    judge: Callable[[Any], VerificationReport],
    source_of: Callable[[Any], str],
    max_revisions: int,
    roles: tuple[str, str] = (CODE_WRITER_ROLE, REVISER_ROLE),
) -> LoopOutcome:
    """Draft, judge by the gate, revise from the failures: the loop every model-written artefact goes through.

    Args:
        ask_draft: sends the first request; ``ask_revision(draft, failures)`` sends a revision request with the
            previous draft and its failed checks (``{"check", "tool", "state", "detail", "passed"}`` dicts).
        read: a reply's text -> a draft (untrusted text; only string and syntax operations).
        judge: a draft -> its :class:`VerificationReport` (never raises for a defective draft).
        source_of: a draft -> its code, for the attempt's ``source`` and ``diff``.
        max_revisions: most revision requests after the first draft (0 = draft only).
        roles: the roles of the first and the revision requests, named in a backend error.

    Returns:
        A :class:`LoopOutcome`. It stops at the first passing draft, after ``max_revisions``, when a revision is
        not better than the draft before it, or at a backend error (``report`` None when the first request
        failed). A revision that reads as the same draft is not judged again.

    Raises:
        ValueError: ``max_revisions`` below 0.
        BackendConfigError: the backend is misconfigured (the same for every request, so not a failed draft).
    """
    if max_revisions < 0:
        raise ValueError(f"max_revisions={max_revisions} must be >= 0")
    attempts: list[dict[str, Any]] = []
    try:
        completion = ask_draft()
    except BackendConfigError:
        raise
    except LLMError as exc:
        return LoopOutcome(None, None, attempts, STOP_BACKEND_ERROR, f"{STOP_BACKEND_ERROR}: {roles[0]}: {exc}")
    draft = read(completion.text)
    report = judge(draft)
    attempts.append(_attempt(0, source_of(draft), None, report, completion))
    drafts = [(draft, report)]
    stop = STOP_PASSED if report.status == "passed" else STOP_MAX_REVISIONS
    backend_error = ""
    revision = 0
    while report.status != "passed" and revision < max_revisions:
        revision += 1
        failures = [c.as_dict() for c in report.checks if not c.passed]
        try:
            reply = ask_revision(draft, failures)
        except BackendConfigError:
            raise
        except LLMError as exc:
            stop, backend_error = STOP_BACKEND_ERROR, f"{STOP_BACKEND_ERROR}: {roles[1]}: {exc}"
            break
        new_draft = read(reply.text)
        new_report = report if new_draft == draft else judge(new_draft)
        attempts.append(_attempt(revision, source_of(new_draft), source_of(draft), new_report, reply))
        drafts.append((new_draft, new_report))
        if new_report.status == "passed":
            stop = STOP_PASSED
            draft, report = new_draft, new_report
            break
        if _badness(new_report) >= _badness(report):  # compared with the draft before, not the best
            stop = STOP_NO_IMPROVEMENT
            break
        draft, report = new_draft, new_report
        stop = STOP_MAX_REVISIONS
    if stop != STOP_PASSED:
        draft, report = min(drafts, key=lambda d: _badness(d[1]))  # first of equals
    return LoopOutcome(draft, report, attempts, stop, backend_error)


def failure_reasons(outcome: LoopOutcome, max_revisions: int) -> list[str]:
    """Why a loop that did not pass failed: the stop reason (or the backend error), then the failed checks of its
    best draft."""
    head = outcome.backend_error or (
        f"{outcome.stop_reason} after {len(outcome.attempts)} attempt(s) (max_revisions={max_revisions})"
    )
    return [head, *(outcome.report.reasons if outcome.report is not None else [])]


def build_with_revisions(
    env: dict[str, Any],
    backend: ChatBackend,
    max_revisions: int = DEFAULT_MAX_REVISIONS,
    limits: SandboxLimits | None = None,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    seed: int = 7,
) -> RevisionResult:
    """Have ``backend`` write ``env``'s module, then revise it until it passes verification
    (:func:`revision_loop`).

    Args:
        env: an Environment dict from the programmatic builder; its tools, tables, state schema and
            initial states are kept, only ``source`` is replaced by model-written code.
        backend: a :class:`~envfactory_assets.llm.base.ChatBackend`; asked with role ``code_writer``
            for the first draft and ``reviser`` for each revision (failed checks as ``{"check", "tool",
            "state", "detail"}`` plus the previous source).
        max_revisions: most reviser calls after the first draft (0 = draft only).
        limits: sandbox limits of the verification workers.
        max_tokens: completion-token cap of each call.
        seed: argument seed of the verifier.

    Returns:
        A :class:`RevisionResult`. It stops at the first passing draft, after ``max_revisions``, or
        when a revision is not better than the draft before it (fewer failed checks is better; a
        static-check rejection is worse than any draft that ran).

    Raises:
        ValueError: ``max_revisions`` below 0.
        BackendConfigError: the backend is misconfigured (the same for every environment, so it is
            not turned into a failed environment). Other backend errors (budget, endpoint) end the loop
            with ``stop_reason="backend error"`` and status ``failed``.
    """
    outcome = revision_loop(
        lambda: backend.complete(
            code_writer_messages(env), role=CODE_WRITER_ROLE, max_tokens=max_tokens, temperature=0.0
        ),
        lambda source, failures: backend.complete(
            reviser_messages(env, source, failures), role=REVISER_ROLE, max_tokens=max_tokens, temperature=0.0
        ),
        extract_code,
        lambda source: verify_environment(_as_model_code(env, source), limits, seed=seed),
        lambda source: source,
        max_revisions,
    )
    source = outcome.draft if outcome.draft is not None else ""
    if outcome.passed:
        return RevisionResult(with_source(env, source), "passed", outcome.attempts, outcome.stop_reason, [])
    return RevisionResult(
        with_source(env, source),
        "failed",
        outcome.attempts,
        outcome.stop_reason,
        failure_reasons(outcome, max_revisions),
    )


def _as_model_code(env: dict[str, Any], source: str) -> dict[str, Any]:
    """``env`` with a model-written ``source``, marked as such for the sandbox's policy: model code
    runs only inside the OS sandbox (or with the explicit unsafe setting)."""
    return {**with_source(env, source), "origin": "model"}
