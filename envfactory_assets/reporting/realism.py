"""The data-realism figures of a store, queried on a read-only connection (the store is never written).

Each figure comes from a function of the stage that owns it, applied to the store's current rows:
seeded values from :mod:`envfactory_assets.quality.value_semantics`, links between environments from
:func:`envfactory_assets.synth.sampling.sampler.flow_stats`, turns quoting values that do not exist yet and gold values
nobody gave from :mod:`envfactory_assets.synth.refinement.report`. A store written before a table existed gives None
for the figures that need it (shown empty), never an error.
"""

from __future__ import annotations

from typing import Any

import orjson

from envfactory_assets.store.db import Store, read_rows
from envfactory_assets.store.schema import TABLES


def has_table(con: Any, name: str) -> bool:
    """True when the store behind ``con`` has the table or view ``name``."""
    return bool(
        con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()[0]
    )


def current_rows(con: Any, table: str, where: str = "") -> list[dict[str, Any]] | None:
    """Current rows of ``table`` (:func:`~envfactory_assets.store.db.read_rows`), or None when the store
    predates the table."""
    return read_rows(con, table, where) if has_table(con, f"current_{table}") else None


def value_figures(con: Any) -> dict[str, Any] | None:
    """:func:`~envfactory_assets.quality.value_semantics.summarise` of the current built environments (what
    the ``environments`` asset records in its metadata), with ``environments`` judged; None without the table."""
    from envfactory_assets.envgen.stage import as_environment
    from envfactory_assets.quality.value_semantics import summarise

    rows = current_rows(con, "environments", "status = 'built'")
    return None if rows is None else {"environments": len(rows), **summarise(as_environment(r) for r in rows)}


def argument_value_figures(con: Any, refined: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """:func:`~envfactory_assets.quality.value_semantics.argument_figures` of the generated argument values in
    the tool calls of the passed ``refined`` trajectory rows, judged against the current built environments'
    tool schemas; None when the store lacks either table."""
    from envfactory_assets.envgen.environment_dict import as_environment
    from envfactory_assets.quality.value_semantics import argument_figures

    rows = current_rows(con, "environments", "status = 'built'")
    if refined is None or rows is None:
        return None
    return argument_figures(refined, {r["env_id"]: as_environment(r) for r in rows})


def link_figures(con: Any, sampler: str = "topology") -> dict[str, Any] | None:
    """:func:`~envfactory_assets.synth.sampling.sampler.flow_stats` of the current ``sampler`` chains on the stored tool
    graph (as the ``tool_chains`` asset records it); None when the store lacks the graph or the chains."""
    from envfactory_assets.graph.stage import graph_from_store_rows
    from envfactory_assets.synth.sampling.sampler import Chain, flow_stats

    if not all(
        has_table(con, t)
        for t in ("tool_graph_nodes", "tool_graph_parameters", "tool_graph_edges", "current_tool_chains")
    ):
        return None
    graph = graph_from_store_rows(
        read_rows(con, "tool_graph_nodes"), read_rows(con, "tool_graph_parameters"), read_rows(con, "tool_graph_edges")
    )
    chains = read_rows(con, "tool_chains", "sampler = ?", [sampler])
    return flow_stats(graph, [Chain.from_dict(r["tools"]) for r in chains])


def turn_figures(con: Any, refined: list[dict[str, Any]] | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``(future identifier figures, gold argument figures)`` of the passed ``refined`` trajectory rows
    (:func:`~envfactory_assets.synth.refinement.report.future_identifier_figures`,
    :func:`~envfactory_assets.synth.refinement.report.gold_argument_figures` over the current ``rl_dataset`` rows); None
    for a figure whose tables the store lacks."""
    from envfactory_assets.synth.refinement.report import future_identifier_figures, gold_argument_figures

    if refined is None:
        return None, None
    future = future_identifier_figures(refined)
    if not has_table(con, "current_rl_dataset"):
        return future, None
    names = ("refined_trajectory_id", "turn_index", "gold_calls", "masked_arguments")
    present = {
        c
        for (c,) in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'rl_dataset'"
        ).fetchall()
    }
    if not set(names) <= present:
        return future, None
    rl = [
        {
            "refined_trajectory_id": r,
            "turn_index": t,
            "gold_calls": orjson.loads(g),
            "masked_arguments": orjson.loads(m) if m is not None else [],
        }
        for r, t, g, m in con.execute(f"SELECT {', '.join(names)} FROM current_rl_dataset ORDER BY id").fetchall()
    ]
    return future, gold_argument_figures({r["id"]: r["turns"] for r in refined}, rl)


def realism_figures(con: Any, refined: list[dict[str, Any]] | None) -> dict[str, dict[str, Any] | None]:
    """``{"values", "arguments", "links", "future_identifiers", "gold_arguments"}`` (see the functions above) for
    the store behind ``con``, ``refined`` being its passed refined trajectory rows (None: the store lacks the table)."""
    future, gold = turn_figures(con, refined)
    return {
        "values": value_figures(con),
        "arguments": argument_value_figures(con, refined),
        "links": link_figures(con),
        "future_identifiers": future,
        "gold_arguments": gold,
    }


def flat_realism_figures(figures: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """The scalar figures of :func:`realism_figures` as ``{"group: figure": value}``, in report order; a group
    the store lacks gives its scalar names with None (and no per-kind names)."""
    scalars = {
        "values": (
            "environments",
            "passed",
            "failed",
            "unknown",
            "share_passing",
            "timestamps_after_clock",
            "timestamps",
        ),
        "arguments": (
            "values",
            "covered",
            "unknown",
            "unknown_share",
            "share_passing",
            "random_words",
            "random_word_share",
            "placeholders",
            "wrong_kind",
        ),
        "links": (
            "chains",
            "multi_env_chains",
            "multi_env_share",
            "multi_env_with_shared_flow",
            "identifier_crossings",
            "flows",
            "cross_env_flows",
        ),
        "future_identifiers": ("turns", "turns_quoting_future_identifier", "share"),
        "gold_arguments": ("rl_rows", "gold_arguments", "masked", "unstated", "never_given", "never_given_share"),
    }
    labels = {
        "values": "seeded values",
        "arguments": "generated call arguments",
        "links": "topology chains",
        "future_identifiers": "kept turns",
        "gold_arguments": "RL gold arguments",
    }
    flat: dict[str, Any] = {}
    for group, names in scalars.items():
        got = figures.get(group)
        for name in names:
            flat[f"{labels[group]}: {name}"] = None if got is None else got[name]
        if group == "links" and got is not None:
            flat.update(
                {f"{labels[group]}: cross_env_flows of kind {k}": v for k, v in got["cross_env_flows_by_kind"].items()}
            )
        if group == "gold_arguments" and got is not None:
            flat.update({f"{labels[group]}: referred_to by {k}": v for k, v in got["referred_to"].items()})
    return flat


def open_old_store(path: str) -> Store:
    """The store at ``path`` for a comparison, checked readable without writing it.

    Raises:
        FileNotFoundError: nothing is at ``path``.
        ValueError: ``path`` is not a DuckDB file or holds none of the store's tables.
    """
    from pathlib import Path

    import duckdb

    where = Path(path)
    if not where.exists():
        raise FileNotFoundError(
            f"--compare {path}: no such file (expected a store, e.g. $ENVFACTORY_HOME/envfactory.duckdb)"
        )
    if where.is_dir():
        raise ValueError(f"--compare {path}: a folder, not a store (expected its envfactory.duckdb file)")
    store = Store(where)
    try:
        with store.connect(read_only=True) as con:
            known = [t for t in TABLES if has_table(con, f"current_{t}")]
    except duckdb.Error as exc:
        raise ValueError(f"--compare {path}: not a DuckDB store ({str(exc).splitlines()[0]})") from None
    if not known:
        raise ValueError(f"--compare {path}: a DuckDB file without any of the store's tables (not an envfactory store)")
    return store
