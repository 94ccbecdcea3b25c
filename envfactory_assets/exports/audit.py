"""What a written export trains, measured as its own ecosystems would load it: the verl reward over every RL row,
LlamaFactory's ShareGPT rules over every SFT row, and the Hugging Face rows' fit in the base model's context.

The figures are stored with the export (table ``export_audits``), gate it (the exports' asset checks) and are
printed by ``envfactory report`` (its "Exports" section).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

ABSTENTION_REPLY = "None of my tools can do that."
"""The reply scored on a row whose gold is no call (an abstention row): a reply in words, without a call."""

MAX_EXAMPLES = 5
"""Row ids (with their scores or problems) kept per failing figure."""


def _verl_rows(folder: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return [r for path in sorted(folder.glob("verl_*.parquet")) for r in pq.read_table(path).to_pylist()]


def _sharegpt_rows(folder: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(folder.glob("sharegpt_*.json")):
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from None
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise ValueError(f"{path}: expected a JSON list of ShareGPT records (objects)")
        rows += records
    return rows


def verl_reward_figures(
    folder: Path, runner: Any, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """The exported reward (:func:`~envfactory_assets.exports.verl_reward.score_calls`, what verl's
    ``compute_score`` returns) of four responses on every verl row of the export in ``folder``.

    Responses: an empty one and a blank one (each must score 0); the gold calls, or on an abstention row
    :data:`ABSTENTION_REPLY` (must score :data:`~envfactory_assets.tooluse.reward.MAX_REWARD`); the turn's
    executed calls (must score the maximum: a model that answers as the turn did is never charged); on a row
    whose gold calls need arguments, the gold calls with empty arguments (must score 0).

    Args:
        folder: an export version's folder (``verl_train.parquet``, ``verl_validation.parquet``).
        runner: a :class:`~envfactory_assets.tooluse.task_episode.TaskRunner` holding the rows' environments.
        progress: called as ``progress(done, total)`` in rows.

    Returns:
        ``{"rows", "empty_paid", "gold_below_max", "executed_below_max", "rows_needing_arguments",
        "empty_arguments_paid", "max_empty_score", "examples": {figure: ["row_id: score", ...]}}``; counts in
        rows.

    Raises:
        ValueError: a score is not a finite number in range (the reward's own guard).
        KeyError: a row's ground truth lacks a field, or names an environment ``runner`` lacks.
    """
    rows = _verl_rows(folder)
    figures: dict[str, Any] = {
        "rows": len(rows),
        "empty_paid": 0,
        "gold_below_max": 0,
        "executed_below_max": 0,
        "rows_needing_arguments": 0,
        "empty_arguments_paid": 0,
        "max_empty_score": 0.0,
    }
    examples: dict[str, list[str]] = {}

    def miss(figure: str, row_id: str, score: float) -> None:
        figures[figure] += 1
        if len(examples.setdefault(figure, [])) < MAX_EXAMPLES:
            examples[figure].append(f"{row_id}: {score}")

    for done, row in enumerate(rows, 1):
        row_id = str(row.get("id"))
        try:
            truth = json.loads(row["reward_model"]["ground_truth"])
            if not isinstance(truth, dict):
                raise ValueError("the ground truth is not a JSON object")
            _score_row(truth, row_id, figures, miss, runner)
        except (KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"verl row {row_id} of {folder}: {type(exc).__name__}: {exc}") from None
        if progress:
            progress(done, len(rows))
    return {**figures, "examples": examples}


def _score_row(truth: dict[str, Any], row_id: str, figures: dict[str, Any], miss: Any, runner: Any) -> None:
    """The four responses of :func:`verl_reward_figures` on one row, counted into ``figures``."""
    from envfactory_assets.exports.verl_reward import score_calls
    from envfactory_assets.tooluse.reward import MAX_REWARD, arguments_that_matter
    from envfactory_assets.tooluse.tool_calls import tool_call_text

    def score(text: str) -> float:
        return score_calls(truth, text, runner=runner)["score"]

    empty = max(score(""), score(" \n"))
    figures["max_empty_score"] = max(figures["max_empty_score"], empty)
    if empty:
        miss("empty_paid", row_id, empty)
    gold = tool_call_text(truth["gold_calls"]) or ABSTENTION_REPLY
    if (s := score(gold)) != MAX_REWARD:
        miss("gold_below_max", row_id, s)
    executed = tool_call_text(truth.get("executed_calls") or []) or gold
    if executed != gold and (s := score(executed)) != MAX_REWARD:
        miss("executed_below_max", row_id, s)
    if any(arguments_that_matter(c, truth["tools"], truth.get("masked_arguments") or ()) for c in truth["gold_calls"]):
        figures["rows_needing_arguments"] += 1
        emptied = [{"name": c["name"], "arguments": {}} for c in truth["gold_calls"]]
        if s := score(tool_call_text(emptied)):
            miss("empty_arguments_paid", row_id, s)


def sharegpt_figures(folder: Path) -> dict[str, Any]:
    """LlamaFactory's ShareGPT rules (:func:`~envfactory_assets.exports.formats.sharegpt_problems`) over every
    record of the export's ``sharegpt_*.json`` files.

    Returns:
        ``{"rows", "rows_breaking_rules", "examples": ["row_id: problem", ...]}``.
    """
    from envfactory_assets.exports.formats import sharegpt_problems

    records = _sharegpt_rows(folder)
    broken = [(r.get("id"), p) for r in records if (p := sharegpt_problems(r))]
    return {
        "rows": len(records),
        "rows_breaking_rules": len(broken),
        "examples": [f"{i}: {p[0]}" for i, p in broken[:MAX_EXAMPLES]],
    }


def audit_export(
    manifest: dict[str, Any], runner: Any | None = None, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Every figure of one written export (the folder ``manifest["path"]``).

    Args:
        manifest: the export's manifest (:func:`~envfactory_assets.exports.stage.build_exports`).
        runner: a :class:`~envfactory_assets.tooluse.task_episode.TaskRunner` with the RL rows' environments;
            None opens one on the export's ``environments.json`` and closes it after.
        progress: as in :func:`verl_reward_figures`.

    Returns:
        ``{"version", "verl": verl_reward_figures(...) or None (no reward module exported), "sharegpt":
        sharegpt_figures(...), "hf_context": manifest["hf_context"], "dropped_by_licence": manifest["dropped"],
        "problems": [...]}``; ``problems`` lists every figure that breaks a rule (empty: the export trains what it
        claims).
    """
    from envfactory_assets.exports import verl_reward

    if not isinstance(manifest, dict) or "path" not in manifest or "version" not in manifest:
        raise ValueError("audit_export: the manifest must be a dict with the export's 'version' and 'path'")
    folder = Path(manifest["path"])
    if not folder.is_dir():
        raise FileNotFoundError(f"audit_export: export {manifest['version']}: no folder {folder}")
    verl = None
    if manifest.get("verl_reward"):
        own = runner is None
        if own:
            from envfactory_assets.tooluse.task_episode import TaskRunner

            environments = json.loads((folder / verl_reward.ENVIRONMENTS_FILE).read_text(encoding="utf-8"))
            runner = TaskRunner(environments)
        try:
            verl = verl_reward_figures(folder, runner, progress)
        finally:
            if own:
                runner.close()
    sharegpt = sharegpt_figures(folder)
    problems = []
    if verl:
        for figure, what in (
            ("empty_paid", "an empty response is paid"),
            ("gold_below_max", "the gold calls score below the maximum"),
            ("executed_below_max", "the turn's executed calls score below the maximum"),
            ("empty_arguments_paid", "calls with empty arguments are paid"),
        ):
            if verl[figure]:
                problems.append(f"verl: {what} on {verl[figure]} of {verl['rows']} rows: {verl['examples'][figure]}")
    # the rows the audit read against the rows the manifest says were written: an emptied or swapped folder
    # is not a pass
    files = manifest.get("files") or {}
    listed = {
        kind: sum(sum((info.get("rows") or {}).values()) for name, info in files.items() if name.startswith(kind + "_"))
        for kind in ("verl", "sharegpt")
    }
    if verl and verl["rows"] != listed["verl"]:
        problems.append(f"verl: read {verl['rows']} rows, the manifest lists {listed['verl']}")
    if sharegpt["rows"] != listed["sharegpt"]:
        problems.append(f"ShareGPT: read {sharegpt['rows']} rows, the manifest lists {listed['sharegpt']}")
    if sharegpt["rows_breaking_rules"]:
        problems.append(
            f"ShareGPT: {sharegpt['rows_breaking_rules']} of {sharegpt['rows']} rows break LlamaFactory's rules: "
            f"{sharegpt['examples']}"
        )
    return {
        "version": manifest["version"],
        "verl": verl,
        "sharegpt": sharegpt,
        "hf_context": manifest.get("hf_context"),
        "dropped_by_licence": manifest.get("dropped"),
        "problems": problems,
    }
