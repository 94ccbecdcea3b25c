"""The DuckDB store: short, idempotent write transactions and read-only readers that retry.

DuckDB allows one read-write process or many read-only ones, never both; writers hold their
connection only for one transaction (never while computing); readers open it read-only, so they do
not block one another; both retry briefly, then name the process that holds the file (docs/design.md,
"Paper settings and measured facts").
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import orjson

from envfactory_assets.store.schema import (
    COMMON,
    JSON_COLUMNS,
    PASSED_STATUS,
    SAME_INPUT_COLUMN,
    TABLES,
    columns,
    ddl,
)

if TYPE_CHECKING:  # polars is imported where frames are made: readers (serve-env) do without it
    import polars as pl


class StoreBusy(RuntimeError):
    """Another process holds the store for writing; the message says what to do."""


def _holder(lock_error: str) -> str:
    """``"PID n: its command line"`` of the process DuckDB's lock error names (``"another process"`` when it
    names none; the command line only where ``/proc`` shows it)."""
    found = re.search(r"\(PID (\d+)\)", lock_error)
    if not found:
        return "another process"
    pid = found.group(1)
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        command = " ".join(" ".join(a.decode(errors="replace").split()) for a in argv if a)  # one line
    except OSError:
        command = ""
    return f"process {pid}" + (f" ({command[:200]})" if command else "")


def _busy_message(path: Path, lock_error: str, read_only: bool, waited_s: float) -> str:
    """What :class:`StoreBusy` says: who holds ``path``, how, and what to do."""
    holder = _holder(lock_error)
    # DuckDB adds the read-only hint only when the holder itself has the file read-only
    # (a read-only opener is refused only by a writer, so the hint never shows to one)
    if not read_only and "open this database in read-only mode" in lock_error:
        how = f"{holder} has it open for reading (a long read such as `envfactory report`)"
    else:
        how = f"{holder} has it open for writing (a run or another write is in progress)"
    return f"store {path} is busy: {how}; waited {waited_s:g} s. Try again when that process finishes."


class EmptyResultRefused(ValueError):
    """A write would replace a table's current passed rows with a version that has none; nothing was written."""


class RegressionRefused(EmptyResultRefused):
    """A write would turn passed rows into failed ones for inputs that did not change (only a setting did);
    nothing was written."""


def _dumps(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _existing_columns(con: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    existing: dict[str, set[str]] = {}
    for table, column in con.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'main'"
    ).fetchall():
        existing.setdefault(table, set()).add(column)
    return existing


def _schema_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the store on ``con`` has every table, column and ``current_`` view of the current schema."""
    existing = _existing_columns(con)
    wanted = {t: {c.split()[0] for c in cols + COMMON} for t, cols in TABLES.items()}
    return all(cols <= existing.get(t, set()) and f"current_{t}" in existing for t, cols in wanted.items())


def _ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create missing tables and views, and bring a store written by an older version up to the current
    schema: columns added since are created (NULL in old rows); nothing is dropped or rewritten.

    One catalog query when the schema is already current (the common case on every write connection).
    """
    if _schema_current(con):
        return
    for statement in ddl():
        con.execute(statement)
    existing = _existing_columns(con)
    for table, cols in TABLES.items():
        for col in cols:
            name, typ = col.split()[:2]
            if name not in existing[table]:
                con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {typ}")
    for statement in ddl():  # views again, so they show the added columns
        if statement.startswith("CREATE OR REPLACE VIEW"):
            con.execute(statement)


def sql_string(value: str) -> str:
    """``value`` as an SQL string literal (quotes doubled), for a ``where`` of :func:`read_rows` that must not
    bind Python parameters: binding the first one makes DuckDB import pandas, half a second that a short-lived
    reader (``serve-env``) would spend on nothing else.

    Raises:
        ValueError: ``value`` is not a string or holds a NUL character (no SQL string can).
    """
    if not isinstance(value, str) or "\x00" in value:
        raise ValueError(f"not a value for an SQL string literal: {value!r}")
    return "'" + value.replace("'", "''") + "'"


def read_rows(
    con: duckdb.DuckDBPyConnection, table: str, where: str = "", params: list[Any] | None = None, current: bool = True
) -> list[dict[str, Any]]:
    """Rows of ``table`` on an open connection, as :meth:`Store.read` returns them (JSON columns decoded,
    ordered by id), with the columns the store has: on a read-only connection to a store written by an older
    version, columns added since are absent and a table added since gives ``[]`` (nothing is migrated).

    Raises:
        KeyError: for a table the store schema does not have.
    """
    columns(table)
    source = f"current_{table}" if current else table
    if not con.execute(
        f"SELECT count(*) FROM information_schema.tables WHERE table_name = {sql_string(source)}"
    ).fetchone()[0]:
        return []
    cur = con.execute(f"SELECT * FROM {source}" + (f" WHERE {where}" if where else "") + " ORDER BY id", params or [])
    names = [d[0] for d in cur.description]
    json_cols = JSON_COLUMNS[table]
    return [
        {n: (orjson.loads(v) if n in json_cols and v is not None else v) for n, v in zip(names, row, strict=False)}
        for row in cur.fetchall()
    ]


class Store:
    """A DuckDB file holding every stage's rows.

    Args:
        path: the database file; parent folders are created on first write.
        retry_seconds: how long readers and writers wait for a lock held by another process.
        refuse_empty: refuse a write that would supersede a table's current passed rows with a version
            that has none (see :meth:`replace_current_tables`); the pipeline's stores turn it on.
        override_hint: the setting that turns the refusal off, named in its message.
        refuse_regression: refuse a write in which an item whose input is unchanged
            (:data:`~envfactory_assets.store.schema.SAME_INPUT_COLUMN`) goes from passed to not passed, even
            when other items still pass; the pipeline's stores turn it on.
        regression_hint: the setting that turns that refusal off, named in its message.
    """

    def __init__(
        self,
        path: Path | str,
        retry_seconds: float = 10.0,
        refuse_empty: bool = False,
        override_hint: str = "refuse_empty=False on the Store",
        refuse_regression: bool = False,
        regression_hint: str = "refuse_regression=False on the Store",
    ) -> None:
        self.path = Path(path)
        self.retry_seconds = retry_seconds
        self.refuse_empty = refuse_empty
        self.override_hint = override_hint
        self.refuse_regression = refuse_regression
        self.regression_hint = regression_hint

    def _require_exists(self) -> None:
        if not self.path.exists():
            raise FileNotFoundError(f"store {self.path} does not exist yet: run `envfactory run` first")

    @contextlib.contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection, retried for ``retry_seconds`` while another connection stands in its way.

        DuckDB lets one process hold the file read-write, or any number of processes hold it read-only,
        never both; inside one process every connection must have the same mode. So a read-only
        connection waits while another process writes, a read-write one while another process reads or
        writes. A read-only connection asked for in a process that already holds the file read-write
        shares that connection's database instead (the same process's writer cannot conflict with it).

        Raises:
            StoreBusy: when the file is still held after ``retry_seconds``; the message names the process
                that holds it (its PID and command line, as DuckDB's lock error and ``/proc`` give them).
            FileNotFoundError: for a read-only connection to a store not created yet.
        """
        if read_only:
            self._require_exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.retry_seconds
        mode = read_only
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=mode)
                break
            except duckdb.ConnectionException as exc:
                if "different configuration" not in str(exc):
                    raise
                if read_only and mode:  # this process holds it read-write: read through that instance
                    mode = False
                    continue
                if time.monotonic() > deadline:  # a read-only connection of this process is still open
                    raise StoreBusy(
                        f"store {self.path} is open read-only elsewhere in this process (PID {os.getpid()}); "
                        "a write waited "
                        f"{self.retry_seconds:g} s for it to close"
                    ) from exc
                time.sleep(0.2)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise
                if time.monotonic() > deadline:
                    raise StoreBusy(_busy_message(self.path, str(exc), read_only, self.retry_seconds)) from exc
                time.sleep(0.2)
        try:
            if not mode:
                _ensure_schema(con)
            yield con
        finally:
            con.close()

    def replace_current(
        self, table: str, rows: list[dict[str, Any]], scope: str | None = None, *, settings_note: str = ""
    ) -> dict[str, int]:
        """Make ``rows`` the current version of ``table`` in one transaction.

        New ids are inserted, ids already stored are kept as they are (idempotent: re-running adds
        nothing), and current rows not in ``rows`` are marked superseded, never deleted, so older
        lineage stays walkable. ``scope`` is an optional SQL predicate limiting which current rows
        may be superseded (for example one environment's rows).

        Returns:
            ``{"inserted": n, "kept": n, "superseded": n}``.

        Raises:
            ValueError: if a row lacks a column of the table or has an unknown one, or ids repeat.
            EmptyResultRefused: see :meth:`replace_current_tables`.
        """
        return self.replace_current_tables({table: rows}, scope, settings_note=settings_note)[table]

    def append(self, table: str, rows: list[dict[str, Any]]) -> dict[str, int]:
        """Add ``rows`` to ``table`` in one transaction without superseding any stored row (a log such as
        ``stage_times``, where earlier rows stay current); ids already stored are kept as they are.

        Returns and raises as :meth:`replace_current`.
        """
        return self.replace_current_tables({table: rows}, scope="FALSE")[table]

    def replace_current_tables(
        self, tables: Mapping[str, list[dict[str, Any]]], scope: str | None = None, *, settings_note: str = ""
    ) -> dict[str, dict[str, int]]:
        """:meth:`replace_current` for several tables in one transaction: all are written, or none.

        With ``refuse_empty``, a table of :data:`~envfactory_assets.store.schema.PASSED_STATUS` whose new rows
        hold no passed row (none at all, or all failed) while the current rows it would supersede do hold
        passed ones is refused, before any table is written. With ``refuse_regression``, so is a table in
        which any item whose input is unchanged would go from passed to not passed (``settings_note``, the
        writer's settings that differ from their defaults, goes into that message).

        Returns:
            ``{table: {"inserted": n, "kept": n, "superseded": n}}``.

        Raises:
            ValueError: a row lacks a column of its table or has an unknown one, or ids repeat.
            EmptyResultRefused: the guard above; the message names the table, both counts and the setting
                that accepts such a result.
            RegressionRefused: the regression guard; the message says how many items, which, the settings
                note and the setting that accepts it.
        """
        frames = {table: self._frame(table, rows) for table, rows in tables.items()}
        out: dict[str, dict[str, int]] = {}
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                if self.refuse_empty:
                    for table, rows in tables.items():
                        problem = self._empty_result_problem(con, table, rows, scope)
                        if problem:
                            raise EmptyResultRefused(problem)
                if self.refuse_regression:
                    for table, rows in tables.items():
                        problem = self._regression_problem(con, table, rows, scope, settings_note)
                        if problem:
                            raise RegressionRefused(problem)
                for table, rows in tables.items():
                    out[table] = self._write(con, table, len(rows), frames[table], scope)
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
        return out

    @staticmethod
    def _frame(table: str, rows: list[dict[str, Any]]) -> pl.DataFrame | None:
        cols = columns(table)
        ids = [r.get("id") for r in rows]
        if len(set(ids)) != len(ids) or any(not isinstance(i, str) for i in ids):
            raise ValueError(f"{table}: every row needs a unique string id")
        for row in rows:
            if set(row) != set(cols):
                missing, extra = set(cols) - set(row), set(row) - set(cols)
                raise ValueError(f"{table}: row {row.get('id')} missing {sorted(missing)} extra {sorted(extra)}")
        import polars as pl

        json_cols = JSON_COLUMNS[table]
        return (
            pl.DataFrame(
                {c: [(_dumps(r[c]) if c in json_cols else r[c]) for r in rows] for c in cols},
                strict=False,
            )
            if rows
            else None
        )

    def _empty_result_problem(
        self, con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]], scope: str | None
    ) -> str | None:
        if table not in PASSED_STATUS:
            return None
        status = PASSED_STATUS[table]
        if any(status is None or r.get("status") == status for r in rows):
            return None
        where = "NOT superseded" + (f" AND ({scope})" if scope else "") + (" AND status = ?" if status else "")
        current = {
            i for (i,) in con.execute(f"SELECT id FROM {table} WHERE {where}", [status] if status else []).fetchall()
        }
        current -= {r["id"] for r in rows}  # a stored id that comes again is kept as it is
        input_column = SAME_INPUT_COLUMN.get(table)
        if input_column and current:
            inputs = sorted({str(r.get(input_column)) for r in rows})
            marks = ", ".join("?" * len(inputs))
            current = (
                {
                    i
                    for (i,) in con.execute(
                        f"SELECT id FROM {table} WHERE id IN ({', '.join('?' * len(current))}) "
                        f"AND {input_column} IN ({marks})",
                        [*sorted(current), *inputs],
                    ).fetchall()
                }
                if inputs
                else set()
            )
        at_risk = len(current)
        if not at_risk:
            return None
        kind = f"{status} " if status else ""
        if not rows:
            new = "is empty"
        else:
            counts = Counter(str(r.get("status")) for r in rows)
            new = f"has {len(rows)} rows, none {status} ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})"
        return (
            f"refusing to write {table}: the new result {new}, and writing it would supersede the {at_risk} "
            f"{kind}rows currently stored. A result like this usually comes from a setting that leaves nothing "
            f"to keep; check the stage's settings, or set {self.override_hint} to accept it."
        )

    def _regression_problem(
        self,
        con: duckdb.DuckDBPyConnection,
        table: str,
        rows: list[dict[str, Any]],
        scope: str | None,
        settings_note: str,
    ) -> str | None:
        """Why writing ``rows`` would turn unchanged items from passed to not passed, or None."""
        status, input_column = PASSED_STATUS.get(table), SAME_INPUT_COLUMN.get(table)
        if status is None or input_column is None:
            return None
        failing = {str(r.get(input_column)): r for r in rows if r.get("status") != status}
        if not failing:
            return None
        where = "NOT superseded AND status = ?" + (f" AND ({scope})" if scope else "")
        passed = con.execute(f"SELECT id, {input_column} FROM {table} WHERE {where}", [status]).fetchall()
        new_ids = {r["id"] for r in rows}
        regressed = sorted({str(item) for row_id, item in passed if row_id not in new_ids and str(item) in failing})
        if not regressed:
            return None
        names = [str(failing[item].get("env_id") or item) for item in regressed]
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        statuses = Counter(str(failing[item].get("status")) for item in regressed)
        now = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
        changed = (
            f" Settings that differ from their defaults: {settings_note}."
            if settings_note
            else (" No setting differs from its default.")
        )
        return (
            f"refusing to write {table}: {len(regressed)} of the {len(passed)} {status} items whose input "
            f"({input_column}) is unchanged would no longer be {status} ({now}): {shown}. Only the settings or "
            f"the code changed for them, so nothing was written.{changed} Check those settings, or set "
            f"{self.regression_hint} to accept the result."
        )

    @staticmethod
    def _write(
        con: duckdb.DuckDBPyConnection, table: str, n_rows: int, frame: pl.DataFrame | None, scope: str | None
    ) -> dict[str, int]:
        cols = columns(table)
        json_cols = JSON_COLUMNS[table]
        before = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if frame is not None:
            con.register("incoming", frame.to_arrow())
            col_list = ", ".join(cols)
            select = ", ".join(f"CAST({c} AS JSON)" if c in json_cols else c for c in cols)
            con.execute(f"INSERT INTO {table} ({col_list}) SELECT {select} FROM incoming ON CONFLICT DO NOTHING")
            con.execute(f"UPDATE {table} SET superseded = FALSE WHERE id IN (SELECT id FROM incoming)")
        after = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        where = f"NOT superseded AND ({scope})" if scope else "NOT superseded"
        id_filter = "id NOT IN (SELECT id FROM incoming)" if frame is not None else "TRUE"
        superseded = con.execute(f"UPDATE {table} SET superseded = TRUE WHERE {where} AND {id_filter}").fetchone()[0]
        if frame is not None:
            con.unregister("incoming")
        return {"inserted": after - before, "kept": n_rows - (after - before), "superseded": int(superseded)}

    def read(
        self, table: str, where: str = "", params: list[Any] | None = None, current: bool = True
    ) -> list[dict[str, Any]]:
        """Rows of ``table`` as dicts with JSON columns decoded; only current rows unless ``current=False``.

        ``where`` is an SQL predicate with ``?`` placeholders bound from ``params``.

        Opens the store read-only, so readers in other processes neither wait for nor block one another; only
        a store written by an older version is opened read-write once, to add what the schema gained since.

        Raises:
            FileNotFoundError: if the store does not exist yet (a reader never creates it).
            StoreBusy: another process holds the store for writing past ``retry_seconds``.
        """
        columns(table)
        self._require_exists()
        with self.connect(read_only=True) as con:  # read-only: readers in other processes do not block it
            if _schema_current(con):
                return read_rows(con, table, where, params, current)
        # a store written by an older version: a read-write connection brings it up to the schema first
        with self.connect(read_only=False) as con:
            return read_rows(con, table, where, params, current)

    def query(self, sql: str, params: list[Any] | None = None) -> pl.DataFrame:
        """Run a read query and return a polars DataFrame (opens the store read-only)."""
        with self.connect(read_only=True) as con:
            return con.execute(sql, params or []).pl()

    def counts(self) -> dict[str, int]:
        """Current row count of every table (0 for tables not written yet)."""
        from envfactory_assets.store.schema import TABLES

        if not self.path.exists():
            raise FileNotFoundError(f"store {self.path} does not exist yet: run `envfactory run` first")
        with self.connect(read_only=True) as con:
            present = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            return {
                t: (con.execute(f"SELECT count(*) FROM current_{t}").fetchone()[0] if f"current_{t}" in present else 0)
                for t in TABLES
            }
