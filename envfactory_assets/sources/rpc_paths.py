"""Which paths of an OpenAPI document are RPC paths: one path per operation, the operation named in the fragment
(``/#X-Amz-Target=Service_20191201.CreateConnection``, ``/#Action=CreateGroup``). Kept apart from
:mod:`.rpc`, which groups their operations with :mod:`.openapi`'s readers, so that :mod:`.openapi` and
:mod:`.coverage` can tell these paths from collections without importing it."""

from __future__ import annotations

import re
from typing import Any

#: the query parameter or header that names the operation in a path's fragment (``/#Action=CreateGroup``)
RPC_KEYS = ("X-Amz-Target", "Action")
_RPC_PATH = re.compile(r"^/?#(?P<key>[A-Za-z][A-Za-z0-9-]*)=(?P<name>[A-Za-z0-9_.:-]+)$")
_OPERATION_NAME = re.compile(r"^[A-Z][A-Za-z0-9]+$")


def rpc_operation_name(path: Any) -> str | None:
    """The operation an RPC path names (``/#X-Amz-Target=Svc_20191201.CreateConnection`` -> ``CreateConnection``,
    ``/#Action=CreateGroup`` -> ``CreateGroup``), or None for any other path (the fragment's key must be one of
    :data:`RPC_KEYS` and the name a CamelCase word)."""
    if not isinstance(path, str):
        return None
    m = _RPC_PATH.match(path)
    if m is None or m.group("key") not in RPC_KEYS:
        return None
    name = m.group("name").rsplit(".", 1)[-1]
    return name if _OPERATION_NAME.match(name) else None
