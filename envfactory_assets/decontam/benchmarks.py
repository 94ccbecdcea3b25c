"""Reference tool surfaces of held-out benchmarks, read from packages installed offline.

BFCL v3 multi-turn: the function docs of its stateful API classes ship in the ``bfcl-eval`` wheel
(``bfcl_eval/data/multi_turn_func_doc/*.jsonl``-style files, one JSON object per line). tau2-bench is not
installable offline (PyPI's ``tau2`` is an unrelated package), so it is reported as unavailable rather
than approximated.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass


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
                tools.append(BenchmarkTool("bfcl_v3_multi_turn", entry.name[: -len(".json")], doc["name"],
                                           str(doc.get("description", ""))))
    return tools


def benchmark_availability() -> dict[str, str]:
    """Which benchmark references could be loaded, and why not for the others."""
    return {
        "bfcl_v3_multi_turn": "loaded from bfcl-eval" if bfcl_multi_turn_tools() else "bfcl-eval not installed",
        "tau2": "unavailable offline (no installable package ships its tool surface)",
    }
