"""``envfactory``: run the asset graph, audit lineage, inspect the store, start the UI.

Runs launched here go to the same Dagster instance as the UI (``DAGSTER_HOME`` inside
``ENVFACTORY_HOME``), so each sees the other's runs.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from envfactory_assets import settings

#: The CPU benchmark's command (README, docs/cpu_benchmark.md), stated on the page ``results --page`` writes.
CPU_BENCHMARK_COMMAND = "envfactory run --select checkpoints,evaluations --config configs/cpu_benchmark.yaml"


def prepare_dagster_home(home: Path) -> Path:
    """Create ``DAGSTER_HOME`` under ``home`` with its ``dagster.yaml`` and export it; returns the path."""
    from envfactory_assets.defs.pipeline_runs import prepare_dagster_home as prepare

    dagster_home = prepare(home)
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    return dagster_home


def _load_run_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    import yaml

    try:
        from envfactory_assets.sources.safe_yaml import load_untrusted_yaml

        data = load_untrusted_yaml(Path(path).read_bytes())
    except OSError as exc:
        raise UsageError(f"--config {path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--config {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a YAML mapping of run config, got {type(data).__name__}")
    return data


def _selection(select: str | None) -> Any:
    """``a,b,c`` -> a list of asset keys; anything else -> a Dagster selection string (``tool_graph+``)."""
    if not select:
        return None
    if "," in select:
        return [part.strip() for part in select.split(",") if part.strip()]
    return select


class UsageError(Exception):
    """A command-line input that cannot be used; the message names the input and the problem."""


def _graph() -> Any:
    """The asset graph of the code location (``definitions.defs``)."""
    from envfactory_assets.definitions import defs

    return defs.get_repository_def().asset_graph


@contextlib.contextmanager
def _usage_errors() -> Iterator[None]:
    """A :class:`SelectionError` from the runner becomes a :class:`UsageError` with the same message."""
    from envfactory_assets.defs.selection import SelectionError

    try:
        yield
    except SelectionError as exc:
        raise UsageError(str(exc)) from None


def _selected_ops(selection: Any) -> set[str]:
    """Op names of the assets ``selection`` picks (:func:`defs.selection.selected_ops` on this graph)."""
    from envfactory_assets.defs.selection import selected_ops

    with _usage_errors():
        return selected_ops(_graph(), selection)


def check_selection_runnable(instance: Any, selection: Any, store_exists: bool) -> list[str]:
    """:func:`defs.selection.check_selection_runnable` on this graph; raises :class:`UsageError`."""
    from envfactory_assets.defs.selection import check_selection_runnable as check

    with _usage_errors():
        return check(_graph(), instance, selection, store_exists)


def config_for_selection(run_config: dict[str, Any], selection: Any) -> dict[str, Any]:
    """:func:`defs.selection.config_for_selection` on this graph; raises :class:`UsageError`."""
    from envfactory_assets.defs.selection import config_for_selection as for_selection

    with _usage_errors():
        return for_selection(_graph(), run_config, selection)


@contextlib.contextmanager
def run_lock(home: Path) -> Iterator[None]:
    """Hold ``$ENVFACTORY_HOME/run.lock`` for a whole run: a second run on the same store stops at once
    with a clear message instead of interleaving its steps with the first.

    The lock is the kernel's (``flock``), so it ends with the process that holds it however that process ends:
    a file left by a run killed with SIGKILL holds no lock and does not block the next run. When the block ends
    (normally, by an error or by Ctrl-C) the file is removed while still locked; a run that locked a file just
    removed under it (no longer the one at the path) opens the path again, so two runs never both hold it.

    Raises:
        UsageError: another process holds the lock (the message names its pid).
    """
    lock_path = home / "run.lock"
    while True:
        handle = open(lock_path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "pid unknown"
            handle.close()
            raise UsageError(f"another envfactory run holds {lock_path} ({holder}); wait for it to finish") from None
        if _is_file_at(handle, lock_path):
            break
        handle.close()
    with handle:  # closing it releases the lock, after the file is gone from the path
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            lock_path.unlink(missing_ok=True)


def wait_for_run_lock(home: Path, seconds: float) -> None:
    """Return once no process holds ``$ENVFACTORY_HOME/run.lock`` (:func:`run_lock`), waiting at most
    ``seconds`` for it: a batch of a killed ``envfactory coverage`` takes a moment to end after its parent.

    Raises:
        UsageError: the lock is still held after ``seconds`` (the message names the holder's pid).
    """
    lock_path = home / "run.lock"
    deadline = time.monotonic() + seconds
    while True:
        try:
            handle = open(lock_path)
        except FileNotFoundError:
            return
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return  # closing the file releases the shared lock at once
            except BlockingIOError:
                holder = handle.read().strip() or "pid unknown"
        if time.monotonic() >= deadline:
            raise UsageError(f"another envfactory run holds {lock_path} ({holder}); wait for it to finish")
        time.sleep(0.5)


def _is_file_at(handle: Any, path: Path) -> bool:
    """True when the open file ``handle`` is the file now at ``path`` (not one removed or replaced since)."""
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(handle.fileno())
    return (opened.st_dev, opened.st_ino) == (at_path.st_dev, at_path.st_ino)


def cmd_run(args: argparse.Namespace) -> int:
    """Materialize the selected assets (default: all) in-process on the shared Dagster instance."""
    home = settings.envfactory_home()
    if home.exists() and not home.is_dir():
        raise UsageError(f"ENVFACTORY_HOME={home} is a file, not a folder")
    if not getattr(args, "verbose", False):
        import warnings

        from dagster import BetaWarning, PreviewWarning

        # Dagster warns about its own beta parameters while the graph is imported: noise for a reader of
        # the run, not something the reader can act on (--verbose shows them)
        warnings.filterwarnings("ignore", category=BetaWarning)
        warnings.filterwarnings("ignore", category=PreviewWarning)
    run_config = config_for_selection(_load_run_config(args.config), _selection(args.select))
    corpus_override = run_config.get("ops", {}).get("source_resources", {}).get("config", {}).get("corpus_dir")
    scans_corpus = not args.select or "source_resources" in _selected_ops(_selection(args.select))
    if scans_corpus and not settings.corpus_dir(home).is_dir() and not corpus_override:
        raise UsageError(
            f"the OpenAPI corpus is not installed at {settings.corpus_dir(home)}; run scripts/setup.sh "
            "(or set ops.source_resources.config.corpus_dir)"
        )
    home.mkdir(parents=True, exist_ok=True)
    with run_lock(home):
        return _materialize(
            home,
            args.select,
            run_config,
            getattr(args, "partition", None),
            verbose=getattr(args, "verbose", False),
            config_path=args.config,
        )


def _document_keys(home: Path) -> dict[str, str]:
    """``{document path: partition key}`` of the store's source resources and of the documents now in the user
    folder (a document added since the last run is not in the store yet)."""
    import duckdb

    from envfactory_assets.sources.adding import document_keys
    from envfactory_assets.sources.resource_kinds import USER_RESOURCES_DIR, user_folder_rows
    from envfactory_assets.store.db import read_rows

    keys: dict[str, str] = {}
    path = settings.store_path(home)
    if path.exists():
        try:
            with duckdb.connect(str(path), read_only=True) as con:
                keys.update(document_keys(read_rows(con, "source_resources")))
        except duckdb.Error:
            pass  # the store is busy or unreadable: the run itself says so
    folder = home / USER_RESOURCES_DIR
    keys.update({f"{USER_RESOURCES_DIR}/{p}": k for p, k in document_keys(user_folder_rows(folder)[0]).items()})
    return keys


def _keys_taken_outside(home: Path, folder: Path) -> dict[str, str]:
    """``{partition key: its document}`` of the store's source resources that are not files of the user folder
    ``folder`` (the corpus and MCP tool lists of the last run); {} when there is no store or it cannot be read
    (the run itself then says so)."""
    import duckdb

    from envfactory_assets.store.db import read_rows

    path = settings.store_path(home)
    if not path.exists():
        return {}
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            rows = read_rows(con, "source_resources")
    except duckdb.Error:
        return {}
    user_root = folder.resolve()
    return {
        str(r["resource_key"]): str(Path(r.get("corpus_root") or "") / str(r.get("path") or ""))
        for r in rows
        if r.get("resource_key") and Path(r.get("corpus_root") or "").resolve() != user_root
    }


def cmd_add(args: argparse.Namespace) -> int:
    """Copy an OpenAPI document or MCP tool list into ``$ENVFACTORY_HOME/user_resources`` and print the partition
    key it is stored under (from the document, or from its file name when the document names no provider) and
    the run that builds it. A key the store's corpus or MCP resources already hold is refused."""
    from envfactory_assets.sources.adding import DocumentRefused, add_user_document, shown_path
    from envfactory_assets.sources.resource_kinds import USER_RESOURCES_DIR

    home = settings.envfactory_home()
    folder = home / USER_RESOURCES_DIR
    try:
        added = add_user_document(Path(args.document), folder, taken=_keys_taken_outside(home, folder))
    except (FileNotFoundError, DocumentRefused) as exc:
        raise UsageError(str(exc)) from None
    made_from = ", ".join(
        f"{name} {value!r}" for name, value in (("provider", added.provider), ("service", added.service)) if value
    )
    origin = "" if not made_from else f" (from its {made_from}, not the file name)"
    if made_from and not added.from_document:
        origin = f" (from its file name: the document has no x-providerName; {made_from})"
    print(
        f"{'replaced' if added.replaced else 'added'} {shown_path(added.path)}\n"
        f"partition key: {added.key}{origin}\n"
        f'build it: envfactory run --select "source_resources,environments,verified_environments" '
        f"--partition {added.key}"
    )
    return 0


COMMAND_TAG = "envfactory/command"
"""Run tag naming the ``envfactory run`` command line that made the run (the UI lists it with the run)."""


def _command_text(select: str | None, partitions: str | None) -> str:
    return " ".join(
        [
            "envfactory run",
            *([f"--select {select}"] if select else []),
            *([f"--partition {partitions}"] if partitions else []),
        ]
    )


def release_abandoned_runs(instance: Any) -> list[str]:
    """Mark failed, and free the pool slots of, every run an earlier ``envfactory run`` left unfinished.

    Called while holding ``run.lock``, so no other CLI run is alive: a CLI-tagged run still queued, starting
    or started was abandoned (its process was killed). Left alone, it keeps its ``envfactory_store`` pool slot
    and the next run's steps wait for that slot forever ("Step blocked by limit for pool"). Runs launched from
    the UI carry no CLI tag and are never touched.

    Returns:
        The run ids released.
    """
    import dagster as dg

    from envfactory_assets.runner.progress_bar import RUN_TAG

    unfinished = [
        dg.DagsterRunStatus.QUEUED,
        dg.DagsterRunStatus.NOT_STARTED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
    ]
    released = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=unfinished)):
        if RUN_TAG not in run.tags:
            continue
        instance.report_run_failed(
            run,
            "abandoned: the envfactory run that started it ended without finishing "
            "it; marked failed by the next envfactory run",
        )
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        released.append(run.run_id)
    return released


def _materialize(
    home: Path,
    select: str | None,
    run_config: dict[str, Any],
    partitions_arg: str | None = None,
    verbose: bool = False,
    config_path: str | None = None,
) -> int:
    """Run the selection; unless ``verbose``, the run's own output goes to a log file and the terminal gets
    the progress bars, one line per finished step and the summary (:mod:`envfactory_assets.runner.output`).
    A failed run names the command that builds what it left (``config_path``: the ``--config`` it had)."""
    started = time.monotonic()
    prepare_dagster_home(home)
    import dagster as dg

    from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS, RESOURCES
    from envfactory_assets.defs.selection import op_names
    from envfactory_assets.runner.materialize import (
        assets_left,
        check_partitions,
        materialize_pipeline,
        run_job_name,
        stale_assets,
    )
    from envfactory_assets.runner.memory import PeakMemory
    from envfactory_assets.runner.output import log_path, output_to_log, quiet_config
    from envfactory_assets.runner.progress_bar import RUN_TAG, RunProgressBar
    from envfactory_assets.runner.stage_times import stage_time_rows
    from envfactory_assets.runner.summary import failure_messages, run_summary
    from envfactory_assets.sources.adding import file_named_partition
    from envfactory_assets.store.db import Store, StoreBusy

    partitions = [k.strip() for k in partitions_arg.split(",") if k.strip()] if partitions_arg else None
    if partitions:
        for value in partitions:  # a file name given for a key: say which key the file has, before anything runs
            hint = file_named_partition(value, _document_keys(home))
            if hint:
                raise UsageError(hint)
    token = os.urandom(8).hex()
    log_file = None if verbose else log_path(home, token)
    with dg.DagsterInstance.get() as instance:
        for run_id in release_abandoned_runs(instance):
            print(
                f"run {run_id}: left unfinished by an earlier envfactory run (killed?); marked failed, "
                "its pool slot freed",
                file=sys.stderr,
            )
        if partitions is not None and select and "source_resources" not in _selected_ops(_selection(select)):
            try:  # partitions exist before this run: name a wrong key before anything else
                check_partitions(instance, partitions)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        added = check_selection_runnable(instance, _selection(select), settings.store_path(home).exists())
        if added:
            print(
                f"note: also materializing {', '.join(added)}: written by the same step as the selected assets",
                file=sys.stderr,
            )
        if log_file is not None:
            print(
                f"run log (Dagster's events at INFO and above, library output): {log_file}\n"
                "  (envfactory run --verbose prints it all here instead)",
                file=sys.stderr,
            )
        output = contextlib.nullcontext(sys.stderr) if log_file is None else output_to_log(log_file)
        asset_steps = op_names(_graph())  # checks are steps too; they get no line of their own
        try:
            with (
                output as terminal,
                RunProgressBar(instance, token, out=terminal, steps=asset_steps),
                PeakMemory() as memory,
            ):
                results = materialize_pipeline(
                    [*ALL_ASSETS, *ALL_CHECKS],
                    instance,
                    RESOURCES,
                    run_config if verbose else quiet_config(run_config),
                    _selection(select),
                    partitions,
                    raise_on_error=False,
                    tags={RUN_TAG: token, COMMAND_TAG: _command_text(select, partitions_arg)},
                    job_name=run_job_name(select),
                )
        except dg.DagsterInvalidConfigError as exc:
            problems = "; ".join(e.message for e in exc.errors) if getattr(exc, "errors", None) else str(exc)
            raise UsageError(f"run config is invalid: {problems}") from None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        failed_checks = [
            e.asset_check_key.to_user_string() for r in results for e in r.get_asset_check_evaluations() if not e.passed
        ]
        stale = stale_assets(instance, ALL_ASSETS)
        store = Store(settings.store_path(home)) if settings.store_path(home).exists() else None
        if store is not None:
            try:  # the run's own timing, kept with every earlier run's (envfactory report prints it)
                store.append(
                    "stage_times", stage_time_rows(instance, [r.run_id for r in results], token, asset_steps, memory)
                )
            except StoreBusy as exc:
                print(f"stage times not recorded: {exc}", file=sys.stderr)
        summary = run_summary(
            instance,
            results,
            store,
            time.monotonic() - started,
            str(log_file) if log_file else None,
            asset_steps=asset_steps,
        )
    success = bool(results) and all(r.success for r in results)
    if verbose and store is not None:
        for table, n in store.counts().items():
            print(f"  {table:<24} {n}")
    if failed_checks:
        print(f"failed checks: {failed_checks}")
    if stale:
        print(
            f"stale now (upstream data or code changed since they were built): {', '.join(stale)}\n"
            f'  re-synthesize them with: envfactory run --select "{",".join(stale)}"'
        )
    if not success:
        for message in failure_messages(results, asset_steps):  # the stage's own words: why it refused or failed
            print(f"error: {message}", file=sys.stderr)
    if not success and log_file is not None:
        print(f"a run failed: its errors are in {log_file} (and in the UI: envfactory ui)", file=sys.stderr)
    if not success:
        left = assets_left([*ALL_ASSETS, *ALL_CHECKS], _selection(select), results)
        if left:
            config_arg = f" --config {shlex.quote(config_path)}" if config_path else ""
            print(
                "what stored passed is kept; once the cause is fixed, build the rest with: "
                f'envfactory run --select "{",".join(left)}"{config_arg}',
                file=sys.stderr,
            )
    print(summary)  # last: per-stage times, checkpoints, results, exports, total time
    return 0 if success and not failed_checks else 1


def cmd_lineage(args: argparse.Namespace) -> int:
    """Print the path from a checkpoint back to its source resources."""
    from envfactory_assets.store.db import Store
    from envfactory_assets.store.lineage import LineageError, checkpoint_lineage, format_lineage

    try:
        lineage = checkpoint_lineage(Store(settings.store_path()), args.checkpoint_id)
    except (LineageError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(with_absolute_paths(lineage), indent=2) if args.json else format_lineage(lineage))
    return 0


def with_absolute_paths(lineage: dict[str, Any]) -> dict[str, Any]:
    """``lineage`` plus ``absolute_path`` next to each stored path: the checkpoint folder, and each source
    file (its ``corpus_root`` joined with its corpus-relative ``path``, which is kept). A relative root is taken
    from the current folder; a source that is not a file (an MCP server, ``mcp-server:NAME``) gets None."""

    def absolute(path: str | None) -> str | None:
        if not path:
            return None
        return str(Path(path).expanduser().absolute())

    checkpoint = {**lineage["checkpoint"], "absolute_path": absolute(lineage["checkpoint"].get("path"))}
    sources = [
        {**s, "absolute_path": None if str(s.get("path") or "").startswith("mcp-server:") else absolute(s["uri"])}
        for s in lineage["source_resources"]
    ]
    return {**lineage, "checkpoint": checkpoint, "source_resources": sources}


def cmd_status(args: argparse.Namespace) -> int:
    """Current rows per store table, as ``envfactory report`` counts them: the passed rows of the main sampler
    first, rejected rows and the baseline sampler's chains beside them
    (:func:`~envfactory_assets.reporting.stage_counts.stage_counts`). The store is only read."""
    from envfactory_assets.reporting.stage_counts import stage_counts
    from envfactory_assets.store.db import Store, StoreBusy

    try:
        with Store(settings.store_path()).connect(read_only=True) as con:
            counts = stage_counts(con)
    except (FileNotFoundError, StoreBusy) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for count in counts:
        print(f"{count.table:<24} {count.text()}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write the Markdown report of the store (to stdout or ``--output``), or with ``--compare OLD_STORE``
    the table of its figures before (``OLD_STORE``) and after (the store); both are only read. The step it is
    at goes to stderr (:class:`~envfactory_assets.progress_meter.StepLine`)."""
    from envfactory_assets.progress_meter import StepLine
    from envfactory_assets.reporting.report import COMPARE_STEPS, REPORT_STEPS, compare_report, run_report
    from envfactory_assets.store.db import Store, StoreBusy

    try:
        store = Store(settings.store_path())
        seed = {} if args.seed is None else {"seed": args.seed}
        with StepLine("envfactory report", len(COMPARE_STEPS if args.compare else REPORT_STEPS)) as progress:
            if args.compare:
                text = compare_report(args.compare, store, progress=progress)
            else:
                text = run_report(store, progress=progress, **seed)
    except (FileNotFoundError, StoreBusy, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(text + "\n")
    else:
        print(text)
    return 0


def cmd_config_docs(args: argparse.Namespace) -> int:
    """Write docs/configuration.md (every setting of every asset: type, default, help) to ``--output``, or
    print it."""
    from envfactory_assets.defs.config_docs import configuration_markdown

    text = configuration_markdown()
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    """Print the evaluation results table, or write it between the results markers of ``--into``; a GRPO
    checkpoint's cells also show its difference to its SFT parent (recomputed here from the rows' per-task
    results and ``checkpoints``' parents, so stores evaluated before ``vs_parent`` existed show it too)."""
    from envfactory_assets.evaluation.run import add_parent_comparisons
    from envfactory_assets.reporting.results_table import results_markdown, update_markdown
    from envfactory_assets.store.db import Store

    if args.section is not None and not args.into:
        print("error: --section names the markers to write between; it needs --into FILE", file=sys.stderr)
        return 2
    if args.page and args.into:
        print("error: --page writes a whole page and --into a section of one: give one of them", file=sys.stderr)
        return 2
    try:
        store = Store(settings.store_path())
        rows = store.read("evaluations")
        checkpoints = store.read("checkpoints")
        add_parent_comparisons(rows, {r["id"]: r.get("parent_checkpoint_id") for r in checkpoints})
        if args.page:
            command = args.command
            if command is None:
                problems = _cpu_benchmark_mismatches(checkpoints, rows)
                if problems:
                    print(
                        f"error: the store's checkpoints and evaluations were not made by `{CPU_BENCHMARK_COMMAND}` "
                        f"({'; '.join(problems)}): run that command first, or give --command with the command "
                        "that made them",
                        file=sys.stderr,
                    )
                    return 2
                command = CPU_BENCHMARK_COMMAND
            return _write_benchmark_page(store, rows, checkpoints, Path(args.page), args.title, command)
        text = update_markdown(Path(args.into), rows, args.section) if args.into else results_markdown(rows)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0


def _cpu_benchmark_mismatches(checkpoints: list, rows: list) -> list[str]:
    """:func:`~envfactory_assets.reporting.benchmark_page.settings_mismatches` of the store's rows against
    ``configs/cpu_benchmark.yaml`` of this checkout; ``[]`` where the checkout has no such file."""
    from envfactory_assets.reporting.benchmark_page import settings_mismatches

    path = Path(__file__).resolve().parents[1] / "configs" / "cpu_benchmark.yaml"
    if not path.is_file():
        return []
    return settings_mismatches(_load_run_config(str(path)), checkpoints, rows)


def _write_benchmark_page(store: Any, rows: list, checkpoints: list, page: Path, title: str, command: str) -> int:
    """Write :func:`~envfactory_assets.reporting.benchmark_page.benchmark_page` of the store to ``page``."""
    from envfactory_assets.reporting.benchmark_page import benchmark_page
    from envfactory_assets.reporting.report import latest_stage_times

    if not rows:
        print(f"error: no evaluations in {store.path}: nothing to write to {page}", file=sys.stderr)
        return 2
    with store.connect(read_only=True) as con:
        times = latest_stage_times(con)
    page.write_text(benchmark_page(rows, checkpoints, times, title=title, command=command), encoding="utf-8")
    print(f"wrote {page}")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    """Start the Dagster UI on localhost with ``DAGSTER_HOME`` inside ``ENVFACTORY_HOME``."""
    prepare_dagster_home(settings.envfactory_home())
    workspace = Path(__file__).resolve().parents[1] / "workspace.yaml"
    cmd = [sys.executable, "-m", "dagster", "dev", "-h", "127.0.0.1", "-p", str(args.port)]
    cmd += ["-w", str(workspace)] if workspace.exists() else ["-m", "envfactory_assets.definitions"]
    # Replace this process, so signals sent to its PID reach dagster dev, which stops its children.
    os.execv(sys.executable, cmd)
    return 0  # not reached


# --- serve-env: a verified environment as an MCP server over stdio or Streamable HTTP ------------------
HTTP_OPTIONS = ("max_sessions", "idle_timeout_s")


def cmd_serve_env(args: argparse.Namespace) -> int:
    """Serve a verified environment as an MCP server on stdin/stdout until the client disconnects, or with
    ``--http`` over Streamable HTTP (one episode per MCP session) until Ctrl-C (exit 130) or SIGTERM (exit 0)."""
    if not args.http:
        given = [f"--{k.replace('_', '-')}" for k in ("host", "port", *HTTP_OPTIONS) if getattr(args, k) is not None]
        if given:
            print(
                f"error: {', '.join(given)}: only with --http (without it, serve-env speaks MCP over stdio)",
                file=sys.stderr,
            )
            return 2
        return _serve_env_stdio(args)
    return _serve_env_http(args)


def _serve_env_stdio(args: argparse.Namespace) -> int:
    from envfactory_assets.mcp_server import (
        EnvironmentNotServable,
        build_server,
        load_environment_from_store,
        serve_stdio,
    )
    from envfactory_assets.mcp_server.transport import MAX_MESSAGE_BYTES
    from envfactory_assets.serving.serve_env_settings import DEFAULT_MAX_ARGUMENT_BYTES
    from envfactory_assets.store.db import StoreBusy

    if args.max_argument_bytes is None:
        args.max_argument_bytes = DEFAULT_MAX_ARGUMENT_BYTES
    try:
        if args.max_argument_bytes < 1:
            raise ValueError(f"--max-argument-bytes {args.max_argument_bytes}: expected a whole number >= 1")
        environment = load_environment_from_store(settings.store_path(), args.env_id)
        server = build_server(environment, args.state, max_argument_bytes=args.max_argument_bytes)
    except (EnvironmentNotServable, FileNotFoundError, StoreBusy, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        # a line must be able to hold the largest arguments allowed, so those get the tool's own error
        serve_stdio(server, max(MAX_MESSAGE_BYTES, 2 * args.max_argument_bytes + (1 << 20)))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the environment could not start (state rejected, worker failed): say so, briefly
        print(f"error: serving {args.env_id!r} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def _serve_env_http(args: argparse.Namespace) -> int:
    import signal

    from envfactory_assets.config_checks import SettingError
    from envfactory_assets.mcp_server import EnvironmentNotServable, load_environment_from_store
    from envfactory_assets.mcp_server.http import MCP_PATH, build_http_server, serve_http
    from envfactory_assets.serving.serve_env_settings import HttpSettings
    from envfactory_assets.store.db import StoreBusy

    host = args.host if args.host is not None else "127.0.0.1"
    port = args.port if args.port is not None else 8000
    try:
        http_settings = HttpSettings(
            **{k: getattr(args, k) for k in (*HTTP_OPTIONS, "max_argument_bytes") if getattr(args, k) is not None}
        )
        environment = load_environment_from_store(settings.store_path(), args.env_id)
        server = build_http_server(environment, args.state, max_argument_bytes=http_settings.max_argument_bytes)
    except (EnvironmentNotServable, FileNotFoundError, StoreBusy, SettingError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # uvicorn stops gracefully on SIGTERM, then raises the signal again under the handler it found: this one,
    # so that the process ends with exit 0 once every session's worker is stopped
    signal.signal(signal.SIGTERM, _raise_terminated)
    print(
        f"serve-env: {args.env_id} over MCP Streamable HTTP at http://{host}:{port}{MCP_PATH}, one episode per "
        f"session, at most {http_settings.max_sessions} sessions, idle ones ended after "
        f"{http_settings.idle_timeout_s:g} s; Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    try:
        serve_http(server, http_settings, host, port)
    except KeyboardInterrupt:
        return 130
    except _Terminated:
        return 0
    return 0


# --- end serve-env ---------------------------------------------------------------------------------------


# --- serve-openenv: the RL tasks as an OpenEnv environment over HTTP and WebSocket -----------------------
SESSION_OPTIONS = ("max_sessions", "idle_timeout_s", "max_steps", "max_argument_bytes", "workers", "open_tasks")


class _Terminated(Exception):
    """SIGTERM arrived: stop serving as on Ctrl-C."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise _Terminated


def cmd_serve_openenv(args: argparse.Namespace) -> int:
    """Serve the store's RL rows as an OpenEnv environment until Ctrl-C (exit 130) or SIGTERM (exit 0); either
    way the episodes are closed and every sandbox worker is stopped before the process ends."""
    import signal

    from envfactory_assets.config_checks import SettingError
    from envfactory_assets.curation import CurationError, curation_path, load_curation
    from envfactory_assets.serving.sessions import SessionPool, SessionSettings
    from envfactory_assets.serving.tasks import load_task_set
    from envfactory_assets.store.db import StoreBusy

    try:
        session_settings = SessionSettings(
            **{k: getattr(args, k) for k in SESSION_OPTIONS if getattr(args, k) is not None}
        )
        curation = load_curation(curation_path(settings.envfactory_home()))
        tasks = load_task_set(settings.store_path(), curation, args.dataset_version)
    except (SettingError, CurationError, FileNotFoundError, StoreBusy, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        import uvicorn

        from envfactory_assets.serving.openenv_app import create_openenv_app, message_bounds
    except ImportError as exc:  # openenv-core is a dependency; a hand-made virtualenv may lack it
        print(f"error: serve-openenv needs openenv-core (scripts/setup.sh installs it): {exc}", file=sys.stderr)
        return 2
    pool = SessionPool(tasks, session_settings)
    pool.start_reaper()
    # uvicorn stops gracefully on SIGTERM, then raises the signal again under the handler it found: this one,
    # so that the pool below is closed instead of the process dying with its episodes open
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        app = create_openenv_app(pool)
        print(
            f"serve-openenv: {len(tasks.rows)} RL tasks (rl_dataset version {tasks.version}) over "
            f"{len(tasks.environments)} environments, at most {session_settings.max_sessions} episodes at once, "
            f"on http://{args.host}:{args.port} (WebSocket ws://{args.host}:{args.port}/ws); Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            ws_max_size=2 * message_bounds(pool).max_bytes,  # past the bounded reader's clear error: closed
        )
    except KeyboardInterrupt:
        return 130
    except _Terminated:
        return 0
    finally:
        pool.close()
    return 0


# --- export-verifiers: the RL rows as an installable verifiers environment package ------------------------
def cmd_export_verifiers(args: argparse.Namespace) -> int:
    """Write the ``verifiers`` environment package of the store's servable RL rows (the rows ``serve-openenv``
    serves, curation applied) and print its folder and the commands that run it."""
    from envfactory_assets.curation import CurationError, curation_path, load_curation
    from envfactory_assets.exports.verifiers_env_package import write_verifiers_package
    from envfactory_assets.serving.tasks import load_task_set
    from envfactory_assets.store.db import StoreBusy

    home = settings.envfactory_home()
    output = Path(args.output) if args.output else home / "exports" / "verifiers"
    try:
        tasks = load_task_set(settings.store_path(), load_curation(curation_path(home)), args.dataset_version)
        package = write_verifiers_package(tasks, output)
    except (CurationError, FileNotFoundError, StoreBusy, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"export-verifiers: {len(tasks.rows)} RL tasks (rl_dataset version {tasks.version}) in {package}\n"
        f"  serve them:  envfactory serve-openenv --dataset-version {tasks.version}\n"
        f"  in verifiers' own virtualenv:  pip install {package}\n"
        "  then:  ENVFACTORY_OPENENV_URL=http://127.0.0.1:8000 vf-eval envfactory-env --no-push "
        "--model <model> --client.base-url <OpenAI-compatible URL>"
    )
    return 0


# --- end serve-openenv -----------------------------------------------------------------------------------


# --- curation and trajectory viewer ---------------------------------------------------------------------
def cmd_exclude(args: argparse.Namespace) -> int:
    """Add (``exclude``) or remove (``include``) one exclusion in ``$ENVFACTORY_HOME/curation.yaml``."""
    from envfactory_assets.curation import CurationError, check_known_id, curation_path, set_exclusion
    from envfactory_assets.store.db import Store, StoreBusy

    path = curation_path(settings.envfactory_home())
    try:
        if args.command == "exclude":
            if settings.store_path().exists():
                check_known_id(Store(settings.store_path()), args.kind, args.id)
            else:  # excluding before the first run is allowed: nothing to check the id against yet
                print(
                    f"note: no store at {settings.store_path()} yet, so {args.kind} {args.id!r} is not checked "
                    "against known ids",
                    file=sys.stderr,
                )
        curation = set_exclusion(path, args.kind, args.id, args.reason if args.command == "exclude" else None)
    except (CurationError, StoreBusy) as exc:
        raise UsageError(str(exc)) from None
    verb = "excluded" if args.command == "exclude" else "no longer excluded"
    print(
        f"{args.kind} {args.id} {verb}; {len(curation)} exclusion(s) in {path}. "
        "Re-run the pipeline (envfactory run) to apply it."
    )
    return 0


def cmd_environments(args: argparse.Namespace) -> int:
    """List the servable environments (passed verification, built row current): id, domain, tools, and
    whether the curation file excludes it; ``--tools`` adds one line per tool node id."""
    from envfactory_assets.catalog import passed_environments
    from envfactory_assets.curation import CurationError, curation_path, load_curation
    from envfactory_assets.store.db import Store, StoreBusy

    try:
        curation = load_curation(curation_path(settings.envfactory_home()))
        store = Store(settings.store_path())
        passed = passed_environments(store)
    except (CurationError, FileNotFoundError, StoreBusy) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "env_id": e,
                        "domain": env.get("domain"),
                        "tools": [t["name"] for t in env["tools"]],
                        "excluded": curation.reason("environment", e),
                    }
                    for e, env in sorted(passed.environments.items())
                ],
                indent=2,
            )
        )
        return 0
    if not passed.environments:
        print("no servable environment yet (materialize verified_environments first: envfactory run)")
    # columns as wide as their longest value, so a long domain name does not shift the next column
    id_width = max((len(e) for e in passed.environments), default=0)
    domain_width = max((len(str(env.get("domain") or "")) for env in passed.environments.values()), default=0)
    for env_id, env in sorted(passed.environments.items()):
        reason = curation.reason("environment", env_id)
        n_tools = len(env["tools"])
        print(
            f"{env_id:<{id_width}}  {str(env.get('domain') or ''):<{domain_width}}  {n_tools:>3} "
            + ("tool" if n_tools == 1 else "tools")
            + (f"  (excluded: {reason})" if reason else "")
        )
        if args.tools:
            for tool in env["tools"]:
                node = f"{env_id}.{tool['name']}"
                tool_reason = curation.reason("tool", node)
                print(f"    {node}" + (f"  (excluded: {tool_reason})" if tool_reason else ""))
    n_tools = sum(len(env["tools"]) for env in passed.environments.values())
    print(
        f"{len(passed.environments)} servable environment(s), {n_tools} tools; "
        "serve one with: envfactory serve-env ENV_ID",
        file=sys.stderr,
    )
    return 0


def cmd_curation(args: argparse.Namespace) -> int:
    """Print the exclusions of ``$ENVFACTORY_HOME/curation.yaml``."""
    from envfactory_assets.curation import CurationError, curation_path, load_curation

    path = curation_path(settings.envfactory_home())
    try:
        curation = load_curation(path)
    except CurationError as exc:
        raise UsageError(str(exc)) from None
    if not len(curation):
        print(f"no exclusions ({path})")
    for entry in curation.as_yaml_data()["exclusions"]:
        print(f"{entry['kind']:<12} {entry['id']:<40} {entry['reason']}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print one trajectory (raw or refined id) as Markdown: turns, calls, results, queries."""
    from envfactory_assets.store.db import Store, StoreBusy
    from envfactory_assets.viewer import TrajectoryNotFound, render_from_store

    try:
        print(render_from_store(Store(settings.store_path()), args.trajectory_id))
    except (FileNotFoundError, StoreBusy, TrajectoryNotFound) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


# --- end curation and trajectory viewer ------------------------------------------------------------------


def cmd_estimate(args: argparse.Namespace) -> int:
    """Print the model calls and tokens the configured model backend would spend on the environments
    stage. Calls no model: resources come from the store's ``source_resources`` when it has them, else
    from a scan configured like the run (``ops.source_resources.config``)."""
    from envfactory_assets.config_checks import SettingError
    from envfactory_assets.defs.resources import ModelBackend
    from envfactory_assets.defs.sources.assets import SourceConfig  # its defaults, read not restated
    from envfactory_assets.envgen.estimate import estimate_environments, format_estimate
    from envfactory_assets.envgen.run_settings import EnvironmentRunSpec
    from envfactory_assets.envgen.stage import select_resources
    from envfactory_assets.store.db import Store, StoreBusy

    home = settings.envfactory_home()
    run_config = _load_run_config(args.config)
    backend_config = (run_config.get("resources", {}).get("model_backend") or {}).get("config") or {}
    try:
        model_backend = ModelBackend(**backend_config)
    except Exception as exc:  # pydantic names the bad field
        raise UsageError(f"resources.model_backend.config: {exc}") from None
    store_path = settings.store_path(home)
    try:
        resources = Store(store_path).read("source_resources") if store_path.exists() else []
    except StoreBusy as exc:
        raise UsageError(f"cannot read the store's source_resources: {exc}") from None
    origin = f"the store's source_resources ({store_path})"
    if not resources:
        from envfactory_assets.sources.stage import all_resource_rows

        src = op_config(run_config, "source_resources")
        corpus = Path(src["corpus_dir"]) if src.get("corpus_dir") else settings.corpus_dir(home)
        if not corpus.is_dir():
            raise UsageError(f"no source_resources in the store and no corpus at {corpus}; run scripts/setup.sh")
        resources, _ = all_resource_rows(
            corpus,
            home,
            src.get("domains"),
            src.get("max_bytes", SourceConfig.model_fields["max_bytes"].default),
            src.get("path_contains") or None,
            src.get("include_mcp", SourceConfig.model_fields["include_mcp"].default),
        )
        origin = f"a scan of {corpus}"
    src = op_config(run_config, "source_resources")  # the environments to build are chosen there (one partition each)
    try:
        chosen = select_resources(
            resources,
            src.get("per_domain", SourceConfig.model_fields["per_domain"].default),
            src.get("include", []),
            src.get("exclude", []),
        )
    except ValueError as exc:  # a setting or a row that cannot be ranked, named in the message
        raise UsageError(f"{origin}: {exc}") from None
    try:
        build = EnvironmentRunSpec(**op_config(run_config, "environments"))
    except (SettingError, TypeError) as exc:  # an unknown or out-of-range environments setting
        raise UsageError(f"ops.environments.config: {exc}") from None
    try:
        backend = model_backend.backend_for(home)
    except Exception as exc:  # dg.Failure naming the bad setting
        raise UsageError(str(exc)) from None
    try:
        estimate = estimate_environments(chosen, backend, model_backend.max_revisions, resource_cap=build.resource_cap)
    finally:
        if backend is not None and hasattr(backend, "close"):
            backend.close()
    estimate["resources_from"] = origin
    budget = model_backend.token_budget
    worst = int(estimate.get("total_worst_case", {}).get("tokens") or 0)
    estimate["token_budget"] = budget or None
    estimate["over_token_budget"] = bool(budget) and worst > budget
    if args.json:
        print(json.dumps(estimate, indent=2))
    else:
        print(f"resources from {origin}")
        print(format_estimate(estimate, model_backend.backend))
    if estimate["over_token_budget"]:
        # the run stops at the budget (TokenBudgetExceeded) part-way through: say so before it starts
        print(
            f"warning: the worst-case estimate ({worst:,} tokens) exceeds resources.model_backend.config."
            f"token_budget ({budget:,}); the environments stage would stop when the budget is spent. Raise "
            "token_budget or build fewer environments (ops.source_resources.config.per_domain)",
            file=sys.stderr,
        )
    return 0


#: Seconds ``envfactory coverage`` waits for another run's lock to go (a batch of a killed coverage run ending).
LOCK_WAIT_S = 30.0


def op_config(run_config: dict[str, Any], op: str) -> Any:
    """``ops.<op>.config`` of ``run_config`` (``{}`` where it is absent or empty)."""
    entry = (run_config.get("ops") or {}).get(op) or {}
    return (entry.get("config") if isinstance(entry, dict) else entry) or {}


def check_coverage_config(run_config: dict[str, Any], path: str | None) -> None:
    """Check the ``environments`` and ``verified_environments`` settings of ``run_config`` as the batches will
    read them, so a bad one is named before the corpus is scanned rather than by the first batch.

    Raises:
        UsageError: an unknown setting, or a value of the wrong type or out of range (named).
    """
    from envfactory_assets.config_checks import SettingError
    from envfactory_assets.envgen.run_settings import EnvironmentRunSpec, VerificationRunSpec

    if not isinstance(run_config.get("ops") or {}, dict):
        raise UsageError(f"--config {path}: ops: expected a mapping of op names")
    for op, spec in (("environments", EnvironmentRunSpec), ("verified_environments", VerificationRunSpec)):
        values = op_config(run_config, op)
        if not isinstance(values, dict):
            raise UsageError(f"--config {path}: ops.{op}.config: expected a mapping, got {type(values).__name__}")
        try:
            spec(**values)
        except (SettingError, TypeError) as exc:  # TypeError: a setting the stage does not have
            raise UsageError(f"--config {path}: ops.{op}.config: {exc}") from None


def cmd_coverage(args: argparse.Namespace) -> int:
    """Coverage of the corpus by verified tools: ``source_resources`` once (unless the store has it and
    ``--rescan`` is not given), then ``environments`` and ``verified_environments`` for the partitions not yet
    verified, ``--batch`` partitions per ``envfactory run`` command, each in its own process, until all are done or
    ``--max-minutes`` have passed; then the figures (:mod:`envfactory_assets.reporting.corpus_coverage`) are
    printed and written to ``--output``. A re-run resumes with what is left."""
    import subprocess

    from envfactory_assets.defs.pipeline_runs import latest_partition_metadata
    from envfactory_assets.envgen.builder import MAX_RESOURCES
    from envfactory_assets.envgen.run_settings import EnvironmentRunSpec
    from envfactory_assets.incremental.partitions import ENVIRONMENT_PARTITIONS
    from envfactory_assets.reporting.corpus_coverage import coverage_figures, coverage_markdown, stage_time_figures
    from envfactory_assets.runner.coverage_batches import (
        MAX_FAILED_IN_A_ROW,
        built_with,
        default_output,
        plan_batches,
        run_batches,
        verified_keys,
    )
    from envfactory_assets.store.db import Store

    if args.batch < 1:
        raise UsageError(f"coverage --batch {args.batch}: expected a whole number >= 1")
    if args.max_minutes is not None and not args.max_minutes > 0:
        raise UsageError(f"coverage --max-minutes {args.max_minutes}: expected a number > 0")
    run_config = _load_run_config(args.config)
    check_coverage_config(run_config, args.config)  # named before anything runs
    home = settings.envfactory_home()
    output = Path(args.output) if args.output else default_output(home)
    if output.is_dir():  # found before the batches run, not when their figures are written
        raise UsageError(f"coverage --output {output}: a folder; give the Markdown file's path")
    if not args.report_only:
        wait_for_run_lock(home, LOCK_WAIT_S)
    path = settings.store_path(home)
    config_args = ["--config", args.config] if args.config else []
    if not args.report_only and (args.rescan or not path.exists() or not Store(path).read("source_resources")):
        code = subprocess.call(
            [sys.executable, "-m", "envfactory_assets.cli", "run", "--select", "source_resources", *config_args]
        )
        if code:
            return code
    if not path.exists():
        raise UsageError(f"no store at {path}: run envfactory coverage without --report-only first")
    store = Store(path)
    prepare_dagster_home(home)
    import dagster as dg

    wanted = EnvironmentRunSpec(**op_config(run_config, "environments")).max_resources

    def latest_caps() -> dict[str, Any]:
        with dg.DagsterInstance.get() as instance:
            return latest_partition_metadata(instance, "environments", "max_resources")

    def done() -> set[str]:
        """Verified partitions whose environment was built with this run's ``max_resources``: one built with
        another cap (an earlier run of another config) is built again."""
        current = built_with(latest_caps(), wanted, MAX_RESOURCES)
        return current & verified_keys(store.read("environments"), store.read("verified_environments"))

    if not args.report_only:
        with dg.DagsterInstance.get() as instance:
            partitions = instance.get_dynamic_partitions(ENVIRONMENT_PARTITIONS)
        batches = plan_batches(partitions, done(), args.batch)
        pending = sum(map(len, batches))
        print(f"{pending} of {len(partitions)} environment partitions to build and verify", file=sys.stderr)
        outcome = run_batches(
            batches,
            args.config,
            lambda keys: len(done() & set(keys)),
            max_seconds=None if args.max_minutes is None else args.max_minutes * 60,
            log=lambda line: print(line, file=sys.stderr),
        )
        if outcome.failed:
            print(
                f"{len(outcome.failed)} partitions verified nothing in a run of their own (left pending, tried "
                f"again by the next run; their errors are in the run logs above): {', '.join(outcome.failed[:20])}",
                file=sys.stderr,
            )
        if outcome.stopped == "time_budget":
            print("stopped (time budget); run the same command again to go on", file=sys.stderr)
        elif outcome.stopped == "batch_failed":
            print(
                f"stopped: {MAX_FAILED_IN_A_ROW} partitions in a row verified nothing, each in a run of its own, so "
                "the cause is not one document; the errors are in the run logs above; fix it, then run the same "
                "command again",
                file=sys.stderr,
            )
    figures = coverage_figures(
        store.read("source_resources"),
        store.read("rejected_resources"),
        store.read("environments"),
        store.read("verified_environments"),
    )
    text = coverage_markdown(figures, stage_time_figures(store.read("stage_times")))
    latest = latest_caps()  # a store without its Dagster home has no builds to judge: nothing is noted
    verified_now = verified_keys(store.read("environments"), store.read("verified_environments"))
    other_cap = (verified_now & set(latest)) - built_with(latest, wanted, MAX_RESOURCES)
    if other_cap:
        text += (
            f"\n{len(other_cap):,} of the environments counted were built with another max_resources than this "
            f"config's ({wanted}); envfactory coverage without --report-only builds them again.\n"
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(text)
    print(f"written to {output}", file=sys.stderr)
    return 0 if args.report_only or outcome.stopped == "done" else 1


#: ``envfactory ablations --step`` -> the ablation asset it materializes (no step: all four, in order).
ABLATION_STEPS = {
    "data": "ablation_data",
    "checkpoint": "ablation_checkpoint",
    "evaluation": "ablation_evaluation",
    "report": "ablations_report",
}


def cmd_ablations(args: argparse.Namespace) -> int:
    """The paper's ablations: materialize the ablation assets (``--step``, default every step then the report) for
    ``--arm`` (default every arm) as ``envfactory run --select ... --partition ...`` would, each arm in its own
    home under ``$ENVFACTORY_HOME/ablations``; ``--write-docs`` then copies the page to docs/ablations.md. Hours
    on a CPU for every arm; not part of CI."""
    from envfactory_assets.ablations.plan import arm_named
    from envfactory_assets.defs.ablations.assets import REPORT_FILE

    arms = [a.strip() for a in (args.arm or "").split(",") if a.strip()]
    try:
        for name in arms:
            arm_named(name)
    except ValueError as exc:
        raise UsageError(f"ablations --arm: {exc}") from None
    steps = [ABLATION_STEPS[args.step]] if args.step else list(ABLATION_STEPS.values())
    partitioned = [s for s in steps if s != "ablations_report"]
    home = settings.envfactory_home()
    code = cmd_run(
        argparse.Namespace(
            select=",".join(steps) if len(steps) > 1 else steps[0],
            config=args.config,
            partition=",".join(arms) if arms and partitioned else None,
            verbose=args.verbose,
        )
    )
    page = home / "ablations" / REPORT_FILE
    if args.write_docs and code == 0:
        if not page.is_file():
            raise UsageError(
                f"ablations --write-docs: {page} does not exist yet; run envfactory ablations --step report"
            )
        target = Path(args.write_docs)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, target)
        print(f"copied {page} to {target}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envfactory", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialize assets (default: the whole graph)")
    run.add_argument("--select", help="Dagster asset selection, e.g. 'source_resources+' or 'tool_graph'")
    run.add_argument("--config", help="YAML file of run config (ops: {asset: {config: {...}}})")
    run.add_argument(
        "--partition",
        help="partition keys (comma-separated): environment keys for the per-environment stages, ablation arms "
        "(topology, random_walk, raw_queries) for the ablation assets; default: all",
    )
    run.add_argument(
        "--verbose",
        action="store_true",
        help="print Dagster's events (DEBUG too), library progress bars and trainer logs here "
        "instead of only in the run log file",
    )
    run.set_defaults(func=cmd_run)
    cov = sub.add_parser(
        "coverage",
        help="coverage of the corpus by verified tools, built and verified in resumable batches "
        "(use with --config configs/corpus_coverage.yaml and its own ENVFACTORY_HOME; hours, not in CI)",
    )
    cov.add_argument("--config", help="YAML run config of every command (configs/corpus_coverage.yaml)")
    cov.add_argument(
        "--batch", type=int, default=100, help="environment partitions per envfactory run command (default: 100)"
    )
    cov.add_argument(
        "--max-minutes", type=float, default=None, help="start no batch after this many minutes (default: no limit)"
    )
    cov.add_argument("--rescan", action="store_true", help="materialize source_resources again first")
    cov.add_argument("--report-only", action="store_true", help="only write the figures of what the store holds")
    cov.add_argument("--output", help="Markdown file for the figures (default: $ENVFACTORY_HOME/corpus_coverage.md)")
    cov.set_defaults(func=cmd_coverage)
    abl = sub.add_parser(
        "ablations",
        help="the paper's ablations as assets partitioned by arm, each arm in its own store (hours; not in CI)",
    )
    abl.add_argument(
        "--config",
        help="YAML run config: ops.ablation_data (synthesis_config), ops.ablation_checkpoint, ops.ablation_evaluation",
    )
    abl.add_argument("--arm", help="comma-separated arms (default: topology,random_walk,raw_queries)")
    abl.add_argument(
        "--step", choices=list(ABLATION_STEPS), help="one step (default: data, checkpoint, evaluation, then the report)"
    )
    abl.add_argument(
        "--write-docs",
        nargs="?",
        const="docs/ablations.md",
        metavar="PATH",
        help="copy the page ($ENVFACTORY_HOME/ablations/ablations.md) to PATH (default docs/ablations.md)",
    )
    abl.add_argument("--verbose", action="store_true", help="print Dagster's events here instead of the run log")
    abl.set_defaults(func=cmd_ablations)
    lin = sub.add_parser("lineage", help="trace a checkpoint back to its source resources")
    lin.add_argument("checkpoint_id")
    lin.add_argument("--json", action="store_true", help="print the lineage as JSON (paths absolute) instead of text")
    lin.set_defaults(func=cmd_lineage)
    st = sub.add_parser(
        "status",
        help="rows per store table: passed rows of the main sampler, as the report counts them, the others beside",
    )
    st.set_defaults(func=cmd_status)
    rep = sub.add_parser("report", help="Markdown report of what the store holds")
    rep.add_argument("--output", help="write to this file instead of stdout")
    rep.add_argument(
        "--compare",
        metavar="OLD_STORE",
        help="instead of the report, each figure of OLD_STORE (an envfactory.duckdb) and of this store side by side",
    )
    # default None: REPORT_SEED of envfactory_assets/reporting/report.py, read when reporting (importing it
    # here would slow every command); the value in the help is checked against it by a test
    rep.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the random turns and trajectories the report shows (default: 0)",
    )
    rep.set_defaults(func=cmd_report)
    res = sub.add_parser("results", help="evaluation table (base vs checkpoints) from the store")
    # --readme is accepted as a synonym, so scripts that spell it that way keep working
    res.add_argument(
        "--into",
        "--readme",
        dest="into",
        metavar="FILE",
        help="write it between the results markers of this Markdown file (docs/evaluation.md)",
    )
    res.add_argument(
        "--section",
        default=None,
        help="with --into: write between <!-- results:SECTION:start --> and its end marker "
        "(e.g. cpu_benchmark) instead of the default run's markers",
    )
    res.add_argument(
        "--page",
        metavar="FILE",
        help="write a whole benchmark page (wall time, settings, targets, tables) to FILE, e.g. docs/cpu_benchmark.md",
    )
    res.add_argument("--title", default="CPU benchmark", help="with --page: the page's heading")
    res.add_argument(
        "--command",
        default=None,
        help="with --page: the command that produced the store's rows, stated on the page (default: the CPU "
        "benchmark's, refused when the rows record other settings than configs/cpu_benchmark.yaml)",
    )
    res.set_defaults(func=cmd_results)
    cfg = sub.add_parser("config-docs", help="every setting of every asset with its default and help, as Markdown")
    cfg.add_argument("--output", help="write to this file (docs/configuration.md) instead of stdout")
    cfg.set_defaults(func=cmd_config_docs)
    ui = sub.add_parser("ui", help="start the Dagster UI on 127.0.0.1")
    ui.add_argument("--port", type=int, default=3000, help="port of the UI on 127.0.0.1 (default: 3000)")
    ui.set_defaults(func=cmd_ui)
    est = sub.add_parser("estimate", help="model calls and tokens the environments stage would spend (no call)")
    est.add_argument("--config", help="YAML file of run config (resources.model_backend, ops.environments)")
    est.add_argument("--json", action="store_true", help="print the estimate as JSON")
    est.set_defaults(func=cmd_estimate)
    serve = sub.add_parser(
        "serve-env", help="serve a verified environment as an MCP server over stdio, or Streamable HTTP (--http)"
    )
    serve.add_argument("env_id", help="the id of an environment that passed verification")
    serve.add_argument(
        "--state",
        choices=["valid", "boundary"],
        default="valid",
        help="the initial state the session starts from (default: valid)",
    )
    from envfactory_assets.serving.serve_env_settings import DEFAULT_MAX_ARGUMENT_BYTES, HttpSettings

    # default None: the settings module's own defaults, the one place they live (shown here from it)
    serve.add_argument(
        "--max-argument-bytes",
        type=int,
        default=None,
        help="most bytes (as JSON) of one tool call's arguments; larger calls get a tool error "
        f"and do not run (default: {DEFAULT_MAX_ARGUMENT_BYTES})",
    )
    serve.add_argument(
        "--http",
        action="store_true",
        help="serve over MCP Streamable HTTP at http://HOST:PORT/mcp, one episode (and sandbox worker) per MCP "
        "session, instead of one episode over stdio",
    )
    serve.add_argument("--host", default=None, help="with --http: address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="with --http: port to listen on (default: 8000)")
    http_defaults = HttpSettings()
    for option, kind, what in (
        ("max-sessions", int, "most MCP sessions open at once; one more initialize gets HTTP 503 session_capacity"),
        ("idle-timeout-s", float, "seconds without a request after which a session and its worker are ended"),
    ):
        default = getattr(http_defaults, option.replace("-", "_"))
        serve.add_argument(
            f"--{option}",
            type=kind,
            default=None,
            help=f"with --http: {what} (default: {default if isinstance(default, int) else format(default, 'g')})",
        )
    serve.set_defaults(func=cmd_serve_env)
    oe = sub.add_parser(
        "serve-openenv", help="serve the RL rows as an OpenEnv environment (HTTP and WebSocket) to RL trainers"
    )
    oe.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine)")
    oe.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    oe.add_argument(
        "--dataset-version",
        default=None,
        help="refuse to start unless the store's current RL rows are this version (a checkpoint's "
        "rl_dataset_version); default: serve the current rows",
    )
    # default None: SessionSettings' own defaults, the one place they live (shown here from it)
    from envfactory_assets.serving.serve_env_settings import SessionSettings

    session_defaults = SessionSettings()
    for option, kind, what in (
        ("max-sessions", int, "most episodes open at once; one more reset gets a session_capacity error"),
        ("idle-timeout-s", float, "seconds without a request after which an episode is closed"),
        ("max-steps", int, "most steps in one episode before it is ended and scored"),
        ("max-argument-bytes", int, "most bytes (as JSON) of one call's arguments; a larger call does not run"),
        ("workers", int, "sandbox worker sets the episodes are spread over (tool calls run at once)"),
        ("open-tasks", int, "tasks each worker set keeps opened for their next episodes (forks of one base)"),
    ):
        default = getattr(session_defaults, option.replace("-", "_"))
        oe.add_argument(
            f"--{option}",
            type=kind,
            default=None,
            help=f"{what} (default: {default if isinstance(default, int) else format(default, 'g')})",
        )
    oe.set_defaults(func=cmd_serve_openenv)
    ev = sub.add_parser(
        "export-verifiers",
        help="write the RL rows as an installable verifiers environment package (its tools and reward served by "
        "serve-openenv)",
    )
    ev.add_argument(
        "--output",
        default=None,
        help="folder to write envfactory_env/ into (default: $ENVFACTORY_HOME/exports/verifiers)",
    )
    ev.add_argument(
        "--dataset-version",
        default=None,
        help="refuse unless the store's current RL rows are this version (as serve-openenv's option)",
    )
    ev.set_defaults(func=cmd_export_verifiers)
    for name, help_text in (
        ("exclude", "exclude a resource, environment or tool from every re-synthesis"),
        ("include", "remove an exclusion"),
    ):
        cur = sub.add_parser(name, help=help_text)
        cur.add_argument("kind", choices=["resource", "environment", "tool"])
        cur.add_argument("id", help="resource key, environment id, or tool node id (env_id.tool_name)")
        if name == "exclude":
            cur.add_argument("--reason", required=True, help="why (kept in the file and in asset metadata)")
        cur.set_defaults(func=cmd_exclude)
    envs = sub.add_parser("environments", help="list the servable environments (passed verification)")
    envs.add_argument("--tools", action="store_true", help="also list each tool's node id (env_id.tool_name)")
    envs.add_argument("--json", action="store_true", help="print id, domain, tool names and exclusion as JSON")
    envs.set_defaults(func=cmd_environments)
    lst = sub.add_parser("curation", help="list the exclusions in $ENVFACTORY_HOME/curation.yaml")
    lst.set_defaults(func=cmd_curation)
    add = sub.add_parser(
        "add", help="add an OpenAPI document or MCP tool list to the user folder and print its partition key"
    )
    add.add_argument("document", help="a .json, .yaml or .yml file")
    add.set_defaults(func=cmd_add)
    show = sub.add_parser("show", help="print a trajectory (raw or refined id) as Markdown")
    show.add_argument("trajectory_id")
    show.set_defaults(func=cmd_show)
    return parser


def _stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reading end is closed (``poll`` reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or stdout is not a file descriptor
        return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (``envfactory lineage ... | head``): stop quietly, as Unix tools do. Python would
        # otherwise report the pipe again while flushing stdout at exit, so stdout is pointed at /dev/null.
        # Any other broken pipe (a worker or server subprocess that died) is a real failure and is re-raised.
        if not _stdout_reader_gone():
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by a closed pipe


if __name__ == "__main__":
    sys.exit(main())
