"""Content-hash ids: the same content always gets the same id, so writes are idempotent."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

ID_HEX_CHARS = 16


def content_id(kind: str, content: Any) -> str:
    """``"{kind}_{16 hex}"``: sha256 of the canonical JSON (sorted keys) of ``content``.

    Raises:
        TypeError: if ``content`` is not JSON-serializable.
    """
    digest = hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"{kind}_{digest[:ID_HEX_CHARS]}"
