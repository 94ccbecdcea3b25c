"""Adding a document to the user folder, and the partition key it is stored under.

A document's partition key is its resource key (:func:`~envfactory_assets.sources.scan.resource_key_for`:
``x-providerName`` and ``x-serviceName`` of an OpenAPI document's ``info``, the file path only when they are
absent; an MCP tool list's server name), never its file name, so ``my_api.json`` may well be stored as
``acme__billing``. Adding checks the document exactly as ``source_resources`` will (the same reader, the same
duplicate-key rule within the user folder) and names its key; :func:`file_named_partition` turns a
``--partition`` that names a file into the key that file has.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from envfactory_assets.sources.resource_kinds import user_folder_rows
from envfactory_assets.sources.scan import DEFAULT_MAX_BYTES, DOCUMENT_SUFFIXES


class DocumentRefused(ValueError):
    """The document would be rejected by ``source_resources``; nothing was added (the message says why)."""


@dataclass(frozen=True)
class AddedDocument:
    """Where the document went (``path``), the partition key it is stored under (``key``), the provider and
    service the key was made from, and whether it replaced a file of the same name (``replaced``)."""

    path: Path
    key: str
    provider: str
    service: str
    replaced: bool


def add_user_document(source: Path, folder: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> AddedDocument:
    """Copy ``source`` into the user folder ``folder`` (created if missing) and return its partition key.

    A file of the same name is replaced (editing a document keeps its key); if the new document is refused, the
    earlier file is put back.

    Raises:
        FileNotFoundError: ``source`` is not a file.
        DocumentRefused: ``source`` does not end in .json, .yaml or .yml, or ``source_resources`` would reject it
            (unparseable, neither an OpenAPI 3 document nor an MCP tool list, too large, or its key is already
            the key of another file in the folder); the message carries the rejection's detail.
    """
    source = Path(source)
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no such file")
    if source.suffix.lower() not in DOCUMENT_SUFFIXES:
        raise DocumentRefused(f"{source}: a document must end in {', '.join(DOCUMENT_SUFFIXES)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / source.name
    before = {r["path"]: r["resource_key"] for r in user_folder_rows(folder, max_bytes=max_bytes)[0]}
    replaced = dest.exists()
    backup = dest.with_name(f".{dest.name}.previous") if replaced else None
    if backup is not None:
        shutil.copy2(dest, backup)
    try:
        if not (replaced and dest.resolve() == source.resolve()):
            shutil.copyfile(source, dest)
        accepted, rejected = user_folder_rows(folder, max_bytes=max_bytes)
        rel = dest.relative_to(folder).as_posix()
        mine = next((r for r in accepted if r["path"] == rel), None)
        if mine is None:
            why = next((r for r in rejected if r["path"] == rel), None)
            detail = f"{why['reason']}: {why['detail']}" if why else "not accepted"
            raise DocumentRefused(f"{source} was not added: source_resources would reject it ({detail})")
        # the scan keeps the first file of a key in name order: a new one may come first and push an older out
        taken = sorted(p for p, k in before.items() if k == mine["resource_key"] and p != rel)
        if taken:
            raise DocumentRefused(
                f"{source} was not added: source_resources would reject it (duplicate_key: its partition key "
                f"{mine['resource_key']} is already the key of {taken[0]} in the user folder; edit that file instead)"
            )
    except BaseException:
        if backup is not None:
            shutil.move(backup, dest)
        else:
            dest.unlink(missing_ok=True)
        raise
    if backup is not None:
        backup.unlink(missing_ok=True)
    return AddedDocument(dest, mine["resource_key"], mine.get("provider") or "", mine.get("service") or "", replaced)


def document_keys(rows: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """``{document path: partition key}`` of ``source_resources`` rows (``path``, ``resource_key``)."""
    return {str(r["path"]): str(r["resource_key"]) for r in rows if r.get("path") and r.get("resource_key")}


def file_named_partition(value: str, keys: Mapping[str, str]) -> str | None:
    """When ``value`` (a ``--partition`` entry) is no partition key but names a document in ``keys``
    (``{document path: key}``) by its file name, with or without its suffix, the sentence saying which key
    that file has; otherwise None."""
    if value in set(keys.values()):
        return None
    for path, key in sorted(keys.items()):
        name = PurePosixPath(path).name
        if value in (name, PurePosixPath(name).stem, path):
            return (
                f"--partition {value} names the file {path}, not a partition key: its partition key is {key} "
                f"(from the document's x-providerName/x-serviceName, not its file name); use --partition {key}"
            )
    return None
