"""Profile SFT on the store: token profile of the stage's training examples, then a few timed steps padded
and padding-free from the same seed (their losses must agree).

Usage: ENVFACTORY_HOME=... python scripts/profile_sft.py [STEPS] [MAX_TRAIN_ROWS] [MAX_TOOLS]
Trains into a temporary directory; prints JSON. Defaults: 3 steps, 64 rows, 8 tools (the stage's defaults).
"""

import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from transformers import AutoTokenizer

from envfactory_assets import settings
from envfactory_assets.store.db import Store
from envfactory_assets.training.base_model import prepare_tokenizer, resolve_base_model
from envfactory_assets.training.profiling import sft_token_profile
from envfactory_assets.training.sft import SFTConfigSpec, train_sft
from envfactory_assets.training.stage import train_split, training_examples


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    max_rows = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    max_tools = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    spec = SFTConfigSpec(max_steps=steps)
    rows = train_split(Store(settings.store_path()).read("sft_dataset"))
    examples = training_examples(rows, max_rows, spec.max_length, max_tools)
    base = resolve_base_model("smollm2-135m-instruct", settings.envfactory_home() / "models")
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(base))
    report = {"profile": sft_token_profile(examples, tokenizer, spec.per_device_train_batch_size)}
    for padding_free in (False, True):
        with tempfile.TemporaryDirectory() as out:
            m = train_sft(examples, base, Path(out), dataclasses.replace(spec, padding_free=padding_free))
        report["padding_free" if padding_free else "padded"] = {
            k: m.get(k) for k in ("step_seconds", "seconds_per_step", "cpu_seconds", "loss_history", "train_tokens", "threads")}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
