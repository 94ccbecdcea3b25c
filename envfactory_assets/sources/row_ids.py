"""Ids of the sources' rows."""

from __future__ import annotations

from typing import Any

from envfactory_assets.store.ids import content_id


def source_row_id(row: dict[str, Any]) -> str:
    """The id of an accepted ``source_resources`` row: a content id (``src_`` + 16 hex digits) of the whole row
    but ``corpus_root`` (where the corpus lies on this machine) and ``id``, so it covers what the rules read from
    the document (its resources, operations by kind, domain), not only its key and bytes: the store keeps a
    stored id's row as it is, so a re-run whose rules read a document differently makes a new row."""
    return content_id("src", {k: v for k, v in row.items() if k not in ("corpus_root", "id")})
