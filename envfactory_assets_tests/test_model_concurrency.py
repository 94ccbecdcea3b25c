"""Model-backed stages with several requests in flight give the rows of a sequential run: raw trajectories with
the model query writer, refined trajectories with the model solver and refiner, against the local
OpenAI-compatible test server answering by request content (never by arrival order), with replies held a
random few milliseconds so they come back out of order."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest

from envfactory_assets.llm.base import concurrency_of
from envfactory_assets.llm.openai_backend import OpenAICompatibleBackend
from envfactory_assets.llm.testing import FakeChatServer
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.refinement.model_querygen import ModelQueryWriter, ModelRefiner
from envfactory_assets.synth.refinement.solver.model import ModelSolver
from envfactory_assets.synth.sampling.sampler import SamplerConfig
from envfactory_assets.synth.stage import chain_rows, raw_trajectory_rows, refined_trajectory_rows
from envfactory_assets.synth.stub_roles import RoleReplies, gold_of
from envfactory_assets.synth.trajectories.execution import SynthConfig

SYNTH = SynthConfig(min_turns=2, query_writer="model")
CALIBRATION = CalibrationConfig(k=2, conversational_share=0.0, refiner="model", workers=1)


class Responder:
    """``replies`` with a random hold of 0-20 ms per request, counting the most requests in flight at once."""

    def __init__(self, replies) -> None:
        self.replies, self.in_flight, self.most = replies, 0, 0
        self._lock = threading.Lock()

    def __call__(self, body):
        with self._lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            time.sleep(random.uniform(0.0, 0.02))
            return self.replies(body)
        finally:
            with self._lock:
                self.in_flight -= 1


def _backend(server, concurrency, cache):
    return OpenAICompatibleBackend(server.base_url, "m", max_retries=0, max_concurrency=concurrency, cache_path=cache)


@pytest.fixture(scope="module")
def chains(environments, graph):
    rows = chain_rows(
        graph,
        environments,
        {e: f"ver-{e}" for e in environments},
        10,
        "concurrency",
        "topology",
        SamplerConfig(min_tools=3),
    )
    passed = [r for r in rows if r["status"] == "passed"]
    assert len(passed) >= 6
    return passed


def _raw(chains, graph, environments, concurrency, cache):
    responder = Responder(RoleReplies(refuse_share=0.3))
    with FakeChatServer(responder=responder) as server:
        backend = _backend(server, concurrency, cache)
        rows = raw_trajectory_rows(chains, graph, environments, SYNTH, writer=ModelQueryWriter(backend))
        backend.close()
        return rows, responder.most, backend.usage(), len(server.requests)


def test_raw_trajectories_with_the_model_query_writer_are_the_same_at_any_concurrency(
    chains, graph, environments, tmp_path
):
    one, most_one, usage_one, sent_one = _raw(chains, graph, environments, 1, tmp_path / "one.sqlite")
    four, most_four, usage_four, sent_four = _raw(chains, graph, environments, 4, tmp_path / "four.sqlite")
    assert most_one == 1 and most_four > 1  # the second run really had several requests in flight
    assert json.dumps(four, sort_keys=True) == json.dumps(one, sort_keys=True)
    records = [t["query_writer"] for r in one for t in r["turns"]]
    assert "model" in {r["outcome"] for r in records} and any(r["refusals"] for r in records)  # retries ran
    assert sent_four == sent_one and usage_four == usage_one


@pytest.fixture(scope="module")
def raws(chains, graph, environments):
    rows = raw_trajectory_rows(chains, graph, environments, SynthConfig(min_turns=2))
    passed = [r for r in rows if r["status"] == "passed"]
    assert len(passed) >= 4
    return passed


def _refined(raws, environments, concurrency, cache):
    programmatic = refined_trajectory_rows(
        raws, environments, config=CalibrationConfig(k=2, conversational_share=0.0, workers=1)
    )
    replies = RoleReplies(gold_of(t for r in programmatic for t in r["turns"]), refuse_share=0.3)
    responder = Responder(replies)
    with FakeChatServer(responder=responder) as server:
        backend = _backend(server, concurrency, cache)
        assert concurrency_of(backend) == concurrency
        rows = refined_trajectory_rows(
            raws, environments, ModelSolver(backend), CALIBRATION, refiner=ModelRefiner(backend)
        )
        backend.close()
        return rows, responder.most, backend.usage()


def test_refined_trajectories_with_the_model_solver_and_refiner_are_the_same_at_any_concurrency(
    raws, environments, tmp_path
):
    one, most_one, usage_one = _refined(raws, environments, 1, tmp_path / "one.sqlite")
    four, most_four, usage_four = _refined(raws, environments, 4, tmp_path / "four.sqlite")
    assert most_one == 1 and most_four > 1
    assert json.dumps(four, sort_keys=True) == json.dumps(one, sort_keys=True)
    turns = [t for r in one for t in r["turns"]]
    assert turns and any(t["solve_raw"]["passed"] for t in turns)  # the model solver solved turns
    assert any(t["refiner"]["refusals"] for t in turns)
    assert usage_four == usage_one


def test_equal_requests_in_flight_at_once_are_sent_once_with_a_cache(tmp_path):
    with FakeChatServer(responder=lambda body: "the reply", delay_s=0.2) as server:
        backend = _backend(server, 4, tmp_path / "cache.sqlite")
        messages = [{"role": "user", "content": "the same question"}]
        barrier = threading.Barrier(4)
        replies = []

        def ask():
            barrier.wait()
            replies.append(backend.complete(messages, role="r", max_tokens=8).text)

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert replies == ["the reply"] * 4 and len(server.requests) == 1
        assert backend.usage()["calls"] == 1 and backend.usage()["cached"] == 3
        backend.close()


def test_the_transformers_backend_and_none_run_one_at_a_time(tmp_path):
    from envfactory_assets.llm.transformers_backend import TransformersBackend

    (tmp_path / "config.json").write_text("{}")  # the backend loads lazily: a folder with a config is enough here
    assert concurrency_of(TransformersBackend(tmp_path)) == 1 and concurrency_of(None) == 1
