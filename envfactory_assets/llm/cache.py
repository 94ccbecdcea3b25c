"""A response cache in one SQLite file: identical requests are answered from disk, for free.

Keyed by :func:`~envfactory_assets.llm.base.request_key` (sha256 of the canonical request: model,
messages, parameters), so a re-run of the pipeline with the same inputs sends no request and gets the
same replies: reproducible and free.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from envfactory_assets.llm.base import BackendConfigError, Completion

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    role TEXT NOT NULL,
    request TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    created_at REAL NOT NULL
)
"""


class ResponseCache:
    """Thread-safe SQLite store of replies by request key.

    Args:
        path: the SQLite file (created with its parent folders if missing).

    Raises:
        BackendConfigError: ``path`` cannot be opened as a SQLite database.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise BackendConfigError(f"cache_path={str(path)!r} cannot be used as a SQLite cache: {exc}") from exc
        self._lock = threading.Lock()

    def get(self, key: str) -> Completion | None:
        """The cached reply of request ``key`` (``cached=True``), or None.

        An empty reply stored by an earlier version is a miss: served from the cache it would stay empty
        forever, while asking again may give a real answer.
        """
        with self._lock:
            row = self._db.execute(
                "SELECT text, prompt_tokens, completion_tokens FROM responses WHERE key = ? AND text != ''", (key,)
            ).fetchone()
        if row is None:
            return None
        return Completion(text=row[0], prompt_tokens=row[1], completion_tokens=row[2], cached=True)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return (
                self._db.execute("SELECT 1 FROM responses WHERE key = ? AND text != ''", (key,)).fetchone() is not None
            )

    def put(self, key: str, completion: Completion, *, model: str, role: str, request: str) -> bool:
        """Store ``completion`` under ``key`` (``request`` is the canonical request JSON, kept for audits).

        Returns:
            False, storing nothing, when ``completion.text`` is empty (an empty reply is not worth
            replaying: the next run asks again); True once stored.
        """
        if not completion.text:
            return False
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    model,
                    role,
                    request,
                    completion.text,
                    completion.prompt_tokens,
                    completion.completion_tokens,
                    time.time(),
                ),
            )
        return True

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()
