"""Run the benchmarks and write ``docs/BENCHMARKS.md`` (the machine's description, then each benchmark's
table with the command that produced it). Usage, from the repository root::

    .venv/bin/python -m benchmarks.run --store ~/.envfactory/envfactory.duckdb

Every comparison is measured within one run as a ratio, since a shared machine's absolute times drift.
"""

from __future__ import annotations

import argparse
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import model_concurrency, refinement, serve_env_startup
from envfactory_assets.store.db import Store

DOC = Path(__file__).resolve().parents[1] / "docs" / "BENCHMARKS.md"
#: What the figures mean, the profiles and the targets still missed: kept by hand, appended as it is.
NOTES = Path(__file__).with_name("notes.md")


def machine() -> str:
    """One line: CPU model, cores, memory (GiB), Python version, date (UTC)."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() \
        else platform.processor()
    mem = (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / 2 ** 30
    return (f"{model}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}, "
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a store with raw_trajectories")
    parser.add_argument("--n", type=int, default=300, help="raw trajectories in the refinement sample")
    parser.add_argument("--model-levels", default=",".join(map(str, model_concurrency.LEVELS)),
                        help="max_concurrency values of the model-backed stages' benchmark, comma-separated")
    args = parser.parse_args()
    raw, envs, flags = refinement.sample(Store(args.store), args.n)
    table = refinement.markdown(refinement.measure(raw, envs, flags, 0), len(raw), args.store)
    models = model_concurrency.run(tuple(int(x) for x in args.model_levels.split(",")))
    startup = serve_env_startup.run()
    DOC.write_text("\n".join([
        "# Benchmarks", "",
        "Written by `python -m benchmarks.run`; every ratio is measured within one run.", "",
        f"Machine: {machine()}.", "",
        "## Refinement (`refined_trajectories`)", "", table, "",
        "## Model-backed stages (`max_concurrency`)", "", models, "",
        "## `serve-env` start", "", startup, "",
        NOTES.read_text(encoding="utf-8") if NOTES.exists() else "",
    ]), encoding="utf-8")
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
