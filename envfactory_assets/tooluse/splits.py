"""Train / held-out split by environment, shared by training, evaluation and exports.

A held-out environment is never trained on (SFT or GRPO), so an evaluation on tasks from held-out
environments measures transfer to unseen tools and states, not memorized rows. The split is a stable
hash of the environment id (no global random stream), so it survives re-synthesis and adding environments.
A row is held out when any of its environments is; the sampler combines held-out environments only with
each other (:func:`envfactory_assets.synth.sampling.sampler.keep_apart`), so a chain is wholly held out or wholly for
training and about a tenth of the rows are held out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from typing import Any

HELD_OUT_SHARE = 0.1


def _bucket(env_id: str) -> float:
    """``env_id``'s stable position in [0, 1] (sha256, no global random stream)."""
    return int(hashlib.sha256(f"heldout:{env_id}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def _check_share(share: float) -> None:
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"held-out share must be in [0, 1], got {share}")


def is_held_out_environment(env_id: str, share: float = HELD_OUT_SHARE) -> bool:
    """Whether ``env_id``'s hash bucket is below ``share`` (about ``share`` of all environments are).

    Raises:
        ValueError: ``share`` is outside [0, 1].
    """
    _check_share(share)
    return _bucket(env_id) < share


def held_out_environments(env_ids: Iterable[str], share: float = HELD_OUT_SHARE) -> frozenset[str]:
    """The held-out environments among ``env_ids``: those :func:`is_held_out_environment` holds out, or, when
    that is none of them and there are at least two (a small corpus: 3 environments at 10% usually have
    none), the one with the lowest hash bucket, so the held-out evaluation is never empty by accident.

    The choice depends only on the ids, so it is the same in every stage that sees the same environments;
    adding environments can move the fallback only while no environment reaches ``share`` on its own.

    Raises:
        ValueError: ``share`` is outside [0, 1].
    """
    _check_share(share)
    ids = sorted(set(env_ids))
    held = frozenset(e for e in ids if _bucket(e) < share)
    if not held and len(ids) >= 2 and share > 0:
        held = frozenset([min(ids, key=_bucket)])
    return held


def row_split(env_ids: Iterable[str], held_out: Collection[str] | None = None, share: float = HELD_OUT_SHARE) -> str:
    """``"held_out"`` when any of a row's environments is held out, else ``"train"``.

    ``held_out`` is the set :func:`held_out_environments` chose for the whole dataset; None applies the hash
    rule alone (:func:`is_held_out_environment`).
    """
    if held_out is not None:
        return "held_out" if any(e in held_out for e in env_ids) else "train"
    return "held_out" if any(is_held_out_environment(e, share) for e in env_ids) else "train"


TRAIN_SPLIT, VALIDATION_SPLIT = "train", "validation"
"""The ``split`` values of ``sft_dataset`` / ``rl_dataset`` rows, which the exports' train and validation files use
as they are: ``validation`` is every row :func:`row_split` holds out."""


def dataset_split(
    env_ids: Iterable[str], held_out: Collection[str] | None = None, share: float = HELD_OUT_SHARE
) -> str:
    """The stored ``split`` of a dataset row: :data:`VALIDATION_SPLIT` when :func:`row_split` holds it out,
    else :data:`TRAIN_SPLIT`."""
    return VALIDATION_SPLIT if row_split(env_ids, held_out, share) == "held_out" else TRAIN_SPLIT


def stored_split(row: Mapping[str, Any]) -> str:
    """``"held_out"`` or ``"train"`` from a dataset row's stored ``split``, the one decision training,
    evaluation and exports all read (the dataset stage made it over every environment at once).

    Raises:
        ValueError: the row has no ``split`` or an unknown one (a store written before splits were stored:
            re-materialize ``sft_dataset`` and ``rl_dataset``).
    """
    split = row.get("split")
    if split not in (TRAIN_SPLIT, VALIDATION_SPLIT):
        raise ValueError(
            f"dataset row {row.get('id')!r} has split {split!r}, expected {TRAIN_SPLIT!r} or "
            f"{VALIDATION_SPLIT!r}; re-materialize sft_dataset and rl_dataset"
        )
    return "held_out" if split == VALIDATION_SPLIT else "train"


def stored_held_out(rows: Iterable[Mapping[str, Any]], share: float = HELD_OUT_SHARE) -> frozenset[str]:
    """The environments of dataset ``rows`` that no ``train`` row uses, from the rows' stored splits alone.

    The dataset stage chose the held-out environments over every refined trajectory, some of which may have
    left no row (all their RL rows failed the replay check), so re-running :func:`held_out_environments` on
    the rows can pick another fallback environment; the stored splits are the decision. They must still be
    consistent with some held-out set: no ``train`` row uses an environment the hash rule holds out, and
    every ``validation`` row uses at least one environment no ``train`` row uses.

    Raises:
        ValueError: a row's split is missing or unknown (:func:`stored_split`), or the splits are
            inconsistent as above (a held-out environment would be trained on); the message names the row.
    """
    rows = list(rows)
    trained = {e for r in rows if stored_split(r) == "train" for e in r["env_ids"]}
    hashed = sorted(e for e in trained if is_held_out_environment(e, share))
    if hashed:
        row = next(r for r in rows if r.get("split") == TRAIN_SPLIT and set(hashed) & set(r["env_ids"]))
        raise ValueError(
            f"row {row.get('id')}: stored split {TRAIN_SPLIT!r} but its environments "
            f"{list(row['env_ids'])} make it {VALIDATION_SPLIT!r} (the hash rule holds out {hashed}); "
            "re-materialize sft_dataset and rl_dataset"
        )
    for row in rows:
        if row.get("split") == VALIDATION_SPLIT and set(row["env_ids"]) <= trained:
            raise ValueError(
                f"row {row.get('id')}: stored split {VALIDATION_SPLIT!r} but each of its environments "
                f"{list(row['env_ids'])} is in train rows too, so it holds out none; re-materialize "
                "sft_dataset and rl_dataset"
            )
    return frozenset(e for r in rows for e in r["env_ids"]) - trained
