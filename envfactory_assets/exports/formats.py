"""Row builders and writers for the three export formats.

- verl: one parquet row per ``rl_dataset`` row. Columns follow verl's RL dataset layout
  (``data_source``, ``prompt``, ``ability``, ``reward_model`` = ``{"style": "rule", "ground_truth"}``,
  ``extra_info``) plus ``initial_state``, ``final_state``, ``tool_config`` and ``licences``. Message
  fields that differ between rows (tool calls, states) are JSON strings, so every row has the same
  parquet schema (no struct merging, no ``null`` keys invented for other rows' arguments).
  ``reward_model.ground_truth`` is a JSON string ``{"gold_calls", "masked_arguments", "final_state_hash", "final_state_hashes"}`` (per environment):
  what :func:`envfactory_assets.tooluse.reward.hybrid_reward` needs.
- LlamaFactory / ShareGPT: one JSON record per ``sft_dataset`` row, ``{"conversations": [{"from", "value"}],
  "system", "tools"}`` with roles ``human``, ``gpt``, ``function_call`` (a JSON list of ``{"name",
  "arguments"}``) and ``observation``, plus a ``dataset_info.json`` describing the columns.
- Hugging Face ``datasets``: ``DatasetDict(train, validation)`` of SFT rows saved with ``save_to_disk``;
  ``messages`` and ``tools`` are JSON strings (``Dataset.from_list`` would merge argument dicts across rows).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.tooluse.chat_template import normalize_messages

DATA_SOURCE = "envfactory"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _message_struct(message: dict[str, Any]) -> dict[str, str]:
    return {"role": message["role"], "content": message.get("content") or "",
            "tool_calls": _json(message["tool_calls"]) if message.get("tool_calls") else "",
            "tool_call_id": message.get("tool_call_id") or "", "name": message.get("name") or ""}


def verl_row(row: dict[str, Any], index: int, split: str, licences: list[dict[str, str]]) -> dict[str, Any]:
    """The verl parquet row of one ``rl_dataset`` row (see the module docstring)."""
    ground_truth = {"gold_calls": row["gold_calls"], "masked_arguments": row.get("masked_arguments") or [],
                    "final_state_hash": row["final_state_hash"],
                    "final_state_hashes": {e: state_hash(s) for e, s in row["final_state"].items()}}
    return {
        "data_source": DATA_SOURCE, "id": row["id"], "split": split,
        "prompt": [_message_struct(m) for m in normalize_messages(row["prompt"])],
        "ability": "tool_use",
        "reward_model": {"style": "rule", "ground_truth": _json(ground_truth)},
        "extra_info": {"index": index, "split": split, "rl_dataset_id": row["id"], "turn_index": row["turn_index"],
                       "env_ids": list(row["env_ids"]), "domains": list(row.get("domains") or [])},
        "initial_state": _json(row["initial_state"]), "final_state": _json(row["final_state"]),
        "tool_config": _json({"tools": row["tools"], "env_ids": row["env_ids"]}),
        "licences": licences,
    }


def sharegpt_record(row: dict[str, Any], split: str, licences: list[dict[str, str]]) -> dict[str, Any]:
    """The LlamaFactory ShareGPT record of one ``sft_dataset`` row.

    Raises:
        ValueError: a message role the format has no place for.
    """
    system, conversations = "", []
    for message in normalize_messages(row["messages"]):
        role = message["role"]
        if role == "system":
            system = message["content"]
        elif role == "user":
            conversations.append({"from": "human", "value": message["content"]})
        elif role == "assistant" and message.get("tool_calls"):
            calls = [{"name": c.get("function", c)["name"], "arguments": c.get("function", c)["arguments"]}
                     for c in message["tool_calls"]]
            conversations.append({"from": "function_call", "value": _json(calls)})
        elif role == "assistant":
            conversations.append({"from": "gpt", "value": message["content"]})
        elif role == "tool":
            conversations.append({"from": "observation", "value": message["content"]})
        else:
            raise ValueError(f"sft row {row.get('id')}: message role {role!r} has no ShareGPT equivalent")
    return {"id": row["id"], "split": split, "system": system, "conversations": conversations,
            "tools": _json(row["tools"]), "env_ids": list(row["env_ids"]), "licences": licences}


SHAREGPT_DATASET_INFO = {"formatting": "sharegpt", "columns": {"messages": "conversations", "system": "system",
                                                              "tools": "tools"},
                         "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "human",
                                  "assistant_tag": "gpt", "observation_tag": "observation",
                                  "function_tag": "function_call"}}


def hf_record(row: dict[str, Any], split: str, licences: list[dict[str, str]]) -> dict[str, Any]:
    """The Hugging Face ``datasets`` record of one ``sft_dataset`` row (nested fields as JSON strings)."""
    return {"id": row["id"], "messages": _json(normalize_messages(row["messages"])), "tools": _json(row["tools"]),
            "env_ids": list(row["env_ids"]), "licences": _json(licences)}


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """Write rows with pyarrow (schema inferred once over all rows; empty rows give an empty file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def write_json(value: Any, path: Path) -> None:
    path.write_text(json.dumps(value, ensure_ascii=False, indent=1), encoding="utf-8")


def write_hf(splits: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """``DatasetDict`` of the non-empty splits saved with ``save_to_disk`` (explicit features: strings and a
    string list)."""
    from datasets import Dataset, DatasetDict, Features, Sequence, Value

    features = Features({"id": Value("string"), "messages": Value("string"), "tools": Value("string"),
                         "env_ids": Sequence(Value("string")), "licences": Value("string")})
    # Empty splits are left out: datasets 5.2 saves them but load_from_disk then fails (IndexError).
    DatasetDict({name: Dataset.from_dict({c: [r[c] for r in rows] for c in features}, features=features)
                 for name, rows in splits.items() if rows}).save_to_disk(str(path))
