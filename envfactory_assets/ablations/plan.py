"""Which run config each ablation arm gets, where its store lives, and the equal-SFT-budget rule.

EnvFactory's ablations (EnvFactory, ablations) compare data built one way with data built another, with
everything else fixed. Here every arm is a full synthesis (sources to ``sft_dataset``) in its own
``ENVFACTORY_HOME`` under ``<main home>/ablations/<arm>``, sharing the main home's OpenAPI corpus, then
an SFT checkpoint (no GRPO) on the same number of rows (the configured ``max_train_rows``; an arm with fewer
train-split rows is refused, so no arm trains on fewer rows than another):

- ``topology``: the default pipeline (topology-aware sampler, refined queries); the control of both comparisons.
- ``random_walk``: tool chains and trajectories from the random-walk baseline sampler.
- ``raw_queries``: the topology arm's data with each turn's query as synthesized, before refinement
  (``datasets.query_source: raw``; the calls and turns kept are the refined trajectories').
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envfactory_assets.config_checks import SettingError
from envfactory_assets.config_checks import setting as _setting

#: Folder of the main ``ENVFACTORY_HOME`` under which each arm gets its own home.
ARMS_DIR = "ablations"
#: The selection of one arm's synthesis (sources to datasets), run in the arm's home.
DATA_SELECTION = "*sft_dataset"
#: Asset trained in each arm's home (GRPO off).
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


def arm_config(run_config: Mapping[str, Any], arm: Arm, corpus_dir: Path) -> dict[str, Any]:
    """The synthesis run config of ``arm``: ``run_config`` (the user's, left unchanged) with the arm's settings
    over it and ``source_resources.corpus_dir`` set to the main home's corpus unless the user set one.

    Raises:
        ValueError: ``ops`` (or an op's entry) is not a mapping.
    """
    config = copy.deepcopy(dict(run_config))
    ops = _ops(config)
    for op, values in arm.ops.items():
        _settings(ops, op).update(copy.deepcopy(dict(values)))
    _settings(ops, "source_resources").setdefault("corpus_dir", str(corpus_dir))
    config["ops"] = ops
    return config


def _settings(ops: dict[str, Any], op: str) -> dict[str, Any]:
    entry = ops.setdefault(op, {})
    if not isinstance(entry, dict) or not isinstance(entry.setdefault("config", {}), dict):
        raise ValueError(f"config ops.{op} must be a mapping with a 'config' mapping")
    return entry["config"]


def sft_config(checkpoint_settings: Mapping[str, Any]) -> dict[str, Any]:
    """The run config of an arm's SFT run: ``checkpoint_settings`` (the ``checkpoints`` op's settings) with GRPO
    off (``grpo_max_steps: 0``; the ablations compare SFT data)."""
    return {"ops": {TRAIN_ASSET: {"config": {**dict(checkpoint_settings), "grpo_max_steps": 0}}}}


def require_rows(arm: str, train_rows: int, budget: int) -> None:
    """Refuse an SFT budget an arm cannot meet: every arm trains on exactly ``budget`` rows (the configured
    ``max_train_rows``), so an arm with fewer train-split rows would be compared on less data.

    Raises:
        ValueError: ``train_rows`` < ``budget``, naming the arm and both counts.
    """
    if train_rows < budget:
        raise ValueError(
            f"ablation arm {arm} has {train_rows} train-split SFT rows, fewer than max_train_rows={budget} every "
            "arm trains on; lower max_train_rows for every arm or synthesize more chains (tool_chains.n_chains)"
        )


def arm_named(name: str) -> Arm:
    """The arm called ``name``.

    Raises:
        ValueError: ``name`` is not an arm (the message lists the arms).
    """
    for arm in ARMS:
        if arm.name == name:
            return arm
    raise ValueError(f"unknown ablation arm {name!r}; known: {[a.name for a in ARMS]}")


@dataclass(frozen=True)
class AblationSynthesisSpec:
    """What every arm's synthesis runs with besides the arm's own settings.

    Raises:
        SettingError: (a ValueError) ``synthesis_config`` is not a string.
    """

    synthesis_config: str = _setting(
        "",
        "a YAML run config file (ops: {asset: {config: ...}}) applied to every arm's synthesis (sources to "
        "sft_dataset), under the arm's own sampler and query source and the main home's OpenAPI corpus; "
        "empty: the embedded defaults, as a plain envfactory run.",
    )

    def __post_init__(self) -> None:
        if not isinstance(self.synthesis_config, str):
            raise SettingError(f"ablation setting synthesis_config={self.synthesis_config!r}: expected a file path")

    def run_config(self) -> dict[str, Any]:
        """The run config of :attr:`synthesis_config` ({} when empty).

        Raises:
            ValueError: the file cannot be read, is not YAML, or is not a mapping with an ``ops`` mapping.
        """
        if not self.synthesis_config:
            return {}
        from envfactory_assets.sources.safe_yaml import load_untrusted_yaml

        path = Path(self.synthesis_config).expanduser()
        try:
            data = load_untrusted_yaml(path.read_bytes())
        except OSError as exc:
            raise ValueError(f"ablation setting synthesis_config: cannot read {path} ({exc.strerror})") from None
        except Exception as exc:  # yaml.YAMLError and the loader's own size refusals
            raise ValueError(f"ablation setting synthesis_config: {path} is not valid YAML ({exc})") from None
        if not isinstance(data, dict) or not isinstance(data.get("ops", {}), dict):
            raise ValueError(f"ablation setting synthesis_config: {path} must be a mapping with an 'ops' mapping")
        return data
