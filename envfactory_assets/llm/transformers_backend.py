"""A chat backend on a local Hugging Face model directory (``transformers`` ``generate``, greedy).

Nothing is downloaded: ``HF_HUB_OFFLINE=1`` is set and files are loaded with ``local_files_only``.
The model loads lazily on the first call, so constructing the backend is cheap.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envfactory_assets.llm.base import BackendConfigError, Completion, LLMError, Message


class TransformersBackend:
    """Greedy chat completions from a local causal LM (e.g. SmolLM2-135M-Instruct) on CPU or GPU.

    One generation runs at a time (``max_concurrency`` is 1): the model lives in this process, and
    concurrent ``generate`` calls on it would only share its cores.

    Args:
        model_dir: folder with ``config.json``, the weights and the tokenizer (a chat template is used
            when the tokenizer has one, else the messages are joined as ``role: content`` lines).
        device: torch device string (``"cpu"``, ``"cuda"``).
        max_input_tokens: prompts longer than this keep their last ``max_input_tokens`` tokens.

    Raises:
        BackendConfigError: ``model_dir`` is not a folder with a ``config.json`` (checked at construction).
    """

    #: Stages ask this backend one conversation at a time (:func:`~envfactory_assets.llm.base.concurrency_of`).
    max_concurrency = 1

    def __init__(self, model_dir: str | Path, *, device: str = "cpu", max_input_tokens: int = 8192) -> None:
        path = Path(model_dir) if model_dir else None
        if path is None or not (path / "config.json").is_file():
            raise BackendConfigError(
                f"TransformersBackend: model_dir={str(model_dir)!r} is not a local model folder "
                "(no config.json); nothing is downloaded, point it at a saved model"
            )
        self.model_dir = path
        self.device = device
        self.max_input_tokens = max_input_tokens
        self._model: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        self._stats = {"calls": 0, "cached": 0, "retries": 0, "prompt_tokens": 0, "completion_tokens": 0}
        self._by_role: dict[str, dict[str, int]] = {}

    def usage(self) -> dict[str, Any]:
        """Counters so far, as :meth:`~envfactory_assets.llm.openai_backend.OpenAICompatibleBackend.usage` has
        them: ``calls`` (generations), ``cached`` and ``retries`` (always 0: no cache, no retries here),
        ``prompt_tokens``, ``completion_tokens``, ``generate_s`` (seconds spent generating) and ``by_role``."""
        with self._lock:
            return {**self._stats, "by_role": {r: dict(v) for r, v in self._by_role.items()}}

    def _count(self, role: str, prompt: int, completion: int, seconds: float) -> None:
        for stats in (
            self._stats,
            self._by_role.setdefault(role, {"calls": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0}),
        ):
            stats["calls"] += 1
            stats["prompt_tokens"] += prompt
            stats["completion_tokens"] += completion
        self._stats["generate_s"] = round(self._stats.get("generate_s", 0.0) + seconds, 3)

    def _load(self) -> None:
        if self._model is not None:
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir), local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(str(self.model_dir), local_files_only=True)
        except Exception as exc:  # a half-saved folder, a missing tokenizer, an unknown architecture
            raise BackendConfigError(
                f"TransformersBackend: model_dir={str(self.model_dir)!r} cannot be loaded: {type(exc).__name__}: {exc}"
            ) from exc
        model.to(self.device)
        model.eval()
        self._model = model

    def _prompt_ids(self, messages: Sequence[Message]) -> Any:
        tok = self._tokenizer
        msgs = [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
            ids = ids["input_ids"]
        else:
            text = "\n".join(f"{m['role']}: {m['content']}" for m in msgs) + "\nassistant:"
            ids = tok(text, return_tensors="pt")["input_ids"]
        return ids[:, -self.max_input_tokens :]

    def complete(
        self, messages: Sequence[Message], *, role: str, max_tokens: int = 1024, temperature: float = 0.0
    ) -> Completion:
        """Greedy generation (``temperature`` is ignored: local runs are deterministic).

        Raises:
            BackendConfigError: the model folder cannot be loaded.
            LLMError: generation failed.
        """
        import torch

        with self._lock:
            self._load()
            ids = self._prompt_ids(messages).to(self.device)
            pad = self._tokenizer.pad_token_id
            if pad is None:
                pad = self._tokenizer.eos_token_id
            started = time.monotonic()
            try:
                with torch.no_grad():
                    out = self._model.generate(
                        input_ids=ids,
                        attention_mask=torch.ones_like(ids),
                        max_new_tokens=int(max_tokens),
                        do_sample=False,
                        pad_token_id=pad,
                    )
            except Exception as exc:
                raise LLMError(
                    f"TransformersBackend({self.model_dir.name}) failed to generate for role "
                    f"{role!r}: {type(exc).__name__}: {exc}"
                ) from exc
            new = out[0, ids.shape[1] :]
            text = self._tokenizer.decode(new, skip_special_tokens=True)
            self._count(role, int(ids.shape[1]), int(new.shape[0]), time.monotonic() - started)
        return Completion(text=text, prompt_tokens=int(ids.shape[1]), completion_tokens=int(new.shape[0]), cached=False)

    def __repr__(self) -> str:
        return f"TransformersBackend(model_dir={str(self.model_dir)!r})"
