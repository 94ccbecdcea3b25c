"""Adding a document to the user folder, and the partition key it is stored under.

A document's partition key is its resource key (:func:`~envfactory_assets.sources.scan.resource_key_for`:
``x-providerName`` and ``x-serviceName`` of an OpenAPI document's ``info``, the file path only when they are
absent; an MCP tool list's server name), never its file name, so ``my_api.json`` may well be stored as
``acme__billing``. Adding checks the document with the reader ``source_resources`` uses and the same
duplicate-key rule: against the other files of the user folder and against the keys the caller passes as taken
(the corpus and MCP keys; the CLI takes them from the store's ``source_resources``, since scanning the whole
corpus again would take minutes, so a key new to the corpus since the last run is not seen). It names the key;
:func:`file_named_partition` turns a ``--partition`` that names a file into the key that file has.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from envfactory_assets.sources.resource_kinds import user_folder_rows
from envfactory_assets.sources.scan import DEFAULT_MAX_BYTES, DOCUMENT_SUFFIXES, safe_name

_COPY_CHUNK = 1 << 20


class DocumentRefused(ValueError):
    """The document would be rejected by ``source_resources``, or cannot be added safely; nothing was added
    (the message says why)."""


@dataclass(frozen=True)
class AddedDocument:
    """Where the document went (``path``), the partition key it is stored under (``key``), the provider and
    service the key was made from (``service`` empty when the key has none), whether the provider came from the
    document (``from_document``: ``x-providerName`` or an MCP server name) rather than its file name, and whether
    it replaced a file of the same name (``replaced``)."""

    path: Path
    key: str
    provider: str
    service: str
    replaced: bool
    from_document: bool = True


def shown_path(path: Path | str) -> str:
    """``path`` as printable text: bytes that are not UTF-8 as ``\\xNN`` and control characters (a newline, an
    escape) as Python's ``ascii()`` writes them, so a file name cannot forge or hide terminal output."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in safe_name(str(path)))


def _copy_regular_file(source: Path, dest: Path, max_bytes: int) -> None:
    """Copy ``source`` to the new file ``dest``, refusing before a byte is copied when ``source`` is not a
    regular file or is over ``max_bytes``; at most ``max_bytes + 1`` bytes are ever read (a file that grows
    while copied is refused too). Opened non-blocking, so that a FIFO put in its place never blocks."""
    try:
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise FileNotFoundError(f"{shown_path(source)}: no such file") from None
    except IsADirectoryError:
        raise DocumentRefused(f"{shown_path(source)}: a folder, not a regular file; it was not added") from None
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        os.close(fd)
        what = "a folder" if stat.S_ISDIR(status.st_mode) else "a FIFO, socket or device"
        raise DocumentRefused(f"{shown_path(source)}: {what}, not a regular file; it was not added")
    with os.fdopen(fd, "rb") as reader:
        too_large = DocumentRefused(
            f"{shown_path(source)} was not added: source_resources would reject it (too_large: "
            f"{status.st_size} bytes > limit {max_bytes})"
        )
        if status.st_size > max_bytes:
            raise too_large
        copied = 0
        with open(dest, "xb") as writer:
            while chunk := reader.read(min(_COPY_CHUNK, max_bytes + 1 - copied)):
                writer.write(chunk)
                copied += len(chunk)
                if copied > max_bytes:
                    raise too_large


def add_user_document(
    source: Path,
    folder: Path,
    max_bytes: int = DEFAULT_MAX_BYTES,
    taken: Mapping[str, str] | None = None,
) -> AddedDocument:
    """Copy ``source`` into the user folder ``folder`` (created if missing) and return its partition key.

    The copy is checked in a temporary folder beside ``folder`` (never inside it, so a scan running meanwhile
    does not see it) and moved into place with one ``os.replace`` once accepted. A file of the same name is
    replaced (editing a document keeps its key); a refused document leaves the folder as it was.

    Args:
        source: the document (.json, .yaml or .yml); a symbolic link to one is followed.
        folder: the user folder.
        max_bytes: the size limit of ``source_resources``; a larger file is refused before it is copied.
        taken: ``{partition key: where it comes from}`` of keys other sources already hold (the corpus, MCP
            servers); a document with one of these keys is refused as ``source_resources`` would.

    Raises:
        FileNotFoundError: ``source`` does not exist.
        DocumentRefused: ``source`` does not end in .json, .yaml or .yml, is not a regular file (a folder, a
            FIFO), the file it would replace in ``folder`` is a symbolic link or not a regular file, or
            ``source_resources`` would reject it (too large, unparseable, neither an OpenAPI 3 document nor an
            MCP tool list, or its key is already held by another file of the folder or by ``taken``); the
            message carries the rejection's detail.
    """
    source = Path(source)
    if source.suffix.lower() not in DOCUMENT_SUFFIXES:
        raise DocumentRefused(f"{shown_path(source)}: a document must end in {', '.join(DOCUMENT_SUFFIXES)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / source.name
    if dest.is_symlink():
        raise DocumentRefused(
            f"{shown_path(dest)} is a symbolic link; it was left as it is and nothing was added "
            "(remove the link, or add the document under another name)"
        )
    replaced = dest.exists()
    if replaced and not dest.is_file():
        raise DocumentRefused(f"{shown_path(dest)} exists and is not a regular file; nothing was added")
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.adding-", dir=folder.parent))
    try:
        candidate = staging / source.name
        _copy_regular_file(source, candidate, max_bytes)
        accepted, rejected = user_folder_rows(staging, max_bytes=max_bytes)
        rel = candidate.relative_to(staging).as_posix()
        mine = next((r for r in accepted if r["path"] == rel), None)
        if mine is None:
            why = next((r for r in rejected if r["path"] == rel), None)
            detail = f"{why['reason']}: {why['detail']}" if why else "not accepted"
            detail = detail.replace(str(staging), str(folder))
            raise DocumentRefused(
                f"{shown_path(source)} was not added: source_resources would reject it ({shown_path(detail)})"
            )
        key = mine["resource_key"]
        if taken and key in taken:
            raise DocumentRefused(
                f"{shown_path(source)} was not added: source_resources would reject it (duplicate_key: its "
                f"partition key {key} is already the key of {shown_path(taken[key])})"
            )
        # the scan keeps the first file of a key in name order: a new one may come first and push an older out
        others = sorted(
            r["path"]
            for r in user_folder_rows(folder, max_bytes=max_bytes)[0]
            if r["resource_key"] == key and r["path"] != rel
        )
        if others:
            raise DocumentRefused(
                f"{shown_path(source)} was not added: source_resources would reject it (duplicate_key: its "
                f"partition key {key} is already the key of {shown_path(others[0])} in the user folder; edit "
                "that file instead)"
            )
        if dest.is_symlink():  # put there while the copy was checked: still never written through
            raise DocumentRefused(f"{shown_path(dest)} is a symbolic link; nothing was added")
        os.replace(candidate, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    provider = mine.get("provider") or ""
    return AddedDocument(
        dest,
        key,
        provider,
        mine.get("service") or "",
        replaced,
        from_document=mine.get("kind") != "openapi" or provider != PurePosixPath(rel).with_suffix("").parts[0],
    )


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
