"""``envfactory``: run the asset graph, audit lineage, inspect the store, start the UI.

Runs launched here go to the same Dagster instance as the UI (``DAGSTER_HOME`` inside
``ENVFACTORY_HOME``), so each sees the other's runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from envfactory_assets import settings

DAGSTER_YAML = """\
# Written by envfactory. The store takes one writer at a time: the envfactory_store pool runs one step at once.
telemetry:
  enabled: false
concurrency:
  pools:
    default_limit: 1
"""


def prepare_dagster_home(home: Path) -> Path:
    """Create ``DAGSTER_HOME`` under ``home`` with its ``dagster.yaml`` and export it; returns the path."""
    dagster_home = settings.dagster_home(home)
    dagster_home.mkdir(parents=True, exist_ok=True)
    config = dagster_home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    return dagster_home


def _load_run_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    import yaml

    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict):
        raise SystemExit(f"--config {path}: expected a YAML mapping of run config, got {type(data).__name__}")
    return data


def _selection(select: str | None) -> Any:
    """``a,b,c`` -> a list of asset keys; anything else -> a Dagster selection string (``tool_graph+``)."""
    if not select:
        return None
    if "," in select:
        return [part.strip() for part in select.split(",") if part.strip()]
    return select


def config_for_selection(run_config: dict[str, Any], selection: Any) -> dict[str, Any]:
    """Drop op config of assets outside ``selection``, so one config file serves every partial run."""
    if not selection or "ops" not in run_config:
        return run_config
    import dagster as dg

    from envfactory_assets.definitions import defs

    graph = defs.get_repository_def().asset_graph
    keys = dg.AssetSelection.from_coercible(selection).resolve(graph)
    ops = set()
    for key in keys:
        node = graph.get(key).assets_def.node_def
        ops.add(node.name)
    kept = {op: cfg for op, cfg in run_config["ops"].items() if op in ops}
    return {**run_config, "ops": kept}


def cmd_run(args: argparse.Namespace) -> int:
    """Materialize the selected assets (default: all) in-process on the shared Dagster instance."""
    home = settings.envfactory_home()
    prepare_dagster_home(home)
    import dagster as dg

    from envfactory_assets.definitions import ALL_ASSETS, ALL_CHECKS, RESOURCES

    if not settings.corpus_dir(home).is_dir() and not args.allow_missing_corpus:
        print(f"error: the OpenAPI corpus is not installed at {settings.corpus_dir(home)}; run scripts/setup.sh",
              file=sys.stderr)
        return 2
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize(
            [*ALL_ASSETS, *ALL_CHECKS],
            instance=instance,
            selection=_selection(args.select),
            run_config=config_for_selection(_load_run_config(args.config), _selection(args.select)),
            resources=RESOURCES,
            raise_on_error=False,
        )
        failed_checks = [e.asset_check_key.to_user_string()
                         for e in result.get_asset_check_evaluations() if not e.passed]
    print(f"run {result.run_id}: {'success' if result.success else 'FAILED'}")
    if failed_checks:
        print(f"failed checks: {failed_checks}")
    from envfactory_assets.store.db import Store

    if settings.store_path(home).exists():
        for table, n in Store(settings.store_path(home)).counts().items():
            print(f"  {table:<24} {n}")
    return 0 if result.success and not failed_checks else 1


def cmd_lineage(args: argparse.Namespace) -> int:
    """Print the path from a checkpoint back to its source resources."""
    from envfactory_assets.store.db import Store
    from envfactory_assets.store.lineage import LineageError, checkpoint_lineage, format_lineage

    try:
        lineage = checkpoint_lineage(Store(settings.store_path()), args.checkpoint_id)
    except (LineageError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(lineage, indent=2) if args.json else format_lineage(lineage))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Current row counts per store table."""
    from envfactory_assets.store.db import Store

    try:
        counts = Store(settings.store_path()).counts()
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for table, n in counts.items():
        print(f"{table:<24} {n}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write the Markdown report of the store (to stdout or ``--output``)."""
    from envfactory_assets.store.db import Store
    from envfactory_assets.store.report import run_report

    try:
        text = run_report(Store(settings.store_path()))
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(text + "\n")
    else:
        print(text)
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    """Start the Dagster UI on localhost with ``DAGSTER_HOME`` inside ``ENVFACTORY_HOME``."""
    prepare_dagster_home(settings.envfactory_home())
    workspace = Path(__file__).resolve().parents[1] / "workspace.yaml"
    cmd = [sys.executable, "-m", "dagster", "dev", "-h", "127.0.0.1", "-p", str(args.port)]
    cmd += ["-w", str(workspace)] if workspace.exists() else ["-m", "envfactory_assets.definitions"]
    return subprocess.call(cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envfactory", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialize assets (default: the whole graph)")
    run.add_argument("--select", help="Dagster asset selection, e.g. 'source_resources+' or 'tool_graph'")
    run.add_argument("--config", help="YAML file of run config (ops: {asset: {config: {...}}})")
    run.add_argument("--allow-missing-corpus", action="store_true", help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)
    lin = sub.add_parser("lineage", help="trace a checkpoint back to its source resources")
    lin.add_argument("checkpoint_id")
    lin.add_argument("--json", action="store_true")
    lin.set_defaults(func=cmd_lineage)
    st = sub.add_parser("status", help="row counts of the store")
    st.set_defaults(func=cmd_status)
    rep = sub.add_parser("report", help="Markdown report of what the store holds")
    rep.add_argument("--output", help="write to this file instead of stdout")
    rep.set_defaults(func=cmd_report)
    ui = sub.add_parser("ui", help="start the Dagster UI on 127.0.0.1")
    ui.add_argument("--port", type=int, default=3000)
    ui.set_defaults(func=cmd_ui)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
