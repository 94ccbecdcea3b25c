"""Time the evaluation of one model on the store of a run (wall and CPU seconds per benchmark).

Usage: ``ENVFACTORY_HOME=... .venv/bin/python -m benchmarks.evaluation [MODEL_DIR] [N_SYNTHETIC] [N_BFCL]
[SEEDS] [MAX_NEW_TOKENS] [PREFIX_CACHE_TOKENS]``; MODEL_DIR defaults (also when given as "") to the cached base
model, the rest to the defaults of ``EvalSpec``/``SamplingSpec`` (the ``evaluations`` asset's defaults). Reads the store
(passed environments, rl_dataset),
writes nothing. The figures go to docs/evaluation.md ("Settings and the CPU budget").
"""

from __future__ import annotations

import dataclasses
import sys
import time

from envfactory_assets import settings
from envfactory_assets.catalog import passed_environments
from envfactory_assets.evaluation.model_policy import SamplingSpec
from envfactory_assets.evaluation.run import EvalSpec, ModelRef, evaluate_models
from envfactory_assets.store.db import Store
from envfactory_assets.training.base_model import resolve_base_model


def main(argv: list[str]) -> None:
    model = argv[0] if argv and argv[0] else str(resolve_base_model("smollm2-135m-instruct", settings.models_dir()))
    defaults, sampling = EvalSpec(), SamplingSpec()
    n_synth = int(argv[1]) if len(argv) > 1 else defaults.n_synthetic
    n_bfcl = int(argv[2]) if len(argv) > 2 else defaults.n_bfcl
    seeds = tuple(range(int(argv[3]))) if len(argv) > 3 else defaults.seeds
    sampling = dataclasses.replace(
        sampling,
        max_new_tokens=int(argv[4]) if len(argv) > 4 else sampling.max_new_tokens,
        prefix_cache_tokens=int(argv[5]) if len(argv) > 5 else sampling.prefix_cache_tokens,
    )
    store = Store(settings.store_path())
    envs = passed_environments(store).environments
    started = time.perf_counter()
    rows = evaluate_models(
        [ModelRef("bench", "base", model)],
        store.read("rl_dataset"),
        envs,
        EvalSpec(n_synthetic=n_synth, n_bfcl=n_bfcl, seeds=seeds, sampling=sampling),
    )
    for row in rows:
        if row["subset"] == "all":
            m = row["metrics"]
            print(
                f"{row['benchmark']}: {row['n_tasks']} tasks x {len(seeds)} seeds, mean {row['mean']:.3f}, "
                f"{m['seconds']:.0f} s wall, {m['cpu_seconds']:.0f} CPU-s"
            )
    print(
        f"total {time.perf_counter() - started:.0f} s wall (model load included); max_new_tokens "
        f"{sampling.max_new_tokens}, prefix_cache_tokens {sampling.prefix_cache_tokens}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
