"""Decontamination tags against BFCL v3 multi-turn (function docs shipped by the bfcl-eval wheel)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from envfactory_assets.decontam.benchmarks import benchmark_availability, bfcl_multi_turn_tools
from envfactory_assets.decontam.tagging import benchmark_tags, overlap_rows
from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.graph.embedding_cache import CachedEmbedder
from envfactory_assets.graph.embeddings import HashingEmbedder, MiniLMEmbedder
from envfactory_assets.sources.scan import inspect_file
from envfactory_assets_tests.fixture_environments import FIXTURES

pytestmark = pytest.mark.skipif(not bfcl_multi_turn_tools(), reason="bfcl-eval is not installed (scripts/setup.sh)")


def env_of(name: str) -> dict:
    resource = inspect_file(FIXTURES / name, FIXTURES)
    return build_environment(resource.as_row(), orjson.loads((FIXTURES / name).read_bytes()))


def test_bfcl_reference_holds_the_multi_turn_api_classes():
    tools = bfcl_multi_turn_tools()
    suites = {t.suite for t in tools}
    assert {"ticket_api", "gorilla_file_system", "travel_booking", "vehicle_control"} <= suites
    assert any(t.name == "close_ticket" for t in tools)
    assert "sierra-research/tau2-bench" in benchmark_availability()["tau2"]


def test_a_ticketing_environment_is_tagged_and_a_bookshop_is_not():
    helpdesk, bookshop = env_of("helpdesk.json"), env_of("bookshop.json")
    rows = overlap_rows([helpdesk, bookshop], bfcl_multi_turn_tools(), MiniLMEmbedder())
    tags = benchmark_tags(rows)
    assert tags == {helpdesk["env_id"]: ["bfcl_v3_multi_turn"]}
    matched = {(r["tool_name"], r["benchmark_tool"]) for r in rows}
    assert ("create_ticket", "create_ticket") in matched
    assert all(r["suite"] == "ticket_api" for r in rows if r["match"] == "name")


def test_the_reference_embedded_once_is_read_back_bit_for_bit_by_the_next_run(tmp_path):
    """The cache the tool_graph asset puts in front of the benchmark reference: a second run (a new embedder
    object, as in a new process) reads the stored array instead of encoding, and tags exactly as without it."""
    helpdesk, bookshop = env_of("helpdesk.json"), env_of("bookshop.json")
    reference = bfcl_multi_turn_tools()[:120]
    plain = overlap_rows([helpdesk, bookshop], reference, MiniLMEmbedder())
    first = CachedEmbedder(MiniLMEmbedder(), tmp_path / "cache")
    assert overlap_rows([helpdesk, bookshop], reference, MiniLMEmbedder(), reference_embedder=first) == plain
    assert (first.hits, first.misses) == (0, 1) and len(list((tmp_path / "cache").glob("*.npy"))) == 1
    second = CachedEmbedder(MiniLMEmbedder(), tmp_path / "cache")
    again = overlap_rows([helpdesk, bookshop], reference, MiniLMEmbedder(), reference_embedder=second)
    assert again == plain and (second.hits, second.misses) == (1, 0)
    # another order of the same texts is another call: embedded, not answered from the first file
    third = CachedEmbedder(MiniLMEmbedder(), tmp_path / "cache")
    overlap_rows([helpdesk, bookshop], reference[::-1], MiniLMEmbedder(), reference_embedder=third)
    assert (third.hits, third.misses) == (0, 1) and len(list((tmp_path / "cache").glob("*.npy"))) == 2


def test_a_damaged_or_unwritable_cache_costs_time_never_the_result(tmp_path):
    texts = ["close a ticket by its id", "list the files of a directory", "book a flight"]
    cache = tmp_path / "cache"
    first = CachedEmbedder(MiniLMEmbedder(), cache)
    vectors = first.embed(texts)
    hit = CachedEmbedder(MiniLMEmbedder(), cache)
    assert np.array_equal(hit.embed(texts), MiniLMEmbedder().embed(texts)) and hit.hits == 1  # the same bits
    (stored,) = cache.glob("*.npy")
    stored.write_bytes(b"\x93NUMPY truncated")
    damaged = CachedEmbedder(MiniLMEmbedder(), cache)
    assert np.array_equal(damaged.embed(texts), vectors) and damaged.misses == 1
    assert np.load(stored).shape == (3, 384)  # replaced by a whole file
    np.save(stored, np.full((3, 384), np.nan, dtype=np.float32))
    assert np.array_equal(CachedEmbedder(MiniLMEmbedder(), cache).embed(texts), vectors)
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    unwritable = CachedEmbedder(MiniLMEmbedder(), blocked)
    assert np.array_equal(unwritable.embed(texts), vectors)
    assert unwritable.misses == 1 and len(unwritable.write_errors) == 1
    # an embedder of unknown make is never cached: nothing written
    hashing = CachedEmbedder(HashingEmbedder(), tmp_path / "hashing")
    assert hashing.embed(texts).shape == (3, 256) and not (tmp_path / "hashing").exists()
