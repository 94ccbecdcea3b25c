"""GRPO step time of the two rollouts (``rollout_func`` and TRL's ``environment_factory``) on a one-layer model.

The base model's architecture shrunk to one layer of width 32 (``envfactory_assets_tests.tiny_run``), taught
to call the fixture bookshop's ``delete_book`` (``envfactory_assets_tests.taught_policy``), so that every
rollout makes a real tool call in the sandbox; then ``--rounds`` rounds, each training ``--steps`` GRPO steps
with each rollout in turn (interleaved, so a shared machine's load drifts over both alike), with the default
GRPO settings otherwise (4 rollouts per step, 64 completion tokens, one tool round). The step time is TRL's
logged ``step_time`` (generation, tool calls, reward, and the forward and backward passes); the first step of
each run is left out (its one-off set-up). The trainer process's CPU time per step (all its threads, every
step of the run; the sandbox worker is a process of its own) is the figure that a shared machine's load moves
least. Usage::

    .venv/bin/python -m benchmarks.grpo_rollouts --rounds 3 --steps 4 [--device cpu]

Prints a Markdown table of the median step time per rollout, the fastest step, the ratio to ``rollout_func``,
the median CPU seconds per step and its ratio, the tool calls per step and the mean reward, with the
machine's load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs of each rollout")
    parser.add_argument("--steps", type=int, default=4, help="GRPO optimizer steps per run (the first is left out)")
    parser.add_argument("--device", default="cpu", help="'cpu', 'cuda' or 'auto'")
    parser.add_argument("--base-model", default="smollm2-135m-instruct", help="base model spec or directory")
    args = parser.parse_args(argv)

    from envfactory_assets.tooluse.task_episode import TaskRunner
    from envfactory_assets.training.base_model import resolve_base_model
    from envfactory_assets.training.grpo import ROLLOUTS, GRPOConfigSpec, train_grpo
    from envfactory_assets_tests.fixture_environments import build_fixture_environment
    from envfactory_assets_tests.taught_policy import delete_book_task, taught_to_call
    from envfactory_assets_tests.tiny_run import one_layer_model

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="grpo_rollouts_") as tmp:
        work = Path(tmp)
        base = resolve_base_model(args.base_model, work / "models")
        bookshop = build_fixture_environment("bookshop.json")
        environments = {bookshop["env_id"]: bookshop}
        with TaskRunner(environments) as runner:
            task = delete_book_task(bookshop, runner)
        start = taught_to_call(one_layer_model(base, work / "one_layer"), task, work / "start")
        steps: dict[str, list[float]] = {r: [] for r in ROLLOUTS}
        calls: dict[str, list[float]] = {r: [] for r in ROLLOUTS}
        rewards: dict[str, list[float]] = {r: [] for r in ROLLOUTS}
        cpu: dict[str, list[float]] = {r: [] for r in ROLLOUTS}
        for round_index in range(args.rounds):
            for rollout in ROLLOUTS:
                spec = GRPOConfigSpec(max_steps=args.steps, save_steps=0, device=args.device, rollout=rollout)
                out = work / f"{rollout}_{round_index}"
                metrics = train_grpo([task], environments, start, out, spec)
                steps[rollout] += metrics["step_seconds"][1:]
                calls[rollout].append(metrics["tool_calls"] / metrics["steps"])
                rewards[rollout] += metrics["reward_mean_per_step"]
                cpu[rollout].append(metrics["cpu_seconds"] / metrics["steps"])
    load_after = os.getloadavg()
    baseline = statistics.median(steps["rollout_func"])
    print(
        f"{os.cpu_count()} cores, load average (1/5/15 min) {load_before} before, {load_after} after; "
        f"device {args.device}"
    )
    print()
    cpu_baseline = statistics.median(cpu["rollout_func"])
    print(
        "| rollout | median step (s) | fastest step (s) | ratio | CPU s per step | CPU ratio | tool calls per step "
        "| mean reward | steps timed |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for rollout in ROLLOUTS:
        median = statistics.median(steps[rollout])
        print(
            f"| `{rollout}` | {median:.3f} | {min(steps[rollout]):.3f} | {median / baseline:.2f} | "
            f"{statistics.median(cpu[rollout]):.3f} | {statistics.median(cpu[rollout]) / cpu_baseline:.2f} | "
            f"{statistics.mean(calls[rollout]):.1f} | {statistics.mean(rewards[rollout]):.3f} | {len(steps[rollout])} |"
        )


if __name__ == "__main__":
    main()
