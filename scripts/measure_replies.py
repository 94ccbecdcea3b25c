"""Measure the assistant's closing replies of a store: as stored, and rewritten by the current reply writer.

Usage: ``python scripts/measure_replies.py STORE.duckdb [--table refined_trajectories] [--show 10] [--seed 36]``

For every passed trajectory of ``--table`` (``refined_trajectories`` or ``raw_trajectories``) the replies are
recomputed from the stored turns' calls (name, arguments, output) with
:func:`envfactory_assets.synth.refinement.replies.write_reply`, seeded as the pipeline seeds them
(``"{raw trajectory id}/{turn}/reply"``); a turn that goal merging made of two (``merged_from``, where the
store keeps the two turns' calls) gets its two replies joined
(:func:`~envfactory_assets.synth.refinement.replies.join_replies`), else one reply for all its calls. Both sets
are scored by the report's figures: distinct word 3-grams per 1,000 replies
(:func:`envfactory_assets.synth.refinement.report.query_statistics` on ``assistant_summary``) and the share of
replies the fact checker passes (:func:`envfactory_assets.quality.reply_facts.reply_figures`), and by how many
replies show each slip of wording in :data:`SLIPS` (a word said twice, "all product", a boolean said as
"bot no"...). ``--show``
prints that many recomputed replies drawn with ``random.Random(seed)``. Open a copy of a store, never one a
run is writing.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from typing import Any

import duckdb

from envfactory_assets.envgen.environment_dict import as_environment
from envfactory_assets.quality.reply_facts import reply_figures
from envfactory_assets.store.db import read_rows
from envfactory_assets.synth.refinement.replies import join_replies, write_reply
from envfactory_assets.synth.refinement.report import query_statistics
from envfactory_assets.synth.trajectories.execution import ToolIndex

#: Slips of wording a reply should not show, as patterns over its text: ``{name: pattern}``.
SLIPS = {
    "a word said twice": r"(?i)\b(a|an|the|of|to|in|for|with|and|is|on|by|at|it|as|that|has|have|are|was)\s+\1\b",
    "singular after 'all'": r"I listed all (?!of )[a-z ]+?[^s], which gave",
    "one row named after 'records'": r"records, (?:'[^']+'|[a-z]+_\d+)",
    "a boolean as 'field yes/no'": r"\b(?!(?:are|were|there|found|holds|set|to|came|and|then|that|after)\b)[a-z]+ "
    r"(?:is (?:now )?)?(?:yes|no)(?=[,.;)]| and\b|$)",
    "'a' before a vowel sound": r"\ba (?:[aeio]|u(?!s|n[iu]))\w*",
    "'listed of' / 'got for'": r"\b(?:listed of|got for)\b",
}


def _reply(turn: dict[str, Any], raw_id: str, index: ToolIndex) -> str:
    # a store keeps a merged turn's two turns whole in some versions, only their queries in others: then the
    # merged turn's calls get one reply
    merged = [p for p in turn.get("merged_from") or [] if isinstance(p, dict) and "calls" in p]
    parts = merged or [turn]
    replies = [
        write_reply(p["calls"], index.tools, index.key_of, f"{raw_id}/{p.get('turn_index', i)}/reply")
        for i, p in enumerate(parts)
    ]
    text = replies[0]
    for more in replies[1:]:
        text = join_replies(text, more)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--table", default="refined_trajectories", choices=("refined_trajectories", "raw_trajectories"))
    parser.add_argument("--show", type=int, default=10)
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args(argv)
    con = duckdb.connect(args.store, read_only=True)
    con.execute("SET enable_progress_bar = false")
    index = ToolIndex({r["env_id"]: as_environment(r) for r in read_rows(con, "environments", "status = 'built'")})
    rows = read_rows(con, args.table, "status = 'passed'")
    before, after = [], []
    for row in rows:
        raw_id = row.get("raw_trajectory_id") or row["id"]
        turns = [t for t in row["turns"] if all(c["name"] in index.tools for c in t["calls"])]
        before.append({"id": row["id"], "status": "passed", "turns": turns})
        after.append(
            {
                "id": row["id"],
                "status": "passed",
                "turns": [{**t, "assistant_summary": _reply(t, raw_id, index)} for t in turns],
            }
        )
    for name, scored in (("before (stored)", before), ("after (recomputed)", after)):
        stats = query_statistics(scored, field="assistant_summary")
        facts = reply_figures(scored)
        words = [len(t["assistant_summary"].split()) for r in scored for t in r["turns"]]
        print(
            f"{name}: replies {facts['replies']}, distinct 3-grams per 1,000 replies "
            f"{stats['distinct_trigrams_per_1000']}, checker pass share {facts['pass_share']}, "
            f"mean words {sum(words) / max(len(words), 1):.1f}, max words {max(words, default=0)}"
        )
        texts = [t["assistant_summary"] for r in scored for t in r["turns"]]
        slips = {k: sum(1 for x in texts if re.search(p, x)) for k, p in SLIPS.items()}
        print("  replies with a slip: " + ", ".join(f"{k} {n}" for k, n in slips.items()))
        for failure in facts["failures"]:
            print("  failure:", failure, file=sys.stderr)
    turns = [(r["id"], t) for r in after for t in r["turns"]]
    for row_id, turn in random.Random(args.seed).sample(turns, min(args.show, len(turns))):
        print(f"\n[{row_id} turn {turn.get('turn_index')}, {len(turn['calls'])} call(s)] {turn['assistant_summary']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
