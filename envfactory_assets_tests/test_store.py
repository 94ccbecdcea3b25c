"""``envfactory_assets.store``: idempotent versioned writes, JSON columns, readers, ids, SQL models, lineage.

Every test writes real rows into a real DuckDB file under ``tmp_path``.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from envfactory_assets.store.db import Store, StoreBusy, read_rows, sql_string
from envfactory_assets.store.gates import failed_environment_leaks, pass_rate, passed_environment_ids
from envfactory_assets.store.ids import content_id
from envfactory_assets.store.lineage import LineageError, checkpoint_lineage, format_lineage
from envfactory_assets.store.schema import JSON_COLUMNS, TABLES, columns, ddl
from envfactory_assets.store.sql_models import SQL_DIR, SqlModel, load_models, materialize_model
from envfactory_assets_tests.store_holder import hold_store


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "home" / "envfactory.duckdb", retry_seconds=1.0)


def make(table: str, id_kind: str, /, **values: Any) -> dict[str, Any]:
    """A complete row of ``table``: unspecified columns None, ``id`` a content hash of the given values."""
    row = dict.fromkeys(columns(table))
    unknown = set(values) - set(row)
    assert not unknown, unknown
    row.update(values)
    row["id"] = values.get("id") or content_id(id_kind, values)
    return row


def rejection(n: int, **extra: Any) -> dict[str, Any]:
    return make(
        "rejected_resources",
        "rej",
        path=f"spec {n} & co.json",
        corpus_root="/corpus",
        sha256=f"{n:064x}",
        reason="no_paths",
        detail=f"document {n} has no paths",
        **extra,
    )


def table_snapshot(store: Store, table: str) -> list[tuple]:
    with store.connect() as con:
        return con.execute(f"SELECT * EXCLUDE (written_at) FROM {table} ORDER BY id").fetchall()


# ---------------------------------------------------------------------------------------- schema


def test_schema_has_ids_and_json_columns():
    for table in TABLES:
        cols = columns(table)
        assert cols[0] == "id" and len(set(cols)) == len(cols)
        assert JSON_COLUMNS[table] <= set(cols)
    assert JSON_COLUMNS["checkpoints"] == {"sft_dataset_ids", "config", "metrics", "rl_dataset_ids"}
    assert len(ddl()) == 2 * len(TABLES)
    with pytest.raises(KeyError, match="unknown store table 'nope'"):
        columns("nope")


# ---------------------------------------------------------------------------------- replace_current


def test_replace_current_is_idempotent(store):
    rows = [rejection(i) for i in range(3)]
    assert store.replace_current("rejected_resources", rows) == {"inserted": 3, "kept": 0, "superseded": 0}
    assert store.path.exists()
    first = table_snapshot(store, "rejected_resources")
    assert store.replace_current("rejected_resources", rows) == {"inserted": 0, "kept": 3, "superseded": 0}
    assert store.replace_current("rejected_resources", list(reversed(rows))) == {
        "inserted": 0,
        "kept": 3,
        "superseded": 0,
    }
    assert table_snapshot(store, "rejected_resources") == first
    assert [r["id"] for r in store.read("rejected_resources")] == sorted(r["id"] for r in rows)
    assert store.counts()["rejected_resources"] == 3


def test_replace_current_supersedes_without_deleting_and_restores(store):
    a, b, c = (rejection(i) for i in range(3))
    store.replace_current("rejected_resources", [a, b, c])
    assert store.replace_current("rejected_resources", [a, b]) == {"inserted": 0, "kept": 2, "superseded": 1}
    assert {r["id"] for r in store.read("rejected_resources")} == {a["id"], b["id"]}
    everything = {r["id"]: r["superseded"] for r in store.read("rejected_resources", current=False)}
    assert everything == {a["id"]: False, b["id"]: False, c["id"]: True}
    with store.connect() as con:
        assert con.execute("SELECT count(*) FROM rejected_resources").fetchone()[0] == 3
        assert con.execute("SELECT count(*) FROM current_rejected_resources").fetchone()[0] == 2
    # a new version: one row new, one dropped
    d = rejection(3)
    assert store.replace_current("rejected_resources", [b, d]) == {"inserted": 1, "kept": 1, "superseded": 1}
    assert {r["id"] for r in store.read("rejected_resources")} == {b["id"], d["id"]}
    # c comes back: restored (not re-inserted), and d, no longer in the set, is superseded
    assert store.replace_current("rejected_resources", [a, b, c]) == {"inserted": 0, "kept": 3, "superseded": 1}
    everything = {r["id"]: r["superseded"] for r in store.read("rejected_resources", current=False)}
    assert everything == {a["id"]: False, b["id"]: False, c["id"]: False, d["id"]: True}
    # an empty version supersedes everything and deletes nothing
    assert store.replace_current("rejected_resources", []) == {"inserted": 0, "kept": 0, "superseded": 3}
    assert store.read("rejected_resources") == [] and len(store.read("rejected_resources", current=False)) == 4
    assert store.counts()["rejected_resources"] == 0


def test_replace_current_scope_limits_what_is_superseded(store):
    def env(env_id: str, n: int) -> dict[str, Any]:
        return make(
            "environments",
            "env",
            env_id=env_id,
            source_resource_id="src_x",
            domain="productivity",
            status="built",
            n_tools=n,
        )

    e1a, e1b, e2 = env("e1", 1), env("e1", 2), env("e2", 1)
    store.replace_current("environments", [e1a, e2])
    assert store.replace_current("environments", [e1b], scope="env_id = 'e1'") == {
        "inserted": 1,
        "kept": 0,
        "superseded": 1,
    }
    assert {r["id"] for r in store.read("environments")} == {e1b["id"], e2["id"]}


def _missing(rows: list[dict]) -> list[dict]:
    del rows[1]["detail"]
    return rows


def _extra(rows: list[dict]) -> list[dict]:
    rows[1]["bogus"] = 1
    return rows


def _duplicate(rows: list[dict]) -> list[dict]:
    return rows + [dict(rows[1])]


def _no_id(rows: list[dict]) -> list[dict]:
    rows[1]["id"] = None
    return rows


@pytest.mark.parametrize(
    "break_rows, message",
    [
        (_missing, r"rejected_resources: row rej_\w+ missing \['detail'\]"),
        (_extra, r"rejected_resources: row rej_\w+ missing \[\] extra \['bogus'\]"),
        (_duplicate, r"rejected_resources: every row needs a unique string id"),
        (_no_id, r"rejected_resources: every row needs a unique string id"),
    ],
)
def test_malformed_rows_leave_the_table_unchanged(store, break_rows, message):
    store.replace_current("rejected_resources", [rejection(0), rejection(1)])
    before = table_snapshot(store, "rejected_resources")
    with pytest.raises(ValueError, match=message):
        store.replace_current("rejected_resources", break_rows([rejection(2), rejection(3)]))
    assert table_snapshot(store, "rejected_resources") == before


def test_a_failure_inside_the_transaction_rolls_everything_back(store):
    store.replace_current("rejected_resources", [rejection(0), rejection(1)])
    before = table_snapshot(store, "rejected_resources")
    # well-formed rows, but one violates NOT NULL (reason): the insert of the good one and the
    # superseding of the old ones must both be undone
    bad = rejection(3) | {"reason": None}
    with pytest.raises(duckdb.ConstraintException, match="rejected_resources.reason"):
        store.replace_current("rejected_resources", [rejection(2), bad])
    assert table_snapshot(store, "rejected_resources") == before
    # and the store is still writable afterwards
    assert store.replace_current("rejected_resources", [rejection(2)])["inserted"] == 1


def test_unknown_table_is_refused(store):
    with pytest.raises(KeyError, match="unknown store table"):
        store.replace_current("not_a_table", [])
    with pytest.raises(KeyError, match="unknown store table"):
        store.read("not_a_table")


# ------------------------------------------------------------------------------------ JSON columns

NESTED = {
    "名前": "東京の天気 ☀️",
    "café": ["crème brûlée", {"ünïcödé": [1, 2.5, -3, None, True, False]}],
    "empty": {"list": [], "dict": {}, "text": ""},
    "deep": [[[[{"Ω": "ω"}]]]],
    "quote": 'he said "hi" \\ then left\nnew line\ttab',
    "big": 2**53 + 1,
}


def test_json_columns_round_trip_nested_non_ascii(store):
    row = make(
        "tool_chains",
        "chain",
        chain_key="k1",
        sampler="topology",
        seed=2**64 - 1,
        status="passed",
        tools=[NESTED, {"name": "créer_événement"}],
        env_ids=["env_ü"],
        verified_environment_ids=[],
        domains="just a string",
        n_tools=2,
        n_servers=1,
        reasons=None,
    )
    other = make(
        "tool_chains",
        "chain",
        chain_key="k2",
        seed=0,
        status="failed",
        tools={"a": {"b": {"c": [[]]}}},
        env_ids=[],
        verified_environment_ids=["ver_1"],
        domains=["productivity"],
        reasons=["日本語の理由"],
    )
    store.replace_current("tool_chains", [row, other])
    back = {r["id"]: r for r in store.read("tool_chains")}
    for original in (row, other):
        got = back[original["id"]]
        assert {k: got[k] for k in original} == original
        assert got["superseded"] is False
    # the JSON is stored as JSON (queryable), not as a double-encoded string
    with store.connect() as con:
        name = con.execute("SELECT tools->>'$[1].name' FROM tool_chains WHERE chain_key = 'k1'").fetchone()[0]
        weather = con.execute("SELECT tools->0->>'名前' FROM tool_chains WHERE chain_key = 'k1'").fetchone()[0]
        n = con.execute("SELECT json_array_length(reasons) FROM tool_chains WHERE chain_key = 'k2'").fetchone()[0]
    assert (name, weather, n) == ("créer_événement", "東京の天気 ☀️", 1)


def test_read_binds_parameters(store):
    rows = [rejection(i) for i in range(4)]
    store.replace_current("rejected_resources", rows)
    got = store.read("rejected_resources", "path = ? OR detail LIKE ?", ["spec 1 & co.json", "%document 3%"])
    assert [r["path"] for r in sorted(got, key=lambda r: r["path"])] == ["spec 1 & co.json", "spec 3 & co.json"]


@pytest.mark.parametrize(
    "value",
    [
        "spec 1 & co.json",
        "it's",
        "'; DROP TABLE rejected_resources; --",
        "back\\slash \\' and \\n",
        "line\nbreak",
        "ünïcødé ✓",
        "",
    ],
)
def test_sql_string_is_the_literal_of_its_value(store, value):
    """A literal DuckDB reads back as exactly the value, whatever quotes or backslashes it holds, and as a
    read_rows predicate it matches that value only."""
    with duckdb.connect() as con:
        assert con.execute(f"SELECT {sql_string(value)}").fetchone()[0] == value
    rows = [rejection(i) for i in range(2)]
    rows[1] = {**rows[1], "path": value}
    store.replace_current("rejected_resources", rows)
    with store.connect(read_only=True) as con:
        got = read_rows(con, "rejected_resources", f"path = {sql_string(value)}")
    assert [r["id"] for r in got] == [rows[1]["id"]]
    assert len(store.read("rejected_resources")) == 2


@pytest.mark.parametrize("value", ["nul\x00byte", 7, None])
def test_sql_string_refuses_what_no_literal_holds(value):
    with pytest.raises(ValueError, match="not a value for an SQL string literal"):
        sql_string(value)


# ----------------------------------------------------------------------------------------- readers


def test_read_only_reader_on_a_missing_store(tmp_path):
    missing = Store(tmp_path / "nowhere" / "envfactory.duckdb", retry_seconds=0.1)
    with pytest.raises(FileNotFoundError, match=r"does not exist yet: run `envfactory run` first") as err:
        missing.query("SELECT 1")
    assert str(missing.path) in str(err.value)
    with pytest.raises(FileNotFoundError, match="does not exist yet"):
        with missing.connect(read_only=True):
            pass
    # reading rows never creates the store either
    with pytest.raises(FileNotFoundError, match="does not exist yet"):
        missing.read("source_resources")
    assert not missing.path.exists() and not missing.path.parent.exists()


def test_query_reads_an_existing_store(store):
    store.replace_current("rejected_resources", [rejection(i) for i in range(3)])
    frame = store.query("SELECT reason, count(*) AS n FROM current_rejected_resources GROUP BY reason")
    assert frame.to_dicts() == [{"reason": "no_paths", "n": 3}]


def test_a_read_in_another_process_does_not_block_reads(store):
    store.replace_current("rejected_resources", [rejection(i) for i in range(3)])
    holder = hold_store(store.path, read_only=True)  # as a long `envfactory report` holds it
    try:
        started = time.monotonic()
        assert len(store.read("rejected_resources")) == 3
        assert store.counts()["rejected_resources"] == 3
        assert store.query("SELECT count(*) AS n FROM current_rejected_resources").item() == 3
        assert time.monotonic() - started < store.retry_seconds  # no wait for the other reader
        # a write must wait for the reader, and then names it and how it holds the store
        with pytest.raises(StoreBusy, match=rf"process {holder.pid} .*open for reading"):
            store.replace_current("rejected_resources", [rejection(i) for i in range(4)])
    finally:
        holder.kill()
        holder.wait()
    assert len(store.read("rejected_resources")) == 3


def test_a_read_while_another_process_writes_names_the_writer(store):
    store.replace_current("rejected_resources", [rejection(i) for i in range(2)])
    holder = hold_store(store.path, read_only=False)
    try:
        with pytest.raises(StoreBusy, match=rf"process {holder.pid} \(.*python.*\) has it open for writing"):
            store.read("rejected_resources")
    finally:
        holder.kill()
        holder.wait()
    assert len(store.read("rejected_resources")) == 2  # the lock goes with its process


def test_a_read_inside_this_process_write_connection_shares_it(store):
    store.replace_current("rejected_resources", [rejection(i) for i in range(2)])
    with store.connect() as con:  # DuckDB refuses a read-only connection beside it: the read shares it
        con.execute("SELECT 1")
        assert len(store.read("rejected_resources")) == 2


# ------------------------------------------------------------------------------------------------ ids


def test_content_id_is_stable_under_key_order():
    a = {"key": "bookshop", "sha256": "ab" * 32, "nested": {"x": 1, "y": [1, {"p": "é", "q": None}]}}
    b = {"nested": {"y": [1, {"q": None, "p": "é"}], "x": 1}, "sha256": "ab" * 32, "key": "bookshop"}
    assert content_id("src", a) == content_id("src", b)
    assert re.fullmatch(r"src_[0-9a-f]{16}", content_id("src", a))
    assert content_id("env", a) != content_id("src", a)  # kind is a tag
    assert content_id("src", a)[4:] == content_id("env", a)[4:]
    assert content_id("src", {**a, "sha256": "cd" * 32}) != content_id("src", a)  # content matters
    assert content_id("x", [1, 2]) != content_id("x", [2, 1])  # list order matters
    assert content_id("x", {"n": 1}) != content_id("x", {"n": "1"})
    with pytest.raises(TypeError):
        content_id("x", {"s": {1, 2}})


# ------------------------------------------------------------------------------------------ SQL models


def test_load_models_reads_the_project_models():
    models = {m.name: m for m in load_models()}
    assert set(models) == {
        "environment_quality_by_domain",
        "trajectory_statistics",
        "rejection_reasons",
        "lineage_edges",
        "benchmark_overlap_by_environment",
        "sampler_comparison",
        "trajectory_diversity",
        "query_statistics",
        "turns_by_operator",
        "operation_coverage",
    }
    assert models["lineage_edges"].layer == "lineage" and models["rejection_reasons"].layer == "marts"
    assert models["rejection_reasons"].depends_on == ("source_resources",)
    for m in models.values():
        assert m.depends_on and set(m.depends_on) <= set(TABLES) | {"tool_graph"}  # asset names
        assert re.fullmatch(r"[0-9a-f]{16}", m.code_version)
        assert not m.sql.endswith(";")
    assert [m.name for m in load_models(SQL_DIR)] == [m.name for m in load_models()]


def test_load_models_rejects_a_model_without_depends_on(tmp_path):
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / "good.sql").write_text("-- depends_on: source_resources\nSELECT 1 AS x;\n")
    assert [(m.name, m.depends_on, m.sql) for m in load_models(tmp_path)] == [
        ("good", ("source_resources",), "-- depends_on: source_resources\nSELECT 1 AS x")
    ]
    (tmp_path / "marts" / "headless.sql").write_text("-- counts rows\nSELECT count(*) FROM current_environments\n")
    with pytest.raises(ValueError, match=r"headless\.sql: first line must be '-- depends_on: <assets>'"):
        load_models(tmp_path)


def test_load_models_rejects_a_bad_view_name(tmp_path):
    (tmp_path / "Bad-Name.sql").write_text("-- depends_on: source_resources\nSELECT 1\n")
    with pytest.raises(ValueError, match="lower_snake_case"):
        load_models(tmp_path)


# ------------------------------------------------------------------------------------------- lineage


def build_chain(store: Store, tag: str = "a") -> dict[str, dict[str, Any]]:
    """One real row per stage, linked by parent ids (not written yet), by table."""
    src = make(
        "source_resources",
        "src",
        resource_key=f"shop_{tag}",
        kind="openapi",
        provider=f"shop-{tag}.example",
        service="",
        title="Shop",
        version="1",
        license_name="MIT",
        license_url="https://mit",
        path=f"shop {tag} & co.json",
        corpus_root="/corpus",
        sha256=tag * 64,
        size_bytes=10,
        domain="ecommerce_retail",
        categories=["ecommerce"],
        n_paths=2,
        n_resources=1,
        resource_names=["books"],
        n_operations=2,
        n_mapped_operations=2,
        operations_by_kind={"list": 1, "create": 1},
        unmapped_by_reason={},
    )
    env = make(
        "environments",
        "env",
        env_id=f"shop_{tag}",
        source_resource_id=src["id"],
        domain="ecommerce_retail",
        status="built",
        reasons=[],
        provenance="programmatic",
        n_tools=1,
        tools=[{"name": "list_books"}],
        tables={"books": []},
        state_schema={},
        source="def load(d):\n    return d\n",
        initial_states=[],
    )
    ver = make(
        "verified_environments",
        "ver",
        environment_id=env["id"],
        env_id=env["env_id"],
        domain="ecommerce_retail",
        status="passed",
        reasons=[],
        n_checks=3,
        n_failed=0,
        checks=[],
    )
    chain = make(
        "tool_chains",
        "chain",
        chain_key=f"c_{tag}",
        sampler="topology",
        seed=7,
        tools=["list_books"],
        env_ids=[env["env_id"]],
        verified_environment_ids=[ver["id"]],
        domains=["ecommerce_retail"],
        n_tools=1,
        n_servers=1,
        status="passed",
        reasons=[],
    )
    raw = make(
        "raw_trajectories",
        "raw",
        tool_chain_id=chain["id"],
        env_ids=[env["env_id"]],
        domains=[],
        status="passed",
        reasons=[],
        n_turns=2,
        n_calls=2,
        turns=[{"q": "hé"}],
        initial_state={},
        final_state={},
        initial_state_hash="0",
        final_state_hash="1",
    )
    refined = make(
        "refined_trajectories",
        "ref",
        raw_trajectory_id=raw["id"],
        tool_chain_id=chain["id"],
        env_ids=[env["env_id"]],
        domains=[],
        status="passed",
        reasons=[],
        n_turns=2,
        operators=[],
        turns=[],
    )
    sft = make(
        "sft_dataset",
        "sft",
        refined_trajectory_id=refined["id"],
        env_ids=[env["env_id"]],
        domains=[],
        split="train",
        messages=[{"role": "user", "content": "¿libros?"}],
        tools=[],
        n_turns=2,
    )
    ckpt = make(
        "checkpoints",
        "ckpt",
        sft_dataset_version="v1",
        sft_dataset_ids=[sft["id"]],
        base_model="SmolLM2",
        base_model_hash="f" * 64,
        config={"lr": 5e-5},
        metrics={"valid_calls": [0.1, 0.4]},
        path=f"/ckpt/{tag}",
    )
    rows = {
        "source_resources": src,
        "environments": env,
        "verified_environments": ver,
        "tool_chains": chain,
        "raw_trajectories": raw,
        "refined_trajectories": refined,
        "sft_dataset": sft,
        "checkpoints": ckpt,
    }
    return rows


def write_chains(store: Store, *chains: dict[str, dict[str, Any]]) -> None:
    for table in chains[0]:
        result = store.replace_current(table, [c[table] for c in chains])
        assert result["inserted"] == len(chains), (table, result)


@pytest.fixture(scope="module")
def chains(tmp_path_factory) -> tuple[Store, dict, dict]:
    """A store holding two independent chains, ``a`` (verification passed) and ``b`` (verification failed)."""
    store = Store(tmp_path_factory.mktemp("lineage") / "envfactory.duckdb", retry_seconds=1.0)
    a, b = build_chain(store, "a"), build_chain(store, "b")
    b["verified_environments"]["status"] = "failed"
    b["verified_environments"]["id"] = content_id("ver", {"failed": "b"})
    b["tool_chains"]["verified_environment_ids"] = [b["verified_environments"]["id"]]
    write_chains(store, a, b)
    return store, a, b


def copy_of(store: Store, tmp_path: Path) -> Store:
    """A private copy of a (closed) store file, for tests that damage it."""
    target = tmp_path / store.path.name
    for suffix in ("", ".wal"):
        src = store.path.with_name(store.path.name + suffix)
        if src.exists():
            shutil.copy(src, target.with_name(target.name + suffix))
    return Store(target, retry_seconds=1.0)


def test_checkpoint_lineage_returns_exactly_its_source_resource(chains):
    store, a, b = chains
    lineage = checkpoint_lineage(store, a["checkpoints"]["id"])
    assert lineage["source_resources"] == [
        {
            "id": a["source_resources"]["id"],
            "resource_key": "shop_a",
            "provider": "shop-a.example",
            "domain": "ecommerce_retail",
            "uri": "/corpus/shop a & co.json",
            "path": "shop a & co.json",
            "sha256": "a" * 64,
            "license": "MIT",
            "license_url": "https://mit",
        }
    ]
    assert lineage["counts"] == {
        **dict.fromkeys(
            [
                "sft_dataset",
                "refined_trajectories",
                "raw_trajectories",
                "tool_chains",
                "verified_environments",
                "environments",
                "source_resources",
            ],
            1,
        ),
        "rl_dataset": 0,
    }
    for table, ids in lineage["ids"].items():
        assert ids == ([] if table == "rl_dataset" else [a[table]["id"]]), table
    assert lineage["checkpoint"] == {
        "id": a["checkpoints"]["id"],
        "base_model": "SmolLM2",
        "base_model_hash": "f" * 64,
        "sft_dataset_version": "v1",
        "path": "/ckpt/a",
        "stage": "sft",
        "parent_checkpoint_id": None,
        "rl_dataset_version": None,
    }
    text = format_lineage(lineage)
    assert "shop_a" in text and "shop_b" not in text and "/corpus/shop a & co.json" in text


def test_grpo_checkpoint_lineage_walks_its_rl_prompts_and_its_sft_parent(chains, tmp_path):
    store, a, b = chains
    store = copy_of(store, tmp_path)
    # the GRPO prompt comes from chain b's refined trajectory, so its sources show up too
    rl = make(
        "rl_dataset",
        "rl",
        refined_trajectory_id=b["refined_trajectories"]["id"],
        turn_index=0,
        env_ids=["shop_b"],
        split="train",
        prompt=[{"role": "user", "content": "hi"}],
        tools=[],
        gold_calls=[],
        masked_arguments=[],
        initial_state={},
        final_state={},
    )
    store.replace_current("rl_dataset", [rl])
    grpo = make(
        "checkpoints",
        "ckpt",
        sft_dataset_version="v1",
        sft_dataset_ids=[a["sft_dataset"]["id"]],
        base_model="SmolLM2",
        base_model_hash="f" * 64,
        config={},
        metrics={},
        path="/ckpt/grpo",
        stage="grpo",
        parent_checkpoint_id=a["checkpoints"]["id"],
        rl_dataset_ids=[rl["id"]],
        rl_dataset_version="rv1",
    )
    store.replace_current("checkpoints", [a["checkpoints"], grpo])
    lineage = checkpoint_lineage(store, grpo["id"])
    assert lineage["ids"]["rl_dataset"] == [rl["id"]]
    assert lineage["counts"]["refined_trajectories"] == 2
    assert {s["resource_key"] for s in lineage["source_resources"]} == {"shop_a", "shop_b"}
    assert (
        lineage["checkpoint"]["stage"] == "grpo"
        and lineage["checkpoint"]["parent_checkpoint_id"] == a["checkpoints"]["id"]
    )
    assert "stage grpo" in format_lineage(lineage) and "rl dataset version rv1" in format_lineage(lineage)
    with store.connect() as con:
        con.execute("DELETE FROM checkpoints WHERE id = ?", [a["checkpoints"]["id"]])
    with pytest.raises(LineageError, match="parent checkpoint"):
        checkpoint_lineage(store, grpo["id"])


def test_lineage_survives_superseding(chains, tmp_path):
    store, a, _ = chains
    store = copy_of(store, tmp_path)
    # re-synthesis replaced every row below the checkpoint; the old checkpoint stays walkable
    for table in ("sft_dataset", "refined_trajectories", "raw_trajectories", "tool_chains"):
        assert store.replace_current(table, [])["superseded"] == 2
    assert store.read("sft_dataset") == []
    assert checkpoint_lineage(store, a["checkpoints"]["id"])["source_resources"][0]["id"] == a["source_resources"]["id"]


def test_lineage_of_an_unknown_checkpoint(chains):
    store, a, b = chains
    known = sorted([a["checkpoints"]["id"], b["checkpoints"]["id"]])
    with pytest.raises(LineageError, match=r"no checkpoint 'ckpt_0000' .* known: \['" + known[0]):
        checkpoint_lineage(store, "ckpt_0000")


def test_lineage_on_a_missing_store(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist yet"):
        checkpoint_lineage(Store(tmp_path / "none.duckdb"), "ckpt_0000")
    assert not (tmp_path / "none.duckdb").exists()


@pytest.mark.parametrize("broken", ["sft_dataset", "raw_trajectories", "source_resources"])
def test_lineage_with_a_broken_link(chains, tmp_path, broken):
    store, a, _ = chains
    store = copy_of(store, tmp_path)
    with store.connect() as con:
        con.execute(f"DELETE FROM {broken} WHERE id = ?", [a[broken]["id"]])
    with pytest.raises(LineageError, match=rf"broken lineage for {a['checkpoints']['id']}: 1 {broken} row"):
        checkpoint_lineage(store, a["checkpoints"]["id"])


def test_lineage_edges_model_and_gates_on_the_chain(chains, tmp_path):
    store, a, b = chains
    store = copy_of(store, tmp_path)
    models = {m.name: m for m in load_models()}
    assert materialize_model(store, models["lineage_edges"]).rows == 14  # 7 links per chain
    edges = store.query(
        "SELECT child_table, parent_table, parent_id FROM lineage_edges WHERE child_id = ?", [a["checkpoints"]["id"]]
    ).to_dicts()
    assert edges == [{"child_table": "checkpoints", "parent_table": "sft_dataset", "parent_id": a["sft_dataset"]["id"]}]
    assert materialize_model(store, models["environment_quality_by_domain"]).rows == 1
    assert store.query("SELECT environments, passed, failed FROM environment_quality_by_domain").to_dicts() == [
        {"environments": 2, "passed": 1, "failed": 1}
    ]
    assert pass_rate(store) == (0.5, 2)
    assert passed_environment_ids(store) == {"shop_a": a["verified_environments"]["id"]}
    assert failed_environment_leaks(store, ["tool_chains", "raw_trajectories"]) == [
        f"tool_chains:{b['tool_chains']['id']} -> shop_b",
        f"raw_trajectories:{b['raw_trajectories']['id']} -> shop_b",
    ]


def test_a_store_from_an_older_schema_gains_new_columns_without_losing_rows(tmp_path):
    import duckdb

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE environments (id VARCHAR PRIMARY KEY, env_id VARCHAR NOT NULL, "
        "superseded BOOLEAN NOT NULL DEFAULT FALSE, written_at TIMESTAMP DEFAULT current_timestamp)"
    )
    con.execute("INSERT INTO environments (id, env_id) VALUES ('env_old', 'legacy')")
    con.close()
    store = Store(path)
    rows = store.read("environments")
    assert [r["id"] for r in rows] == ["env_old"] and rows[0]["seed_data"] is None


def test_report_of_an_empty_store_says_what_is_missing_instead_of_printing_none(store):
    """A store with no passed trajectory printed "Calls per passed trajectory: None / None / None"."""
    from envfactory_assets.reporting.report import run_report

    with store.connect():
        pass
    report = run_report(store)
    assert "None" not in report and "no passed trajectory yet" in report
    assert "envfactory show" not in report  # nothing to read yet


def test_report_tables_survive_pipes_and_line_breaks_in_stored_text(store):
    """A domain such as "billing|refunds" (text from source documents) split the report's Markdown row into
    extra columns, and a line break ended it."""
    from envfactory_assets.reporting.report import run_report

    row = make(
        "refined_trajectories",
        "rt",
        status="passed",
        n_turns=2,
        domains=["billing|refunds", "a\nb"],
        turns=[],
        operators=[],
        raw_trajectory_id="raw_1",
        tool_chain_id="chain_1",
        env_ids=["e"],
        reasons=[],
    )
    store.replace_current("refined_trajectories", [row])
    shown = run_report(store).split("## Trajectories to read whole", 1)[1]
    [line] = [ln for ln in shown.splitlines() if row["id"] in ln and ln.startswith("|")]
    assert line.replace("\\|", "").count("|") == 4  # id, turns, domains: three cells
    assert "billing\\|refunds" in line


def test_a_model_is_computed_once_with_duckdbs_progress_and_a_failing_model_keeps_the_old_view(tmp_path):
    store = Store(tmp_path / "envfactory.duckdb")
    with store.connect() as con:
        con.execute("CREATE TABLE numbers AS SELECT range AS n FROM range(8000000)")
    slow = SqlModel("distinct_hashes", "marts", "SELECT count(DISTINCT md5(n::VARCHAR)) AS k FROM numbers", ())
    said: list[int] = []
    view = materialize_model(store, slow, progress=said.append, progress_after_s=0.0)
    assert view.rows == 1 and view.preview.to_dicts() == [{"k": 8000000}]
    assert said[0] == 0 and said == sorted(said) and said[-1] == 100, said  # from the start, never back, to 100
    assert len([p for p in said if 0 < p < 100]) >= 1, said  # it moved while the query ran
    quick = SqlModel("small_numbers", "marts", "SELECT n FROM numbers WHERE n < 30 ORDER BY n", ())
    quiet: list[int] = []
    view = materialize_model(store, quick, progress=quiet.append, preview_rows=5)
    assert (view.rows, view.preview["n"].to_list(), quiet) == (30, [0, 1, 2, 3, 4], [0])  # no bar for a quick one

    # a progress sink that fails stops the reports, never the query
    def failing(percent):
        raise RuntimeError(f"sink broke at {percent}")

    assert materialize_model(store, slow, progress=failing, progress_after_s=0.0).rows == 1
    broken = SqlModel("small_numbers", "marts", "SELECT no_such_column FROM numbers", ())
    with pytest.raises(duckdb.BinderException, match="no_such_column"):
        materialize_model(store, broken)
    assert store.query("SELECT count(*) AS n FROM small_numbers").to_dicts() == [{"n": 30}]
