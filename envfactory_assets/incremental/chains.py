"""Re-synthesizing only the chains that touch a changed environment.

Each chain's seed comes from its own key (:func:`envfactory_assets.synth.sampling.sampler.chain_seed`), but the
sampler walks the whole tool graph, so adding or changing one environment can change what any key draws.
To keep chains that do not touch a change exactly as they are, the previous current chains are reused
when every environment they use still has the same passed verification, and fresh chains fill the rest.
Rows downstream (trajectories) are reused by chain id in the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envfactory_assets.store.schema import COMMON

_BOOKKEEPING = {c.split()[0] for c in COMMON}


def as_written(row: dict[str, Any]) -> dict[str, Any]:
    """A row read from the store without the store's bookkeeping columns (``superseded``, ``written_at``),
    ready to be written again."""
    return {k: v for k, v in row.items() if k not in _BOOKKEEPING}


def unaffected(chain_row: dict[str, Any], verified_ids: dict[str, str]) -> bool:
    """True when every environment of ``chain_row`` still has the verification the chain was built on.

    ``verified_ids``: ``{env_id: verified_environments.id}`` of the environments that pass now.
    """
    return all(
        verified_ids.get(env) == ver
        for env, ver in zip(chain_row["env_ids"], chain_row["verified_environment_ids"], strict=True)
    )


def merge_chains(
    previous: list[dict[str, Any]],
    fresh: list[dict[str, Any]],
    verified_ids: dict[str, str],
    n_per_sampler: dict[str, int],
    still_valid: Callable[[dict[str, Any]], bool] = lambda r: True,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(chain rows to make current, previous rows reused)``.

    Per sampler: previous rows that are :func:`unaffected` and ``still_valid`` are kept (same ids);
    then ``fresh`` rows (in their sampling order) are added, skipping a chain key or tool sequence already
    kept, until ``n_per_sampler[sampler]`` chains. A sampler missing from ``n_per_sampler`` keeps nothing.
    """
    kept = [
        as_written(r)
        for r in previous
        if n_per_sampler.get(r["sampler"], 0) > 0 and unaffected(r, verified_ids) and still_valid(r)
    ]
    out: list[dict[str, Any]] = []
    for sampler, n in n_per_sampler.items():
        mine = sorted((r for r in kept if r["sampler"] == sampler), key=lambda r: r["chain_key"])[:n]
        keys = {r["chain_key"] for r in mine}
        tools = {tuple(r["tools"]["tools"]) for r in mine}
        ids = {r["id"] for r in mine}
        for r in fresh:
            if len(mine) >= n:
                break
            if (
                r["sampler"] != sampler
                or r["chain_key"] in keys
                or r["id"] in ids
                or tuple(r["tools"]["tools"]) in tools
            ):
                continue
            mine.append(r)
            keys.add(r["chain_key"])
            tools.add(tuple(r["tools"]["tools"]))
            ids.add(r["id"])
        out += mine
    reused_ids = {r["id"] for r in kept}
    return out, [r for r in out if r["id"] in reused_ids]


def split_by_previous(
    items: list[dict[str, Any]],
    previous: list[dict[str, Any]],
    link: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(previous rows whose ``link`` id is an item's id, items that have no such previous row)``:
    what can be reused as is and what must be computed."""
    by_parent = {r[link]: r for r in previous}
    reused = [as_written(by_parent[i["id"]]) for i in items if i["id"] in by_parent]
    todo = [i for i in items if i["id"] not in by_parent]
    return reused, todo
