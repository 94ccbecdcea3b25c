"""Row builders and writers for the three export formats.

- verl: one parquet row per ``rl_dataset`` row. Columns follow verl's RL dataset layout
  (``data_source``, ``prompt``, ``ability``, ``reward_model`` = ``{"style": "rule", "ground_truth"}``,
  ``extra_info``) plus ``initial_state``, ``final_state``, ``tool_config`` and ``licences``. ``prompt`` is a
  list of message objects ``{"role", "content", "tool_calls", "tool_call_id", "name"}``; ``tool_calls`` is a
  list of OpenAI call objects ``{"id", "type", "function": {"name", "arguments"}}`` (empty for messages
  without calls), so a chat template that loops over ``message.tool_calls`` renders them. ``arguments`` is
  the JSON text of the argument object, as in the OpenAI format: argument names differ between rows, and a
  parquet struct would merge them into one schema with ``null`` for every other row's names. States stay
  JSON strings for the same reason. ``reward_model.ground_truth`` is a JSON string of what
  :mod:`envfactory_assets.exports.verl_reward` needs: ``{"gold_calls", "executed_calls", "masked_arguments",
  "tools", "final_state_hash", "final_state_hashes", "env_ids", "tool_names", "initial_state"}``. For verl's tool agent
  loop, ``extra_info.tool_selection`` lists the row's tool names (the tools its prompt offers) and
  ``extra_info.tools_kwargs`` gives each of them ``{"create_kwargs": {"task_id": row id}}``
  (:mod:`envfactory_assets.exports.verl_tools`); that struct holds every tool name of the file, ``null`` for
  the names another row offers.
- LlamaFactory / ShareGPT: one JSON record per ``sft_dataset`` row, ``{"conversations": [{"from", "value"}],
  "system", "tools"}`` with roles ``human``, ``gpt``, ``function_call`` (a JSON list of ``{"name",
  "arguments"}``) and ``observation``, plus a ``dataset_info.json`` describing the columns. Parallel calls are
  one ``function_call`` turn holding the list of calls and one ``observation`` turn holding the JSON list of
  their results, in call order (LlamaFactory's data/README.md; its ``SharegptDatasetConverter`` skips a row
  whose roles do not alternate: :func:`sharegpt_problems`).
- Hugging Face ``datasets``: ``DatasetDict(train, validation)`` of SFT rows saved with ``save_to_disk``;
  ``messages`` and ``tools`` are lists of objects stored with the ``datasets.Json`` feature, which keeps each
  object exactly as the store has it (no ``null`` keys merged in from other rows), so TRL's ``SFTTrainer``
  reads ``messages`` as chat data and a chat template renders a row as it renders the store's row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from envfactory_assets.runtime.canonical import state_hash
from envfactory_assets.tooluse.chat_template import normalize_messages

DATA_SOURCE = "envfactory"
#: OpenAI's rule for a function name (``tools[].function.name`` of the Chat Completions API), which every format
#: here hands on to a model's API: verl's tool config, LlamaFactory's and the HF rows' ``tools``, the verifiers
#: package. The project's own names (:data:`~envfactory_assets.sources.names.TOOL_NAME_RE`) are a subset.
OPENAI_FUNCTION_NAME_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _arguments_text(arguments: Any) -> str:
    # the spacing of transformers' ``tojson`` (json.dumps defaults, key order kept), so a template that prints
    # the text renders the same bytes as one that serialises the object
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _message_struct(message: dict[str, Any]) -> dict[str, Any]:
    """One verl prompt message with the same fields in every row (see the module docstring)."""
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function", call)
        calls.append(
            {
                "id": str(call.get("id") or f"call_{i}"),
                "type": call.get("type") or "function",
                "function": {"name": function["name"], "arguments": _arguments_text(function.get("arguments") or {})},
            }
        )
    return {
        "role": message["role"],
        "content": message.get("content") or "",
        "tool_calls": calls,
        "tool_call_id": message.get("tool_call_id") or "",
        "name": message.get("name") or "",
    }


def check_tool_names(tools: Iterable[Mapping[str, Any]], what: str) -> None:
    """Refuse ``tools`` (OpenAI function tools ``{"type", "function": {"name", ...}}`` or bare ``{"name", ...}``
    specs) when a name breaks :data:`OPENAI_FUNCTION_NAME_RE`: a model API would refuse the whole request.

    Args:
        tools: the tools of one row or one environment.
        what: names their owner in the error (``"rl row rl_1"``).

    Raises:
        ValueError: a tool without a name, or whose name is not 1-64 letters, digits, ``_`` or ``-``; the
            message names the tool and the owner.
    """
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str) or not OPENAI_FUNCTION_NAME_RE.fullmatch(name):
            raise ValueError(
                f"{what}: tool name {name!r} is not a function name a model API accepts (1-64 letters, digits, "
                "'_' or '-'); rename the tool in its environment"
            )


def _tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [t.get("function", t)["name"] for t in tools]


def verl_row(row: dict[str, Any], index: int, split: str, licences: list[dict[str, str]]) -> dict[str, Any]:
    """The verl parquet row of one ``rl_dataset`` row (see the module docstring)."""
    ground_truth = {
        "gold_calls": row["gold_calls"],
        "executed_calls": row.get("executed_calls") or row["gold_calls"],
        "masked_arguments": row.get("masked_arguments") or [],
        "tools": row["tools"],
        "final_state_hash": row["final_state_hash"],
        "final_state_hashes": {e: state_hash(s) for e, s in row["final_state"].items()},
        "env_ids": list(row["env_ids"]),
        "tool_names": _tool_names(row["tools"]),
        "initial_state": row["initial_state"],
    }
    return {
        "data_source": DATA_SOURCE,
        "id": row["id"],
        "split": split,
        "prompt": [_message_struct(m) for m in normalize_messages(row["prompt"])],
        "ability": "tool_use",
        "reward_model": {"style": "rule", "ground_truth": _json(ground_truth)},
        "extra_info": {
            "index": index,
            "split": split,
            "rl_dataset_id": row["id"],
            "turn_index": row["turn_index"],
            "env_ids": list(row["env_ids"]),
            "domains": list(row.get("domains") or []),
            "tool_selection": ground_truth["tool_names"],
            "tools_kwargs": {n: {"create_kwargs": {"task_id": row["id"]}} for n in ground_truth["tool_names"]},
        },
        "initial_state": _json(row["initial_state"]),
        "final_state": _json(row["final_state"]),
        "tool_config": _json({"tools": row["tools"], "env_ids": row["env_ids"]}),
        "licences": licences,
    }


def sharegpt_record(row: dict[str, Any], split: str, licences: list[dict[str, str]]) -> dict[str, Any]:
    """The LlamaFactory ShareGPT record of one ``sft_dataset`` row.

    Raises:
        ValueError: a message role the format has no place for.
    """
    system, conversations = "", []
    results: list[Any] = []
    for message in normalize_messages(row["messages"]):
        role = message["role"]
        if role == "system":
            system = message["content"]
        elif role == "user":
            conversations.append({"from": "human", "value": message["content"]})
        elif role == "assistant" and message.get("tool_calls"):
            calls = [
                {"name": c.get("function", c)["name"], "arguments": c.get("function", c)["arguments"]}
                for c in message["tool_calls"]
            ]
            conversations.append({"from": "function_call", "value": _json(calls)})
        elif role == "assistant":
            conversations.append({"from": "gpt", "value": message["content"]})
        elif role == "tool" and conversations and conversations[-1]["from"] == "observation":
            # a parallel call's result: LlamaFactory takes one observation turn per function_call turn
            results.append(_result(message["content"]))
            conversations[-1]["value"] = _json(results)
        elif role == "tool":
            results = [_result(message["content"])]
            conversations.append({"from": "observation", "value": message["content"]})
        else:
            raise ValueError(f"sft row {row.get('id')}: message role {role!r} has no ShareGPT equivalent")
    return {
        "id": row["id"],
        "split": split,
        "system": system,
        "conversations": conversations,
        "tools": _json(row["tools"]),
        "env_ids": list(row["env_ids"]),
        "licences": licences,
    }


def _result(content: Any) -> Any:
    """A tool result as a JSON value for a list of results (its text when it is not JSON)."""
    try:
        return json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return content


def sharegpt_problems(record: dict[str, Any]) -> list[str]:
    """Why LlamaFactory's ShareGPT converter would skip ``record`` (empty when it loads whole).

    The rules of ``SharegptDatasetConverter`` (LlamaFactory ``src/llamafactory/data/converter.py``, documented
    in its ``data/README.md``): ``human`` or ``observation`` at odd positions (1st, 3rd, ...), ``gpt`` or
    ``function_call`` at even positions, an even number of turns (so the last one is the model's), and here
    also: each ``observation`` follows a ``function_call``, each ``function_call`` value is a JSON list of
    ``{"name", "arguments"}`` objects and the next turn is its ``observation``.
    """
    odd, even = ("human", "observation"), ("gpt", "function_call")
    turns = record.get("conversations") or []
    problems = []
    for i, turn in enumerate(turns):
        role = turn.get("from")
        if role not in (odd, even)[i % 2]:
            problems.append(f"turn {i + 1} is {role!r}, expected one of {(odd, even)[i % 2]}")
        if role == "observation" and (i == 0 or turns[i - 1].get("from") != "function_call"):
            problems.append(f"turn {i + 1} is an observation that follows no function_call")
        if role == "function_call":
            try:
                calls = json.loads(turn.get("value") or "")
            except ValueError:
                calls = None
            if not isinstance(calls, list) or not all(
                isinstance(c, dict) and {"name", "arguments"} <= c.keys() for c in calls
            ):
                problems.append(f"turn {i + 1}: function_call value is not a JSON list of calls")
            if i + 1 < len(turns) and turns[i + 1].get("from") != "observation":
                problems.append(f"turn {i + 1}: function_call is not followed by its observation")
    if not turns or len(turns) % 2:
        problems.append(f"{len(turns)} turns: LlamaFactory needs an even, non-zero number")
    return problems


SHAREGPT_DATASET_INFO = {
    "formatting": "sharegpt",
    "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
    "tags": {
        "role_tag": "from",
        "content_tag": "value",
        "user_tag": "human",
        "assistant_tag": "gpt",
        "observation_tag": "observation",
        "function_tag": "function_call",
    },
}


def hf_record(row: dict[str, Any], split: str, licences: list[dict[str, str]]) -> dict[str, Any]:
    """The Hugging Face ``datasets`` record of one ``sft_dataset`` row: ``messages`` (normalised, as training
    renders them) and ``tools`` as lists of objects, ``licences`` a list of ``{"env_id", "name", "url",
    "source_resource_id", "stated_name"}``."""
    return {
        "id": row["id"],
        "source_id": row["id"],
        "split": split,
        "messages": normalize_messages(row["messages"]),
        "tools": list(row["tools"]),
        "env_ids": list(row["env_ids"]),
        "licences": list(licences),
        "n_tokens": None,
    }


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """Write rows with pyarrow (schema inferred once over all rows; empty rows give an empty file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def write_json(value: Any, path: Path) -> None:
    path.write_text(json.dumps(value, ensure_ascii=False, indent=1), encoding="utf-8")


def write_hf(splits: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """``DatasetDict`` of the non-empty splits saved with ``save_to_disk``. ``messages``, ``tools`` and
    ``licences`` are ``List(Json())``: each object is kept as it is, with no keys merged in from other rows;
    ``source_id`` is the ``sft_dataset`` row (a part of a row split to fit the context has its own ``id``);
    ``n_tokens`` the row's length in the base model's tokens (null when not counted)."""
    from datasets import Dataset, DatasetDict, Features, Json, List, Value

    features = Features(
        {
            "id": Value("string"),
            "source_id": Value("string"),
            "split": Value("string"),
            "messages": List(Json()),
            "tools": List(Json()),
            "env_ids": List(Value("string")),
            "licences": List(Json()),
            "n_tokens": Value("int64"),
        }
    )
    # Empty splits are left out: datasets 5.2 saves them but load_from_disk then fails (IndexError).
    DatasetDict(
        {
            name: Dataset.from_dict({c: [r[c] for r in rows] for c in features}, features=features)
            for name, rows in splits.items()
            if rows
        }
    ).save_to_disk(str(path))
