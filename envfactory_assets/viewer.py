"""A readable rendering of one trajectory: turns, the user query before and after calibrated refinement,
the refinement operators, every tool call with its arguments and result, and the state hash per turn.

Used by ``envfactory show <trajectory-id>``, the ``show_trajectory`` job in the UI (its observation on
``refined_trajectories`` carries the rendering as Markdown) and the sample in ``refined_trajectories``'s
metadata.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from envfactory_assets.config_checks import non_blank_string, setting

MAX_VALUE_CHARS = 600


class TrajectoryNotFound(LookupError):
    """No current raw or refined trajectory has the given id."""


@dataclass(frozen=True)
class ShowTrajectorySpec:
    """The setting of the ``show_trajectory`` job: which trajectory to render.

    Raises:
        SettingError: (a ValueError) a blank ``trajectory_id``.
    """

    trajectory_id: str = setting(
        help="a raw_trajectories or refined_trajectories id, e.g. the refined_trajectory_id of an sft_dataset "
        "row or one listed in refined_trajectories' metadata.",
        required=True,
    )

    def __post_init__(self) -> None:
        non_blank_string("show_trajectory", "trajectory_id", self.trajectory_id, "a trajectory id")


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + f"... ({len(text)} chars)"


def _fence(text: str) -> str:
    # a value containing a run of backticks must not close the fence early: the fence is one tick longer
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}json\n{text}\n{fence}"


def render_trajectory(raw: dict[str, Any], refined: dict[str, Any] | None = None) -> str:
    """Markdown of a ``raw_trajectories`` row and, when given, its ``refined_trajectories`` row.

    The two rows must describe the same trajectory (``refined["raw_trajectory_id"] == raw["id"]``). With a
    refined row, its own turns are shown (each holds its calls, summary and state): goal merging joins raw
    turns, so raw and refined turns do not line up by position. Long values are cut at
    :data:`MAX_VALUE_CHARS` characters.

    Raises:
        ValueError: ``refined`` was made from another raw trajectory.
    """
    if refined is not None and refined.get("raw_trajectory_id") != raw["id"]:
        raise ValueError(
            f"refined trajectory {refined.get('id')} was made from "
            f"{refined.get('raw_trajectory_id')}, not from {raw['id']}"
        )
    turns = ((refined or {}).get("turns") or []) if refined is not None else (raw.get("turns") or [])
    lines = [f"## Trajectory {refined['id'] if refined else raw['id']}", ""]
    facts = [
        ("raw trajectory", raw["id"]),
        ("tool chain", raw.get("tool_chain_id")),
        ("environments", ", ".join(raw.get("env_ids") or [])),
        ("domains", ", ".join(raw.get("domains") or [])),
        ("status", f"{raw.get('status') or '?'}" + (f" / refined: {refined.get('status')}" if refined else "")),
        ("turns", len(turns) if refined is not None else raw.get("n_turns")),
        ("calls", sum(len(t.get("calls") or []) for t in turns) if refined is not None else raw.get("n_calls")),
    ]
    if refined is not None and raw.get("n_turns") not in (None, len(turns)):
        facts.append(("turns before refinement", raw.get("n_turns")))
    lines += [f"- **{name}**: {value}" for name, value in facts if value not in (None, "")]
    if raw.get("reasons"):
        lines.append(f"- **reasons**: {'; '.join(raw['reasons'])}")
    for i, turn in enumerate(turns):
        lines += ["", f"### Turn {i + 1}", ""]
        if refined is not None:
            lines.append(f"**User (refined):** {turn.get('query')}")
            lines.append("")
            lines.append(f"**User (before refinement):** {turn.get('query_raw', turn.get('query'))}")
            if turn.get("merged_from"):
                lines += ["", f"*Merged from the raw turns:* {' | '.join(str(q) for q in turn['merged_from'])}"]
            if turn.get("operators"):
                ops = [
                    f"{op.get('operator')} ({op.get('argument')})" if isinstance(op, dict) else str(op)
                    for op in turn["operators"]
                ]
                lines += ["", f"*Refinement operators:* {', '.join(ops)}"]
        else:
            lines.append(f"**User:** {turn.get('query')}")
        if turn.get("target_tools"):
            lines += ["", f"*Target tools:* {', '.join(turn['target_tools'])}"]
        for n, call in enumerate(turn.get("calls") or [], 1):
            lines += [
                "",
                f"{n}. **Call** `{call.get('name')}` ({call.get('env_id', '')})",
                "",
                _fence(_json(call.get("arguments"))),
                "",
                "**Result**",
                "",
                _fence(_json(call.get("output"))),
            ]
        if turn.get("assistant_summary"):
            lines += ["", f"**Assistant:** {turn['assistant_summary']}"]
        if turn.get("state_after_hash"):
            lines += ["", f"*State after the turn:* `{turn['state_after_hash'][:16]}`"]
    return "\n".join(lines)


def find_trajectory(store: Any, trajectory_id: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(raw row, refined row or None)`` for a raw or refined trajectory id in ``store``.

    A raw id gives its current refined version, if any. Superseded rows are found too, so an id from an old
    dataset still renders.

    Raises:
        TrajectoryNotFound: no raw or refined trajectory has that id.
        FileNotFoundError: the store does not exist yet.
    """
    refined = store.read("refined_trajectories", "id = ?", [trajectory_id], current=False)
    if refined:
        raws = store.read("raw_trajectories", "id = ?", [refined[0]["raw_trajectory_id"]], current=False)
        if not raws:
            raise TrajectoryNotFound(
                f"refined trajectory {trajectory_id} names raw trajectory "
                f"{refined[0]['raw_trajectory_id']}, which is not in the store"
            )
        return raws[0], refined[0]
    raws = store.read("raw_trajectories", "id = ?", [trajectory_id], current=False)
    if not raws:
        near = closest_ids(store, trajectory_id)
        raise TrajectoryNotFound(
            f"no raw or refined trajectory has id {trajectory_id!r} "
            "(ids look like the refined_trajectory_id of sft_dataset rows)"
            + (f"; the closest stored: {', '.join(near)}" if near else "")
        )
    later = store.read("refined_trajectories", "raw_trajectory_id = ?", [trajectory_id])
    return raws[0], (later[0] if later else None)


def closest_ids(store: Any, trajectory_id: str, n: int = 3) -> list[str]:
    """Up to ``n`` ids of passed refined trajectories closest to ``trajectory_id`` by Jaro-Winkler similarity
    (DuckDB's ``jaro_winkler_similarity``), most similar first: what a mistyped or truncated id was likely
    meant to be, among those at least 0.8 similar (ids alike only by their ``ref_`` prefix are no suggestion).
    Empty when none is."""
    rows = store.query(
        "SELECT id FROM current_refined_trajectories WHERE status = 'passed' "
        "AND jaro_winkler_similarity(id, ?) >= 0.8 "
        f"ORDER BY jaro_winkler_similarity(id, ?) DESC, id LIMIT {int(n)}",
        [trajectory_id, trajectory_id],
    )
    return rows["id"].to_list() if rows.height else []


def render_from_store(store: Any, trajectory_id: str) -> str:
    """Markdown of the trajectory with id ``trajectory_id`` (raw or refined); see :func:`find_trajectory`."""
    return render_trajectory(*find_trajectory(store, trajectory_id))


def sample_markdown(raw_rows: list[dict[str, Any]], refined_rows: list[dict[str, Any]], n: int = 2) -> str:
    """Markdown for asset metadata: the ids of up to 20 refined trajectories and the first ``n`` rendered,
    with how to render any other one (``envfactory show <id>`` or the ``show_trajectory`` job)."""
    raw_by_id = {r["id"]: r for r in raw_rows}
    passed = [r for r in refined_rows if r.get("status") == "passed" and r["raw_trajectory_id"] in raw_by_id]
    if not passed:
        return "No refined trajectory passed."
    head = [
        "Render any trajectory with `envfactory show <id>` or the `show_trajectory` job "
        "(launchpad: `ops: {render_trajectory_markdown: {config: {trajectory_id: <id>}}}`).",
        "",
        "Ids: " + ", ".join(f"`{r['id']}`" for r in passed[:20]) + (" ..." if len(passed) > 20 else ""),
    ]
    return "\n".join(head + [""] + [render_trajectory(raw_by_id[r["raw_trajectory_id"]], r) + "\n" for r in passed[:n]])
