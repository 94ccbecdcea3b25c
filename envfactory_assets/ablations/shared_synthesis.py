"""An arm's store seeded from another arm's finished synthesis (:attr:`~envfactory_assets.ablations.plan.Arm.
shares_synthesis_of`): the source store is checkpointed (its write-ahead log folded into the file) and copied
whole into the arm's home, which then runs only the datasets step over it."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from envfactory_assets import settings


def copy_store(source_home: Path, home: Path) -> Path:
    """Replace the store of ``home`` with a copy of the store of ``source_home``; returns the new store's path.

    The source is opened once to ``CHECKPOINT`` (DuckDB writes any write-ahead log into the database file), then
    copied to a temporary file in ``home`` and renamed over the old store, so a copy stopped midway leaves the
    old store whole (it is checkpointed too, so its write-ahead log, which replayed onto another file would
    corrupt it, is empty and can go). No other process may write either store meanwhile (the ablation steps
    share one pool).

    Raises:
        FileNotFoundError: ``source_home`` has no store.
        OSError: a file cannot be read or written (disk full, permissions).
    """
    import duckdb

    source = settings.store_path(source_home)
    if not source.is_file():
        raise FileNotFoundError(f"no store to share at {source}: the arm whose synthesis is shared has not run")
    target = settings.store_path(home)
    for store in (source, target) if target.is_file() else (source,):
        with duckdb.connect(str(store)) as con:
            con.execute("CHECKPOINT")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".copy")
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        Path(f"{target}.wal").unlink(missing_ok=True)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
