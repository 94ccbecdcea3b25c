"""The small ``envfactory run`` of the whole graph on the fixture corpus (test_pipeline's small counts; the
fixture corpus has 3 environments), run once per test session and shared by the tests that read what a
person sees of it: the terminal (test_run_output) and the UI (test_ui_browser)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from envfactory_assets_tests.fixture_environments import FIXTURES

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The whole graph on 2 cores under load (SFT, GRPO and the evaluation on CPU): minutes, not hours.
TIMEOUT_S = 3000

TINY_RUN_CONFIG = {"ops": {
    "source_resources": {"config": {"corpus_dir": str(FIXTURES), "per_domain": 2}},
    "tool_chains": {"config": {"n_chains": 24, "min_tools": 3}},
    "checkpoints": {"config": {"max_steps": 2, "max_train_rows": 4, "n_eval_prompts": 1, "max_length": 768,
                               "grpo_max_steps": 1, "grpo_num_generations": 2, "grpo_prompts_per_step": 1,
                               "grpo_max_completion_length": 24, "grpo_n_prompts": 2}},
    "evaluations": {"config": {"n_synthetic": 2, "n_bfcl": 1, "max_new_tokens": 8, "max_tool_rounds": 1,
                                 "n_bfcl_single_turn": 0}},
}}


def run_tiny_pipeline(home: Path) -> str:
    """``envfactory run`` of :data:`TINY_RUN_CONFIG` in the ENVFACTORY_HOME ``home`` (in a child process, as a
    person runs it); returns what it printed (stdout and stderr merged, as a terminal shows them).

    Raises:
        AssertionError: the command failed (its last output in the message).
    """
    shared_models = REPO_ROOT / ".envfactory" / "models"  # saves materializing the base model again
    if shared_models.exists() and not (home / "models").exists():
        (home / "models").symlink_to(shared_models, target_is_directory=True)
    config = home / "run.yaml"
    config.write_text(yaml.safe_dump(TINY_RUN_CONFIG))
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    proc = subprocess.run([sys.executable, "-m", "envfactory_assets.cli", "run", "--config", str(config)],
                          env={**env, "ENVFACTORY_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stdout[-5000:]
    return proc.stdout
