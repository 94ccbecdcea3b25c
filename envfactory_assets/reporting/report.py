"""A Markdown report of what a run stored: per-domain environments, trajectories, datasets, checkpoints.

Everything in it is queried from the store, so the numbers in the docs come from the pipeline itself.
"""

from __future__ import annotations

import json
import random
from typing import Any

from envfactory_assets.reporting.results_table import results_markdown
from envfactory_assets.store.db import Store


def _cell(value: Any) -> str:
    """A table cell: stored text (domains, rejection reasons) may hold ``|`` or line breaks, which would
    split or end the Markdown row."""
    return "" if value is None else " ".join(str(value).split()).replace("|", "\\|")


def _table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


#: Seed of the sample of before/after pairs the report shows (printed with them).
REPORT_SEED = 0


def _query_section(rows: list[dict[str, Any]], n: int = 10, seed: int = REPORT_SEED) -> list[str]:
    """How the queries read (:func:`~envfactory_assets.synth.report.query_statistics`, refined and raw) and
    ``n`` turns' raw and refined queries and reply, drawn with ``random.Random(seed)``."""
    from envfactory_assets.synth.report import query_statistics

    if not rows:
        return []
    ref, raw = query_statistics(rows), query_statistics(rows, field="query_raw")
    figures = [(k, raw[k], ref[k]) for k in ("queries", "distinct_trigrams_per_1000", "literal_identifier_share",
                                             "mean_words")] + [("refined_differs_share", "", ref["refined_differs_share"])]
    turns = [t for r in rows for t in r["turns"]]
    picked = random.Random(seed).sample(turns, min(n, len(turns)))
    return ["## Queries", "", "How the user queries read (raw: every argument literal; refined: what is kept):", "",
            _table(figures, ("figure", "raw", "refined")), "",
            "Turns by operator (share of kept turns): " + ", ".join(f"{k} {v:.1%}" for k, v in ref["operator_share"].items()),
            "", f"Ten turns before and after refinement (random.Random({seed})):", "",
            _table([(t["query_raw"], t["query"], t.get("assistant_summary", "")) for t in picked],
                   ("raw query", "refined query", "assistant reply")), ""]


def run_report(store: Store) -> str:
    """The report as Markdown. Raises FileNotFoundError when the store does not exist."""
    with store.connect(read_only=True) as con:
        q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
        sources = q("SELECT count(*) FROM current_source_resources")[0][0]
        rejected = q("SELECT reason, count(*) FROM current_rejected_resources GROUP BY 1 ORDER BY 2 DESC")
        envs = q("""SELECT e.domain, count(*), count(*) FILTER (WHERE v.status = 'passed'),
                           sum(e.n_tools) FILTER (WHERE v.status = 'passed')
                    FROM current_environments e LEFT JOIN current_verified_environments v ON v.environment_id = e.id
                    GROUP BY 1 ORDER BY 1""")
        chains = q("SELECT sampler, status, count(*), round(avg(n_tools), 2), round(avg(n_servers), 2) "
                   "FROM current_tool_chains GROUP BY 1, 2 ORDER BY 1, 2")
        has_comparison = q("SELECT count(*) FROM information_schema.tables WHERE table_name = 'sampler_comparison'")[0][0]
        comparison = q("SELECT * FROM sampler_comparison") if has_comparison else []
        turns = q("SELECT n_turns, count(*) FROM current_raw_trajectories WHERE status = 'passed' GROUP BY 1 ORDER BY 1")
        calls = q("SELECT min(n_calls), round(avg(n_calls), 2), max(n_calls) FROM current_raw_trajectories "
                  "WHERE status = 'passed'")
        traj = q("SELECT status, count(*) FROM current_raw_trajectories GROUP BY 1 ORDER BY 1")
        # applied = every application recorded; kept = applied minus those reverted (the UI's count)
        ops = q("SELECT o->>'operator', count(*), "
                "count(*) FILTER (WHERE coalesce(CAST(o->>'reverted' AS BOOLEAN), false)), "
                "count(*) FILTER (WHERE NOT coalesce(CAST(o->>'reverted' AS BOOLEAN), false)) "
                "FROM current_refined_trajectories, unnest(CAST(operators AS JSON[])) AS t(o) GROUP BY 1 ORDER BY 1")
        example = q("SELECT t->>'query_raw', t->>'query' FROM current_refined_trajectories, "
                    "unnest(CAST(turns AS JSON[])) AS u(t) "
                    "WHERE CAST(t->'operators' AS VARCHAR) LIKE '%implicit_reference%' "
                    "ORDER BY length(t->>'query'), t->>'query' LIMIT 1")
        kinds = q("SELECT kind, count(*) FROM current_source_resources GROUP BY 1 ORDER BY 1")
        overlap = q("SELECT benchmark, count(DISTINCT env_id), count(*) FROM current_benchmark_overlap "
                    "GROUP BY 1 ORDER BY 1")
        refined = q("SELECT status, count(*) FROM current_refined_trajectories GROUP BY 1 ORDER BY 1")
        accuracy = q("SELECT round(CAST(t->>'accuracy' AS DOUBLE), 2) AS a, count(*) FROM current_refined_trajectories, "
                     "unnest(CAST(turns AS JSON[])) AS u(t) WHERE t->>'accuracy' IS NOT NULL GROUP BY 1 ORDER BY 1")
        has_diversity = q("SELECT count(*) FROM information_schema.tables WHERE table_name = 'trajectory_diversity'")[0][0]
        diversity = q("SELECT * FROM trajectory_diversity") if has_diversity else []
        samples = q("SELECT id, n_turns, CAST(domains AS VARCHAR) FROM current_refined_trajectories "
                    "WHERE status = 'passed' ORDER BY n_turns DESC, id LIMIT 3")
        sft = q("SELECT count(*) FROM current_sft_dataset")[0][0]
        rl = q("SELECT count(*) FROM current_rl_dataset")[0][0]
        splits = q("SELECT 'SFT', split, count(*) FROM current_sft_dataset GROUP BY 2 UNION ALL "
                   "SELECT 'RL', split, count(*) FROM current_rl_dataset GROUP BY 2 ORDER BY 1 DESC, 2")
        ckpts = q("SELECT id, stage, base_model, metrics->>'steps', round(CAST(metrics->>'train_loss' AS DOUBLE), 4), "
                  "round(CAST(metrics->'valid_tool_calls_before'->>'share' AS DOUBLE), 3), "
                  "round(CAST(metrics->'valid_tool_calls_after'->>'share' AS DOUBLE), 3), "
                  "coalesce(json_array_length(rl_dataset_ids), json_array_length(sft_dataset_ids)) "
                  "FROM checkpoints ORDER BY written_at DESC LIMIT 5")
        evaluations = store_evaluations(con)
        stage_times = latest_stage_times(con)
        refined_rows = [{"status": "passed", "turns": json.loads(t)} for (t,) in
                        q("SELECT CAST(turns AS VARCHAR) FROM current_refined_trajectories WHERE status = 'passed' ORDER BY id")]
    parts = [
        "# Store report", "",
        "Produced by `envfactory report` from the store of a run; every number below is a query.", "",
        f"Source resources accepted: **{sources}**; rejected by reason:", "",
        _table(rejected, ("reason", "documents")), "",
        "Accepted by kind:", "",
        _table(kinds, ("kind", "resources")), "",
        "Environments overlapping a held-out benchmark (table `benchmark_overlap`):", "",
        _table(overlap, ("benchmark", "environments", "tool matches")), "",
        "## Environments per domain", "",
        _table(envs, ("domain", "built", "passed verification", "tools (passed)")), "",
        "## Tool chains", "", _table(chains, ("sampler", "status", "chains", "mean tools", "mean servers")), "",
        "Topology-aware sampler vs the random-walk baseline (mart `sampler_comparison`):", "",
        _table(comparison, ("sampler", "chains", "mean tools", "mean servers", "mean dependency depth",
                            "valid share", "distinct tool pairs")), "",
        "## Raw trajectories (before refinement)", "", _table(traj, ("status", "raw trajectories")), "",
        "Turns per passed raw trajectory:", "", _table(turns, ("turns", "raw trajectories")), "",
        "Calls per passed raw trajectory (min / mean / max): "
        + (" / ".join(str(v) for v in calls[0]) if calls[0][0] is not None else "no passed trajectory yet"), "",
        "Refinement operators on refined trajectories (applied = every application; reverted = undone because "
        "the refined query became unsolvable; kept = applied - reverted, what the refined queries carry):", "",
        _table(ops, ("operator", "applied", "reverted", "kept")), "",
        "## Solvability calibration", "", "Refined trajectories by status (unsolvable turns end a chain; "
        "near-duplicates are removed):", "", _table(refined, ("status", "refined trajectories")), "",
        "Per-turn accuracy (passing solve attempts / k) of the queries kept:", "",
        _table(accuracy, ("accuracy", "turns")), "",
        "Diversity of passed refined trajectories (mart `trajectory_diversity`):", "",
        _table(diversity, ("trajectories", "distinct tool pairs", "environments", "domains",
                           "tool pairs / 1,000", "environments / 1,000", "domains / 1,000")), "",
    ]
    parts += _query_section(refined_rows)
    if example:
        parts += ["Example turn, before and after refinement:", "", f"> {example[0][0]}", ">", f"> {example[0][1]}", ""]
    if samples:
        parts += ["Trajectories to read whole (`envfactory show <id>` prints one as Markdown):", "",
                  _table([(f"`{i}`", n, d) for i, n, d in samples], ("id", "turns", "domains")), ""]
    parts += [f"## Datasets\n\nSFT rows: **{sft}**; RL rows (every one replayed to its final state): **{rl}**. "
              "Rows per stored split (`validation`: a row with a held-out environment, 10% of environments; "
              "the exports use this split):", "", _table(splits, ("dataset", "split", "rows")), "",
              "## Checkpoints", "",
              _table(ckpts, ("id", "stage", "base model", "steps", "train loss", "valid tool calls before",
                             "valid tool calls after", "rows trained on (SFT: sft rows; GRPO: RL prompts)")), ""]
    parts += ["## Evaluations", "", results_markdown(evaluations), ""]
    parts += stage_times_section(stage_times)
    return "\n".join(parts)


def latest_stage_times(con: Any) -> list[tuple[Any, ...]]:
    """Per step of ``stage_times``, in start order of its latest run: ``(step_key, wall_seconds, peak_rss_mib,
    status, started_at, runs recorded, fastest and slowest successful wall seconds)``; empty when nothing is
    recorded or the store predates the table (read-only connections do not migrate)."""
    if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'stage_times'").fetchone()[0]:
        return []
    return con.execute("""
        SELECT step_key, wall_seconds, peak_rss_mib, status, started_at, runs, fastest, slowest FROM (
            SELECT *, row_number() OVER (PARTITION BY step_key ORDER BY started_at DESC NULLS LAST, id) AS latest,
                   count(*) OVER (PARTITION BY step_key) AS runs,
                   min(wall_seconds) FILTER (WHERE status = 'SUCCESS') OVER (PARTITION BY step_key) AS fastest,
                   max(wall_seconds) FILTER (WHERE status = 'SUCCESS') OVER (PARTITION BY step_key) AS slowest
            FROM current_stage_times)
        WHERE latest = 1 ORDER BY started_at NULLS LAST, step_key""").fetchall()


def stage_times_section(rows: list[tuple[Any, ...]]) -> list[str]:
    """The "Stage times" section of :func:`run_report` from :func:`latest_stage_times` rows."""
    if not rows:
        return ["## Stage times", "", "No stage times recorded yet: `envfactory run` records them at its end.", ""]
    table = [(step, "" if secs is None else f"{secs:.1f}", "" if mib is None else f"{mib:.0f}", status,
              "" if started is None else f"{started:%Y-%m-%d %H:%M} UTC", runs,
              "" if fastest is None else f"{fastest:.1f} - {slowest:.1f}")
             for step, secs, mib, status, started, runs, fastest, slowest in rows]
    return ["## Stage times", "",
            ("Per stage, its latest run as `envfactory run` recorded it (table `stage_times`): wall time, peak "
             "resident memory of the process that ran it (worker processes not counted), and the fastest and "
             "slowest successful runs this store recorded (any settings, any machine load):"), "",
            _table(table, ("stage", "wall time (s)", "peak memory (MiB)", "status", "started", "runs",
                           "range of successful runs (s)")), ""]


def store_evaluations(con: Any) -> list[dict[str, Any]]:
    """Current ``evaluations`` rows (the columns the results table needs); empty when there are none or the
    store predates the table (read-only connections do not migrate)."""
    import orjson

    if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'current_evaluations'").fetchone()[0]:
        return []

    cur = con.execute("SELECT model, stage, benchmark, subset, mean, std, n_tasks, seeds, config, metrics "
                      "FROM current_evaluations ORDER BY id")
    names = [d[0] for d in cur.description]
    return [{n: (orjson.loads(v) if n in ("seeds", "config", "metrics") and v is not None else v) for n, v in zip(names, row)}
            for row in cur.fetchall()]
