"""Near-duplicate filter and diversity figures of refined trajectories."""

from __future__ import annotations

import pytest

from envfactory_assets.synth.refinement.filtering import apply_filter, diversity, near_duplicates


def _row(
    rid: str,
    queries: list[str],
    calls: list[list[str]],
    env: str = "shop",
    domain: str = "ecommerce_retail",
    status: str = "passed",
) -> dict:
    turns = [
        {"query": q, "calls": [{"name": n, "env_id": env} for n in names]}
        for q, names in zip(queries, calls, strict=False)
    ]
    return {"id": rid, "status": status, "reasons": [], "turns": turns, "env_ids": [env], "domains": [domain]}


CALLS = [["list_books", "get_book"], ["delete_book"]]


def test_same_tools_and_near_identical_queries_are_duplicates():
    a = _row("a", ["Show me the books, and then look up book 'boo_00001'.", "Delete that book."], CALLS)
    b = _row("b", ["Show me the books, and then look up book 'boo_00002'.", "Delete that book."], CALLS)
    other_text = _row("c", ["List every author named 'Ada' please.", "Remove the newest one."], CALLS)
    other_tools = _row("d", [t["query"] for t in a["turns"]], [["list_books", "get_book"], ["update_book"]])
    failed = _row("e", [t["query"] for t in a["turns"]], CALLS, status="failed")
    rows = [b, other_text, a, other_tools, failed]
    dups = near_duplicates(rows)
    assert set(dups) == {"b"} and "same tool sequence as a" in dups["b"]  # first in id order is kept
    assert apply_filter(rows) == 1
    assert b["status"] == "failed" and b["reasons"][0].startswith("near-duplicate")
    assert near_duplicates(rows, threshold=1.0) == {}  # nothing identical is left
    with pytest.raises(ValueError, match="threshold"):
        near_duplicates(rows, threshold=0)


def test_diversity_counts_distinct_pairs_environments_and_domains_per_1000():
    rows = [
        _row("a", ["q1", "q2"], CALLS),
        _row("b", ["q3", "q4"], CALLS),
        _row("c", ["q5", "q6"], [["get_flight"], ["book_flight"]], env="air", domain="travel_transport"),
        _row("d", ["q7", "q8"], [["x"], ["y"]], env="gone", status="failed"),
    ]
    d = diversity(rows)
    # shop: list->get, get->delete; air: get_flight->book_flight. The failed row does not count.
    assert (d["trajectories"], d["distinct_tool_pairs"], d["environments"], d["domains"]) == (3, 3, 2, 2)
    assert d["tool_pairs_per_1000"] == 1000.0 and d["environments_per_1000"] == pytest.approx(666.67)


def test_raw_examples_table_shows_passed_turns_only():
    from envfactory_assets.synth.refinement.report import raw_examples_markdown

    rows = [
        {**_row("a", ["Show me the books | all of them.", "Delete that book."], CALLS), "n_turns": 2},
        {**_row("b", ["Never shown."], [["x"]], status="failed"), "n_turns": 1},
    ]
    table = raw_examples_markdown(rows)
    assert "Show me the books \\| all of them." in table and "`list_books`, `get_book`" in table
    assert "Never shown" not in table
    assert raw_examples_markdown(rows[1:]) == "_no passed trajectory_"
