"""Benchmark: GRPO seconds per step and mean reward on the store's train-split RL rows.

Usage: ENVFACTORY_HOME=... python scripts/bench_grpo.py START_MODEL_DIR [MAX_STEPS] [N_PROMPTS]
Starts from START_MODEL_DIR (an SFT checkpoint), writes to $ENVFACTORY_HOME/bench_grpo, prints the metrics as JSON.
"""

import json
import os
import sys
from pathlib import Path

from envfactory_assets.defs.graph.assets import passed_environments
from envfactory_assets.defs.resources import EnvFactoryHome
from envfactory_assets.training.grpo import GRPOConfigSpec, train_grpo
from envfactory_assets.training.stage import grpo_tasks


def main() -> None:
    start = Path(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    n_prompts = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    home = EnvFactoryHome(home=os.environ.get("ENVFACTORY_HOME", ".envfactory"))
    tasks = grpo_tasks(home.store().read("rl_dataset"), n_prompts, max_tools=4)
    environments, _ = passed_environments(home)
    metrics = train_grpo(tasks, environments, start, home.root() / "bench_grpo", GRPOConfigSpec(max_steps=steps))
    print(json.dumps(metrics, indent=1))


if __name__ == "__main__":
    main()
