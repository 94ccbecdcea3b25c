"""The model backend as a Dagster resource: environments written by an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import orjson
import pytest

from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS
from envfactory_assets.defs.resources import EnvFactoryHome, ModelBackend, VerificationGate
from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.runner.materialize import materialize_pipeline
from envfactory_assets.sources.scan import SourceResource, inspect_file
from envfactory_assets.store.db import Store
from envfactory_assets_tests.fixture_environments import FIXTURES


def programmatic_sources() -> dict[str, str]:
    """First tool name -> the programmatic builder's source, for every accepted fixture."""
    out = {}
    for path in sorted(FIXTURES.glob("*.json")):
        resource = inspect_file(path, FIXTURES)
        if isinstance(resource, SourceResource):
            env = build_environment(resource.as_row(), orjson.loads(path.read_bytes()))
            out[env["tools"][0]["name"]] = env["source"]
    return out


def materialize(home: Path, backend: ModelBackend) -> dg.ExecuteInProcessResult:
    with dg.instance_for_test() as instance:
        return materialize_pipeline(
            [*ALL_ASSETS, *ALL_CHECKS],
            instance,
            raise_on_error=False,
            selection=["source_resources", "environments", "verified_environments"],
            run_config={
                "ops": {
                    "source_resources": {"config": {"corpus_dir": str(FIXTURES), "include_mcp": False, "per_domain": 2}}
                }
            },
            resources={
                "envfactory": EnvFactoryHome(home=str(home)),
                "model_backend": backend,
                "verification_gate": VerificationGate(),
            },
        )[-1]


def test_environments_written_by_a_model_endpoint_pass_verification_and_keep_their_attempts(tmp_path):
    sources = programmatic_sources()
    first_drafts: set[str] = set()

    def responder(body: dict) -> str:
        prompt = json.dumps(body["messages"])
        tool = next(name for name in sources if f'"{name}"' in prompt or f'\\"{name}\\"' in prompt)
        if tool not in first_drafts:  # the first draft's save() drops the meta: state does not round-trip
            first_drafts.add(tool)
            broken = sources[tool].replace('"meta": dict(state["meta"])}', '"meta": {}}')
            assert broken != sources[tool]
            return "```python\n" + broken + "\n```"
        return "Here is the fix:\n```python\n" + sources[tool] + "\n```"

    with FakeChatServer(responder=responder) as server:
        result = materialize(tmp_path, ModelBackend(backend="openai", base_url=server.base_url, model="scripted"))
        n_requests = len(server.requests)
    assert result.success
    store = Store(tmp_path / "envfactory.duckdb")
    envs = store.read("environments")
    assert envs and all(e["status"] == "built" and e["builder"].startswith("model:") for e in envs)
    for env in envs:
        attempts = env["revisions"]["attempts"]
        assert env["revisions"]["stop_reason"] == "passed" and len(attempts) == 2
        assert attempts[0]["failed_checks"] > 0 and attempts[1]["diff"]
    assert all(v["status"] == "passed" for v in store.read("verified_environments"))
    assert n_requests == 2 * len(envs)
    # a second materialization is answered from the response cache: the endpoint sees no request
    with FakeChatServer(script=[]) as server:
        again = materialize(tmp_path, ModelBackend(backend="openai", base_url=server.base_url, model="scripted"))
        assert again.success and server.requests == []


def test_a_misconfigured_backend_fails_the_step_naming_the_setting(tmp_path):
    result = materialize(tmp_path, ModelBackend(backend="openai", base_url="", model="m"))
    assert not result.success
    failure = result.get_step_failure_events()[0].event_specific_data.error.message
    assert "base_url" in failure
    with pytest.raises(dg.Failure, match="backend='nonsense'"):
        ModelBackend(backend="nonsense").make_backend(tmp_path / "c.sqlite")
