"""The small run config of the tests that run the whole graph through ``envfactory run`` on the fixture corpus
(test_pipeline's small counts; the fixture corpus has 3 environments)."""

from __future__ import annotations

from envfactory_assets_tests.fixture_environments import FIXTURES

TINY_RUN_CONFIG = {"ops": {
    "source_resources": {"config": {"corpus_dir": str(FIXTURES), "per_domain": 2}},
    "tool_chains": {"config": {"n_chains": 24, "min_tools": 3}},
    "checkpoints": {"config": {"max_steps": 2, "max_train_rows": 4, "n_eval_prompts": 1, "max_length": 768,
                               "grpo_max_steps": 1, "grpo_num_generations": 2, "grpo_prompts_per_step": 1,
                               "grpo_max_completion_length": 24, "grpo_n_prompts": 2}},
    "evaluations": {"config": {"n_synthetic": 2, "n_bfcl": 1, "max_new_tokens": 8, "max_tool_rounds": 1,
                                 "n_bfcl_single_turn": 0}},
}}
