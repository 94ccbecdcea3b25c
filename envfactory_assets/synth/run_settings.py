"""The settings of the synthesis assets that no algorithm spec holds: how many chains of which sampler, which
sampler's chains are executed, and how refined trajectories are split into SFT and RL rows.

The algorithms' own settings live in :class:`~envfactory_assets.synth.sampling.sampler.SamplerConfig`,
:class:`~envfactory_assets.synth.trajectories.execution.SynthConfig`,
:class:`~envfactory_assets.synth.refinement.calibrate.CalibrationConfig` and
:class:`~envfactory_assets.synth.datasets.datagaps.DataGapsConfig`; with the run specs here they are every
setting of ``tool_chains``, ``raw_trajectories``, ``refined_trajectories`` and the datasets, each default and
help text stated once, in a field's metadata. Each spec's owner is its asset's name, so a refusal reads as the
asset's (``tool_chains setting n_chains=0: expected ...``).
"""

from __future__ import annotations

from dataclasses import dataclass

from envfactory_assets.config_checks import finite_number, non_blank_string, one_of, setting, whole_number
from envfactory_assets.synth.datasets.rows import PAPER_SFT_SHARE
from envfactory_assets.synth.sampling.sampler import SAMPLERS
from envfactory_assets.synth.stage import DEFAULT_QUERY_SOURCE, QUERY_SOURCES

#: The default sampler of both ``tool_chains`` and ``raw_trajectories``: trajectories are executed from the
#: chains of one sampler, so the two defaults must agree (the paper's topology-aware sampler).
DEFAULT_SAMPLER = "topology"


@dataclass(frozen=True)
class ChainRunSpec:
    """How many chains ``tool_chains`` samples, with which sampler, under which seed key.

    Raises:
        SettingError: (a ValueError) a setting of the wrong type or out of range, named in the message.
    """

    n_chains: int = setting(
        3000, "chains drawn with the chosen sampler (3,000: the scale of docs/scale_run.md); at least 1."
    )
    sampler: str = setting(
        DEFAULT_SAMPLER,
        "'topology' (the paper's topology-aware sampler) or 'random_walk' (the baseline that ignores input "
        "dependencies); only this sampler's chains are executed into trajectories.",
    )
    baseline_chains: int = setting(
        100, "chains drawn with the other sampler, for the sampler comparison only (0 = none); 0 or more."
    )
    base_key: str = setting(
        "default",
        "the key every chain's seed is derived from (with its index); another key draws other chains.",
    )

    def __post_init__(self) -> None:
        owner = "tool_chains"
        whole_number(owner, "n_chains", self.n_chains, low=1)
        one_of(owner, "sampler", self.sampler, SAMPLERS)
        whole_number(owner, "baseline_chains", self.baseline_chains, low=0)
        non_blank_string(owner, "base_key", self.base_key)


@dataclass(frozen=True)
class TrajectoryRunSpec:
    """Which chains ``raw_trajectories`` executes.

    Raises:
        SettingError: (a ValueError) an unknown sampler, named in the message.
    """

    sampler: str = setting(
        DEFAULT_SAMPLER,
        "execute the stored passed chains of this sampler ('topology' or 'random_walk'), as tool_chains.sampler.",
    )

    def __post_init__(self) -> None:
        one_of("raw_trajectories", "sampler", self.sampler, SAMPLERS)


@dataclass(frozen=True)
class DatasetRunSpec:
    """How refined trajectories become ``sft_dataset`` and ``rl_dataset`` rows.

    Raises:
        SettingError: (a ValueError) a share out of [0, 1] or an unknown query source, named in the message.
    """

    sft_share: float = setting(
        PAPER_SFT_SHARE,
        "share (0..1) of trajectories, split by a hash of the trajectory id, that become SFT rows; the rest "
        "become RL rows (default: the paper's 1,622 of 2,575).",
    )
    query_source: str = setting(
        DEFAULT_QUERY_SOURCE,
        "'refined' builds the rows from the refined queries; 'raw' from the queries before refinement (the "
        "refined-vs-raw ablation).",
    )
    name_mask_share: float = setting(
        0.1,
        "share (0..1) of train-split SFT rows, chosen by a hash of the trajectory id, whose tool names are replaced "
        "by neutral tokens (fn_1, fn_2, ...) everywhere in the row, so the model learns to pick a tool by its "
        "description, not its name (function masking, Hammer, arXiv 2410.04587); RL and validation rows keep the "
        "real names; 0 turns masking off.",
    )

    def __post_init__(self) -> None:
        finite_number("datasets", "sft_share", self.sft_share, low=0.0, high=1.0)
        one_of("datasets", "query_source", self.query_source, QUERY_SOURCES)
        finite_number("datasets", "name_mask_share", self.name_mask_share, low=0.0, high=1.0)
