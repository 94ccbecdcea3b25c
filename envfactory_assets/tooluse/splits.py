"""Train / held-out split by environment, shared by training, evaluation and exports.

A held-out environment is never trained on (SFT or GRPO), so an evaluation on tasks from held-out
environments measures transfer to unseen tools and states, not memorized rows. The split is a stable
hash of the environment id (no global random stream), so it survives re-synthesis and adding environments.
A row is held out when any of its environments is, and rows combine up to 3 environments, so 10% of the
environments hold out about a quarter of the rows (20% held out about 58% of them in the default run).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

HELD_OUT_SHARE = 0.1


def is_held_out_environment(env_id: str, share: float = HELD_OUT_SHARE) -> bool:
    """Whether ``env_id`` belongs to the held-out environments (about ``share`` of all of them).

    Raises:
        ValueError: ``share`` is outside [0, 1].
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"held-out share must be in [0, 1], got {share}")
    bucket = int(hashlib.sha256(f"heldout:{env_id}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return bucket < share


def row_split(env_ids: Iterable[str], share: float = HELD_OUT_SHARE) -> str:
    """``"held_out"`` when any of a row's environments is held out, else ``"train"``."""
    return "held_out" if any(is_held_out_environment(e, share) for e in env_ids) else "train"


TRAIN_SPLIT, VALIDATION_SPLIT = "train", "validation"
"""The ``split`` values of ``sft_dataset`` / ``rl_dataset`` rows, which the exports' train and validation files use
as they are: ``validation`` is every row :func:`row_split` holds out."""


def dataset_split(env_ids: Iterable[str], share: float = HELD_OUT_SHARE) -> str:
    """The stored ``split`` of a dataset row: :data:`VALIDATION_SPLIT` when :func:`row_split` holds it out,
    else :data:`TRAIN_SPLIT`."""
    return VALIDATION_SPLIT if row_split(env_ids, share) == "held_out" else TRAIN_SPLIT
