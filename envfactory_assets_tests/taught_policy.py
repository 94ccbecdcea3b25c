"""A one-layer policy that calls a task's tool: for GRPO runs (tests and benchmarks/grpo_rollouts.py) whose
rollouts must make real tool calls, which a randomly initialized model never writes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from envfactory_assets.envgen.tools import openai_tool
from envfactory_assets.tooluse.chat_template import render_chat


def delete_book_task(bookshop: dict[str, Any], runner: Any, row_id: str = "rl_delete_book") -> dict[str, Any]:
    """An ``rl_dataset`` row on the bookshop fixture: delete its first book (gold final state from executing
    the gold call in ``runner``, a :class:`~envfactory_assets.tooluse.task_episode.TaskRunner`), plus
    ``book_id``."""
    env_id = bookshop["env_id"]
    initial = {env_id: copy.deepcopy(bookshop["initial_states"][0]["state"])}
    book_id = initial[env_id]["tables"]["books"][0]["book_id"]
    row = {
        "id": row_id,
        "env_ids": [env_id],
        "tools": [openai_tool(t) for t in bookshop["tools"]],
        "prompt": [{"role": "user", "content": f"Please delete book {book_id}."}],
        "gold_calls": [{"name": "delete_book", "arguments": {"book_id": book_id}}],
        "masked_arguments": ["limit"],
        "initial_state": initial,
        "final_state": initial,
    }
    episode = runner.episode(row)
    episode.call("delete_book", {"book_id": book_id})
    final = episode.final_states()
    episode.close()
    return {**row, "final_state": final, "book_id": book_id}


def taught_to_call(model_dir: Path, task: dict[str, Any], out_dir: Path, max_steps: int = 400) -> Path:
    """``model_dir``'s model after supervised steps (Adam, lr 1e-2) on ``task``'s prompt, rendered with its
    tools, followed by its first gold call and the end of turn, until the token loss is under 0.02; saved with
    its tokenizer to ``out_dir``. Returns ``out_dir``.

    Raises:
        AssertionError: the loss is still 0.02 or more after ``max_steps`` steps.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envfactory_assets.training.base_model import prepare_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    prepare_tokenizer(tokenizer, model)
    text = render_chat(task["prompt"], task["tools"], add_generation_prompt=True)
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    call = json.dumps(task["gold_calls"][0])
    target = tokenizer(f"<tool_call>{call}</tool_call><|im_end|>", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + target])
    labels = torch.tensor([[-100] * len(prompt) + target])
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(max_steps):
        loss = model(input_ids=ids, labels=labels).loss
        if loss.item() < 0.02:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.02, f"the policy did not learn the call (loss {loss.item():.3f})"
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
