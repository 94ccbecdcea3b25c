"""The step ledger of one ablation arm: which of its steps (data, checkpoint, evaluation) finished, with
which inputs and settings, and what each produced, in ``<arm home>/ablation_steps.json``.

A step whose key (a content hash of its settings and of its inputs' outputs) is recorded as finished is not
run again; any change of a setting or of an upstream step's output gives a new key and runs it. The file is
written to a temporary name and renamed, so a step killed before it records leaves the previous ledger whole
and is run again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envfactory_assets.store.ids import content_id

#: The file of an arm's ledger, in the arm's home.
LEDGER_FILE = "ablation_steps.json"
#: The steps of an arm, in the order they run.
STEPS = ("data", "checkpoint", "evaluation")


def step_key(step: str, settings: Mapping[str, Any], inputs: Mapping[str, Any]) -> str:
    """``"step_<16 hex>"``: the content hash of ``step``, its ``settings`` and its ``inputs`` (upstream steps'
    outputs, versions of what it reads), all JSON-serializable.

    Raises:
        ValueError: ``step`` is not one of :data:`STEPS`. TypeError: a value is not JSON-serializable.
    """
    if step not in STEPS:
        raise ValueError(f"ablation step {step!r}: expected one of {list(STEPS)}")
    return content_id("step", {"step": step, "settings": dict(settings), "inputs": dict(inputs)})


class StepLedger:
    """The ledger of the arm whose home is ``home`` (``<home>/ablation_steps.json``).

    Each entry: ``{step: {"key", "outputs", "seconds", "finished_at"}}`` (``finished_at`` in Unix seconds).
    """

    def __init__(self, home: Path) -> None:
        self.path = Path(home) / LEDGER_FILE

    def entries(self) -> dict[str, dict[str, Any]]:
        """Every recorded step; {} when the arm has none (or the file is unreadable: its steps then run again)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def outputs(self, step: str) -> dict[str, Any] | None:
        """The outputs of ``step``'s last finished run, or None when it never finished."""
        entry = self.entries().get(step)
        return dict(entry["outputs"]) if isinstance(entry, dict) and "outputs" in entry else None

    def finished(self, step: str, key: str) -> dict[str, Any] | None:
        """The outputs of ``step`` when its last finished run had ``key`` (same settings and inputs), else None."""
        entry = self.entries().get(step)
        return dict(entry["outputs"]) if isinstance(entry, dict) and entry.get("key") == key else None

    def record(self, step: str, key: str, outputs: Mapping[str, Any], seconds: float) -> None:
        """Record ``step`` as finished with ``key`` and ``outputs``; the steps after it are dropped (they were made
        from an earlier output of this one).

        Raises:
            ValueError: ``step`` is not one of :data:`STEPS`. OSError: the file cannot be written.
        """
        if step not in STEPS:
            raise ValueError(f"ablation step {step!r}: expected one of {list(STEPS)}")
        later = STEPS[STEPS.index(step) + 1 :]
        entries = {k: v for k, v in self.entries().items() if k not in later}
        entries[step] = {
            "key": key,
            "outputs": dict(outputs),
            "seconds": round(float(seconds), 1),
            "finished_at": round(time.time(), 1),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=1, sort_keys=True, default=str), encoding="utf-8")
        tmp.replace(self.path)
