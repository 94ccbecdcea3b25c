"""SQL models of ``dbt_like_sql/``: one ``.sql`` file = one view in the store.

Each file starts with ``-- depends_on: a, b`` naming the assets it reads; the model's name is the
file name without ``.sql``, its code version is the sha256 of its text.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from envfactory_assets.store.db import Store

_log = logging.getLogger(__name__)
SQL_DIR = Path(__file__).resolve().parents[2] / "dbt_like_sql"
_DEPENDS = re.compile(r"^--\s*depends_on:\s*(.+)$", re.MULTILINE)
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class SqlModel:
    """One SQL model: ``name`` (view name), ``layer`` (sub-folder), ``sql``, ``depends_on``, ``code_version``."""

    name: str
    layer: str
    sql: str
    depends_on: tuple[str, ...]

    @property
    def code_version(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]


def load_models(sql_dir: Path = SQL_DIR) -> list[SqlModel]:
    """Every model under ``sql_dir``, sorted by name.

    Raises:
        ValueError: for a file name that is not a valid view name or a file without ``-- depends_on:``.
    """
    models = []
    for path in sorted(sql_dir.rglob("*.sql")):
        if not _NAME.match(path.stem):
            raise ValueError(f"{path}: model names must be lower_snake_case")
        text = path.read_text()
        match = _DEPENDS.search(text)
        if not match:
            raise ValueError(f"{path}: first line must be '-- depends_on: <assets>'")
        deps = tuple(d.strip() for d in match.group(1).split(",") if d.strip())
        models.append(SqlModel(path.stem, path.parent.name, text.strip().rstrip(";"), deps))
    return models


@dataclass(frozen=True)
class MaterializedModel:
    """A model's view after :func:`materialize_model`: its row count and its first ``preview`` rows."""

    rows: int
    preview: pl.DataFrame


def materialize_model(
    store: Store,
    model: SqlModel,
    progress: Callable[[int], None] | None = None,
    preview_rows: int = 20,
    progress_after_s: float = 2.0,
) -> MaterializedModel:
    """Create or replace the model's view, then compute it once for its row count and preview.

    The view is computed into a temporary table, so counting and previewing cost one evaluation of the SQL
    (a view over every refined turn takes a minute on the default run). ``progress(percent)`` (0-100, never
    lower than the call before) gets 0 as the evaluation starts, then DuckDB's own estimate of it
    (``query_progress``), polled twice a second once it has run for ``progress_after_s`` seconds, and 100 at
    its end; a quicker query gets only the 0, as DuckDB's own bar waits 2 s before it shows.

    Raises:
        duckdb.Error: the model's SQL fails (the previous view is left as it was).
    """
    with store.connect() as con:
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(f"CREATE OR REPLACE VIEW {model.name} AS {model.sql}")
            with _query_progress(con, progress, progress_after_s):
                con.execute(f"CREATE OR REPLACE TEMP TABLE _model_rows AS SELECT * FROM {model.name}")
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        rows = con.execute("SELECT count(*) FROM _model_rows").fetchone()[0]
        preview = con.execute(f"SELECT * FROM _model_rows LIMIT {int(preview_rows)}").pl()
        con.execute("DROP TABLE _model_rows")
    return MaterializedModel(rows, preview)


@contextlib.contextmanager
def _query_progress(
    con: duckdb.DuckDBPyConnection, progress: Callable[[int], None] | None, after_s: float, poll_s: float = 0.5
) -> Iterator[None]:
    """Around one statement on ``con``: report DuckDB's progress estimate of it to ``progress`` (see
    :func:`materialize_model`) from a thread, the way DuckDB's own progress bar reads it. A ``progress`` that
    raises is not called again (a bar must never fail the query it draws)."""
    if progress is None:
        yield
        return
    con.execute("SET enable_progress_bar = true")  # DuckDB tracks progress only with its bar enabled
    con.execute("SET enable_progress_bar_print = false")  # ... and must not draw it on our terminal
    stopping, started, reported, broken = threading.Event(), time.monotonic(), [-1], threading.Event()

    def tell(percent: int) -> None:
        if broken.is_set():
            return
        try:
            progress(percent)
        except Exception as exc:  # noqa: BLE001 - any failure of the caller's sink stops the reports only
            broken.set()
            _log.warning("SQL progress reports stopped: %s: %s", type(exc).__name__, exc)

    def poll() -> None:
        while not stopping.wait(poll_s):
            if time.monotonic() - started < after_s:
                continue
            percent = min(int(con.query_progress()), 99)  # -1 while no query runs; 100 once it returned
            if percent > reported[0]:
                reported[0] = percent
                tell(percent)

    tell(0)  # the query starts now: a meter made here times its rate from the start, and 0 draws no bar
    thread = threading.Thread(target=poll, daemon=True, name="envfactory-sql-progress")
    thread.start()
    try:
        yield
    finally:
        stopping.set()
        thread.join()
    if reported[0] >= 0:
        tell(100)
