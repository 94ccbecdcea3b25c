"""The data-realism figures of ``envfactory report`` and ``envfactory report --compare``.

The figure functions (:mod:`envfactory_assets.synth.refinement.report`) on hand-built turns; the report on the store of
the session's ``envfactory run`` of the fixture corpus (``tiny_cli_run``), copied and made read-only so any
write would fail, checked against counts made here in SQL.
"""

from __future__ import annotations

import json
import re
import shutil
import stat

import duckdb
import pytest

from envfactory_assets.cli import main as cli_main
from envfactory_assets.reporting.report import comparable_figures, compare_report, run_report
from envfactory_assets.store.db import Store
from envfactory_assets.synth.refinement.report import (
    future_identifier_figures,
    future_identifiers,
    gold_argument_figures,
    refined_turn_of,
    unstated_gold_arguments,
)
from envfactory_assets.viewer import render_from_store


def _state(*book_ids: str) -> dict:
    return {
        "bookshop": {
            "meta": {"now": "2025-06-30T12:00:00Z"},
            "tables": {"books": [{"book_id": b, "title": f"Title {b}"} for b in book_ids]},
        }
    }


def _call(name: str, kind: str, arguments: dict, output: dict, provenance: dict | None = None) -> dict:
    return {
        "name": name,
        "kind": kind,
        "env_id": "bookshop",
        "arguments": arguments,
        "output": output,
        "provenance": provenance or {a: {"source": "user"} for a in arguments},
    }


def _turn(query: str, calls: list[dict], state_ids: tuple[str, ...] = ("boo_00001",), **extra) -> dict:
    return {
        "query": query,
        "query_raw": query,
        "calls": calls,
        "state_before": _state(*state_ids),
        "assistant_summary": "Done.",
        "operators": [],
        **extra,
    }


# --- turns quoting an identifier that does not exist yet --------------------------------------------------
def _create_book(book_id: str, title: str) -> dict:
    return _call("create_book", "create", {"title": title}, {"book_id": book_id, "title": title})


def test_a_query_quoting_an_identifier_its_own_create_call_assigns_is_counted():
    turns = [
        _turn(
            "Add a book titled 'Dune', then show me book 'boo_00002'.",
            [
                _create_book("boo_00002", "Dune"),
                _call(
                    "get_book",
                    "get",
                    {"book_id": "boo_00002"},
                    {"book_id": "boo_00002", "title": "Dune"},
                    {"book_id": {"source": "output", "call": 0, "path": "book_id"}},
                ),
            ],
        )
    ]
    assert future_identifiers(turns, 0) == ["boo_00002"]
    figures = future_identifier_figures([{"status": "passed", "turns": turns}])
    assert (figures["turns"], figures["turns_quoting_future_identifier"], figures["share"]) == (1, 1, 1.0)
    assert figures["examples"] == [(turns[0]["query"], ["boo_00002"])]


def test_an_identifier_a_later_turn_creates_counts_and_existing_ones_do_not():
    later = _turn("Add a book titled 'Emma'.", [_create_book("boo_00003", "Emma")], ("boo_00001", "boo_00002"))
    quoting = _turn(
        "Show me book 'boo_00003'.",
        [
            _call(
                "get_book", "get", {"book_id": "boo_00001"}, {"book_id": "boo_00001"}, {"book_id": {"source": "state"}}
            )
        ],
    )
    existing = _turn(
        "Show me book 'boo_00001', a longer id 'boo_00003x' is not the same.",
        [_call("get_book", "get", {"book_id": "boo_00001"}, {"book_id": "boo_00001"})],
    )
    # the id the create made in turn 1 exists for turn 2
    after = _turn(
        "Delete book 'boo_00003'.",
        [_call("delete_book", "delete", {"book_id": "boo_00003"}, {"deleted": True})],
        ("boo_00001", "boo_00002"),
    )
    rows = [
        {"status": "passed", "turns": [quoting, later]},
        {"status": "passed", "turns": [existing, later]},
        {"status": "passed", "turns": [later, after]},
        {"status": "failed", "turns": [quoting, later]},
    ]
    assert future_identifiers([quoting, later], 0) == ["boo_00003"]
    assert future_identifiers([existing, later], 0) == []
    figures = future_identifier_figures(rows)
    assert (figures["turns"], figures["turns_quoting_future_identifier"]) == (6, 1)


# --- gold arguments nobody gave ------------------------------------------------------------------------------
def test_a_gold_value_from_the_user_that_the_request_never_states_is_never_given():
    create = _call(
        "create_book",
        "create",
        {"title": "Dune", "genre": "fiction", "limit": 10},
        {"book_id": "boo_00002", "title": "Dune", "genre": "fiction"},
    )
    first = _turn("Add a book titled 'Dune' in genre 'fiction'.", [create])
    again = _call(
        "create_book",
        "create",
        {"title": "Dune", "genre": "fiction", "limit": 10},
        {"book_id": "boo_00003", "title": "Dune", "genre": "fiction"},
    )
    # the title was said in an earlier turn only; the genre comes from the clarification answer
    second = _turn(
        "Add another book.",
        [again],
        clarification=[
            {"role": "assistant", "content": "Which genre?"},
            {"role": "user", "content": "The genre is 'fiction'."},
        ],
    )
    gold = [{"name": "create_book", "arguments": again["arguments"]}]
    found = unstated_gold_arguments([first, second], 1, gold, ["limit"])
    assert found == [{"call": "create_book", "argument": "title", "value": "Dune", "referred_by": None}]
    assert unstated_gold_arguments([first, second], 1, gold, ["limit", "title"]) == []


def test_a_value_from_an_earlier_result_or_named_by_a_reference_is_given():
    create = _create_book("boo_00002", "Dune")
    delete = _call(
        "delete_book",
        "delete",
        {"book_id": "boo_00002"},
        {"deleted": True},
        {"book_id": {"source": "output", "call": 0, "path": "book_id"}},
    )
    recent = _call(
        "get_book", "get", {"book_id": "boo_00001"}, {"book_id": "boo_00001"}, {"book_id": {"source": "state"}}
    )
    turn = _turn(
        "Add a book titled 'Dune', delete the book you just created, then show my most recent book.",
        [create, delete, recent],
        operators=[
            {"operator": "ambiguity", "argument": "book_id", "value": "boo_00001", "reference": "my most recent book"}
        ],
    )
    gold = [{"name": c["name"], "arguments": c["arguments"]} for c in (create, delete, recent)]
    assert unstated_gold_arguments([turn], 0, gold, []) == [
        {"call": "get_book", "argument": "book_id", "value": "boo_00001", "referred_by": "ambiguity"}
    ]
    figures = gold_argument_figures(
        {"ref_1": [turn]},
        [
            {"refined_trajectory_id": "ref_1", "turn_index": 0, "gold_calls": gold, "masked_arguments": []},
            {"refined_trajectory_id": "ref_1", "turn_index": 1, "gold_calls": [], "masked_arguments": []},
        ],
    )
    assert figures["rl_rows"] == 1 and figures["gold_arguments"] == 3 and figures["unstated"] == 1
    assert figures["referred_to"] == {"ambiguity": 1} and figures["never_given"] == 0


def test_an_rl_row_after_an_inserted_abstention_turn_finds_its_refined_turn():
    first = _turn("Add a book titled 'Dune'.", [_create_book("boo_00002", "Dune")])
    second = _turn("Add a book titled 'Emma'.", [_create_book("boo_00003", "Emma")])
    gold = [{"name": "create_book", "arguments": {"title": "Emma"}}]
    assert refined_turn_of([first, second], 1, gold) == 1
    assert refined_turn_of([first, second], 2, gold) == 1  # an abstention turn went before it
    assert refined_turn_of([first, second], 0, gold) is None


def test_rows_after_two_inserted_turns_are_judged_and_an_inserted_same_tool_turn_is_counted_apart():
    first = _turn("Add a book titled 'Dune'.", [_create_book("boo_00002", "Dune")])
    second = _turn("Add a book titled 'Emma'.", [_create_book("boo_00003", "Emma")])
    emma = [{"name": "create_book", "arguments": {"title": "Emma"}}]
    # a same-tool parallel turn and an abstention turn both went before the second refined turn
    assert refined_turn_of([first, second], 3, emma) == 1
    assert refined_turn_of([first, second], 4, emma) is None
    same_tool = [{"name": "get_book", "arguments": {"book_id": b}} for b in ("boo_00002", "boo_00003")]
    figures = gold_argument_figures(
        {"ref_1": [first, second]},
        [
            {"refined_trajectory_id": "ref_1", "turn_index": 1, "gold_calls": same_tool, "masked_arguments": []},
            {"refined_trajectory_id": "ref_1", "turn_index": 3, "gold_calls": emma, "masked_arguments": []},
            {
                "refined_trajectory_id": "ref_1",
                "turn_index": 0,
                "gold_calls": [{"name": "delete_book", "arguments": {"book_id": "boo_9"}}],
                "masked_arguments": [],
            },
        ],
    )
    assert figures["rl_rows"] == 3 and figures["rl_rows_judged"] == 1
    assert figures["rl_rows_inserted"] == 1 and figures["rl_rows_unmatched"] == 1
    assert figures["gold_arguments"] == 1  # only the judged row's arguments


# --- the report and the comparison on the store of a real run ------------------------------------------------
@pytest.fixture(scope="module")
def read_only_store(tiny_cli_run, tmp_path_factory) -> Store:
    """A copy of the session run's store that cannot be written: a write would raise."""
    home = tmp_path_factory.mktemp("report_home")
    path = home / "envfactory.duckdb"
    shutil.copy(tiny_cli_run[1] / "envfactory.duckdb", path)
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    return Store(path)


@pytest.fixture(scope="module")
def report(read_only_store) -> str:
    return run_report(read_only_store)


def _figure(section: str, name: str) -> str:
    return re.search(rf"^\| {re.escape(name)} \| ([^|]+) \|$", section, re.M)[1].strip()


def test_the_data_realism_figures_match_counts_made_in_sql(report, read_only_store):
    section = report.split("## Data realism", 1)[1].split("\n## ", 1)[0]
    con = duckdb.connect(str(read_only_store.path), read_only=True)
    q = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    assert _figure(section, "environments") == str(
        q("SELECT count(*) FROM current_environments WHERE status = 'built'")
    )
    n_chains = q("SELECT count(*) FROM current_tool_chains WHERE sampler = 'topology'")
    multi = q("SELECT count(*) FROM current_tool_chains WHERE sampler = 'topology' AND n_servers > 1")
    assert _figure(section, "topology chains") == str(n_chains) and n_chains > 0
    assert _figure(section, "spanning several environments") == f"{multi} ({multi / n_chains:.1%})"
    assert _figure(section, "identifier crossings (must be 0)") == "0"
    turns = q(
        "SELECT count(*) FROM current_refined_trajectories, unnest(CAST(turns AS JSON[])) WHERE status = 'passed'"
    )
    assert re.search(rf"\*\*0\*\* of {turns} \(0\.00%\)", section)
    refined_calls = {
        rid: {json.dumps([c["name"], c["arguments"]], sort_keys=True) for t in json.loads(ts) for c in t["calls"]}
        for rid, ts in con.execute(
            "SELECT id, CAST(turns AS VARCHAR) FROM current_refined_trajectories WHERE status = 'passed'"
        ).fetchall()
    }
    gold = con.execute(
        "SELECT refined_trajectory_id, CAST(gold_calls AS VARCHAR), CAST(masked_arguments AS VARCHAR) "
        "FROM current_rl_dataset"
    ).fetchall()
    calls = [(r, json.loads(g), json.loads(m or "[]")) for r, g, m in gold]
    assert _figure(section, "RL rows with gold calls") == str(sum(1 for _r, g, _m in calls if g)) != "0"
    # a row is judged when its refined trajectory made its gold calls; the rest are turns the dataset stage added
    judged = [
        (g, m)
        for r, g, m in calls
        if g and all(json.dumps([c["name"], c["arguments"]], sort_keys=True) in refined_calls[r] for c in g)
    ]
    added = sum(1 for _r, g, _m in calls if g) - len(judged)
    assert _figure(section, "of those, same-tool parallel turns the dataset stage added (not judged)") == str(added)
    assert "not matched to a refined turn" not in section
    assert _figure(section, "gold arguments") == str(sum(len(c["arguments"]) for g, _m in judged for c in g))
    assert _figure(section, "masked (`masked_arguments`)") == str(
        sum(1 for g, m in judged for c in g for a in c["arguments"] if a in m)
    )


def test_the_clarification_and_user_text_figures_match_counts_made_in_sql(report, read_only_store):
    section = report.split("## Clarifications and user text", 1)[1].split("\n## ", 1)[0]
    con = duckdb.connect(str(read_only_store.path), read_only=True)
    q = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    turns = "FROM current_refined_trajectories, unnest(CAST(turns AS JSON[])) AS u(t) WHERE status = 'passed'"
    n_turns = q(f"SELECT count(*) {turns}")
    asked = q(f"SELECT count(*) {turns} AND json_array_length(t->'clarification') > 0")
    questions = q(f"SELECT coalesce(sum(json_array_length(t->'clarification')), 0) // 2 {turns}")
    row = re.search(r"^\| (\d+) \| (\d+) \| (\d+) \| (\d+) \| ([\d.]+) \| (\d+) \| (\d+) \| (\d+) \|$", section, re.M)
    assert row and [int(row[1]), int(row[2]), int(row[3])] == [n_turns, asked, questions]
    assert row[4] == "0" and row[6] == "0" and row[7] == row[8]  # none asks for a given value, every omission asked
    answers = (
        "FROM current_refined_trajectories, unnest(CAST(turns AS JSON[])) AS u(t), "
        "unnest(CAST(t->'clarification' AS JSON[])) AS m(c) WHERE status = 'passed' AND (c->>'role') = 'user'"
    )
    user_messages = n_turns + q(f"SELECT count(*) {answers}")
    assert re.search(rf"\*\*\d+\*\* of {user_messages} \(", section)


def test_the_ten_trajectories_are_drawn_by_the_printed_seed_and_rendered_as_show_renders_them(
    report, read_only_store, tmp_path
):
    section = report.split("## Trajectories to read whole", 1)[1]
    assert "random.Random(0)" in section
    ids = re.findall(r"^\| `(ref_[0-9a-f]+)` \|", section, re.M)
    passed = (
        duckdb.connect(str(read_only_store.path), read_only=True)
        .execute("SELECT count(*) FROM current_refined_trajectories WHERE status = 'passed'")
        .fetchone()[0]
    )
    assert len(ids) == min(10, passed) == len(set(ids)) and passed > 0
    writable = Store(shutil.copyfile(read_only_store.path, tmp_path / "envfactory.duckdb"))  # show opens it to write
    for i in ids:
        assert render_from_store(writable, i) in section
    other = run_report(read_only_store, seed=1).split("## Trajectories to read whole", 1)[1]
    assert "random.Random(1)" in other and (re.findall(r"^\| `(ref_[0-9a-f]+)` \|", other, re.M) != ids or passed <= 10)


def test_compare_of_a_store_with_itself_shows_every_figure_equal(read_only_store):
    text = compare_report(str(read_only_store.path), read_only_store)
    rows = re.findall(r"^\| (.+?) \| (.*?) \| (.*?) \|$", text, re.M)[1:]  # after the header
    figures = comparable_figures(read_only_store)
    assert len(rows) == len(figures) and all(before == after != "" for _name, before, after in rows)
    named = {name: after for name, _before, after in rows}
    assert named["kept turns: turns_quoting_future_identifier"] == "0"
    assert named["topology chains: identifier_crossings"] == "0"
    assert any(name.startswith("queries (refined): ") for name in named)
    assert any(name.startswith("per-turn accuracy: turns at ") for name in named)


def test_compare_with_a_store_that_predates_tables_shows_their_figures_empty(read_only_store, tmp_path):
    old = tmp_path / "old.duckdb"
    shutil.copy(read_only_store.path, old)
    old.chmod(stat.S_IRUSR | stat.S_IWUSR)
    with duckdb.connect(str(old)) as con:  # as a store written before these tables existed
        for view in ("current_rl_dataset", "current_tool_chains"):
            con.execute(f"DROP VIEW {view}")
    old.chmod(stat.S_IRUSR)
    rows = {
        name: (before, after)
        for name, before, after in re.findall(
            r"^\| (.+?) \| (.*?) \| (.*?) \|$", compare_report(str(old), read_only_store), re.M
        )
    }
    assert rows["RL gold arguments: gold_arguments"][0] == "" != rows["RL gold arguments: gold_arguments"][1]
    assert rows["topology chains: chains"][0] == ""
    assert rows["kept turns: turns"][0] == rows["kept turns: turns"][1] != ""


def test_compare_refuses_a_missing_path_or_a_file_that_is_not_a_store(read_only_store, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENVFACTORY_HOME", str(read_only_store.path.parent))
    text_file = tmp_path / "notes.duckdb"
    text_file.write_text("not a database")
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    for path, problem in (
        (tmp_path / "missing.duckdb", "no such file"),
        (text_file, "not a DuckDB store"),
        (empty, "not an envfactory store"),
        (tmp_path, "a folder, not a store"),
    ):
        assert cli_main(["report", "--compare", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"--compare {path}" in err and problem in err, err
    assert cli_main(["report", "--compare", str(read_only_store.path)]) == 0
    assert "| figure | before | after |" in capsys.readouterr().out


def test_the_examples_block_names_ids_that_exist_in_the_store_and_whose_commands_work(
    report, read_only_store, tmp_path, monkeypatch, capsys
):
    block = report.split("<!-- examples:start -->", 1)[1].split("<!-- examples:end -->", 1)[0]
    ids = dict(re.findall(r"^\| (\w+) \| `([^`]+)` \|", block, re.M))
    assert set(ids) == {"trajectory", "checkpoint", "environment", "tool", "resource"}
    home = tmp_path / "home"
    home.mkdir()
    store = Store(shutil.copyfile(read_only_store.path, home / "envfactory.duckdb"))  # the commands below write
    assert store.read("refined_trajectories", f"id = '{ids['trajectory']}'")
    assert ids["trajectory"] in report.split("## Trajectories to read whole", 1)[1]  # shown whole below
    assert store.read("checkpoints", f"id = '{ids['checkpoint']}'")
    env = store.read("environments", f"env_id = '{ids['environment']}'")[0]
    assert ids["tool"] == f"{env['env_id']}.{env['tools'][0]['name']}"
    assert store.read("source_resources", f"id = '{env['source_resource_id']}'")[0]["resource_key"] == ids["resource"]
    monkeypatch.setenv("ENVFACTORY_HOME", str(home))
    assert cli_main(["show", ids["trajectory"]]) == 0 and cli_main(["lineage", ids["checkpoint"]]) == 0
    for kind in ("tool", "resource", "environment"):
        assert cli_main(["exclude", kind, ids[kind], "--reason", "example"]) == 0, kind
    capsys.readouterr()


def _leaves(value) -> int:
    if isinstance(value, list):
        return sum(_leaves(v) for v in value)
    if isinstance(value, dict):
        return sum(_leaves(v) for v in value.values())
    return 1


def test_the_report_shows_the_coverage_unknown_and_random_word_share_of_generated_arguments(report, read_only_store):
    section = report.split("## Data realism", 1)[1].split("\n## ", 1)[0]
    section = section.split("Argument values the user gives", 1)[1]  # the seeded values' table comes first
    con = duckdb.connect(str(read_only_store.path), read_only=True)
    given = 0
    for (turns,) in con.execute(
        "SELECT CAST(turns AS VARCHAR) FROM current_refined_trajectories WHERE status = 'passed'"
    ).fetchall():
        for turn in json.loads(turns):
            for call in turn["calls"]:
                prov = call.get("provenance") or {}
                given += sum(
                    _leaves(v) for k, v in call["arguments"].items() if (prov.get(k) or {}).get("source") == "user"
                )
    assert _figure(section, "argument values") == str(given) != "0"
    covered = int(_figure(section, "covered by a rule"))
    unknown = re.fullmatch(r"(\d+) \((\d+\.\d)%\)", _figure(section, "unknown (no rule applies)"))
    assert covered + int(unknown[1]) == given
    assert f"{int(unknown[1]) / given:.1%}" == f"{unknown[2]}%"
    assert re.fullmatch(r"\d+ \(\d+\.\d%\)", _figure(section, "random words in a field of a kind (of covered)"))
