"""The report's "Exports" section: the current export's audit (table ``export_audits``), as the exports stage
measured it (:mod:`envfactory_assets.exports.audit`)."""

from __future__ import annotations

from typing import Any

import orjson

from envfactory_assets.reporting.realism import has_table


def current_export_audit(con: Any) -> dict[str, Any] | None:
    """The audit of the export the latest ``dataset_exports`` materialization wrote, or None (no export yet, or
    a store written before exports were audited)."""
    if not has_table(con, "current_export_audits"):
        return None
    row = con.execute("SELECT audit FROM current_export_audits ORDER BY written_at DESC LIMIT 1").fetchone()
    return orjson.loads(row[0]) if row and row[0] else None


def exports_section(audit: dict[str, Any] | None) -> list[str]:
    """Markdown lines of the section (a line saying nothing was measured when ``audit`` is None)."""
    if audit is None:
        return ["## Exports", "", "No export audited in this store yet: materialize `dataset_exports`.", ""]
    lines = [
        "## Exports",
        "",
        f"Export `{audit['version']}`, measured by the exports stage as each ecosystem loads it "
        "(table `export_audits`; the exports' blocking checks fail on any problem listed here):",
        "",
    ]
    verl = audit.get("verl")
    if verl:
        lines += [
            f"- verl: `compute_score` (`envfactory_reward.py`) over all {verl['rows']} RL rows: an empty or blank "
            f"response paid on {verl['empty_paid']} rows (highest score {verl['max_empty_score']}); gold calls below "
            f"the maximum on {verl['gold_below_max']}; the turn's executed calls below the maximum on "
            f"{verl['executed_below_max']}; calls with empty arguments paid on {verl['empty_arguments_paid']} of "
            f"the {verl['rows_needing_arguments']} rows whose gold calls need arguments.",
        ]
    share = audit["sharegpt"]
    lines.append(
        f"- LlamaFactory ShareGPT: {share['rows_breaking_rules']} of {share['rows']} rows break its role rules "
        "(the converter would skip them)."
    )
    context = audit.get("hf_context")
    if context:
        lines.append(
            f"- Hugging Face: within {context['model']}'s {context['max_tokens']} tokens: {context['kept']} rows "
            f"whole, {context['split']} split at turn boundaries into {context['parts']} rows, {context['dropped']} "
            "dropped."
        )
    dropped = audit.get("dropped_by_licence") or {}
    lines.append(f"- Dropped by the licence allow-list: SFT {dropped.get('sft', 0)}, RL {dropped.get('rl', 0)}.")
    lines.append("")
    if audit["problems"]:
        lines += ["Problems:", "", *(f"- {p}" for p in audit["problems"]), ""]
    return lines
