"""Row counts of the store's stages as ``envfactory report`` and the README state them.

A stage keeps the rows it rejected (status ``failed``, with reasons) and ``tool_chains`` also keeps the
comparison sampler's chains (``baseline_chains``, for the mart ``sampler_comparison`` only), while the next
stage reads only the passed rows of the main sampler. The figure a reader compares with the report is that
one; :func:`stage_counts` gives it with the other rows beside it, from the same queries the report's tables
are made of (:func:`status_counts`, :func:`chain_counts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envfactory_assets.reporting.realism import has_table
from envfactory_assets.store.schema import PASSED_STATUS, TABLES


def status_counts(con: Any, table: str) -> list[tuple[str, int]]:
    """``[(status, rows)]`` of the current rows of ``table`` (a store table with a ``status`` column), by status.

    Raises:
        KeyError: ``table`` is not a table of the store schema.
    """
    if table not in TABLES:
        raise KeyError(f"no store table {table!r}")
    return con.execute(f"SELECT status, count(*) FROM current_{table} GROUP BY 1 ORDER BY 1").fetchall()


def chain_counts(con: Any) -> list[tuple[str, str, int, float, float]]:
    """``[(sampler, status, chains, mean tools, mean servers)]`` of the current ``tool_chains`` rows, the
    report's "Tool chains" table."""
    return con.execute(
        "SELECT sampler, status, count(*), round(avg(n_tools), 2), round(avg(n_servers), 2) "
        "FROM current_tool_chains GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall()


def main_sampler(con: Any) -> str:
    """The sampler whose chains the current raw trajectories were executed from (``raw_trajectories.sampler``
    of the run); before any trajectory exists, the default one
    (:data:`~envfactory_assets.synth.run_settings.DEFAULT_SAMPLER`)."""
    if has_table(con, "current_raw_trajectories") and has_table(con, "current_tool_chains"):
        row = con.execute(
            "SELECT c.sampler FROM current_raw_trajectories r JOIN current_tool_chains c ON c.id = r.tool_chain_id "
            "GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"
        ).fetchone()
        if row:
            return row[0]
    from envfactory_assets.synth.run_settings import DEFAULT_SAMPLER

    return DEFAULT_SAMPLER


@dataclass(frozen=True)
class StageCount:
    """The current rows of one store table.

    ``kept`` rows are those the next stage reads: of status ``kept_status``
    (:data:`~envfactory_assets.store.schema.PASSED_STATUS`) and, for ``tool_chains``, of the main sampler; a
    table without a status keeps all its ``rows``. ``rows`` counts the main sampler's rows only;
    ``baseline`` the other sampler's chains (``baseline_sampler``), 0 elsewhere.
    """

    table: str
    kept: int
    rows: int
    kept_status: str | None = None
    baseline: int = 0
    baseline_sampler: str | None = None

    def text(self) -> str:
        """``"2761 passed of 2990"``, ``"3000 (+100 random-walk baseline)"`` or ``"1760"``: the kept rows first,
        the rest named beside them."""
        out = str(self.kept) if self.kept == self.rows else f"{self.kept} {self.kept_status} of {self.rows}"
        if self.baseline:
            out += f" (+{self.baseline} {(self.baseline_sampler or 'other').replace('_', '-')} baseline)"
        return out


def stage_counts(con: Any) -> list[StageCount]:
    """A :class:`StageCount` of every store table in schema order, on a connection to the store (read-only is
    enough); a table the store predates counts 0."""
    out = []
    for table in TABLES:
        status = PASSED_STATUS.get(table)
        if not has_table(con, f"current_{table}"):
            out.append(StageCount(table, 0, 0, status))
        elif table == "tool_chains":
            main = main_sampler(con)
            chains = chain_counts(con)
            mine = [(s, n) for sampler, s, n, _tools, _servers in chains if sampler == main]
            others = {sampler for sampler, *_ in chains if sampler != main}
            out.append(
                StageCount(
                    table,
                    sum(n for s, n in mine if s == status),
                    sum(n for _s, n in mine),
                    status,
                    sum(n for sampler, _s, n, *_ in chains if sampler != main),
                    ", ".join(sorted(others)) or None,
                )
            )
        elif status is not None:
            by_status = dict(status_counts(con, table))
            out.append(StageCount(table, by_status.get(status, 0), sum(by_status.values()), status))
        else:
            n = con.execute(f"SELECT count(*) FROM current_{table}").fetchone()[0]
            out.append(StageCount(table, n, n))
    return out
