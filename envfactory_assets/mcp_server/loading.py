"""Read a servable environment from the store: the current ``verified_environments`` row with status
``passed`` for an env id, and the ``environments`` row it verified.

``serve-env`` reads it before it can answer ``initialize``, so this reads that environment's rows only, on
a read-only connection (several servers may read the store at once), and imports no more than DuckDB: the
catalogue (builders, verifier, curation) is imported only to name other environments in the error.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from envfactory_assets.envgen.environment_dict import as_environment
from envfactory_assets.store.db import Store, read_rows, sql_string

_KNOWN_SHOWN = 10


class EnvironmentNotServable(LookupError):
    """The env id is unknown to the store, or it has no passed verification; the message names the
    env id and lists some env ids that can be served."""

    def __init__(self, env_id: str, message: str) -> None:
        super().__init__(message)
        self.env_id = env_id


def _known_text(known: list[str], env_id: str) -> str:
    if not known:
        return "the store has no verified environment yet (materialize verified_environments first)"
    close = difflib.get_close_matches(env_id, known, n=_KNOWN_SHOWN, cutoff=0.5)
    if close:
        return f"nearest verified environments: {', '.join(close)} (envfactory environments lists all {len(known)})"
    more = f" and {len(known) - _KNOWN_SHOWN} more" if len(known) > _KNOWN_SHOWN else ""
    return (
        f"no verified environment has a close id; verified environments: {', '.join(known[:_KNOWN_SHOWN])}"
        f"{more} (envfactory environments lists them all)"
    )


def load_environment_from_store(store_path: Path | str, env_id: str) -> dict[str, Any]:
    """The Environment dict (docs/design.md) of ``env_id``, if the store holds a passed verification of it.

    Args:
        store_path: the DuckDB store (``settings.store_path()``).
        env_id: the environment's id, e.g. ``apideck_com__crm``.

    Raises:
        EnvironmentNotServable: ``env_id`` is unknown, was not built, failed verification, or its
            verified ``environments`` row is no longer current.
        FileNotFoundError: the store does not exist.
        StoreBusy: another process holds the store for writing.
    """
    store = Store(store_path)
    with store.connect(read_only=True) as con:
        # literals, not bound parameters: binding one makes DuckDB import pandas (see sql_string)
        passed = read_rows(con, "verified_environments", f"env_id = {sql_string(env_id)} AND status = 'passed'")
        if not passed:
            others = read_rows(con, "verified_environments", f"env_id = {sql_string(env_id)}")
            built = read_rows(con, "environments", f"env_id = {sql_string(env_id)}")
        else:
            # The environments row each passed verification checked; several can be current only in a store
            # written by hand, so take the newest verification whose environment row is still current.
            for verified in sorted(
                passed, key=lambda r: (r.get("written_at") is not None, r.get("written_at"), r["id"]), reverse=True
            ):
                rows = read_rows(con, "environments", f"id = {sql_string(verified['environment_id'])}")
                if rows and rows[0]["status"] == "built":
                    return as_environment(rows[0])
    if passed:
        raise EnvironmentNotServable(
            env_id,
            f"environment {env_id!r} passed verification, but the environments row it verified "
            f"({passed[0]['environment_id']}) is no longer current; re-materialize verified_environments",
        )
    from envfactory_assets.catalog import servable_env_ids  # the error path only: it imports the builders

    known = _known_text(servable_env_ids(store), env_id)
    if others:
        reasons = "; ".join(str(r) for row in others for r in (row["reasons"] or []))[:500]
        detail = f"it failed verification ({reasons})" if reasons else "it failed verification"
        raise EnvironmentNotServable(env_id, f"environment {env_id!r} is not verified: {detail}; {known}")
    if built:
        raise EnvironmentNotServable(
            env_id, f"environment {env_id!r} has not been verified (no verified_environments row); {known}"
        )
    raise EnvironmentNotServable(env_id, f"unknown environment {env_id!r}; {known}")
