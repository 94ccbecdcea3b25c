"""Reference tool surfaces of held-out benchmarks, read from packages installed offline.

BFCL v3 multi-turn: the function docs of its stateful API classes ship in the ``bfcl-eval`` wheel
(``bfcl_eval/data/multi_turn_func_doc/*.jsonl``-style files, one JSON object per line).

BFCL v3 single-turn (non-live AST categories ``simple`` (Python), ``multiple``, ``parallel``,
``parallel_multiple`` and ``irrelevance``): the functions offered by each entry of
``bfcl_eval/data/BFCL_v4_<file>.json`` (:data:`BFCL_SINGLE_TURN_FILES`), one per distinct name and
description within a category.

tau2-bench is not installable offline (PyPI's ``tau2`` is an unrelated package). Its agent-side tool
names for the airline, retail and telecom domains, with a one-line summary each, are kept in
``decontam/data/tau2_tools.json`` together with the repository, path and commit they were read from.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BenchmarkTool:
    """One tool of a benchmark: ``benchmark``, ``suite`` (API class file), ``name``, ``description``."""

    benchmark: str
    suite: str
    name: str
    description: str


def bfcl_multi_turn_tools() -> list[BenchmarkTool]:
    """Every function of BFCL's multi-turn API classes; empty when ``bfcl-eval`` is not installed."""
    try:
        folder = importlib.resources.files("bfcl_eval") / "data" / "multi_turn_func_doc"
    except ModuleNotFoundError:
        return []
    tools = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".json"):
            continue
        for line in entry.read_text().splitlines():
            if line.strip():
                doc = json.loads(line)
                tools.append(
                    BenchmarkTool(
                        "bfcl_v3_multi_turn", entry.name[: -len(".json")], doc["name"], str(doc.get("description", ""))
                    )
                )
    return tools


BFCL_SINGLE_TURN = "bfcl_v3_single_turn"
BFCL_SINGLE_TURN_FILES = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "irrelevance": "irrelevance",
}
"""``{category: data file stem}`` of BFCL v3's non-live AST categories; the wheel's files are named
``BFCL_v4_<stem>.json`` (these categories were introduced with v2/v3 and are unchanged in the v4 release)."""


def bfcl_single_turn_entries(category: str) -> list[dict]:
    """The entries (``id``, ``question``, ``function``) of one single-turn category, in file order.

    Raises:
        KeyError: ``category`` is not in :data:`BFCL_SINGLE_TURN_FILES`.
        ModuleNotFoundError: ``bfcl-eval`` is not installed.
        ValueError: a line of the data file is not JSON.
    """
    stem = BFCL_SINGLE_TURN_FILES[category]
    return read_jsonl(importlib.resources.files("bfcl_eval") / "data" / f"BFCL_v4_{stem}.json")


def read_jsonl(path: Any) -> list[dict]:
    """The JSON objects of a JSON-lines file (BFCL's data files: one object per line, blank lines skipped);
    ``path`` is a ``Path`` or an ``importlib.resources`` traversable.

    Raises:
        ValueError: a line is not JSON (the message names the file and the line number).
    """
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {n} is not JSON: {exc}") from exc
    return rows


def bfcl_single_turn_tools() -> list[BenchmarkTool]:
    """The functions of BFCL's single-turn categories (suite = category, name as BFCL spells it, dots
    included); one per distinct (category, name, description); empty when ``bfcl-eval`` is not installed."""
    tools: dict[tuple[str, str, str], BenchmarkTool] = {}
    for category in BFCL_SINGLE_TURN_FILES:
        try:
            entries = bfcl_single_turn_entries(category)
        except ModuleNotFoundError:
            return []
        for entry in entries:
            for doc in entry["function"]:
                key = (category, doc["name"], str(doc.get("description", "")))
                tools.setdefault(key, BenchmarkTool(BFCL_SINGLE_TURN, category, key[1], key[2]))
    return list(tools.values())


TAU2_REFERENCE = "tau2_tools.json"


def tau2_reference() -> dict:
    """The packaged tau2-bench reference document (``repository``, per-domain ``path``/``commit``/``tools``).

    Raises:
        ValueError: if the packaged file is missing a domain's provenance or has a non-string summary.
    """
    doc = json.loads((importlib.resources.files("envfactory_assets.decontam") / "data" / TAU2_REFERENCE).read_text())
    for domain, entry in doc["domains"].items():
        if not all(isinstance(entry.get(k), str) and entry[k] for k in ("path", "commit")):
            raise ValueError(f"{TAU2_REFERENCE}: domain {domain} lacks its source path or commit")
        if not all(isinstance(v, str) and v for v in entry["tools"].values()):
            raise ValueError(f"{TAU2_REFERENCE}: domain {domain} has an empty tool summary")
    return doc


def tau2_tools() -> list[BenchmarkTool]:
    """Every agent-side tool of tau2-bench's airline, retail and telecom domains (suite = domain)."""
    doc = tau2_reference()
    return [
        BenchmarkTool("tau2", domain, name, summary)
        for domain, entry in sorted(doc["domains"].items())
        for name, summary in entry["tools"].items()
    ]


def all_benchmark_tools() -> list[BenchmarkTool]:
    """The reference tool surfaces environments are tagged against: BFCL v3 multi-turn and single-turn,
    and tau2."""
    return bfcl_multi_turn_tools() + bfcl_single_turn_tools() + tau2_tools()


def benchmark_availability() -> dict[str, str]:
    """Which benchmark references could be loaded, and why not for the others."""
    doc = tau2_reference()
    commits = ", ".join(f"{d}@{e['commit'][:10]}" for d, e in sorted(doc["domains"].items()))
    return {
        "bfcl_v3_multi_turn": "loaded from bfcl-eval" if bfcl_multi_turn_tools() else "bfcl-eval not installed",
        BFCL_SINGLE_TURN: "loaded from bfcl-eval" if bfcl_single_turn_tools() else "bfcl-eval not installed",
        "tau2": f"tool names from {doc['repository']} ({commits}), packaged reference file",
    }
