"""Queries behind the blocking asset checks (the verification gates), plain SQL over the store."""

from __future__ import annotations

from envfactory_assets.store.db import Store

# (table, SQL expression listing the environment ids a row depends on)
_ENV_REFERENCES = {
    "tool_graph_nodes": "SELECT id, env_id AS env FROM current_tool_graph_nodes",
    "tool_chains": "SELECT id, unnest(CAST(env_ids AS VARCHAR[])) AS env "
    "FROM current_tool_chains WHERE status = 'passed'",
    "raw_trajectories": "SELECT id, unnest(CAST(env_ids AS VARCHAR[])) AS env "
    "FROM current_raw_trajectories WHERE status = 'passed'",
    "refined_trajectories": "SELECT id, unnest(CAST(env_ids AS VARCHAR[])) AS env "
    "FROM current_refined_trajectories WHERE status = 'passed'",
    "sft_dataset": "SELECT id, unnest(CAST(env_ids AS VARCHAR[])) AS env FROM current_sft_dataset",
    "rl_dataset": "SELECT id, unnest(CAST(env_ids AS VARCHAR[])) AS env FROM current_rl_dataset",
}


def pass_rate(store: Store) -> tuple[float, int]:
    """``(share of current verified_environments rows with status passed, number of rows)``."""
    with store.connect() as con:
        n, passed = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE status = 'passed') FROM current_verified_environments"
        ).fetchone()
    return (passed / n if n else 0.0), n


def failed_environment_leaks(store: Store, tables: list[str] | None = None) -> list[str]:
    """Rows of later stages that use an environment without a current ``passed`` verification.

    Returns ``"table:id -> env_id"`` strings (empty when the gate holds).
    """
    leaks: list[str] = []
    with store.connect() as con:
        for table in tables or list(_ENV_REFERENCES):
            sql = (
                f"SELECT r.id, r.env FROM ({_ENV_REFERENCES[table]}) r "
                "WHERE r.env NOT IN (SELECT env_id FROM current_verified_environments WHERE status = 'passed') "
                "ORDER BY r.id LIMIT 100"
            )
            leaks += [f"{table}:{i} -> {e}" for i, e in con.execute(sql).fetchall()]
    return leaks


def passed_environment_ids(store: Store) -> dict[str, str]:
    """``{env_id: verified_environments.id}`` of every current environment that passed verification."""
    with store.connect() as con:
        rows = con.execute("SELECT env_id, id FROM current_verified_environments WHERE status = 'passed'").fetchall()
    return dict(rows)
