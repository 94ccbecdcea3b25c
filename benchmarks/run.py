"""Run the benchmarks and write ``docs/BENCHMARKS.md`` (the machine's description, then each benchmark's
table with the command that produced it). Usage, from the repository root::

    .venv/bin/python -m benchmarks.run --store ~/.envfactory/envfactory.duckdb

Every benchmark also runs alone, with its own arguments: ``python -m benchmarks.run --list`` names them,
``python -m benchmarks.run NAME [ARGS...]`` runs one (as ``python -m benchmarks.NAME ARGS...``).

Every comparison is measured within one run as a ratio, since a shared machine's absolute times drift.
"""

from __future__ import annotations

import argparse
import ast
import os
import platform
import runpy
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import episode_speed, model_concurrency, openenv_load, refinement, serve_env_http, serve_env_startup
from envfactory_assets.store.db import Store

DOC = Path(__file__).resolve().parents[1] / "docs" / "BENCHMARKS.md"
#: What the figures mean, the profiles and the targets still missed: kept by hand, appended as it is.
NOTES = Path(__file__).with_name("notes.md")


def benchmarks() -> dict[str, Path]:
    """Every benchmark of this folder by name: its modules (``run`` and ``__init__`` aside) and shell scripts."""
    here = Path(__file__).resolve().parent
    return {p.stem: p for p in sorted([*here.glob("*.py"), *here.glob("*.sh")]) if p.stem not in {"run", "__init__"}}


def summary(path: Path) -> str:
    """The first line of a benchmark's docstring (a module) or of its leading comment (a shell script)."""
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        return doc.splitlines()[0] if doc else ""
    comments = [line.lstrip("# ") for line in path.read_text(encoding="utf-8").splitlines()[1:] if line.startswith("#")]
    return comments[0] if comments else ""


def run_one(name: str, args: list[str]) -> int:
    """Run benchmark ``name`` with command-line ``args`` as if started on its own; its exit status.

    Raises:
        ValueError: ``name`` is not a benchmark of this folder (see :func:`benchmarks`).
    """
    path = benchmarks().get(name)
    if path is None:
        raise ValueError(f"no benchmark named {name!r}; choose one of {', '.join(benchmarks())}")
    if path.suffix == ".sh":
        return subprocess.run(["bash", str(path), *args], check=False).returncode
    sys.argv = [f"benchmarks.{name}", *args]
    try:
        runpy.run_module(f"benchmarks.{name}", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def machine() -> str:
    """One line: CPU model, cores, memory (GiB), Python version, date (UTC)."""
    model = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else platform.processor()
    )
    mem = (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / 2**30
    return (
        f"{model}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["--list"]:
        for name, path in benchmarks().items():
            print(f"{name:20} {summary(path)}")
        return
    if argv and argv[0] in benchmarks():
        sys.exit(run_one(argv[0], argv[1:]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a store with raw_trajectories")
    parser.add_argument("--n", type=int, default=300, help="raw trajectories in the refinement sample")
    parser.add_argument(
        "--model-levels",
        default=",".join(map(str, model_concurrency.LEVELS)),
        help="max_concurrency values of the model-backed stages' benchmark, comma-separated",
    )
    args = parser.parse_args()
    raw, envs, flags = refinement.sample(Store(args.store), args.n)
    table = refinement.markdown(refinement.measure(raw, envs, flags, 0), len(raw), args.store)
    models = model_concurrency.run(tuple(int(x) for x in args.model_levels.split(",")))
    startup = serve_env_startup.run()
    http_calls = serve_env_http.run()
    episodes = episode_speed.run()
    load, _held = openenv_load.run([])
    DOC.write_text(
        "\n".join(
            [
                "# Benchmarks",
                "",
                "Written by `python -m benchmarks.run`; every ratio is measured within one run.",
                "",
                f"Machine: {machine()}.",
                "",
                "## Refinement (`refined_trajectories`)",
                "",
                table,
                "",
                "## Model-backed stages (`max_concurrency`)",
                "",
                models,
                "",
                "## `serve-env` start",
                "",
                startup,
                "",
                "## `serve-env --http` calls",
                "",
                http_calls,
                "",
                "## `serve-openenv` under load, one worker killed",
                "",
                load,
                "",
                episode_speed.SECTION,
                "",
                "Also alone: `python -m benchmarks.episode_speed --write` (see its docstring).",
                "",
                episodes,
                "",
                NOTES.read_text(encoding="utf-8") if NOTES.exists() else "",
            ]
        ),
        encoding="utf-8",
    )
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
