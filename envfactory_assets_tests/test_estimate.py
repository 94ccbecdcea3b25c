"""``envfactory estimate``: the environments stage's model calls and tokens, counted without calling a model."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from envfactory_assets.cli import main as cli_main
from envfactory_assets.envgen.model_builder import CODE_WRITER_ROLE, DEFAULT_MAX_TOKENS, code_writer_messages
from envfactory_assets.envgen.stage import programmatic_environment, select_resources
from envfactory_assets.llm.base import estimate_prompt_tokens
from envfactory_assets.llm.openai_backend import OpenAICompatibleBackend
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.sources.stage import scan_rows
from envfactory_assets_tests.fixture_environments import FIXTURES


def _config(tmp_path: Path, backend: dict) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "ops": {
                    "source_resources": {"config": {"corpus_dir": str(FIXTURES), "include_mcp": False, "per_domain": 2}}
                },
                "resources": {"model_backend": {"config": backend}},
            }
        )
    )
    return path


def _estimate(tmp_path, monkeypatch, capsys, backend: dict) -> dict:
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    assert cli_main(["estimate", "--config", str(_config(tmp_path, backend)), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _chosen_environments() -> list[dict]:
    accepted, _ = scan_rows(FIXTURES)
    return [programmatic_environment(r, FIXTURES / r["path"]) for r in select_resources(accepted, 2)]


def test_estimate_counts_the_real_code_writer_requests_and_sends_nothing(tmp_path, monkeypatch, capsys):
    envs = _chosen_environments()
    with FakeChatServer([]) as server:
        est = _estimate(
            tmp_path,
            monkeypatch,
            capsys,
            {"backend": "openai", "base_url": server.base_url, "model": "coder", "max_revisions": 2},
        )
        assert server.requests == []  # a dry run: no request reached the endpoint
    assert est["environments"] == len(envs) >= 2 and est["unbuildable"] == []
    drafts = est["drafts"]
    assert drafts["calls"] == len(envs) and drafts["cached"] == 0
    assert drafts["prompt_tokens_est"] == sum(estimate_prompt_tokens(code_writer_messages(e)) for e in envs)
    assert drafts["max_completion_tokens"] == len(envs) * DEFAULT_MAX_TOKENS
    revisions = est["revisions_worst_case"]
    assert revisions["calls"] == 2 * len(envs)
    assert revisions["prompt_tokens_est"] > 2 * drafts["prompt_tokens_est"]  # each carries a previous module
    assert est["total_worst_case"]["calls"] == 3 * len(envs)


def test_a_cached_draft_is_not_counted_as_a_call(tmp_path, monkeypatch, capsys):
    envs = _chosen_environments()
    home = tmp_path / "home"
    home.mkdir()
    with FakeChatServer(["```python\ndef load(data):\n    return data\n```"]) as server:
        with OpenAICompatibleBackend(server.base_url, "coder", cache_path=home / "llm_cache.sqlite") as backend:
            backend.complete(
                code_writer_messages(envs[0]), role=CODE_WRITER_ROLE, max_tokens=DEFAULT_MAX_TOKENS, temperature=0.0
            )
        est = _estimate(
            tmp_path,
            monkeypatch,
            capsys,
            {"backend": "openai", "base_url": server.base_url, "model": "coder", "max_revisions": 1},
        )
        assert len(server.requests) == 1  # only the call made above
    assert est["drafts"]["cached"] == 1 and est["drafts"]["calls"] == len(envs) - 1
    assert est["revisions_worst_case"]["calls"] == len(envs) - 1


def test_programmatic_backend_estimates_zero_and_a_bad_backend_setting_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    assert cli_main(["estimate", "--config", str(_config(tmp_path, {"backend": "programmatic"}))]) == 0
    out = capsys.readouterr().out
    assert "0 model calls" in out and "environments stage" in out
    assert cli_main(["estimate", "--config", str(_config(tmp_path, {"backend": "openai", "model": "m"}))]) == 2
    assert "base_url" in capsys.readouterr().err


def test_estimate_warns_when_the_worst_case_exceeds_the_token_budget(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    with FakeChatServer([]) as server:
        backend = {"backend": "openai", "base_url": server.base_url, "model": "coder", "max_revisions": 1}
        assert cli_main(["estimate", "--config", str(_config(tmp_path, backend)), "--json"]) == 0
        unlimited = json.loads(capsys.readouterr().out)
        worst = unlimited["total_worst_case"]["tokens"]
        assert unlimited["over_token_budget"] is False and unlimited["token_budget"] is None
        assert cli_main(["estimate", "--config", str(_config(tmp_path, {**backend, "token_budget": worst - 1}))]) == 0
        out, err = capsys.readouterr()
        assert f"worst-case estimate ({worst:,} tokens) exceeds" in err and f"token_budget ({worst - 1:,})" in err
        assert cli_main(["estimate", "--config", str(_config(tmp_path, {**backend, "token_budget": worst}))]) == 0
        assert "warning" not in capsys.readouterr().err
        assert server.requests == []


def test_an_include_written_without_its_list_is_named(tmp_path, monkeypatch, capsys):
    # "include: bookshop" was read as the keys "b", "o", "k", ... and forced nothing in
    monkeypatch.setenv("ENVFACTORY_HOME", str(tmp_path / "home"))
    config = _config(tmp_path, {"backend": "programmatic"})
    run = yaml.safe_load(config.read_text())
    run["ops"]["source_resources"]["config"]["include"] = "bookshop"
    config.write_text(yaml.safe_dump(run))
    assert cli_main(["estimate", "--config", str(config)]) == 2
    assert "include must be a list of resource keys, got 'bookshop'" in capsys.readouterr().err
