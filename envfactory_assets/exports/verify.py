"""Verify a written export against its manifest (used by the exports' asset checks)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envfactory_assets.tooluse.splits import row_split


def _rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return [{**r, "env_ids": r["extra_info"]["env_ids"]} for r in pq.read_table(path).to_pylist()]
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    from datasets import load_from_disk

    out = []
    for split, ds in load_from_disk(str(path)).items():
        out += [{**r, "split": split} for r in ds]
    return out


def verify_export(folder: Path, manifest: dict[str, Any], files: Iterable[str]) -> list[str]:
    """Problems found in ``files`` of the export in ``folder`` (empty list = all good).

    Checked: each file exists; its row count equals the manifest's; rows of the train split use no
    held-out environment (the manifest's ``held_out_env_ids``; the hash rule of ``row_split`` for a
    manifest written before it was recorded) and validation rows do; every row lists one licence per environment;
    where the manifest records ``hf_context``, every ``hf_sft`` row has a token count within it.
    ``dataset_info.json`` is only checked for existence.
    """
    problems = []
    recorded = manifest.get("held_out_env_ids")
    held_out = None if recorded is None else set(recorded)
    if not (folder / "README.md").is_file():
        problems.append("dataset card README.md missing")
    for name in files:
        path = folder / name
        if not path.exists():
            problems.append(f"{name}: missing")
            continue
        if name == "dataset_info.json":
            continue
        rows = _rows(path)
        expected = sum(manifest["files"][name]["rows"].values())
        if len(rows) != expected:
            problems.append(f"{name}: {len(rows)} rows, manifest says {expected}")
        for row in rows:
            split = row.get("split") or ("validation" if "validation" in name else "train")
            held = row_split(row["env_ids"], held_out) == "held_out"
            if held != (split == "validation"):
                problems.append(
                    f"{name}: row {row['id']} in {split} but environments {row['env_ids']} "
                    f"are {'held out' if held else 'training'} environments"
                )
            context = manifest.get("hf_context")
            if context and name == "hf_sft" and not 0 < (row.get("n_tokens") or 0) <= context["max_tokens"]:
                problems.append(
                    f"{name}: row {row['id']} has {row.get('n_tokens')} tokens, not within {context['model']}'s "
                    f"{context['max_tokens']}"
                )
            licences = row.get("licences") or []
            if len(licences) != len(row["env_ids"]) or not all(entry.get("name") for entry in licences):
                problems.append(f"{name}: row {row['id']} lacks a licence per environment")
    return problems
