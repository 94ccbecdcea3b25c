"""Benchmark: GRPO seconds per step and mean reward on the store's train-split RL rows.

Usage: ENVFACTORY_HOME=... python -m benchmarks.grpo START_MODEL_DIR [MAX_STEPS] [N_PROMPTS]
Starts from START_MODEL_DIR (an SFT checkpoint), writes to $ENVFACTORY_HOME/bench_grpo, prints the metrics as JSON.
"""

import json
import sys
from pathlib import Path

from envfactory_assets import settings
from envfactory_assets.catalog import passed_environments
from envfactory_assets.store.db import Store
from envfactory_assets.training.grpo import GRPOConfigSpec, train_grpo
from envfactory_assets.training.stage import DEFAULT_GRPO_MAX_TOOLS, grpo_tasks


def main() -> None:
    start = Path(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    n_prompts = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    store = Store(settings.store_path())
    tasks = grpo_tasks(store.read("rl_dataset"), n_prompts, max_tools=DEFAULT_GRPO_MAX_TOOLS)
    environments = passed_environments(store).environments
    spec = GRPOConfigSpec(max_steps=steps, save_steps=0)  # resumable checkpoints would add their writes to the time
    metrics = train_grpo(tasks, environments, start, settings.envfactory_home() / "bench_grpo", spec)
    print(json.dumps(metrics, indent=1))


if __name__ == "__main__":
    main()
