"""Summaries of the refinement stage for asset metadata (plain values and Markdown text, no Dagster)."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from envfactory_assets.synth.refinement.filtering import diversity


def accuracy_distribution(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Kept turns by per-turn accuracy (``"0.25"`` ... ``"1.0"``), over every row given."""
    counts = Counter(f"{t['accuracy']:.2f}" for r in rows for t in r["turns"])
    return dict(sorted(counts.items()))


def refined_accuracy_distribution(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Turns whose query refinement changed, by the accuracy of the refined query (reverted ones included,
    at 0.00): how often the operators keep a turn solvable."""
    counts = Counter(
        f"{t['solve_refined']['accuracy']:.2f}" for r in rows for t in r["turns"] if t.get("solve_refined")
    )
    return dict(sorted(counts.items()))


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def examples_markdown(rows: list[dict[str, Any]], n: int = 5) -> str:
    """A Markdown table of up to ``n`` turns whose query refinement changed or reverted: before, after,
    operators and accuracy."""
    lines = ["| before | after | operators | accuracy |", "|---|---|---|---|"]
    shown = 0
    for r in rows:
        for t in r["turns"]:
            if shown >= n:
                break
            if not t.get("operators"):
                continue
            ops = ", ".join(
                sorted({o["operator"] + (" (reverted)" if o.get("reverted") else "") for o in t["operators"]})
            )
            after = t.get("query_refined_rejected", t["query"])
            lines.append(f"| {_md_cell(t['query_raw'])} | {_md_cell(after)} | {ops} | {t['accuracy']:.2f} |")
            shown += 1
    return "\n".join(lines) if shown else "_no turn was changed by refinement_"


def refinement_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Metadata of ``refined_trajectories``: operator counts (applied / reverted), accuracy distribution of
    kept turns and of refined queries, turns reverted, rejection reasons, near-duplicates removed,
    :func:`~envfactory_assets.synth.refinement.filtering.diversity`, and a Markdown table of examples
    (``examples_md``; the asset wraps it as Markdown)."""
    ops = Counter(o["operator"] for r in rows for o in r["operators"] if not o.get("reverted"))
    reverted = Counter(o["operator"] for r in rows for o in r["operators"] if o.get("reverted"))
    turns = [t for r in rows for t in r["turns"]]
    return {
        "operators": dict(ops),
        "operators_reverted": dict(reverted),
        "accuracy_distribution": accuracy_distribution(rows),
        "refined_accuracy_distribution": refined_accuracy_distribution(rows),
        "mean_accuracy": round(sum(t["accuracy"] for t in turns) / len(turns), 4) if turns else 0.0,
        "turns_reverted": sum(1 for t in turns if "query_refined_rejected" in t),
        "rejection_reasons": dict(Counter(x.split(":")[0][:80] for r in rows for x in r["reasons"]).most_common(10)),
        "near_duplicates_removed": sum(1 for r in rows for x in r["reasons"] if x.startswith("near-duplicate")),
        "diversity": diversity(rows),
        "query_statistics": query_statistics(rows),
        "raw_query_statistics": query_statistics(rows, field="query_raw"),
        "examples_md": examples_markdown(rows),
    }


def raw_examples_markdown(rows: list[dict[str, Any]], n: int = 5) -> str:
    """A Markdown table of the first ``n`` turns of passed raw trajectories: query, calls made, turn count."""
    lines = ["| query | calls | turns in trajectory |", "|---|---|---|"]
    shown = [(r, t) for r in rows if r["status"] == "passed" for t in r["turns"][:1]][:n]
    for r, t in shown:
        calls = ", ".join(f"`{c['name']}`" for c in t["calls"])
        lines.append(f"| {_md_cell(t['query'])} | {calls} | {r['n_turns']} |")
    return "\n".join(lines) if shown else "_no passed trajectory_"


_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _is_identifier_argument(name: str) -> bool:
    return name == "id" or name.endswith("_id") or name.endswith("Id")


def identifier_values(turn: dict[str, Any]) -> list[str]:
    """String values of a turn's identifier arguments (``*_id`` / ``id``) across its calls."""
    return [
        v
        for c in turn["calls"]
        for n, v in c["arguments"].items()
        if _is_identifier_argument(n) and isinstance(v, str) and v
    ]


def query_statistics(rows: list[dict[str, Any]], field: str = "query", sample: int = 1000) -> dict[str, Any]:
    """Figures of how the user queries of refined trajectories read, over the passed rows' kept turns.

    Returns ``{"queries", "distinct_trigrams_per_1000", "literal_identifier_share", "mean_words",
    "refined_differs_share", "operator_share", "accuracy_distribution"}``:

    - ``distinct_trigrams_per_1000``: distinct word 3-grams (lower-cased ``[a-z0-9]`` words) among the first
      ``sample`` queries, scaled to 1,000 queries when there are fewer (so small runs overstate it; compare
      runs of the same size);
    - ``literal_identifier_share``: among turns whose calls take an identifier argument, the share whose
      query (``field``: ``"query"`` or ``"query_raw"``) quotes one of those identifier values;
    - ``mean_words``: words per query; ``refined_differs_share``: share of turns whose ``query`` differs from
      ``query_raw``; ``operator_share``: share of turns with each (not reverted) operator;
      ``accuracy_distribution``: kept turns by per-turn solve accuracy.
    """
    turns = [t for r in rows if r.get("status", "passed") == "passed" for t in r["turns"]]
    queries = [t[field] for t in turns]
    n = len(queries)
    trigrams: set[tuple[str, ...]] = set()
    for q in queries[:sample]:
        toks = _WORD.findall(q.lower())
        trigrams.update(zip(toks, toks[1:], toks[2:], strict=False))
    with_ids = [t for t in turns if identifier_values(t)]
    literal = sum(1 for t in with_ids if any(v in t[field] for v in identifier_values(t)))
    ops = Counter(o for t in turns for o in {o["operator"] for o in t.get("operators") or [] if not o.get("reverted")})
    return {
        "queries": n,
        "distinct_trigrams_per_1000": round(len(trigrams) * 1000 / min(n, sample), 1) if n else 0.0,
        "literal_identifier_share": round(literal / len(with_ids), 4) if with_ids else 0.0,
        "mean_words": round(sum(len(_WORD.findall(q.lower())) for q in queries) / n, 2) if n else 0.0,
        "refined_differs_share": round(sum(1 for t in turns if t["query"] != t.get("query_raw", t["query"])) / n, 4)
        if n
        else 0.0,
        "operator_share": {k: round(v / n, 4) for k, v in sorted(ops.items())},
        "accuracy_distribution": dict(
            sorted(Counter(f"{t['accuracy']:.2f}" for t in turns if "accuracy" in t).items())
        ),
    }


# --- realism of the refined turns: values a query quotes before they exist, gold values never given ------
def _identifier_leaves(value: Any) -> set[str]:
    """String values under identifier-named keys (``id`` / ``*_id``) anywhere in a JSON value."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if isinstance(v, str) and v and _is_identifier_argument(k):
                    found.add(v)
                else:
                    stack.append(v)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _inside_a_token(char: str) -> bool:
    return char.isalnum() or char in "_-"


def quotes(text: str, value: str) -> bool:
    """True when ``value`` occurs in ``text`` (any case) as a whole token, not inside a longer word or
    identifier (a string search: one regular expression per value would be compiled thousands of times)."""
    text, value = text.lower(), value.lower()
    start = text.find(value)
    while start >= 0 and value:
        end = start + len(value)
        if not (start and _inside_a_token(text[start - 1])) and not (end < len(text) and _inside_a_token(text[end])):
            return True
        start = text.find(value, start + 1)
    return False


def assigned_identifiers(calls: list[dict[str, Any]]) -> set[str]:
    """String identifiers (``id`` / ``*_id`` values) that the ``create`` calls among ``calls`` assigned: in
    their output and not among their arguments (a foreign key the create was given is not new)."""
    return set().union(
        *(
            _identifier_leaves(c.get("output")) - _identifier_leaves(c["arguments"])
            for c in calls
            if c.get("kind") == "create"
        )
    )


def future_identifiers(turns: list[dict[str, Any]], index: int) -> list[str]:
    """Identifiers the query of ``turns[index]`` quotes before they exist, sorted.

    Such an identifier is a string value of an identifier field (``id`` / ``*_id``) that a ``create`` call of
    this turn or a later one assigns (in its output, not among its arguments) and that no identifier field
    of the turn's ``state_before`` (every environment, every table) nor of an earlier turn's call outputs
    holds. A person cannot know it when asking, so a query quoting it tells the answer. Numeric identifiers
    are left out: in a query a bare number cannot be told from a count or a limit.
    """
    turn = turns[index]
    assigned = assigned_identifiers([c for t in turns[index:] for c in t["calls"]])
    quoted = {v for v in assigned if quotes(turn["query"], v)}
    if not quoted:  # the common case: the states need not be walked
        return []
    existing = _identifier_leaves(turn.get("state_before") or {})
    existing |= _identifier_leaves([c.get("output") for t in turns[:index] for c in t["calls"]])
    return sorted(quoted - existing)


def future_identifier_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Kept turns of passed refined trajectories whose query quotes an identifier that does not exist yet
    (:func:`future_identifiers`): ``{"turns", "turns_quoting_future_identifier", "share", "examples"}``,
    ``examples`` up to three ``(query, identifiers)`` pairs."""
    n, quoting = 0, []
    for r in rows:
        if r.get("status", "passed") != "passed":
            continue
        for i, turn in enumerate(r["turns"]):
            n += 1
            ids = future_identifiers(r["turns"], i)
            if ids:
                quoting.append((turn["query"], ids))
    return {
        "turns": n,
        "turns_quoting_future_identifier": len(quoting),
        "share": round(len(quoting) / n, 4) if n else 0.0,
        "examples": quoting[:3],
    }


def _value_stated(value: Any, texts: list[str], outputs: set[str]) -> bool:
    """True when ``value`` is a JSON leaf of a call output (``outputs`` holds those leaves as JSON text), or
    ``texts`` quote it written as a raw query writes it,
    as a person writes it (:func:`~envfactory_assets.synth.refinement.phrasing.spoken_value`) or bare; a list or an
    object is stated when each of its items is, ``None`` and ``""`` always are (nothing to give)."""
    from envfactory_assets.synth.refinement.phrasing import literal, spoken_forms

    if isinstance(value, dict):
        return all(_value_stated(v, texts, outputs) for v in value.values())
    if isinstance(value, list):
        return all(_value_stated(v, texts, outputs) for v in value)
    if value is None or value == "" or json.dumps(value, ensure_ascii=False) in outputs:
        return True
    forms = {literal(value), *spoken_forms(value), value if isinstance(value, str) else literal(value)}
    return any(quotes(text, form) for text in texts for form in forms)


def _json_leaves(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set().union(*(_json_leaves(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_json_leaves(v) for v in value))
    return {json.dumps(value, ensure_ascii=False)}


def unstated_gold_arguments(
    turns: list[dict[str, Any]], turn_index: int, gold_calls: list[dict[str, Any]], masked: list[str]
) -> list[dict[str, Any]]:
    """Arguments of an RL row's gold calls whose value nobody gave the agent and that the row does not mask.

    ``turns`` are the refined trajectory's turns, ``turn_index`` the row's turn, ``gold_calls`` its
    ``[{"name", "arguments"}]`` (a subsequence of that turn's calls), ``masked`` its ``masked_arguments``.
    A value is given when this turn's user messages (its query, its clarification answers) quote it (see
    :func:`_value_stated`), or, for a value the call's ``provenance`` does not take from the user, when an
    earlier turn's messages (user or assistant) quote it or an output of a call before the gold call holds
    it. A value taken from the user must be said in this request: that an earlier turn or result mentions
    it does not tell the agent to use it again. Returns ``[{"call", "argument", "value", "referred_by"}]``:
    ``referred_by`` is the (not reverted) refinement operator of the turn that names the value by reference
    instead ("the newest order", "the book titled ..."), or None when nothing in the request points at it.
    """
    turn = turns[turn_index]
    now = [turn["query"]] + [m["content"] for m in turn.get("clarification") or [] if m["role"] == "user"]
    before = [
        text
        for t in turns[:turn_index]
        for text in [t["query"], t.get("assistant_summary") or ""]
        + [m["content"] for m in t.get("clarification") or []]
    ]
    outputs: set[str] = set()
    for t in turns[:turn_index]:
        for c in t["calls"]:
            outputs |= _json_leaves(c.get("output"))
    refs = {
        (o["argument"], json.dumps(o["value"], ensure_ascii=False)): o["operator"]
        for o in turn.get("operators") or []
        if o.get("reference") and not o.get("reverted")
    }
    pending = list(gold_calls)
    found = []
    for call in turn["calls"]:
        if pending and (call["name"], call["arguments"]) == (pending[0]["name"], pending[0]["arguments"]):
            pending.pop(0)
            for arg, value in call["arguments"].items():
                from_user = (call.get("provenance") or {}).get(arg, {}).get("source") == "user"
                if (
                    arg in masked
                    or _value_stated(value, now, set())
                    or (not from_user and _value_stated(value, before, outputs))
                ):
                    continue
                found.append(
                    {
                        "call": call["name"],
                        "argument": arg,
                        "value": value,
                        "referred_by": refs.get((arg, json.dumps(value, ensure_ascii=False))),
                    }
                )
        outputs |= _json_leaves(call.get("output"))
    return found


def _is_subsequence(gold: list[dict[str, Any]], calls: list[dict[str, Any]]) -> bool:
    pending = iter((c["name"], c["arguments"]) for c in calls)
    return all((g["name"], g["arguments"]) in pending for g in gold)


MAX_INSERTED_TURNS = 2
"""Turns the dataset stage may insert into one trajectory
(:func:`~envfactory_assets.synth.datasets.datagaps.augment_trajectory`): one same-tool parallel turn and one
abstention turn."""


def refined_turn_of(turns: list[dict[str, Any]], turn_index: int, gold_calls: list[dict[str, Any]]) -> int | None:
    """The index in a refined trajectory's ``turns`` of the turn an RL row with ``turn_index`` and
    ``gold_calls`` was made from, or None when no candidate's calls hold the gold calls in order.

    The dataset stage may insert up to :data:`MAX_INSERTED_TURNS` turns before it, so the row's turn is one
    of ``turn_index``, ``turn_index - 1``, ... ``turn_index - MAX_INSERTED_TURNS`` of the stored turns (the
    nearest that holds the calls).
    """
    for index in range(turn_index, turn_index - MAX_INSERTED_TURNS - 1, -1):
        if 0 <= index < len(turns) and _is_subsequence(gold_calls, turns[index]["calls"]):
            return index
    return None


def _is_same_tool_turn(gold_calls: list[dict[str, Any]]) -> bool:
    """Whether gold calls look like a same-tool parallel turn the dataset stage wrote
    (:mod:`~envfactory_assets.synth.trajectories.same_tool_parallel`): two or more calls, all of one tool."""
    return len(gold_calls) > 1 and len({c["name"] for c in gold_calls}) == 1


def gold_argument_figures(
    trajectories: dict[str, list[dict[str, Any]]], rl_rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """Gold arguments of RL rows nobody gave (:func:`unstated_gold_arguments`), over the rows whose refined
    trajectory is in ``trajectories`` (``{refined id: turns}``).

    The words judged are the refined trajectory's (the dataset stage may restate a value in a converted
    form on purpose, :mod:`envfactory_assets.synth.datasets.conversions`); the rows' own ``turn_index`` counts an
    inserted turn, so each row is matched to its refined turn by :func:`refined_turn_of`.

    Returns ``{"rl_rows", "rl_rows_judged", "rl_rows_inserted", "rl_rows_unmatched", "gold_arguments",
    "masked", "unstated", "referred_to", "never_given", "never_given_share", "never_given_by_argument"}``:
    ``rl_rows`` counts the rows with gold calls (abstention rows have none and are left out), of which
    ``rl_rows_judged`` were matched to their refined turn, ``rl_rows_inserted`` are same-tool parallel turns
    the dataset stage wrote (their words are not in the refined trajectory, so they are not judged) and
    ``rl_rows_unmatched`` are neither; ``unstated`` = unmasked arguments no message or
    earlier output gives, of which ``referred_to`` (by operator) are named by reference and
    ``never_given`` are not; the share is of the unmasked arguments; ``never_given_by_argument`` counts the
    ten commonest ``tool.argument`` of those.
    """
    n_rows = judged = inserted = unmatched = total = masked = 0
    unstated: list[dict[str, Any]] = []
    for row in rl_rows:
        turns = trajectories.get(row["refined_trajectory_id"])
        if turns is None or not row["gold_calls"]:
            continue  # another trajectory's row, or an abstention turn (no gold call, nothing to give)
        n_rows += 1
        index = refined_turn_of(turns, row["turn_index"], row["gold_calls"])
        if index is None:
            if _is_same_tool_turn(row["gold_calls"]):
                inserted += 1
            else:
                unmatched += 1
            continue
        judged += 1
        mask = row.get("masked_arguments") or []
        total += sum(len(g["arguments"]) for g in row["gold_calls"])
        masked += sum(1 for g in row["gold_calls"] for a in g["arguments"] if a in mask)
        unstated += unstated_gold_arguments(turns, index, row["gold_calls"], mask)
    never = [u for u in unstated if u["referred_by"] is None]
    unmasked = total - masked
    return {
        "rl_rows": n_rows,
        "rl_rows_judged": judged,
        "rl_rows_inserted": inserted,
        "rl_rows_unmatched": unmatched,
        "gold_arguments": total,
        "masked": masked,
        "unstated": len(unstated),
        "referred_to": dict(Counter(u["referred_by"] for u in unstated if u["referred_by"]).most_common()),
        "never_given": len(never),
        "never_given_share": round(len(never) / unmasked, 4) if unmasked else 0.0,
        "never_given_by_argument": dict(Counter(f"{u['call']}.{u['argument']}" for u in never).most_common(10)),
    }
