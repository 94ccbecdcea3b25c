"""Partition keys of the per-environment stages: one per environment, from its stable resource key.

The key is the resource key (provider + API name, normalized by :func:`envfactory_assets.sources.names.
to_identifier`), never a content hash: editing a document keeps its partition and changes its data version.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

ENVIRONMENT_PARTITIONS = "environment"
PARTITION_KEY_RE = re.compile(r"^[a-z0-9_]{1,128}$")


def partition_key(resource_key: str) -> str:
    """The partition key of ``resource_key`` (the key itself, checked to be partition- and SQL-safe).

    Raises:
        ValueError: if ``resource_key`` has characters other than ``a-z``, ``0-9`` and ``_``, or is empty
            or longer than 128 characters.
    """
    if not isinstance(resource_key, str) or not PARTITION_KEY_RE.match(resource_key):
        raise ValueError(
            f"resource key {resource_key!r} is not a valid environment partition key "
            f"(expected {PARTITION_KEY_RE.pattern})"
        )
    return resource_key


def env_scope(keys: Iterable[str], column: str = "env_id") -> str:
    """An SQL predicate ``column IN ('k1', ...)`` for :meth:`Store.replace_current`'s ``scope``.

    Keys are validated with :func:`partition_key`, so quoting them inline is safe.
    """
    quoted = ", ".join(f"'{partition_key(k)}'" for k in sorted(set(keys)))
    return f"{column} IN ({quoted})" if quoted else "FALSE"
