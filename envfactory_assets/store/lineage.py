"""Walking a checkpoint back to the exact source resources it was trained from.

Path: checkpoint -> sft_dataset rows -> refined_trajectories -> raw_trajectories -> tool_chains ->
verified_environments -> environments -> source_resources (uri, sha256, license). Superseded rows are
included, so an old checkpoint stays auditable after re-synthesis.
"""

from __future__ import annotations

from typing import Any

from envfactory_assets.store.db import Store


class LineageError(LookupError):
    """The checkpoint (or a link on its path) is not in the store."""


def _by_ids(store: Store, table: str, ids: set[str]) -> list[dict[str, Any]]:
    if not ids:
        return []
    marks = ", ".join("?" for _ in ids)
    return store.read(table, f"id IN ({marks})", sorted(ids), current=False)


def _parents(store: Store, table: str, ids: set[str], checkpoint_id: str) -> list[dict[str, Any]]:
    """The rows of ``table`` with ``ids``; raises LineageError naming the ids that are missing."""
    rows = _by_ids(store, table, ids)
    missing = sorted(ids - {r["id"] for r in rows})
    if missing:
        raise LineageError(
            f"broken lineage for {checkpoint_id}: {len(missing)} {table} row(s) missing, e.g. {missing[:5]}"
        )
    return rows


def checkpoint_lineage(store: Store, checkpoint_id: str) -> dict[str, Any]:
    """The lineage of ``checkpoint_id`` as a dict of counts, ids per stage and the source resources.

    Raises:
        LineageError: if no checkpoint has that id, or a parent row is missing (a broken store).
    """
    ckpts = _by_ids(store, "checkpoints", {checkpoint_id})
    if not ckpts:
        known = [r["id"] for r in store.read("checkpoints", current=False)]
        raise LineageError(f"no checkpoint {checkpoint_id!r} in {store.path}; known: {known[:10]}")
    ckpt = ckpts[0]
    # Every link is checked: a parent id that is not stored is a broken store, not an empty lineage.
    sft = _parents(store, "sft_dataset", set(ckpt["sft_dataset_ids"]), checkpoint_id)
    rl = _parents(store, "rl_dataset", set(ckpt.get("rl_dataset_ids") or []), checkpoint_id)  # GRPO prompts
    if ckpt.get("parent_checkpoint_id") and not _by_ids(store, "checkpoints", {ckpt["parent_checkpoint_id"]}):
        raise LineageError(
            f"broken lineage for {checkpoint_id}: parent checkpoint {ckpt['parent_checkpoint_id']} missing"
        )
    refined = _parents(store, "refined_trajectories", {r["refined_trajectory_id"] for r in sft + rl}, checkpoint_id)
    raw = _parents(store, "raw_trajectories", {r["raw_trajectory_id"] for r in refined}, checkpoint_id)
    chains = _parents(store, "tool_chains", {r["tool_chain_id"] for r in raw}, checkpoint_id)
    verified = _parents(
        store, "verified_environments", {v for c in chains for v in c["verified_environment_ids"]}, checkpoint_id
    )
    envs = _parents(store, "environments", {v["environment_id"] for v in verified}, checkpoint_id)
    sources = _parents(store, "source_resources", {e["source_resource_id"] for e in envs}, checkpoint_id)
    return {
        "checkpoint": {
            **{k: ckpt[k] for k in ("id", "base_model", "base_model_hash", "sft_dataset_version", "path")},
            "stage": ckpt.get("stage") or "sft",
            "parent_checkpoint_id": ckpt.get("parent_checkpoint_id"),
            "rl_dataset_version": ckpt.get("rl_dataset_version"),
        },
        "counts": {
            "sft_dataset": len(sft),
            "rl_dataset": len(rl),
            "refined_trajectories": len(refined),
            "raw_trajectories": len(raw),
            "tool_chains": len(chains),
            "verified_environments": len(verified),
            "environments": len(envs),
            "source_resources": len(sources),
        },
        "ids": {
            "sft_dataset": [r["id"] for r in sft],
            "rl_dataset": [r["id"] for r in rl],
            "refined_trajectories": [r["id"] for r in refined],
            "raw_trajectories": [r["id"] for r in raw],
            "tool_chains": [r["id"] for r in chains],
            "verified_environments": [r["id"] for r in verified],
            "environments": [r["id"] for r in envs],
        },
        "source_resources": [
            {
                "id": s["id"],
                "resource_key": s["resource_key"],
                "provider": s["provider"],
                "domain": s["domain"],
                "uri": f"{s['corpus_root']}/{s['path']}",
                "path": s["path"],
                "sha256": s["sha256"],
                "license": s["license_name"],
                "license_url": s["license_url"],
            }
            for s in sources
        ],
    }


def format_lineage(lineage: dict[str, Any]) -> str:
    """Human-readable text of :func:`checkpoint_lineage`."""
    c = lineage["checkpoint"]
    lines = [
        f"checkpoint {c['id']}  base={c['base_model']} ({c['base_model_hash'][:12]})  path={c['path']}",
        f"  stage {c.get('stage', 'sft')}"
        + (f"  parent {c['parent_checkpoint_id']}" if c.get("parent_checkpoint_id") else "")
        + f"  dataset version {c['sft_dataset_version']}"
        + (f"  rl dataset version {c['rl_dataset_version']}" if c.get("rl_dataset_version") else ""),
    ]
    for stage, n in lineage["counts"].items():
        lines.append(f"  <- {n:5d} {stage}")
    lines.append("source resources:")
    for s in lineage["source_resources"]:
        lines.append(f"  {s['resource_key']:<40} {s['domain']:<24} sha256={s['sha256'][:16]}  license={s['license']}")
        lines.append(f"      {s['uri']}")
    return "\n".join(lines)
