"""Code versions: a hash of the code, prompt templates and SQL an asset depends on.

Dagster compares an asset's ``code_version`` with the one recorded at its last materialization; a change
marks the asset (and what depends on it) stale. A constant version never does, so each asset's version
here is the sha256 of the files it runs: the packages it calls plus its own defs module.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Iterable
from pathlib import Path

CODE_SUFFIXES = (".py", ".sql", ".jinja", ".j2", ".txt", ".json", ".yaml", ".yml")
VERSION_HEX_CHARS = 12


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"code path {path} does not exist")
    return sorted(
        p for p in path.rglob("*") if p.is_file() and p.suffix in CODE_SUFFIXES and "__pycache__" not in p.parts
    )


def tree_hash(paths: Iterable[Path | str]) -> str:
    """sha256 (first 12 hex chars) over the relative names and bytes of every code file under ``paths``.

    Folders are walked recursively (files ending in :data:`CODE_SUFFIXES`, ``__pycache__`` skipped);
    a file path counts as itself. The order of ``paths`` does not matter.

    Raises:
        FileNotFoundError: if a path does not exist.
    """
    digest = hashlib.sha256()
    entries = []
    for root in {Path(p).resolve() for p in paths}:
        base = root.parent
        entries += [(f.relative_to(base).as_posix(), f) for f in _files(root)]
    for name, f in sorted(entries):
        digest.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()[:VERSION_HEX_CHARS]


def module_path(name: str) -> Path:
    """The file of module ``name``, or the folder of package ``name``.

    Raises:
        ModuleNotFoundError: if ``name`` cannot be found.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no module named {name!r}")
    origin = Path(spec.origin)
    return origin.parent if spec.submodule_search_locations else origin


def code_version(*modules: str, files: Iterable[Path | str] = ()) -> str:
    """The code version of an asset that runs ``modules`` (dotted names of modules or packages) and
    reads ``files`` (templates, SQL): :func:`tree_hash` of all of them."""
    return tree_hash([module_path(m) for m in modules] + [Path(f) for f in files])
