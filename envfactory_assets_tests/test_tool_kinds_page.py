"""docs/tool_kinds.md's tour is what its command gives: the small run of ``configs/tool_kinds_tour.yaml`` over the
two fixture documents written for transfers, side effects and computed reads, its figures, and the trajectory
the page prints with ``envfactory show`` (a transfer refused because it would leave a bin below zero)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from envfactory_assets.cli import main as cli_main
from envfactory_assets.store.db import Store
from envfactory_assets_tests.tiny_run import THROUGH_REFINEMENT

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "tool_kinds.md"
TOUR = ",".join(THROUGH_REFINEMENT)


def _between(text: str, marker: str) -> str:
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    assert start in text and end in text, f"docs/tool_kinds.md has no {marker} block"
    return text.split(start, 1)[1].split(end, 1)[0].strip()


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> Path:
    """The home of the page's run, made as the page says: from the repository root, the tour config."""
    home = tmp_path_factory.mktemp("tour")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)  # the config's corpus folder is relative to the repository root
        mp.setenv("ENVFACTORY_HOME", str(home))
        mp.setenv("DAGSTER_HOME", str(home / "dagster"))
        assert cli_main(["run", "--config", "configs/tool_kinds_tour.yaml", "--select", TOUR]) == 0
    return home


def test_the_page_names_the_command_of_its_run():
    text = PAGE.read_text(encoding="utf-8")
    assert "envfactory run --config configs/tool_kinds_tour.yaml" in text and TOUR in text


def test_the_shown_trajectory_is_the_runs_and_reads_as_the_page_prints_it(tour, monkeypatch, capsys):
    text = PAGE.read_text(encoding="utf-8")
    shown = _between(text, "tour-show")
    (ref_id,) = re.findall(r"^## Trajectory (ref_[0-9a-f]{16})$", shown, re.MULTILINE)
    row = Store(tour / "envfactory.duckdb").read("refined_trajectories", f"id = '{ref_id}' AND status = 'passed'")
    assert row, f"{ref_id} is not a passed refined trajectory of the tour run"
    refused = [c for t in row[0]["turns"] for c in t["calls"] if c["kind"] == "transfer" and c.get("error")]
    assert refused and "would leave -" in refused[0]["output"]["message"]
    monkeypatch.setenv("ENVFACTORY_HOME", str(tour))
    assert cli_main(["show", ref_id]) == 0
    printed = capsys.readouterr().out.strip()
    assert shown.removeprefix("````markdown").removesuffix("````").strip() == printed


def test_the_tour_figures_are_the_runs(tour):
    store = Store(tour / "envfactory.duckdb")
    passed = store.read("refined_trajectories", "status = 'passed'")
    turns = [t for r in passed for t in r["turns"]]
    calls = Counter(c["kind"] for t in turns for c in t["calls"])
    refused = Counter(c["kind"] for t in turns for c in t["calls"] if c.get("error"))
    tools = Counter(t["kind"] for e in store.read("environments", "status = 'built'") for t in e["tools"])
    figures = _between(PAGE.read_text(encoding="utf-8"), "tour-figures")
    n_refused = sum(any(c.get("error") for c in t["calls"]) for t in turns)
    assert f"{len(passed)} refined trajectories passed: {len(turns)} turns, {n_refused} of them holding" in figures
    for kind, n in calls.items():
        assert f"| `{kind}` | {tools[kind]} | {n} | {refused[kind]} |" in figures, kind
