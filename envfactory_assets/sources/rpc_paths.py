"""Which paths of an OpenAPI document are RPC paths: one path per operation, the operation named in the fragment
(``/#X-Amz-Target=Service_20191201.CreateConnection``, ``/#Action=CreateGroup``). Kept apart from
:mod:`.rpc`, which groups their operations with :mod:`.openapi`'s readers, so that :mod:`.openapi` and
:mod:`.coverage` can tell these paths from collections without importing it."""

from __future__ import annotations

import re
from typing import Any

from envfactory_assets.sources.actions import action_verb

#: the query parameter or header that names the operation in a path's fragment (``/#Action=CreateGroup``)
RPC_KEYS = ("X-Amz-Target", "Action")
_RPC_PATH = re.compile(r"^/?#(?P<key>[A-Za-z][A-Za-z0-9-]*)=(?P<name>[A-Za-z0-9_.:-]+)$")
_OPERATION_NAME = re.compile(r"^[A-Z][A-Za-z0-9]+$")
#: a path whose last segment is an operation's name, a verb and what it acts on (``/createAccountHolder``,
#: ``/2015-01-01/DeleteJob``), with no path parameter: the operation is named in the path itself
_NAMED_PATH = re.compile(r"^(?:/[A-Za-z0-9._-]+)*/(?P<verb>[A-Za-z][a-z]+)(?P<noun>[A-Z][A-Za-z0-9]*)/?$")
#: first words of an operation named in its path: the verbs the RPC grouping gives a kind; any other first word
#: is a collection named in camelCase (``/paymentMethods``, ``/sourceAccounts``), not an operation
_PATH_VERBS = frozenset({"create", "get", "describe", "list", "update", "modify", "delete"})


def rpc_operation_name(path: Any, paths: Any = None) -> str | None:
    """The operation an RPC path names (``/#X-Amz-Target=Svc_20191201.CreateConnection`` -> ``CreateConnection``,
    ``/#Action=CreateGroup`` -> ``CreateGroup``, ``/createAccountHolder`` -> ``CreateAccountHolder``), or None for
    any other path (the fragment's key must be one of :data:`RPC_KEYS` and the name a CamelCase word; a name in
    the path itself must start with a verb the grouping knows and end the path).

    ``paths``: the document's paths, when the caller has them: a name in the path that another path extends
    (``/UpdateGroups`` beside ``/UpdateGroups/{ID}``) is a collection, not an operation."""
    if not isinstance(path, str):
        return None
    named = _NAMED_PATH.match(path)
    if named is not None:
        stem = path.rstrip("/") + "/"
        if isinstance(paths, dict) and any(isinstance(p, str) and p.startswith(stem) for p in paths):
            return None
        verb = named.group("verb").lower()
        if verb in _PATH_VERBS or action_verb(verb) == verb:
            return verb.capitalize() + named.group("noun")
        return None
    m = _RPC_PATH.match(path)
    if m is None or m.group("key") not in RPC_KEYS:
        return None
    name = m.group("name").rsplit(".", 1)[-1]
    return name if _OPERATION_NAME.match(name) else None
