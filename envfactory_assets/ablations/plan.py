"""Which run config each ablation arm gets, where its store lives, and the equal-SFT-budget rule.

EnvFactory's ablations (EnvFactory, ablations) compare data built one way with data built another, with
everything else fixed. Here every arm is a full synthesis (sources to ``sft_dataset``) in its own
``ENVFACTORY_HOME`` under ``<main home>/ablations/<arm>``, sharing the main home's OpenAPI corpus, then
an SFT checkpoint (no GRPO) on the same number of rows (the configured ``max_train_rows``; an arm with fewer
train-split rows is refused, so no arm trains on fewer rows than another):

- ``topology``: the default pipeline (topology-aware sampler, refined queries); the control of both comparisons.
- ``random_walk``: tool chains and trajectories from the random-walk baseline sampler.
- ``raw_queries``: the topology arm's data with each turn's query as synthesized, before refinement
  (``datasets.query_source: raw``; the calls and turns kept are the refined trajectories'). Its synthesis up
  to the refined trajectories is the topology arm's own (:attr:`Arm.shares_synthesis_of`): a copy of that
  arm's store with only the datasets step run again, so the two arms differ in the user's words and nothing
  else, and the arm costs minutes instead of a second synthesis.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envfactory_assets.config_checks import SettingError
from envfactory_assets.config_checks import setting as _setting
from envfactory_assets.synth.run_settings import ChainRunSpec

#: Folder of the main ``ENVFACTORY_HOME`` under which each arm gets its own home.
ARMS_DIR = "ablations"
#: The selection of one arm's synthesis (sources to datasets), run in the arm's home.
DATA_SELECTION = "*sft_dataset"
#: The selection of an arm that shares another arm's synthesis: the datasets step alone (sft_dataset brings
#: rl_dataset, the other asset of its step).
DATASETS_SELECTION = "sft_dataset"
#: The op whose settings an arm sharing a synthesis may change (everything it reads is upstream of it).
DATASETS_OP = "datasets"
#: Asset trained in each arm's home (GRPO off).
TRAIN_ASSET = "checkpoints"


@dataclass(frozen=True)
class Arm:
    """One arm: ``name`` (its folder and its label in the evaluation), ``what`` (one line for the report),
    ``ops`` (op config merged over the user's config for this arm, ``{op: {setting: value}}``) and
    ``shares_synthesis_of`` (another arm whose ``ops`` differ from this arm's only in the ``datasets`` op: this
    arm's data step copies that arm's finished store and runs the datasets step alone; None: a synthesis of
    its own) and ``chain_factor`` (the arm draws this many times the configured ``tool_chains.n_chains``, for a
    sampler most of whose chains are not executable, so that it still has the rows every arm trains on)."""

    name: str
    what: str
    ops: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    shares_synthesis_of: str | None = None
    chain_factor: int = 1

    def __post_init__(self) -> None:
        """Raises ValueError when the name cannot be a folder name, ``ops`` is not a mapping of mappings, or the
        arm names itself as the one whose synthesis it shares."""
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"ablation arm name {self.name!r}: expected letters, digits and underscores")
        if not isinstance(self.ops, Mapping) or not all(isinstance(v, Mapping) for v in self.ops.values()):
            raise ValueError(f"ablation arm {self.name}: ops must map an op name to its settings")
        if self.shares_synthesis_of == self.name:
            raise ValueError(f"ablation arm {self.name}: cannot share the synthesis of itself")
        if not isinstance(self.chain_factor, int) or isinstance(self.chain_factor, bool) or self.chain_factor < 1:
            raise ValueError(
                f"ablation arm {self.name}: chain_factor={self.chain_factor!r}, expected a whole number >= 1"
            )


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
        "random-walk baseline sampler, refined queries; three times the chains (89% of random walks leave a "
        "required input without an earlier producer and are not executed)",
        {
            "tool_chains": {"sampler": "random_walk"},
            "raw_trajectories": {"sampler": "random_walk"},
            "datasets": {"query_source": "refined"},
        },
        chain_factor=3,
    ),
    Arm(
        "raw_queries",
        "topology-aware sampler, raw (unrefined) queries",
        {
            "tool_chains": {"sampler": "topology"},
            "raw_trajectories": {"sampler": "topology"},
            "datasets": {"query_source": "raw"},
        },
        shares_synthesis_of="topology",
    ),
)
COMPARISONS = (
    Comparison("(a) random-walk sampler instead of the topology-aware one", "topology", "random_walk"),
    Comparison("(b) raw queries instead of refined ones", "topology", "raw_queries"),
)


def synthesis_settings(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """``run_config`` without the ``datasets`` op's entry: the settings of the stages up to the refined
    trajectories, which two arms must agree on to share a synthesis.

    Raises:
        ValueError: ``ops`` is not a mapping.
    """
    config = copy.deepcopy(dict(run_config))
    config["ops"] = {op: v for op, v in _ops(config).items() if op != DATASETS_OP}
    return config


def check_shared_syntheses(arms: tuple[Arm, ...]) -> None:
    """Refuse an arm that shares the synthesis of an arm that is not in ``arms``, that itself shares one, or
    whose ``ops`` differ from it outside the ``datasets`` op (its copied upstream would not be its own).

    Raises:
        ValueError: naming the arm and what is wrong.
    """
    by_name = {a.name: a for a in arms}
    for arm in arms:
        if arm.shares_synthesis_of is None:
            continue
        source = by_name.get(arm.shares_synthesis_of)
        if source is None or source.shares_synthesis_of is not None:
            raise ValueError(
                f"ablation arm {arm.name} shares the synthesis of {arm.shares_synthesis_of!r}, which is not an "
                "arm with a synthesis of its own"
            )
        mine = {op: dict(v) for op, v in arm.ops.items() if op != DATASETS_OP}
        theirs = {op: dict(v) for op, v in source.ops.items() if op != DATASETS_OP}
        if mine != theirs or arm.chain_factor != source.chain_factor:
            raise ValueError(
                f"ablation arm {arm.name} shares the synthesis of {source.name} but its settings differ outside "
                f"the {DATASETS_OP} op: {mine} against {theirs}, chain factor {arm.chain_factor} against "
                f"{source.chain_factor}"
            )


check_shared_syntheses(ARMS)


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
    over it, ``tool_chains.n_chains`` (the user's or the default) times the arm's ``chain_factor``, and
    ``source_resources.corpus_dir`` set to the main home's corpus unless the user set one.

    Raises:
        ValueError: ``ops`` (or an op's entry) is not a mapping.
    """
    config = copy.deepcopy(dict(run_config))
    ops = _ops(config)
    for op, values in arm.ops.items():
        _settings(ops, op).update(copy.deepcopy(dict(values)))
    if arm.chain_factor != 1:
        chains = _settings(ops, "tool_chains")
        chains["n_chains"] = arm.chain_factor * chains.get("n_chains", ChainRunSpec.n_chains)
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
