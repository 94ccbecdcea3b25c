"""SQL models of ``dbt_like_sql/``: one ``.sql`` file = one view in the store.

Each file starts with ``-- depends_on: a, b`` naming the assets it reads; the model's name is the
file name without ``.sql``, its code version is the sha256 of its text.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from envfactory_assets.store.db import Store

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


def materialize_model(store: Store, model: SqlModel) -> int:
    """Create or replace the model's view in one transaction and return its row count."""
    with store.connect() as con:
        con.execute(f"CREATE OR REPLACE VIEW {model.name} AS {model.sql}")
        return con.execute(f"SELECT count(*) FROM {model.name}").fetchone()[0]
