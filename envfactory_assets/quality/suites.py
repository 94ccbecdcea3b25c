"""Great Expectations suites for ``sft_dataset`` and ``rl_dataset``.

Rows are flattened into pandas DataFrames (Great Expectations 1.x validates DataFrames correctly; its
SQLAlchemy path gives wrong results on DuckDB) and checked for schema, nulls, ranges, tool-call arguments
that parse as JSON objects, and tool names that belong to the row's own tool set.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass
class QualityReport:
    """Outcome of one suite: ``success`` and one result per expectation
    (``expectation``, ``column``, ``success``, ``unexpected_count``)."""

    suite: str
    success: bool
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [r for r in self.results if not r["success"]]


def _object_json(text: Any) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (TypeError, ValueError):
        return False


def sft_frames(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rows frame, tool-call frame)`` of SFT rows: one line per row, one line per assistant tool call."""
    row_lines, call_lines = [], []
    for row in rows:
        names = {t["function"]["name"] for t in row.get("tools") or []}
        messages = row.get("messages") or []
        row_lines.append(
            {
                "row_id": row["id"],
                "n_turns": row.get("n_turns"),
                "n_messages": len(messages),
                "first_role": messages[0]["role"] if messages else None,
                "last_role": messages[-1]["role"] if messages else None,
                "n_tools": len(names),
            }
        )
        for m in messages:
            for call in m.get("tool_calls") or []:
                fn = call.get("function", {})
                call_lines.append(
                    {
                        "row_id": row["id"],
                        "tool_name": fn.get("name"),
                        "arguments": fn.get("arguments"),
                        "arguments_object": _object_json(fn.get("arguments")),
                        "in_toolset": fn.get("name") in names,
                    }
                )
    return pd.DataFrame(row_lines), pd.DataFrame(call_lines)


def rl_frames(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rows frame, gold-call frame)`` of RL rows."""
    row_lines, call_lines = [], []
    for row in rows:
        names = {t["function"]["name"] for t in row.get("tools") or []}
        gold = row.get("gold_calls") or []
        args = {a for g in gold for a in g.get("arguments", {})}
        row_lines.append(
            {
                "row_id": row["id"],
                "turn_index": row.get("turn_index"),
                "n_gold_calls": len(gold),
                "last_prompt_role": (row.get("prompt") or [{}])[-1].get("role"),
                "final_state_hash": row.get("final_state_hash"),
                "masked_in_gold": set(row.get("masked_arguments") or []) <= args,
            }
        )
        for g in gold:
            call_lines.append(
                {
                    "row_id": row["id"],
                    "tool_name": g.get("name"),
                    "arguments": json.dumps(g.get("arguments"), ensure_ascii=False),
                    "arguments_object": isinstance(g.get("arguments"), dict),
                    "in_toolset": g.get("name") in names,
                }
            )
    return pd.DataFrame(row_lines), pd.DataFrame(call_lines)


def _run(suite_name: str, frames: dict[str, tuple[pd.DataFrame, list[Any]]]) -> QualityReport:
    import great_expectations as gx

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    context = gx.get_context(mode="ephemeral")
    source = context.data_sources.add_pandas(suite_name)
    report = QualityReport(suite_name, True)
    for frame_name, (frame, expectations) in frames.items():
        if frame.empty:
            report.success = False
            report.results.append(
                {"expectation": "table_not_empty", "column": frame_name, "success": False, "unexpected_count": 0}
            )
            continue
        batch = source.add_dataframe_asset(frame_name).add_batch_definition_whole_dataframe("all")
        suite = context.suites.add(gx.ExpectationSuite(name=f"{suite_name}.{frame_name}"))
        for expectation in expectations:
            suite.add_expectation(expectation)
        validation = context.validation_definitions.add(
            gx.ValidationDefinition(name=f"{suite_name}.{frame_name}", data=batch, suite=suite)
        )
        result = validation.run(batch_parameters={"dataframe": frame})
        report.success &= bool(result.success)
        for r in result.results:
            report.results.append(
                {
                    "expectation": f"{frame_name}.{r.expectation_config.type}",
                    "column": r.expectation_config.kwargs.get("column"),
                    "success": bool(r.success),
                    "unexpected_count": r.result.get("unexpected_count", 0),
                }
            )
    return report


def validate_sft(rows: list[dict[str, Any]]) -> QualityReport:
    """The SFT suite: rows start with a system message and end with the assistant; every tool call names a
    tool of the row and has JSON-object arguments."""
    import great_expectations as gx

    e = gx.expectations
    row_frame, call_frame = sft_frames(rows)
    return _run(
        "sft_dataset",
        {
            "rows": (
                row_frame,
                [
                    e.ExpectColumnValuesToBeUnique(column="row_id"),
                    e.ExpectColumnValuesToNotBeNull(column="n_turns"),
                    e.ExpectColumnValuesToBeBetween(column="n_turns", min_value=1, max_value=50),
                    e.ExpectColumnValuesToBeInSet(column="first_role", value_set=["system"]),
                    e.ExpectColumnValuesToBeInSet(column="last_role", value_set=["assistant"]),
                    e.ExpectColumnValuesToBeBetween(column="n_tools", min_value=1),
                ],
            ),
            "tool_calls": (
                call_frame,
                [
                    e.ExpectColumnValuesToNotBeNull(column="tool_name"),
                    e.ExpectColumnValuesToBeJsonParseable(column="arguments"),
                    e.ExpectColumnValuesToBeInSet(column="arguments_object", value_set=[True]),
                    e.ExpectColumnValuesToBeInSet(column="in_toolset", value_set=[True]),
                ],
            ),
        },
    )


def validate_rl(rows: list[dict[str, Any]]) -> QualityReport:
    """The RL suite: each row ends its prompt on the user's turn, has gold calls (none for an abstention row)
    naming its own tools with JSON-object arguments, masks only arguments its gold calls use, and records a final state
    hash."""
    import great_expectations as gx

    e = gx.expectations
    row_frame, call_frame = rl_frames(rows)
    return _run(
        "rl_dataset",
        {
            "rows": (
                row_frame,
                [
                    e.ExpectColumnValuesToBeUnique(column="row_id"),
                    e.ExpectColumnValuesToBeBetween(column="turn_index", min_value=0),
                    e.ExpectColumnValuesToBeBetween(column="n_gold_calls", min_value=0),
                    e.ExpectColumnValuesToBeInSet(column="last_prompt_role", value_set=["user"]),
                    e.ExpectColumnValueLengthsToEqual(column="final_state_hash", value=64),
                    e.ExpectColumnValuesToBeInSet(column="masked_in_gold", value_set=[True]),
                ],
            ),
            "gold_calls": (
                call_frame,
                [
                    e.ExpectColumnValuesToNotBeNull(column="tool_name"),
                    e.ExpectColumnValuesToBeJsonParseable(column="arguments"),
                    e.ExpectColumnValuesToBeInSet(column="arguments_object", value_set=[True]),
                    e.ExpectColumnValuesToBeInSet(column="in_toolset", value_set=[True]),
                ],
            ),
        },
    )
