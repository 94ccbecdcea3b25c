"""A Markdown report of what a run stored: per-domain environments, trajectories, datasets, checkpoints.

Everything in it is queried from the store, so the numbers in the docs come from the pipeline itself.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from envfactory_assets.envgen.tools import BEYOND_CRUD, KIND_ORDER, RELATION_KINDS
from envfactory_assets.reporting.dataset_mix import sft_mix, sft_mix_lines
from envfactory_assets.reporting.exports_section import current_export_audit, exports_section
from envfactory_assets.reporting.realism import (
    current_rows,
    flat_realism_figures,
    has_table,
    open_old_store,
    realism_figures,
)
from envfactory_assets.reporting.results_table import results_markdown
from envfactory_assets.reporting.stage_counts import chain_counts, status_counts
from envfactory_assets.store.db import Store, read_rows


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


def query_figures(rows: list[dict[str, Any]]) -> list[tuple[str, Any, Any]]:
    """``(figure, raw, refined)`` of :func:`~envfactory_assets.synth.refinement.report.query_statistics` over passed
    refined trajectory ``rows``: how the raw and the refined queries read."""
    from envfactory_assets.synth.refinement.report import query_statistics

    ref, raw = query_statistics(rows), query_statistics(rows, field="query_raw")
    return [
        (k, raw[k], ref[k]) for k in ("queries", "distinct_trigrams_per_1000", "literal_identifier_share", "mean_words")
    ] + [("refined_differs_share", "", ref["refined_differs_share"])]


def reply_figures_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How the assistant replies of passed refined trajectory ``rows`` read and whether they hold: ``replies``,
    ``distinct_trigrams_per_1000`` (as for queries, :func:`~envfactory_assets.synth.refinement.report.
    query_statistics` over the first 1,000 replies), ``checker_pass_share`` and ``failing``
    (:func:`~envfactory_assets.quality.reply_facts.reply_figures`: every number, date, quote and identifier
    of a reply held against its turn's tool results) and up to five ``failures``."""
    from envfactory_assets.quality.reply_facts import reply_figures
    from envfactory_assets.synth.refinement.report import query_statistics

    checked = reply_figures(rows)
    return {
        "replies": checked["replies"],
        "distinct_trigrams_per_1000": query_statistics(rows, field="assistant_summary")["distinct_trigrams_per_1000"],
        "checker_pass_share": checked["pass_share"],
        "failing": checked["replies"] - checked["passing"],
        "failures": checked["failures"],
    }


def replies_section(rows: list[dict[str, Any]], n: int = 5, seed: int = REPORT_SEED) -> list[str]:
    """The "Assistant replies" section: :func:`reply_figures_of` and ``n`` replies with their turn's request,
    drawn with ``random.Random(seed)``."""
    if not rows:
        return []
    figures = reply_figures_of(rows)
    turns = [t for r in rows for t in r["turns"] if t.get("calls")]
    picked = random.Random(seed).sample(turns, min(n, len(turns)))
    parts = [
        "## Assistant replies",
        "",
        "Closing replies of the kept turns: how varied they read, and the share whose every number, date, quote and "
        "identifier the turn's tool results hold (`quality.reply_facts`: rows returned, a total only where the "
        "result states one, a refusal reported with its reason):",
        "",
        _table(
            [
                ("replies", figures["replies"]),
                ("distinct word 3-grams per 1,000 replies", figures["distinct_trigrams_per_1000"]),
                ("checker pass share", figures["checker_pass_share"]),
                ("failing replies", figures["failing"]),
            ],
            ("figure", "value"),
        ),
        "",
    ]
    if figures["failures"]:
        parts += [
            _table(
                [(r, t, reply, "; ".join(p)) for r, t, reply, p in figures["failures"]],
                ("trajectory", "turn", "reply", "problems"),
            ),
            "",
        ]
    parts += [
        f"Five replies (random.Random({seed})):",
        "",
        _table([(t["query"], t.get("assistant_summary", "")) for t in picked], ("request", "assistant reply")),
        "",
    ]
    return parts


def accuracy_rows(con: Any) -> list[tuple[Any, int]] | None:
    """``(per-turn accuracy rounded to 0.01, turns)`` over every current refined trajectory; None when the
    store predates the table."""
    if not has_table(con, "current_refined_trajectories"):
        return None
    return con.execute(
        "SELECT round(CAST(t->>'accuracy' AS DOUBLE), 2) AS a, count(*) FROM current_refined_trajectories, "
        "unnest(CAST(turns AS JSON[])) AS u(t) WHERE t->>'accuracy' IS NOT NULL GROUP BY 1 ORDER BY 1"
    ).fetchall()


def _query_section(rows: list[dict[str, Any]], n: int = 10, seed: int = REPORT_SEED) -> list[str]:
    """How the queries read (:func:`~envfactory_assets.synth.refinement.report.query_statistics`, refined and raw) and
    ``n`` turns' raw and refined queries and reply, drawn with ``random.Random(seed)``."""
    from envfactory_assets.synth.refinement.report import query_statistics

    if not rows:
        return []
    ref = query_statistics(rows)
    figures = query_figures(rows)
    turns = [t for r in rows for t in r["turns"]]
    picked = random.Random(seed).sample(turns, min(n, len(turns)))
    return [
        "## Queries",
        "",
        "How the user queries read (raw: every argument literal; refined: what is kept):",
        "",
        _table(figures, ("figure", "raw", "refined")),
        "",
        "Turns by operator (share of kept turns): "
        + ", ".join(f"{k} {v:.1%}" for k, v in ref["operator_share"].items()),
        "",
        f"Ten turns before and after refinement (random.Random({seed})):",
        "",
        _table(
            [(t["query_raw"], t["query"], t.get("assistant_summary", "")) for t in picked],
            ("raw query", "refined query", "assistant reply"),
        ),
        "",
    ]


#: What :func:`run_report` does, in order: each name is handed to its ``progress`` as the step starts.
REPORT_STEPS = (
    "counting rows per stage",
    "per-turn accuracy",
    "diversity, datasets, checkpoints, evaluations, stage times",
    "reading the passed refined trajectories",
    "data realism figures",
    "clarification and user text figures",
    "drawing the trajectories to show",
    "query figures",
    "assistant reply figures",
)


def run_report(store: Store, seed: int = REPORT_SEED, progress: Callable[[str], None] | None = None) -> str:
    """The report as Markdown, its samples (turns, trajectories) drawn with ``random.Random(seed)``; the store
    is opened read-only. ``progress``, when given, is called with each of :data:`REPORT_STEPS` as it starts
    (the report takes about a minute on a default run's store). Raises FileNotFoundError when the store does
    not exist."""
    steps = iter(REPORT_STEPS)
    step = (lambda: progress(next(steps))) if progress else (lambda: None)
    with store.connect(read_only=True) as con:
        step()
        q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
        sources = q("SELECT count(*) FROM current_source_resources")[0][0]
        rejected = q("SELECT reason, count(*) FROM current_rejected_resources GROUP BY 1 ORDER BY 2 DESC, 1")
        envs = q("""SELECT e.domain, count(*), count(*) FILTER (WHERE v.status = 'passed'),
                           sum(e.n_tools) FILTER (WHERE v.status = 'passed')
                    FROM current_environments e LEFT JOIN current_verified_environments v ON v.environment_id = e.id
                    GROUP BY 1 ORDER BY 1""")
        tool_kinds = q("""SELECT e.domain, t->>'kind', count(*)
                          FROM current_environments e JOIN current_verified_environments v ON v.environment_id = e.id,
                               unnest(CAST(e.tools AS JSON[])) AS u(t)
                          WHERE v.status = 'passed' GROUP BY 1, 2""")
        call_kinds = q("""SELECT c->>'kind', count(*), count(*) FILTER (WHERE c->>'error' IS NOT NULL)
                          FROM current_refined_trajectories, unnest(CAST(turns AS JSON[])) AS u(t),
                               unnest(CAST(t->'calls' AS JSON[])) AS w(c)
                          WHERE status = 'passed' GROUP BY 1 ORDER BY 2 DESC, 1""")
        refused_turns = q("""SELECT count(*), count(*) FILTER (WHERE EXISTS (SELECT 1
                                 FROM unnest(CAST(t->'calls' AS JSON[])) AS w(c) WHERE c->>'error' IS NOT NULL))
                             FROM current_refined_trajectories, unnest(CAST(turns AS JSON[])) AS u(t)
                             WHERE status = 'passed'""")[0]
        coverage = (
            q("SELECT outcome, name, operations, share_of_operations FROM operation_coverage")
            if has_table(con, "operation_coverage")
            else []
        )
        model_tools = model_tool_outcomes(con)
        chains = chain_counts(con)
        comparison = q("SELECT * FROM sampler_comparison") if has_table(con, "sampler_comparison") else []
        turns = q(
            "SELECT n_turns, count(*) FROM current_raw_trajectories WHERE status = 'passed' GROUP BY 1 ORDER BY 1"
        )
        calls = q(
            "SELECT min(n_calls), round(avg(n_calls), 2), max(n_calls) FROM current_raw_trajectories "
            "WHERE status = 'passed'"
        )
        traj = status_counts(con, "raw_trajectories")
        # applied = every application recorded; kept = applied minus those reverted (the UI's count)
        ops = q(
            "SELECT o->>'operator', count(*), "
            "count(*) FILTER (WHERE coalesce(CAST(o->>'reverted' AS BOOLEAN), false)), "
            "count(*) FILTER (WHERE NOT coalesce(CAST(o->>'reverted' AS BOOLEAN), false)) "
            "FROM current_refined_trajectories, unnest(CAST(operators AS JSON[])) AS t(o) GROUP BY 1 ORDER BY 1"
        )
        example = q(
            "SELECT t->>'query_raw', t->>'query' FROM current_refined_trajectories, "
            "unnest(CAST(turns AS JSON[])) AS u(t) "
            "WHERE CAST(t->'operators' AS VARCHAR) LIKE '%implicit_reference%' "
            "ORDER BY length(t->>'query'), t->>'query' LIMIT 1"
        )
        kinds = q("SELECT kind, count(*) FROM current_source_resources GROUP BY 1 ORDER BY 1")
        overlap = q(
            "SELECT benchmark, count(DISTINCT env_id), count(*) FROM current_benchmark_overlap GROUP BY 1 ORDER BY 1"
        )
        refined = status_counts(con, "refined_trajectories")
        step()
        accuracy = accuracy_rows(con)
        step()
        diversity = q("SELECT * FROM trajectory_diversity") if has_table(con, "trajectory_diversity") else []
        sft = q("SELECT count(*) FROM current_sft_dataset")[0][0]
        mix = sft_mix(read_rows(con, "sft_dataset"))
        rl = q("SELECT count(*) FROM current_rl_dataset")[0][0]
        splits = q(
            "SELECT 'SFT', split, count(*) FROM current_sft_dataset GROUP BY 2 UNION ALL "
            "SELECT 'RL', split, count(*) FROM current_rl_dataset GROUP BY 2 ORDER BY 1 DESC, 2"
        )
        ckpts = q(
            "SELECT id, stage, base_model, metrics->>'steps', round(CAST(metrics->>'train_loss' AS DOUBLE), 4), "
            "round(CAST(metrics->'valid_tool_calls_before'->>'share' AS DOUBLE), 3), "
            "round(CAST(metrics->'valid_tool_calls_after'->>'share' AS DOUBLE), 3), "
            "round(CAST(metrics->'valid_tool_calls_after'->>'call_rate' AS DOUBLE), 3), "
            "CASE WHEN stage = 'grpo' THEN (metrics->>'steps_with_signal') || ' of ' || (metrics->>'steps') END, "
            "coalesce(json_array_length(rl_dataset_ids), json_array_length(sft_dataset_ids)) "
            "FROM current_checkpoints ORDER BY written_at DESC LIMIT 5"
        )
        evaluations = store_evaluations(con)
        export_audit = current_export_audit(con)
        stage_times = latest_stage_times(con)
        step()
        refined_rows = read_rows(con, "refined_trajectories", "status = 'passed'")
        step()
        realism = realism_figures(con, refined_rows)
        step()
        conversation = conversation_text_figures(con, refined_rows)
        step()
        picked = random.Random(seed).sample(refined_rows, min(10, len(refined_rows)))
        examples = example_ids(con, picked)
        raws = {
            r["id"]: r
            for r in reversed(
                read_rows(
                    con,
                    "raw_trajectories",
                    "list_contains(?, id)",
                    [[r["raw_trajectory_id"] for r in picked]],
                    current=False,
                )
            )
        }
    parts = [
        "# Store report",
        "",
        "Produced by `envfactory report` from the store of a run; every number below is a query.",
        "",
        f"Source resources accepted: **{sources}**; rejected by reason:",
        "",
        _table(rejected, ("reason", "documents")),
        "",
        "Accepted by kind:",
        "",
        _table(kinds, ("kind", "resources")),
        "",
        "Environments overlapping a held-out benchmark (table `benchmark_overlap`):",
        "",
        _table(overlap, ("benchmark", "environments", "tool matches")),
        "",
        "## Environments per domain",
        "",
        _table(envs, ("domain", "built", "passed verification", "tools (passed)")),
        "",
        *tool_kind_section(tool_kinds, call_kinds, coverage, refused_turns),
        *model_tool_section(model_tools),
        "## Tool chains",
        "",
        _table(chains, ("sampler", "status", "chains", "mean tools", "mean servers")),
        "",
        "Topology-aware sampler vs the random-walk baseline (mart `sampler_comparison`):",
        "",
        _table(
            comparison,
            (
                "sampler",
                "chains",
                "mean tools",
                "mean servers",
                "mean dependency depth",
                "valid share",
                "distinct tool pairs",
            ),
        ),
        "",
        "## Raw trajectories (before refinement)",
        "",
        _table(traj, ("status", "raw trajectories")),
        "",
        "Turns per passed raw trajectory:",
        "",
        _table(turns, ("turns", "raw trajectories")),
        "",
        "Calls per passed raw trajectory (min / mean / max): "
        + (" / ".join(str(v) for v in calls[0]) if calls[0][0] is not None else "no passed trajectory yet"),
        "",
        "Refinement operators on refined trajectories (applied = every application; reverted = undone because "
        "the refined query became unsolvable; kept = applied - reverted, what the refined queries carry):",
        "",
        _table(ops, ("operator", "applied", "reverted", "kept")),
        "",
        "## Solvability calibration",
        "",
        "Refined trajectories by status (unsolvable turns end a chain; near-duplicates are removed):",
        "",
        _table(refined, ("status", "refined trajectories")),
        "",
        "Per-turn accuracy (passing solve attempts / k) of the queries kept:",
        "",
        _table(accuracy or [], ("accuracy", "turns")),
        "",
        "Diversity of passed refined trajectories (mart `trajectory_diversity`):",
        "",
        _table(
            diversity,
            (
                "trajectories",
                "distinct tool pairs",
                "environments",
                "domains",
                "tool pairs / 1,000",
                "environments / 1,000",
                "domains / 1,000",
            ),
        ),
        "",
    ]
    step()
    parts += _query_section(refined_rows, seed=seed)
    step()
    parts += replies_section(refined_rows, seed=seed)
    if example:
        parts += ["Example turn, before and after refinement:", "", f"> {example[0][0]}", ">", f"> {example[0][1]}", ""]
    parts += realism_section(realism)
    parts += conversation_text_section(conversation)
    parts += [
        f"## Datasets\n\nSFT rows: **{sft}**; RL rows (every one replayed to its final state): **{rl}**. "
        "Rows per stored split (`validation`: a row with a held-out environment, 10% of environments; "
        "the exports use this split):",
        "",
        _table(splits, ("dataset", "split", "rows")),
        "",
        *sft_mix_lines(mix),
        *exports_section(export_audit),
        "## Checkpoints",
        "",
        _table(
            ckpts,
            (
                "id",
                "stage",
                "base model",
                "steps",
                "train loss",
                "valid tool calls before",
                "valid tool calls after",
                "must-call call rate after",
                "GRPO steps with a reward spread",
                "rows trained on (SFT: sft rows; GRPO: RL prompts)",
            ),
        ),
        "",
        "Valid tool calls: the share of held-out prompts that want a call (first turns of RL rows never trained "
        "on) whose greedy completion holds a call that parses and fits its tool's schema; must-call call rate: "
        "the share with any parsed call; GRPO steps with a reward spread: steps whose rollouts earned different "
        "rewards (a group with one reward has no advantage and moves nothing).",
        "",
    ]
    parts += ["## Evaluations", "", results_markdown(evaluations), ""]
    parts += stage_times_section(stage_times)
    parts += examples_section(examples)
    parts += trajectories_section(picked, raws, seed)
    return "\n".join(parts)


def tool_kind_section(
    tool_kinds: list[tuple[Any, ...]],
    call_kinds: list[tuple[Any, ...]],
    coverage: list[tuple[Any, ...]],
    refused_turns: tuple[int, int] = (0, 0),
) -> list[str]:
    """Tools of passed environments per kind per domain (``[(domain, kind, tools)]``) with the share beyond CRUD
    (:data:`~envfactory_assets.envgen.tools.BEYOND_CRUD`), calls of passed refined trajectories per kind with
    their refused preconditions (``[(kind, calls, refused)]``), the turns holding a refused call (``(turns,
    with a refused call)``), and the corpus's operations mapped per kind and unmapped per reason (mart
    ``operation_coverage`` rows)."""
    kinds = [k for k in (*KIND_ORDER, "action", *RELATION_KINDS) if any(row[1] == k for row in tool_kinds)]
    kinds += sorted({row[1] for row in tool_kinds} - set(kinds))
    by_domain: dict[str, dict[str, int]] = {}
    for domain, kind, n in tool_kinds:
        by_domain.setdefault(domain, {})[kind] = n
    rows = [(d, *(by_domain[d].get(k, 0) for k in kinds), sum(by_domain[d].values())) for d in sorted(by_domain)]
    if rows:
        rows.append(
            (
                "all",
                *(sum(by_domain[d].get(k, 0) for d in by_domain) for k in kinds),
                sum(sum(v.values()) for v in by_domain.values()),
            )
        )
    parts = [
        'Tools of passed environments per kind (`docs/pipeline.md`, "Tool kinds"):',
        "",
        _table(rows, ("domain", *kinds, "all")),
        "",
    ]
    n_tools = sum(n for _, _, n in tool_kinds)
    if n_tools:
        beyond = sum(n for _, kind, n in tool_kinds if kind in BEYOND_CRUD)
        parts += [
            f"Tools beyond CRUD ({', '.join(BEYOND_CRUD)}): {beyond:,} of {n_tools:,} ({beyond / n_tools:.1%}).",
            "",
        ]
    parts += [
        "Calls of passed refined trajectories per tool kind (refused: a call the environment refused with a "
        "typed error, kept with it: an action asked of a row it is refused on, a transfer of more than the "
        "source holds, a create of a row whose unique field is taken; a turn may hold several):",
        "",
        _table(call_kinds, ("kind", "calls", "refused")),
        "",
    ]
    turns, refused = refused_turns
    if turns:
        parts += [
            f"Turns of passed refined trajectories holding a refused call (`raw_trajectories.refusal_share`): "
            f"{refused:,} of {turns:,} ({refused / turns:.1%}).",
            "",
        ]
    if coverage:
        parts += [
            "Operations of the scanned corpus mapped to a tool kind, and the others by reason "
            "(mart `operation_coverage`; `docs/coverage.md`):",
            "",
            _table(coverage, ("outcome", "kind or reason", "operations", "share")),
            "",
        ]
    return parts


def model_tool_outcomes(con: Any) -> list[tuple[Any, ...]]:
    """``[(status, stop reason, operations)]`` of the operations the rules do not map that a model wrote tools for
    (``environments.revisions["unmapped_operations"]``), passed first; empty for a run without a model."""
    return con.execute(
        """SELECT o->>'status', coalesce(o->>'stop_reason', ''), count(*)
           FROM current_environments, unnest(CAST(revisions->'unmapped_operations' AS JSON[])) AS u(o)
           GROUP BY 1, 2 ORDER BY 1 DESC, 2"""
    ).fetchall()


def model_tool_section(outcomes: list[tuple[Any, ...]]) -> list[str]:
    """The report's lines on the tools a model wrote (:func:`model_tool_outcomes`); none when there are none."""
    if not outcomes:
        return []
    return [
        "Operations the rules do not map, written by the model (spec and code, through the gate and the revision "
        "loop; a passed tool is in its environment, a failed one only here; each operation's attempts are in "
        "`environments.revisions`, docs/models.md):",
        "",
        _table(outcomes, ("status", "stop reason", "operations")),
        "",
    ]


def realism_section(figures: dict[str, dict[str, Any] | None]) -> list[str]:
    """The "Data realism" section of :func:`run_report` from
    :func:`~envfactory_assets.reporting.realism.realism_figures`."""
    values, links = figures["values"], figures["links"]
    future, gold = figures["future_identifiers"], figures["gold_arguments"]
    parts = ["## Data realism", ""]
    if values is not None:
        judged = values["passed"] + values["failed"]
        parts += [
            "Seeded values of the built environments (the `valid` initial state, identifiers left out), "
            "judged by the field-semantic check (`quality.value_semantics`: a zone is a zone, a status a "
            "status word):",
            "",
            _table(
                [
                    ("environments", values["environments"]),
                    ("values judged (pass + fail)", judged),
                    ("share passing", values["share_passing"]),
                    ("unknown (no rule applies)", values["unknown"]),
                    (
                        "seeded dates after their state's clock",
                        f"{values['timestamps_after_clock']} / {values['timestamps']}",
                    ),
                ],
                ("figure", "value"),
            ),
            "",
            *(
                [
                    "Fields that failed most:",
                    "",
                    _table(list(values["top_failures"].items()), ("field (rule)", "values")),
                    "",
                ]
                if values["top_failures"]
                else ["No seeded value failed.", ""]
            ),
        ]
    parts += argument_values_section(figures.get("arguments"))
    if links is not None:
        multi = links["multi_env_chains"]
        parts += [
            "Links between environments (topology chains on the stored tool graph; a flow is an input bound "
            "to an earlier tool's output; only shared real-world values may cross environments):",
            "",
            _table(
                [
                    ("topology chains", links["chains"]),
                    ("spanning several environments", f"{multi} ({links['multi_env_share']:.1%})"),
                    ("of those, with a cross-environment flow of a shared value", links["multi_env_with_shared_flow"]),
                    ("identifier crossings (must be 0)", links["identifier_crossings"]),
                    ("flows / cross-environment flows", f"{links['flows']} / {links['cross_env_flows']}"),
                ],
                ("figure", "value"),
            ),
            "",
            *(
                [
                    "Cross-environment flows by value kind:",
                    "",
                    _table(list(links["cross_env_flows_by_kind"].items()), ("value kind", "flows")),
                    "",
                ]
                if links["cross_env_flows_by_kind"]
                else []
            ),
        ]
    if future is not None:
        parts += [
            "Kept turns of passed refined trajectories whose query quotes an identifier that only a call of "
            "the same turn or a later one assigns (`synth.refinement.report.future_identifiers`): "
            f"**{future['turns_quoting_future_identifier']}** of {future['turns']} "
            f"({future['share']:.2%}).",
            "",
        ]
        if future["examples"]:
            parts += [_table([(q, ", ".join(ids)) for q, ids in future["examples"]], ("query", "not yet assigned")), ""]
    if gold is not None:
        parts += [
            "Arguments of RL gold calls that nobody gave the agent (`synth.refinement.report.unstated_gold_arguments`: "
            "not masked, not in the request's user messages, and for values not from the user not in an "
            "earlier message or output either):",
            "",
            _table(
                [
                    ("RL rows with gold calls", gold["rl_rows"]),
                    (
                        "of those, same-tool parallel turns the dataset stage added (not judged)",
                        gold["rl_rows_inserted"],
                    ),
                    *(
                        (("of those, not matched to a refined turn", gold["rl_rows_unmatched"]),)
                        if gold["rl_rows_unmatched"]
                        else ()
                    ),
                    ("gold arguments", gold["gold_arguments"]),
                    ("masked (`masked_arguments`)", gold["masked"]),
                    ("not stated, not masked", gold["unstated"]),
                    *((f"of those, named by reference ({op})", n) for op, n in gold["referred_to"].items()),
                    (
                        "never given (neither stated nor referred to)",
                        f"{gold['never_given']} ({gold['never_given_share']:.2%} of unmasked)",
                    ),
                ],
                ("figure", "value"),
            ),
            "",
        ]
        if gold["never_given_by_argument"]:
            parts += [_table(list(gold["never_given_by_argument"].items()), ("tool.argument never given", "times")), ""]
    return parts if len(parts) > 2 else []


EXAMPLES_MARKER = "examples"
"""Name of the marked block (``<!-- examples:start -->`` ... ``<!-- examples:end -->``) holding the example ids."""
EXAMPLE_COMMANDS = {
    "trajectory": "envfactory show {id}",
    "checkpoint": "envfactory lineage {id}",
    "environment": "envfactory serve-env {id}",
    "tool": 'envfactory exclude tool {id} --reason "..."',
    "resource": 'envfactory exclude resource {id} --reason "..."',
}
"""What each example id is for: the command that takes it."""


def example_ids(con: Any, picked: list[dict[str, Any]]) -> dict[str, str]:
    """One id of each kind of :data:`EXAMPLE_COMMANDS` that exists in the store: the first of the ``picked``
    refined trajectories, the latest checkpoint, the first environment of that trajectory (else the first
    passed one), that environment's first tool (as ``env_id.tool_name``) and its source resource's key. A kind
    the store has none of is left out."""
    out: dict[str, str] = {}
    if picked:
        out["trajectory"] = picked[0]["id"]
    checkpoint = con.execute("SELECT id FROM checkpoints ORDER BY written_at DESC, id LIMIT 1").fetchall()
    if checkpoint:
        out["checkpoint"] = checkpoint[0][0]
    passed = [
        r[0]
        for r in con.execute(
            "SELECT e.env_id FROM current_environments e JOIN current_verified_environments v "
            "ON v.environment_id = e.id WHERE v.status = 'passed' ORDER BY e.env_id"
        ).fetchall()
    ]
    env_id = next((e for e in (picked[0]["env_ids"] if picked else []) if e in passed), passed[0] if passed else None)
    if env_id is None:
        return out
    out["environment"] = env_id
    row = con.execute(
        "SELECT CAST(e.tools AS VARCHAR), s.resource_key FROM current_environments e "
        "LEFT JOIN current_source_resources s ON s.id = e.source_resource_id WHERE e.env_id = ? LIMIT 1",
        [env_id],
    ).fetchall()
    if row:
        tools = json.loads(row[0][0] or "[]")
        if tools:
            out["tool"] = f"{env_id}.{tools[0]['name']}"
        if row[0][1]:
            out["resource"] = row[0][1]
    return out


def examples_section(examples: dict[str, str]) -> list[str]:
    """The "Examples" section: ``examples`` (:func:`example_ids`) as a table inside the marked block the README
    test reads (every id the README's and docs/commands.md's example commands name must be in it)."""
    if not examples:
        return []
    rows = [(kind, f"`{i}`", f"`{EXAMPLE_COMMANDS[kind].format(id=i)}`") for kind, i in examples.items()]
    return [
        "## Examples",
        "",
        "Ids of this run for the example commands of README.md and docs/commands.md (a test checks that every id "
        "they name is here):",
        "",
        f"<!-- {EXAMPLES_MARKER}:start -->",
        _table(rows, ("kind", "id", "command")),
        f"<!-- {EXAMPLES_MARKER}:end -->",
        "",
    ]


def trajectories_section(picked: list[dict[str, Any]], raws: dict[str, dict[str, Any]], seed: int) -> list[str]:
    """The "Trajectories to read whole" section: the ``picked`` refined trajectory rows, each rendered as
    ``envfactory show <id>`` renders it (:func:`~envfactory_assets.viewer.render_trajectory`), ``raws``
    holding their raw trajectory rows by id."""
    from envfactory_assets.viewer import render_trajectory

    if not picked:
        return []
    parts = [
        "## Trajectories to read whole",
        "",
        f"Ten passed refined trajectories drawn with random.Random({seed}) (`envfactory report --seed N` draws "
        "others), each as `envfactory show <id>` prints it:",
        "",
        _table(
            [(f"`{r['id']}`", r["n_turns"], ", ".join(r["domains"] or [])) for r in picked], ("id", "turns", "domains")
        ),
        "",
    ]
    for r in picked:
        raw = raws.get(r["raw_trajectory_id"])
        parts += [
            render_trajectory(raw, r)
            if raw
            else f"Trajectory {r['id']}: its raw trajectory {r['raw_trajectory_id']} is not in the store.",
            "",
        ]
    return parts


def argument_values_section(arguments: dict[str, Any] | None) -> list[str]:
    """The generated tool-call argument values part of the "Data realism" section, from
    :func:`~envfactory_assets.reporting.realism.argument_value_figures` (empty when the store lacks it)."""
    if arguments is None:
        return []

    def share(value: float | None) -> str:
        return "" if value is None else f"{value:.1%}"

    parts = [
        "Argument values the user gives in the tool calls of the kept trajectories (identifiers from the state "
        "or an earlier result left out), judged by the same check; a value is covered when a rule checks a kind "
        "narrower than free text (a code, a zone, a place, a sentence), unknown otherwise:",
        "",
        _table(
            [
                ("argument values", arguments["values"]),
                ("covered by a rule", arguments["covered"]),
                ("unknown (no rule applies)", f"{arguments['unknown']} ({share(arguments['unknown_share'])})"),
                ("share passing (of covered)", arguments["share_passing"]),
                (
                    "random words in a field of a kind (of covered)",
                    f"{arguments['random_words']} ({share(arguments['random_word_share'])})",
                ),
                ("placeholders", arguments["placeholders"]),
                ("other values of the wrong kind", arguments["wrong_kind"]),
            ],
            ("figure", "value"),
        ),
        "",
    ]
    if arguments["top_failures"]:
        parts += [
            "Argument fields that failed most:",
            "",
            _table(list(arguments["top_failures"].items()), ("field (rule)", "values")),
            "",
        ]
    if arguments["top_unknown_fields"]:
        parts += [
            "Argument fields no rule covers, most frequent:",
            "",
            _table(list(arguments["top_unknown_fields"].items()), ("field", "values")),
            "",
        ]
    return parts


def comparable_figures(store: Store) -> dict[str, Any]:
    """The figures ``envfactory report --compare`` sets side by side, ``{"group: figure": value}`` in report
    order: the "Queries" table (raw and refined), the per-turn accuracy distribution and
    :func:`~envfactory_assets.reporting.realism.flat_realism_figures`. A figure the store cannot give (it
    predates the table) is None."""
    with store.connect(read_only=True) as con:
        refined = (
            read_rows(con, "refined_trajectories", "status = 'passed'")
            if has_table(con, "current_refined_trajectories")
            else None
        )
        accuracy = accuracy_rows(con)
        realism = realism_figures(con, refined)
        conversation = conversation_text_figures(con, refined)
    flat: dict[str, Any] = {}
    names = [k for k, _raw, _ref in query_figures([])]
    queries = query_figures(refined) if refined is not None else [(k, None, None) for k in names]
    for name, raw, ref in queries:
        if raw != "":
            flat[f"queries (raw): {name}"] = raw
        flat[f"queries (refined): {name}"] = ref
    replies = reply_figures_of(refined) if refined is not None else {}
    for name in ("replies", "distinct_trigrams_per_1000", "checker_pass_share"):
        flat[f"assistant replies: {name}"] = replies.get(name)
    flat["per-turn accuracy: turns"] = None if accuracy is None else sum(n for _a, n in accuracy)
    flat.update({f"per-turn accuracy: turns at {a:.2f}": n for a, n in accuracy or []})
    flat.update(flat_realism_figures(realism))
    flat.update(flat_conversation_text_figures(conversation))
    return flat


def conversation_text_figures(con: Any, refined: list[dict[str, Any]] | None) -> dict[str, dict[str, Any] | None]:
    """``{"clarifications", "user_text"}``: :func:`~envfactory_assets.quality.conversation_text.clarification_figures`
    and :func:`~envfactory_assets.quality.conversation_text.user_text_figures` of the passed ``refined``
    trajectory rows (the parameters of the store's built environments name the spec identifiers); None for a
    figure the store cannot give."""
    from envfactory_assets.quality.conversation_text import clarification_figures, user_text_figures

    if refined is None:
        return {"clarifications": None, "user_text": None}
    envs = current_rows(con, "environments", "status = 'built'") or []
    parameters = {
        e["env_id"]: [p for t in e["tools"] for p in (t.get("input_schema") or {}).get("properties") or {}]
        for e in envs
    }
    return {"clarifications": clarification_figures(refined), "user_text": user_text_figures(refined, parameters)}


def flat_conversation_text_figures(figures: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """The scalar figures of :func:`conversation_text_figures` as ``{"group: figure": value}``."""
    names = {
        "clarifications": (
            "turns_with_clarification_share",
            "questions",
            "asking_for_given",
            "asking_for_given_share",
            "malformed",
            "omissions",
            "omissions_asked_share",
        ),
        "user_text": ("user_turns", "with_identifier", "share"),
    }
    labels = {"clarifications": "clarifications", "user_text": "user messages with a spec identifier"}
    return {
        f"{labels[g]}: {n}": None if figures.get(g) is None else figures[g][n] for g, ns in names.items() for n in ns
    }


def conversation_text_section(figures: dict[str, dict[str, Any] | None]) -> list[str]:
    """The "Clarifications and user text" section of :func:`run_report` (:func:`conversation_text_figures`)."""
    clar, text = figures["clarifications"], figures["user_text"]
    if clar is None or text is None:
        return []
    parts = [
        "## Clarifications and user text",
        "",
        "Clarification questions of passed refined trajectories, judged by `quality.conversation_text` (not by "
        "the solver that asks): a question asks for a given value when the request, an earlier answer or an "
        "earlier turn already stated the value it asks for (target 0); malformed: a field named twice or a "
        "broken phrase; omissions: kept turns whose request left out a user-providable value on purpose, asked "
        "for: those whose clarification obtains it (target all).",
        "",
        _table(
            [
                (
                    clar["turns"],
                    clar["turns_with_clarification"],
                    clar["questions"],
                    clar["asking_for_given"],
                    clar["asking_for_given_share"],
                    clar["malformed"],
                    clar["omissions"],
                    clar["omissions_asked"],
                )
            ],
            (
                "turns",
                "with a clarification",
                "questions",
                "asking for a given value",
                "share",
                "malformed",
                "omissions",
                "omissions asked for",
            ),
        ),
        "",
    ]
    if clar["examples"]:
        parts += ["Questions asking for a given value or malformed (up to ten):", ""]
        parts += [
            f"- request: {e['request']!r} -> {e['question']!r} -> {e['answer']!r}"
            + (f" (given: {', '.join(e['given'])})" if e["given"] else "")
            + (f" ({e['malformed']})" if e["malformed"] else "")
            for e in clar["examples"]
        ]
        parts.append("")
    parts += [
        f"User messages (queries and clarification answers) holding a spec identifier (a snake_case or camelCase "
        f"name, a path fragment, a parameter's raw words with a short form; target 0): **{text['with_identifier']}** "
        f"of {text['user_turns']} ({text['share']:.2%}); by kind: "
        + (", ".join(f"{k} {v}" for k, v in sorted(text["by_kind"].items())) or "none"),
        "",
    ]
    if text["examples"]:
        parts += [f"- {e['text']!r} ({', '.join(e['identifiers'])})" for e in text["examples"]] + [""]
    return parts


def _figure_cell(value: Any) -> str:
    if value is None:
        return ""
    return str(round(value, 4)) if isinstance(value, float) else str(value)


#: What :func:`compare_report` does, in order (as :data:`REPORT_STEPS` for :func:`run_report`).
COMPARE_STEPS = ("figures of the old store", "figures of this store")


def compare_report(old_path: str, store: Store, progress: Callable[[str], None] | None = None) -> str:
    """Markdown of :func:`comparable_figures` of the store at ``old_path`` (before) and of ``store`` (after),
    one row per figure; both are opened read-only. A per-kind count one store lacks reads 0 when that store
    has the figure's group, empty when it predates it. ``progress``, when given, is called with each of
    :data:`COMPARE_STEPS` as it starts.

    Raises:
        FileNotFoundError: either store does not exist (the message names the path).
        ValueError: ``old_path`` is not a store (see :func:`~envfactory_assets.reporting.realism.open_old_store`).
    """
    step = progress or (lambda name: None)
    step(COMPARE_STEPS[0])
    before = comparable_figures(open_old_store(old_path))
    step(COMPARE_STEPS[1])
    after = comparable_figures(store)
    group = lambda name: name.split(":", 1)[0]  # noqa: E731
    names = list(after)
    for name in before:  # a figure only the old store has goes after the last one of its group
        if name not in after:
            at = max((i for i, n in enumerate(names) if group(n) == group(name)), default=len(names) - 1)
            names.insert(at + 1, name)

    def cell(figures: dict[str, Any], name: str) -> str:
        if name in figures:
            return _figure_cell(figures[name])
        has_group = any(group(k) == group(name) and v is not None for k, v in figures.items())
        return "0" if has_group else ""

    return "\n".join(
        [
            "# Store comparison",
            "",
            f"Before: `{old_path}`; after: `{store.path}` (each figure queried from its store; empty: "
            "the store predates the table).",
            "",
            _table([(n, cell(before, n), cell(after, n)) for n in names], ("figure", "before", "after")),
            "",
        ]
    )


def latest_stage_times(con: Any) -> list[tuple[Any, ...]]:
    """Per step of ``stage_times``, in start order of its latest run: ``(step_key, wall_seconds, peak_rss_mib,
    load_avg_1m, status, started_at, runs recorded, fastest and slowest successful wall seconds)``; empty when
    nothing is recorded or the store predates the table, and load None where it predates that column
    (read-only connections do not migrate)."""
    if not has_table(con, "stage_times"):
        return []
    names = {row[0] for row in con.execute("DESCRIBE current_stage_times").fetchall()}
    load = "" if "load_avg_1m" in names else "NULL::DOUBLE AS load_avg_1m, "
    return con.execute(f"""
        SELECT step_key, wall_seconds, peak_rss_mib, load_avg_1m, status, started_at, runs, fastest, slowest FROM (
            SELECT *, {load}row_number() OVER (PARTITION BY step_key ORDER BY started_at DESC NULLS LAST, id) AS latest,
                   count(*) OVER (PARTITION BY step_key) AS runs,
                   min(wall_seconds) FILTER (WHERE status = 'SUCCESS') OVER (PARTITION BY step_key) AS fastest,
                   max(wall_seconds) FILTER (WHERE status = 'SUCCESS') OVER (PARTITION BY step_key) AS slowest
            FROM current_stage_times)
        WHERE latest = 1 ORDER BY started_at NULLS LAST, step_key""").fetchall()


def stage_times_section(rows: list[tuple[Any, ...]]) -> list[str]:
    """The "Stage times" section of :func:`run_report` from :func:`latest_stage_times` rows."""
    if not rows:
        return ["## Stage times", "", "No stage times recorded yet: `envfactory run` records them at its end.", ""]
    table = [
        (
            step,
            "" if secs is None else f"{secs:.1f}",
            "" if mib is None else f"{mib:.0f}",
            "" if load is None else f"{load:.1f}",
            status,
            "" if started is None else f"{started:%Y-%m-%d %H:%M} UTC",
            runs,
            "" if fastest is None else f"{fastest:.1f} - {slowest:.1f}",
        )
        for step, secs, mib, load, status, started, runs, fastest, slowest in rows
    ]
    return [
        "## Stage times",
        "",
        (
            "Per stage, its latest run as `envfactory run` recorded it (table `stage_times`): wall time, peak "
            "resident memory of the process that ran it (worker processes not counted), the machine's mean "
            "1-minute load average during it (the run's own threads and processes count; above the machine's "
            "core count, other jobs shared the cores), and the fastest and slowest successful runs this store "
            "recorded (any settings, any machine load):"
        ),
        "",
        _table(
            table,
            (
                "stage",
                "wall time (s)",
                "peak memory (MiB)",
                "load average",
                "status",
                "started",
                "runs",
                "range of successful runs (s)",
            ),
        ),
        "",
    ]


def store_evaluations(con: Any) -> list[dict[str, Any]]:
    """Current ``evaluations`` rows (the columns the results table needs); empty when there are none or the
    store predates the table (read-only connections do not migrate)."""
    import orjson

    if not has_table(con, "current_evaluations"):
        return []

    cur = con.execute(
        "SELECT model, stage, benchmark, subset, mean, std, n_tasks, seeds, config, metrics "
        "FROM current_evaluations ORDER BY id"
    )
    names = [d[0] for d in cur.description]
    return [
        {
            n: (orjson.loads(v) if n in ("seeds", "config", "metrics") and v is not None else v)
            for n, v in zip(names, row, strict=False)
        }
        for row in cur.fetchall()
    ]
