"""Which run config each ablation arm gets, where its store lives, and the equal-SFT-budget rule.

EnvFactory's ablations (EnvFactory, ablations) compare data built one way with data built another, with
everything else fixed. Here every arm is a full synthesis (sources to ``sft_dataset``) in its own
``ENVFACTORY_HOME`` under ``<main home>/ablations/<arm>``, sharing the main home's OpenAPI corpus, then
an SFT checkpoint (no GRPO) on the same number of rows:

- ``topology``: the default pipeline (topology-aware sampler, refined queries); the control of both comparisons.
- ``random_walk``: tool chains and trajectories from the random-walk baseline sampler.
- ``raw_queries``: the topology arm's data with each turn's query as synthesized, before refinement
  (``datasets.query_source: raw``; the calls and turns kept are the refined trajectories').
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Folder of the main ``ENVFACTORY_HOME`` under which each arm gets its own home.
ARMS_DIR = "ablations"
#: Asset whose upstream closure is one arm's synthesis (sources to datasets).
DATA_ASSET = "sft_dataset"
#: Asset trained per arm once the rows are equalized.
TRAIN_ASSET = "checkpoints"


@dataclass(frozen=True)
class Arm:
    """One arm: ``name`` (its folder and its label in the evaluation), ``what`` (one line for the report) and
    ``ops`` (op config merged over the user's config for this arm, ``{op: {setting: value}}``)."""

    name: str
    what: str
    ops: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Raises ValueError when the name cannot be a folder name or ``ops`` is not a mapping of mappings."""
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"ablation arm name {self.name!r}: expected letters, digits and underscores")
        if not isinstance(self.ops, Mapping) or not all(isinstance(v, Mapping) for v in self.ops.values()):
            raise ValueError(f"ablation arm {self.name}: ops must map an op name to its settings")


@dataclass(frozen=True)
class Comparison:
    """``treatment`` minus ``control`` (arm names): what the paper's ablation isolates, in ``question``."""

    question: str
    control: str
    treatment: str


ARMS = (
    Arm(
        "topology",
        "topology-aware sampler, refined queries (the default pipeline)",
        {
            "tool_chains": {"sampler": "topology"},
            "raw_trajectories": {"sampler": "topology"},
            "datasets": {"query_source": "refined"},
        },
    ),
    Arm(
        "random_walk",
        "random-walk baseline sampler, refined queries",
        {
            "tool_chains": {"sampler": "random_walk"},
            "raw_trajectories": {"sampler": "random_walk"},
            "datasets": {"query_source": "refined"},
        },
    ),
    Arm(
        "raw_queries",
        "topology-aware sampler, raw (unrefined) queries",
        {
            "tool_chains": {"sampler": "topology"},
            "raw_trajectories": {"sampler": "topology"},
            "datasets": {"query_source": "raw"},
        },
    ),
)
COMPARISONS = (
    Comparison("(a) random-walk sampler instead of the topology-aware one", "topology", "random_walk"),
    Comparison("(b) raw queries instead of refined ones", "topology", "raw_queries"),
)


def arm_home(main_home: Path, arm: Arm) -> Path:
    """``<main_home>/ablations/<arm name>``: the arm's own ``ENVFACTORY_HOME`` (store, Dagster instance, models,
    checkpoints), so no arm writes to the main store."""
    return Path(main_home) / ARMS_DIR / arm.name


def _ops(run_config: Mapping[str, Any]) -> dict[str, Any]:
    ops = run_config.get("ops", {})
    if not isinstance(ops, Mapping):
        raise ValueError(f"config 'ops' must be a mapping of asset name to config, got {type(ops).__name__}")
    return dict(ops)


def arm_config(
    run_config: Mapping[str, Any], arm: Arm, corpus_dir: Path, max_train_rows: int | None = None
) -> dict[str, Any]:
    """The run config of ``arm``: ``run_config`` (the user's, left unchanged) with the arm's settings over it,
    ``source_resources.corpus_dir`` set to the main home's corpus unless the user set one, GRPO off
    (``checkpoints.grpo_max_steps: 0``; the ablations compare SFT data) and, when given, ``max_train_rows``.

    Raises:
        ValueError: ``ops`` (or an op's entry) is not a mapping, or ``max_train_rows`` < 1.
    """
    if max_train_rows is not None and max_train_rows < 1:
        raise ValueError(f"ablation max_train_rows={max_train_rows}: expected >= 1 (an arm has no train row?)")
    config = copy.deepcopy(dict(run_config))
    ops = _ops(config)

    def settings(op: str) -> dict[str, Any]:
        entry = ops.setdefault(op, {})
        if not isinstance(entry, dict) or not isinstance(entry.setdefault("config", {}), dict):
            raise ValueError(f"config ops.{op} must be a mapping with a 'config' mapping")
        return entry["config"]

    for op, values in arm.ops.items():
        settings(op).update(copy.deepcopy(dict(values)))
    settings("source_resources").setdefault("corpus_dir", str(corpus_dir))
    train = settings(TRAIN_ASSET)
    train["grpo_max_steps"] = 0
    if max_train_rows is not None:
        train["max_train_rows"] = int(max_train_rows)
    config["ops"] = ops
    return config


def configured_rows(run_config: Mapping[str, Any], default: int) -> int:
    """The user's ``checkpoints.max_train_rows`` (``default``, the CheckpointConfig default, when unset)."""
    value = ((_ops(run_config).get(TRAIN_ASSET) or {}).get("config") or {}).get("max_train_rows", default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"config checkpoints.max_train_rows={value!r}: expected a whole number >= 1")
    return value


def equal_rows(train_rows: Mapping[str, int], configured: int) -> int:
    """The SFT budget every arm trains on: the configured ``max_train_rows`` capped at the smallest arm's
    train-split row count, so each arm trains on exactly that many rows.

    Raises:
        ValueError: no arm is given, or an arm has no train-split SFT row (it cannot be trained at any budget).
    """
    if not train_rows:
        raise ValueError("equal_rows: no arm")
    empty = sorted(name for name, n in train_rows.items() if n < 1)
    if empty:
        raise ValueError(
            f"ablation arms {empty} have no train-split SFT row; synthesize more chains "
            "(tool_chains.n_chains) and run the ablations again"
        )
    return min(configured, *train_rows.values())


def select_arms(names: Sequence[str] | None) -> tuple[Arm, ...]:
    """The arms named (default: all of :data:`ARMS`); the control arm ``topology`` is always kept.

    Raises:
        ValueError: a name is not an arm.
    """
    if not names:
        return ARMS
    known = {a.name for a in ARMS}
    unknown = sorted(set(names) - known)
    if unknown:
        raise ValueError(f"unknown ablation arms {unknown}; known: {sorted(known)}")
    wanted = set(names) | {"topology"}
    return tuple(a for a in ARMS if a.name in wanted)
