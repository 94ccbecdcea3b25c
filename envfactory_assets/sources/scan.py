"""Scanning a folder of OpenAPI documents into accepted source resources and rejections.

Nothing is dropped silently: every file found is either a :class:`SourceResource` or a
:class:`Rejection` with a reason code and a human-readable detail.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import orjson

from envfactory_assets.sources.domains import categories_of, classify_domain
from envfactory_assets.sources.names import snake_case, to_identifier
from envfactory_assets.sources.openapi import SpecError, extract_resources

DEFAULT_MAX_BYTES = 4_000_000
MAX_RESOURCES_PER_ENV = 4


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

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Rejection:
    """A file that was looked at and not accepted, with ``reason`` (a code) and ``detail``."""

    path: str
    sha256: str
    reason: str
    detail: str

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def corpus_files(root: Path) -> list[Path]:
    """All ``*.json``/``*.yaml`` documents under ``root``, sorted; raises FileNotFoundError if missing."""
    if not root.is_dir():
        raise FileNotFoundError(f"OpenAPI corpus folder {root} does not exist (run scripts/setup.sh)")
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in (".json", ".yaml", ".yml"))


def resource_key_for(spec: dict[str, Any], rel_path: str) -> tuple[str, str, str]:
    """``(resource_key, provider, service)`` from ``x-providerName``/``x-serviceName`` or the file path."""
    info = spec.get("info") if isinstance(spec.get("info"), dict) else {}
    parts = Path(rel_path).with_suffix("").parts
    provider = info.get("x-providerName") if isinstance(info.get("x-providerName"), str) else parts[0]
    service = info.get("x-serviceName") if isinstance(info.get("x-serviceName"), str) else (
        parts[1] if len(parts) > 1 else "")
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


def inspect_file(path: Path, root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> SourceResource | Rejection:
    """Classify one document. Never raises for bad content: returns a :class:`Rejection` instead."""
    rel = path.relative_to(root).as_posix()
    size = path.stat().st_size
    if size > max_bytes:
        return Rejection(rel, "", "too_large", f"{size} bytes > limit {max_bytes}")
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        spec = load_document(raw, path.suffix.lower())
    except Exception as exc:  # any parser error means the file is unusable
        return Rejection(rel, digest, "unparseable", f"{type(exc).__name__}: {str(exc)[:200]}")
    if not isinstance(spec, dict):
        return Rejection(rel, digest, "not_an_object", f"top level is {type(spec).__name__}")
    try:
        resources = extract_resources(spec)
    except SpecError as exc:
        reason = "not_openapi3" if "OpenAPI 3" in str(exc) else "no_paths" if "no paths" in str(exc) else "invalid_spec"
        return Rejection(rel, digest, reason, str(exc))
    except RecursionError:
        return Rejection(rel, digest, "invalid_spec", "schema nesting too deep")
    if not resources:
        return Rejection(rel, digest, "no_stateful_resource",
                         "no collection with create and read operations and scalar fields")
    domain, scores = classify_domain(spec)
    if domain is None:
        return Rejection(rel, digest, "no_domain", "no category or keyword maps to one of the 7 domains")
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
    )


def scan_corpus(root: Path, files: Iterable[Path] | None = None,
                max_bytes: int = DEFAULT_MAX_BYTES) -> Iterator[SourceResource | Rejection]:
    """Inspect every document under ``root`` (or just ``files``), yielding one result per file.

    A second file that maps to an already accepted ``resource_key`` is rejected as ``duplicate_key``.
    """
    seen: set[str] = set()
    for path in files if files is not None else corpus_files(root):
        result = inspect_file(path, root, max_bytes)
        if isinstance(result, SourceResource):
            if result.resource_key in seen:
                result = Rejection(result.path, result.sha256, "duplicate_key",
                                   f"resource key {result.resource_key} already taken by another file")
            else:
                seen.add(result.resource_key)
        yield result
