"""The model-backed code writer and its revision loop, against a scripted OpenAI-compatible server."""

from __future__ import annotations

import json
import re

import orjson
import pytest

from envfactory_assets.envgen.model_builder import (
    code_writer_messages,
    extract_code,
    sandbox_rules,
    write_environment,
)
from envfactory_assets.envgen.revision import build_with_revisions
from envfactory_assets.llm import OpenAICompatibleBackend, estimate_prompt_tokens
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.runtime import code_policy

GET_AUTHOR = r"def get_author\(state, author_id\):(.*?)return _get\(state, 'authors', author_id\)"
GET_BOOK = r"def get_book\(state, book_id\):(.*?)return _get\(state, 'books', book_id\)"


def fenced(source: str) -> str:
    return "Here is the module.\n\n```python\n" + source + "\n```\n"


def ignore_state(source: str, pattern: str = GET_AUTHOR) -> str:
    """The source with one getter replaced by one that ignores its state (the verifier must catch it)."""
    name, key = ("get_author", "author_id") if "author" in pattern else ("get_book", "book_id")
    new, n = re.subn(
        pattern,
        f"def {name}(state, {key}):\n    return {{'{key}': {key}, 'name': 'Nobody', "
        "'created_at': '2025-01-01T00:00:00Z'}",
        source,
        count=1,
        flags=re.S,
    )
    assert n == 1
    return new


def model_backend(server: FakeChatServer, **kw) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(server.base_url, "fake-coder", backoff_s=0.01, timeout_s=10, **kw)


def test_prompt_carries_specs_contract_and_sandbox_rules(bookshop):
    system, user = code_writer_messages(bookshop)
    assert "def load(data: dict) -> dict" in system["content"]
    assert "first parameter named `state`" in system["content"]
    assert all(m in system["content"] for m in code_policy.ALLOWED_MODULES)
    assert "no randomness" in sandbox_rules() and "No I/O" in sandbox_rules()
    payload = json.loads(re.search(r"```json\n(.*?)\n```", user["content"], re.S).group(1))
    assert payload["tools"] == bookshop["tools"] and payload["tables"] == bookshop["tables"]
    assert len(payload["example_valid_state"]["tables"]["books"]) == 2


def test_extract_code():
    assert extract_code("```python\ndef load(d):\n    return d\n```") == "def load(d):\n    return d\n"
    reply = "intro\n```json\n{}\n```\n```python\nX = 1\n```\n```python\ndef load(d):\n    pass\n```\nbye"
    assert extract_code(reply) == "def load(d):\n    pass\n"
    assert extract_code("```\nA = 1\n```") == "A = 1\n"
    assert extract_code("```python\ndef load(d):\n    return d") == "def load(d):\n    return d\n"  # truncated
    assert extract_code("  A = 2  ") == "A = 2\n"


def test_write_environment_keeps_every_artifact_but_the_source(bookshop):
    with FakeChatServer([fenced("X = 1")]) as server:
        env = write_environment(bookshop, model_backend(server))
    assert env["source"] == "X = 1\n"
    assert {k: v for k, v in env.items() if k != "source"} == {k: v for k, v in bookshop.items() if k != "source"}


@pytest.mark.parametrize("defect", ["ignores_state", "syntax_error"])
def test_broken_draft_is_revised_until_it_passes(bookshop, defect):
    broken = (
        ignore_state(bookshop["source"])
        if defect == "ignores_state"
        else bookshop["source"].replace("def save(state):", "def save(state)", 1)
    )
    with FakeChatServer([fenced(broken), fenced(bookshop["source"])]) as server:
        result = build_with_revisions(bookshop, model_backend(server), max_revisions=3)
        assert len(server.requests) == 2
        revise_prompt = server.requests[1]["messages"][1]["content"]
    assert result.status == "passed" and result.stop_reason == "passed" and result.reasons == []
    assert [a["revision"] for a in result.attempts] == [0, 1]
    first, second = result.attempts
    assert first["failed_checks"] > 0 and second["failed_checks"] == 0
    assert first["diff"] == "" and second["diff"].startswith("--- revision_0.py")
    assert "+def save(state):" in second["diff"] or "+    return _get(state, 'authors', author_id)" in second["diff"]
    # the reviser saw the structured failures and the previous source
    failed = {c["check"] for c in first["report"] if not c["passed"]}
    assert ("semantics" in failed) if defect == "ignores_state" else failed == {"static_check"}
    assert '"check": "semantics"' in revise_prompt or '"check": "static_check"' in revise_prompt
    assert broken.splitlines()[5] in revise_prompt
    if defect == "ignores_state":
        assert '"tool": "get_author"' in revise_prompt
    # both paths produce the same artifacts
    assert result.environment == bookshop
    assert orjson.loads(orjson.dumps(result.as_dict()))["attempts"][1]["revision"] == 1


def test_reviser_repeating_the_broken_code_stops_early(bookshop):
    broken = fenced(ignore_state(bookshop["source"]))
    with FakeChatServer([broken, broken, broken, broken]) as server:
        result = build_with_revisions(bookshop, model_backend(server), max_revisions=3)
        assert len(server.requests) == 2  # no third call once a revision did not improve
    assert result.status == "failed" and result.stop_reason == "no improvement"
    assert len(result.attempts) == 2 and result.attempts[1]["diff"] == ""
    assert result.reasons[0].startswith("no improvement after 2 attempt(s)")
    assert any("semantics[valid/get_author]" in r for r in result.reasons)


def test_partial_improvement_runs_until_max_revisions_and_keeps_the_best(bookshop):
    two_bugs = ignore_state(ignore_state(bookshop["source"]), GET_BOOK)
    one_bug = ignore_state(bookshop["source"], GET_BOOK)
    with FakeChatServer([fenced(two_bugs), fenced(one_bug)]) as server:
        result = build_with_revisions(bookshop, model_backend(server), max_revisions=1)
    assert result.status == "failed" and result.stop_reason == "max_revisions"
    assert result.attempts[0]["failed_checks"] > result.attempts[1]["failed_checks"] > 0
    assert result.environment["source"].rstrip() == one_bug.rstrip()


def test_hostile_reply_is_rejected_by_the_static_check_and_never_run(bookshop, tmp_path):
    marker = tmp_path / "pwned"
    hostile = f"import os\nos.makedirs({str(marker)!r})\n\n" + bookshop["source"]
    with FakeChatServer([fenced(hostile), fenced(hostile)]) as server:
        result = build_with_revisions(bookshop, model_backend(server), max_revisions=2)
    assert result.status == "failed" and result.stop_reason == "no improvement"
    report = result.attempts[0]["report"]
    assert [c["check"] for c in report] == ["static_check"] and not report[0]["passed"]
    assert "'os'" in report[0]["detail"]
    assert not marker.exists()


def test_budget_exhausted_during_revision_fails_the_environment_cleanly(bookshop):
    draft_cost = estimate_prompt_tokens(code_writer_messages(bookshop)) + 100
    script = [
        {"content": fenced(ignore_state(bookshop["source"])), "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
    ]
    with FakeChatServer(script) as server:
        result = build_with_revisions(
            bookshop, model_backend(server, token_budget=draft_cost + 5), max_revisions=3, max_tokens=100
        )
        assert len(server.requests) == 1  # the reviser call was refused before it was sent
    assert result.status == "failed" and result.stop_reason == "backend error"
    assert "token_budget" in result.reasons[0] and len(result.attempts) == 1


def test_a_rerun_is_answered_from_the_cache(bookshop, tmp_path):
    cache = tmp_path / "responses.sqlite"
    script = [fenced(ignore_state(bookshop["source"])), fenced(bookshop["source"])]
    with FakeChatServer(script) as server:
        first = build_with_revisions(bookshop, model_backend(server, cache_path=cache))
        second = build_with_revisions(bookshop, model_backend(server, cache_path=cache))
        assert len(server.requests) == 2
    assert first.status == second.status == "passed"
    assert [a["source"] for a in first.attempts] == [a["source"] for a in second.attempts]
    assert all(a["tokens"]["cached"] for a in second.attempts)
