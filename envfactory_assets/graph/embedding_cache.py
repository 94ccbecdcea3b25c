"""Embeddings of a fixed list of texts, kept on disk between runs.

The benchmark reference that environments are tagged against (BFCL's and tau2's tool descriptions, about
2,000 texts) is the same in every run of ``tool_graph``; encoding it with all-MiniLM-L6-v2 costs about a
minute on 2 cores, each time. :class:`CachedEmbedder` stores the array one ``embed`` call returned, keyed by
the embedder's identity and the exact list of texts, and returns the stored array when the same call comes
again. A whole call is the unit (not a text), because sentence-transformers pads each batch to its longest
text: a text's vector can differ in its last bits with its batch neighbours, and a cached call must equal the
fresh one exactly for runs to reproduce.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

from envfactory_assets.graph.embeddings import MINILM_DISTRIBUTION, MiniLMEmbedder, ParameterEmbedder

__all__ = ["CachedEmbedder", "embedder_identity"]


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "absent"


def embedder_identity(embedder: ParameterEmbedder) -> str | None:
    """What decides the numbers ``embedder`` returns, as one string, or ``None`` when it cannot be stated
    (an embedder of unknown make, which is then never cached).

    For :class:`MiniLMEmbedder`: the model directory, the versions of the model package, sentence-transformers
    and torch, the device and the batch size.
    """
    if type(embedder) is not MiniLMEmbedder:
        return None
    versions = ",".join(f"{d}={_version(d)}" for d in (MINILM_DISTRIBUTION, "sentence-transformers", "torch"))
    return f"{embedder.name}|{embedder.model_path}|{versions}|{embedder.device}|batch={embedder.batch_size}"


class CachedEmbedder:
    """``embedder`` whose results are kept as ``.npy`` files in ``directory`` (created on first write).

        ``embed(texts)`` returns the stored array when one is stored for the same identity and the same texts in
        the same order, else embeds, stores (written to a temporary file, then renamed, so a reader never sees a
        partial file) and returns. A stored file that does not read back as a finite float32 array of shape
        ``(len(texts), d)`` is embedded again and replaced. An embedder without an identity
        (:func:`embedder_identity`) passes through uncached. A file that cannot be written (a read-only or full disk)
    is recorded in :attr:`write_errors` and the array returned all the same.

        Args:
            embedder: the embedder to cache.
            directory: where the files live, e.g. ``$ENVFACTORY_HOME/embedding_cache``.
    """

    def __init__(self, embedder: ParameterEmbedder, directory: Path):
        self.embedder = embedder
        self.directory = Path(directory)
        self.identity = embedder_identity(embedder)
        self.name = getattr(embedder, "name", type(embedder).__name__)
        #: calls answered from a stored file, and calls embedded, in this object's life
        self.hits = 0
        self.misses = 0
        #: files that could not be written (the array was returned all the same)
        self.write_errors: list[str] = []

    def _path(self, texts: list[str]) -> Path:
        digest = hashlib.sha256(str(self.identity).encode("utf-8"))
        for text in texts:
            digest.update(b"\0" + text.encode("utf-8"))
        return self.directory / f"{digest.hexdigest()}.npy"

    def _stored(self, path: Path, n: int) -> np.ndarray | None:
        try:
            vectors = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            return None
        ok = vectors.dtype == np.float32 and vectors.ndim == 2 and len(vectors) == n and np.isfinite(vectors).all()
        return vectors if ok else None

    def embed(self, texts: list[str]) -> np.ndarray:
        """Encode ``texts`` -> float32 array ``(len(texts), d)`` as the wrapped embedder does."""
        texts = [str(t) for t in texts]
        if self.identity is None or not texts:
            return self.embedder.embed(texts)
        path = self._path(texts)
        stored = self._stored(path, len(texts)) if path.is_file() else None
        if stored is not None:
            self.hits += 1
            return stored
        vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        self.misses += 1
        try:
            self._write(path, vectors)
        except OSError as exc:  # a cache that cannot be written costs time, never the result
            self.write_errors.append(f"{path}: {exc}")
        return vectors

    def _write(self, path: Path, vectors: np.ndarray) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".npy.tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                np.save(out, vectors, allow_pickle=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
