"""Reuse the key/value cache of earlier generations when a new prompt starts with the same tokens.

An agent loop re-sends the whole conversation at every step, so without reuse the prompt (on BFCL about
1,250 tokens of tool documentation before any history) is encoded again for every assistant message of
every task and seed. Measured on the 2-core machine (SmolLM2-135M, float32, 2 threads): encoding a
1,200-token prompt for 6 conversations took 15.9 s and sampling 48 new tokens for them 4.1 s, so encoding
was four fifths of a generation step.

How a batch reuses per-conversation caches (transformers' ``DynamicCache``):

- every stored entry is the keys/values of one token sequence (a prompt plus what was generated after it);
- a new prompt takes the entry with the longest common token prefix (at most its length minus one, so at
  least one token is encoded) and encodes only the rest;
- rows of a batch have different cached and uncached lengths, so the batch is laid out as
  ``[pad][cached][pad][uncached]`` with the attention mask zero on both pads; positions come from the mask
  (``generate`` numbers tokens by the cumulative mask), so every token keeps the position it had when it
  was cached and the result equals encoding the prompt from scratch (checked against a plain forward pass
  in the tests).

Only models whose cache layers are all full-attention ``DynamicLayer`` s are eligible (sliding-window or
quantized layers cannot be cut and joined this way); for others :func:`supports_prefix_reuse` is False and
the policy encodes every prompt in full.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MIN_REUSED_TOKENS = 16
"""A shorter common prefix is not worth joining caches for; the prompt is encoded in full."""


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading tokens ``a`` and ``b`` share (``os.path.commonprefix`` works on any sequences)."""
    return len(os.path.commonprefix([tuple(a), tuple(b)]))


@dataclass
class _Entry:
    ids: tuple[int, ...]
    layers: list[tuple[Any, Any]]  # per layer (keys, values), each [1, kv_heads, len(ids), head_dim]


class PrefixCache:
    """Least-recently-used store of per-sequence key/value caches, bounded by the tokens it holds.

    Args:
        max_tokens: token positions kept over all entries (each costs ``2 * layers * kv_heads * head_dim * 4``
            bytes in float32: about 46 KB for SmolLM2-135M, so the default 40,000 is ~1.8 GB). The most
            recently used entry is always kept, even alone over the bound.

    Raises:
        ValueError: ``max_tokens`` < 1.
    """

    def __init__(self, max_tokens: int = 40_000) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        self._tokens = 0
        self.reused_tokens = 0
        self.encoded_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, ids: Sequence[int]) -> tuple[list[tuple[Any, Any]] | None, int]:
        """The cached layers of the entry sharing the longest prefix with ``ids``, and how many tokens of it
        to reuse (< ``len(ids)``); ``(None, 0)`` when no entry shares :data:`MIN_REUSED_TOKENS` tokens."""
        best, best_len = None, 0
        for entry in self._entries.values():
            n = min(common_prefix_length(entry.ids, ids), len(ids) - 1)
            if n > best_len:
                best, best_len = entry, n
        if best is None or best_len < MIN_REUSED_TOKENS:
            return None, 0
        self._entries.move_to_end(best.ids)
        return best.layers, best_len

    def add(self, ids: Sequence[int], layers: list[tuple[Any, Any]]) -> None:
        """Store the keys/values of ``ids`` (per layer ``[1, kv_heads, len(ids), head_dim]``), evicting the
        least recently used entry while over ``max_tokens``.

        Raises:
            ValueError: the layers' sequence length is not ``len(ids)``.
        """
        key = tuple(ids)
        if layers and layers[0][0].shape[-2] != len(key):
            raise ValueError(f"cache holds {layers[0][0].shape[-2]} positions for {len(key)} token ids")
        if key in self._entries:
            self._tokens -= len(key)
        self._entries[key] = _Entry(key, layers)
        self._entries.move_to_end(key)
        self._tokens += len(key)
        while self._tokens > self.max_tokens and len(self._entries) > 1:
            dropped, _ = self._entries.popitem(last=False)
            self._tokens -= len(dropped)

    @property
    def tokens(self) -> int:
        """Token positions currently held."""
        return self._tokens


def supports_prefix_reuse(model: Any) -> bool:
    """True when a fresh cache for ``model`` has only full-attention dynamic layers."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    try:
        cache = DynamicCache(config=model.config)
    except Exception:  # noqa: BLE001 - an exotic config: play safe and encode in full
        return False
    return bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)


def batch_inputs(
    rows: Sequence[tuple[Sequence[int], list[tuple[Any, Any]] | None, int]],
    pad_id: int,
    config: Any,
    device: Any = "cpu",
) -> tuple[Any, Any, Any]:
    """Lay out a batch as ``[pad][cached][pad][uncached]`` per row.

    Args:
        rows: per row ``(prompt ids, cached layers or None, cached length)``.
        pad_id: padding token id.
        config: the model config (for the empty ``DynamicCache``).
        device: where the id and mask tensors are made (the model's device; cached layers are kept there).

    Returns:
        ``(input_ids [B, C + S], attention_mask [B, C + S], past_key_values or None)`` where ``C`` is the
        longest cached length and ``S`` the longest uncached one; ``past_key_values`` is None when no row
        reuses anything (a plain left-padded batch).
    """
    import torch
    from transformers import DynamicCache

    width_cached = max(n for _, _, n in rows)
    width_new = max(len(ids) - n for ids, _, n in rows)
    input_ids, mask = [], []
    for ids, _, n in rows:
        new = len(ids) - n
        input_ids.append([pad_id] * (width_cached - n) + list(ids[:n]) + [pad_id] * (width_new - new) + list(ids[n:]))
        mask.append([0] * (width_cached - n) + [1] * n + [0] * (width_new - new) + [1] * new)
    input_tensor, mask_tensor = torch.tensor(input_ids, device=device), torch.tensor(mask, device=device)
    if width_cached == 0:
        return input_tensor, mask_tensor, None
    template = next(layers for _, layers, n in rows if n)
    joined = []
    for li, (k0, v0) in enumerate(template):
        keys, values = [], []
        for _, layers, n in rows:
            pad = width_cached - n
            if n:
                k, v = layers[li][0][:, :, :n], layers[li][1][:, :, :n]
            else:
                k, v = k0[:, :, :0], v0[:, :, :0]
            keys.append(torch.nn.functional.pad(k, (0, 0, pad, 0)))
            values.append(torch.nn.functional.pad(v, (0, 0, pad, 0)))
        joined.append((torch.cat(keys), torch.cat(values)))
    return input_tensor, mask_tensor, DynamicCache(ddp_cache_data=joined, config=config)


def row_layers(cache: Any, row: int, positions: Any) -> list[tuple[Any, Any]]:
    """Keys/values of one batch row at ``positions`` (a 1-D index tensor over the cache's sequence axis),
    as ``[1, kv_heads, len(positions), head_dim]`` copies (so the batch cache can be freed)."""
    return [
        (
            layer.keys[row : row + 1].index_select(2, positions).clone(),
            layer.values[row : row + 1].index_select(2, positions).clone(),
        )
        for layer in cache.layers
    ]
