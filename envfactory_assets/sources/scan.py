"""Scanning a folder of OpenAPI documents into accepted source resources and rejections.

Nothing is dropped silently: every file found is either a :class:`SourceResource` or a
:class:`Rejection` with a reason code and a human-readable detail.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from envfactory_assets.sources.coverage import count_operations, operation_coverage, summarize
from envfactory_assets.sources.domains import categories_of, classify_domain
from envfactory_assets.sources.names import snake_case, to_identifier
from envfactory_assets.sources.openapi import SpecError
from envfactory_assets.sources.problems import load_error_detail
from envfactory_assets.sources.resources import extract_resources

DEFAULT_MAX_BYTES = 4_000_000
ENTRY_REASONS = frozenset({"undecodable_name", "link_outside_folder", "broken_link", "unreadable"})
"""Rejection reasons of :func:`entry_rejection`: files that are refused without being read."""
MAX_RESOURCES_PER_ENV = 4
#: file name suffixes of the documents a corpus folder is scanned for
DOCUMENT_SUFFIXES = (".json", ".yaml", ".yml")


@dataclass(frozen=True)
class SourceResource:
    """An accepted API description. ``resource_key`` is the stable id (provider + API name)."""

    resource_key: str
    kind: str
    provider: str
    service: str
    title: str
    version: str
    license_name: str
    license_url: str
    path: str
    sha256: str
    size_bytes: int
    domain: str
    categories: list[str]
    n_paths: int
    n_resources: int
    resource_names: list[str]
    #: operations of the document, those that become tools (within the resource cap), and both by kind / reason
    #: (:mod:`envfactory_assets.sources.coverage`)
    n_operations: int = 0
    n_mapped_operations: int = 0
    operations_by_kind: dict[str, int] = field(default_factory=dict)
    unmapped_by_reason: dict[str, int] = field(default_factory=dict)

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Rejection:
    """A file that was looked at and not accepted, with ``reason`` (a code) and ``detail``."""

    path: str
    sha256: str
    reason: str
    detail: str
    #: operations of the document when it parsed (none of them becomes a tool)
    n_operations: int = 0

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def corpus_files(root: Path) -> list[Path]:
    """All ``*.json``/``*.yaml`` documents under ``root``, sorted; raises FileNotFoundError if missing."""
    if not root.is_dir():
        raise FileNotFoundError(f"OpenAPI corpus folder {root} does not exist (run scripts/setup.sh)")
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in DOCUMENT_SUFFIXES)


def resource_key_for(spec: dict[str, Any], rel_path: str) -> tuple[str, str, str]:
    """``(resource_key, provider, service)`` from ``x-providerName``/``x-serviceName`` or the file path."""
    info = spec.get("info") if isinstance(spec.get("info"), dict) else {}
    parts = Path(rel_path).with_suffix("").parts
    provider = info.get("x-providerName") if isinstance(info.get("x-providerName"), str) else parts[0]
    service = (
        info.get("x-serviceName")
        if isinstance(info.get("x-serviceName"), str)
        else (parts[1] if len(parts) > 1 else "")
    )
    key = to_identifier(provider, fallback="provider", max_len=40)
    if snake_case(service):
        key = f"{key}__{to_identifier(service, fallback='api', max_len=40)}"
    return key, provider, service


def load_document(raw: bytes, suffix: str) -> Any:
    """Parse a document's bytes: JSON for ``.json``, YAML otherwise (safe loader, no tags, bounded alias
    expansion, no repeated keys: :func:`~envfactory_assets.sources.safe_yaml.load_untrusted_yaml`).

    Raises whatever the parser raises for malformed input (callers turn it into a rejection).
    """
    if suffix == ".json":
        return orjson.loads(raw)
    from envfactory_assets.sources.safe_yaml import load_untrusted_yaml

    return load_untrusted_yaml(raw)


def safe_name(name: str) -> str:
    """``name`` as text that is valid UTF-8: the bytes of a file name that are not UTF-8 (which Python keeps
    as surrogate escapes, e.g. ``b"bad\\xff.json"`` -> ``"bad\\udcff.json"``) are written as ``\\xNN``.

    Rows are stored in DuckDB and hashed as JSON; both refuse surrogates, so a raw name would fail the
    whole scan rather than the one file.
    """
    try:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    except UnicodeError:  # surrogates that no file name decodes to
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def entry_rejection(path: Path, root: Path) -> Rejection | None:
    """The :class:`Rejection` of a folder entry that must not be read at all, or None when it may be read.

    Reasons: ``undecodable_name`` (its path under ``root`` is not valid UTF-8; the row's path is
    :func:`safe_name` of it), ``link_outside_folder`` (after following symbolic links it is not inside
    ``root``: a link to ``/etc/passwd`` is never read), ``broken_link`` (a symbolic link to nothing) and
    ``unreadable`` (a link loop, or a folder on the way that cannot be searched). Neither the detail nor the path
    carries the content of any file. Never raises for a bad entry.
    """
    rel = path.relative_to(root).as_posix()
    shown = safe_name(rel)
    if shown != rel:
        return Rejection(
            shown,
            "",
            "undecodable_name",
            f"{shown}: the file name is not valid UTF-8 (bytes shown as \\xNN); rename the file",
        )
    try:
        inside = path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError) as exc:  # a link loop, or a folder that cannot be searched
        return Rejection(rel, "", "unreadable", f"{rel}: cannot follow its path ({type(exc).__name__})")
    if not inside:
        return Rejection(
            rel,
            "",
            "link_outside_folder",
            f"{rel}: a symbolic link to a file outside the folder {safe_name(str(root))}; "
            "only links that stay inside the folder are read",
        )
    if path.is_symlink() and not path.exists():
        return Rejection(rel, "", "broken_link", f"{rel}: a symbolic link to a file that does not exist")
    return None


def inspect_file(path: Path, root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> SourceResource | Rejection:
    """Classify one document. Never raises for bad content: returns a :class:`Rejection` instead.

    An entry refused by :func:`entry_rejection` (name not UTF-8, link out of ``root``) is not read.
    Details say what is wrong (position of a syntax error, the rule broken), never the file's bytes.
    """
    refused = entry_rejection(path, root)
    if refused is not None:
        return refused
    rel = path.relative_to(root).as_posix()
    size = path.stat().st_size
    if size > max_bytes:
        return Rejection(rel, "", "too_large", f"{size} bytes > limit {max_bytes}")
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        spec = load_document(raw, path.suffix.lower())
    except Exception as exc:  # any parser error means the file is unusable
        return Rejection(rel, digest, "unparseable", load_error_detail(exc))
    if not isinstance(spec, dict):
        return Rejection(rel, digest, "not_an_object", f"top level is {type(spec).__name__}")
    n_operations = count_operations(spec)
    try:
        resources = extract_resources(spec)
        coverage = summarize(operation_coverage(spec, MAX_RESOURCES_PER_ENV, resources))
    except SpecError as exc:
        reason = "not_openapi3" if "OpenAPI 3" in str(exc) else "no_paths" if "no paths" in str(exc) else "invalid_spec"
        return Rejection(rel, digest, reason, str(exc), n_operations)
    except RecursionError:
        return Rejection(rel, digest, "invalid_spec", "schema nesting too deep", n_operations)
    if not resources:
        return Rejection(
            rel,
            digest,
            "no_stateful_resource",
            "no collection or singleton with read operations and scalar fields",
            n_operations,
        )
    domain, scores = classify_domain(spec)
    if domain is None:
        return Rejection(rel, digest, "no_domain", "no category or keyword maps to one of the 7 domains", n_operations)
    info = spec.get("info") if isinstance(spec.get("info"), dict) else {}
    lic = info.get("license") if isinstance(info.get("license"), dict) else {}
    key, provider, service = resource_key_for(spec, rel)
    return SourceResource(
        resource_key=key,
        kind="openapi",
        provider=str(provider),
        service=str(service),
        title=str(info.get("title", ""))[:200],
        version=str(info.get("version", "")),
        license_name=str(lic.get("name", "unspecified"))[:200],
        license_url=str(lic.get("url", ""))[:500],
        path=rel,
        sha256=digest,
        size_bytes=size,
        domain=domain,
        categories=categories_of(info),
        n_paths=len(spec.get("paths", {})),
        n_resources=len(resources),
        resource_names=[r.name for r in resources[:MAX_RESOURCES_PER_ENV]],
        n_operations=n_operations,
        n_mapped_operations=coverage["mapped"],
        operations_by_kind=coverage["by_kind"],
        unmapped_by_reason=coverage["unmapped"],
    )


def scan_corpus(
    root: Path, files: Iterable[Path] | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> Iterator[SourceResource | Rejection]:
    """Inspect every document under ``root`` (or just ``files``), yielding one result per file.

    A second file that maps to an already accepted ``resource_key`` is rejected as ``duplicate_key``.
    """
    seen: set[str] = set()
    for path in files if files is not None else corpus_files(root):
        result = inspect_file(path, root, max_bytes)
        if isinstance(result, SourceResource):
            if result.resource_key in seen:
                result = Rejection(
                    result.path,
                    result.sha256,
                    "duplicate_key",
                    f"resource key {result.resource_key} already taken by another file",
                    result.n_operations,
                )
            else:
                seen.add(result.resource_key)
        yield result
