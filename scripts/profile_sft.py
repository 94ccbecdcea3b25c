"""Profile SFT on the store: the token profile of the stage's training examples, then forward+backward
passes of the same random pairs padded and padding-free, alternated so that a shared machine's load falls
on both alike (their losses must agree).

Usage: ENVFACTORY_HOME=... python scripts/profile_sft.py [PAIRS] [MAX_TRAIN_ROWS] [MAX_TOOLS]
Prints JSON. Defaults: 3 pairs, 64 rows, 8 tools (the stage's defaults).
"""

import json
import random
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTTrainer
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

from envfactory_assets import settings
from envfactory_assets.store.db import Store
from envfactory_assets.training.base_model import prepare_tokenizer, resolve_base_model
from envfactory_assets.training.profiling import sft_token_profile
from envfactory_assets.training.sft import SFTConfigSpec, _trl_config, build_sft_dataset
from envfactory_assets.training.stage import train_split, training_examples


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    max_rows = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    max_tools = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    spec = SFTConfigSpec(padding_free=False)
    rows = train_split(Store(settings.store_path()).read("sft_dataset"))
    examples = training_examples(rows, max_rows, spec.max_length, max_tools)
    base = resolve_base_model("smollm2-135m-instruct", settings.envfactory_home() / "models")
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    prepare_tokenizer(tokenizer, model)
    report = {
        "profile": sft_token_profile(examples, tokenizer, spec.per_device_train_batch_size),
        "threads": torch.get_num_threads(),
    }
    trainer = SFTTrainer(
        model=model,
        args=_trl_config(settings.envfactory_home() / "profile_sft", spec),
        train_dataset=build_sft_dataset(examples),
        processing_class=tokenizer,
    )
    prepared = [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in trainer.train_dataset]
    rng = random.Random(0)
    totals = {False: [0.0, 0.0, 0], True: [0.0, 0.0, 0]}  # wall s, cpu s, tokens fed
    losses = {False: [], True: []}
    for _ in range(pairs):
        pair = rng.sample(prepared, 2)
        for padding_free in (False, True):
            batch = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id, padding_free=padding_free)(
                pair
            )
            wall, cpu = time.perf_counter(), time.process_time()
            loss = model(**batch).loss
            loss.backward()
            model.zero_grad(set_to_none=True)
            totals[padding_free][0] += time.perf_counter() - wall
            totals[padding_free][1] += time.process_time() - cpu
            totals[padding_free][2] += batch["input_ids"].numel()
            losses[padding_free].append(round(loss.item(), 5))
    for padding_free, (wall, cpu, tokens) in totals.items():
        report["padding_free" if padding_free else "padded"] = {
            "seconds_per_pass": round(wall / pairs, 2),
            "cpu_seconds_per_pass": round(cpu / pairs, 2),
            "tokens_per_pass": tokens // pairs,
            "losses": losses[padding_free],
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
