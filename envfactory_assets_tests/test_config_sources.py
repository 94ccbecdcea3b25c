"""Every config value has one source: a Dagster Config under ``defs/`` is built from plain specs and takes each
field's default from the spec, and the spec's ``__post_init__`` is the only place its limits are checked (the
Dagster config reports an algorithm spec's refusal under the asset's name)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import pkgutil

import dagster as dg
import pytest

import envfactory_assets.defs as defs_package
from envfactory_assets.ablations.plan import AblationSynthesisSpec
from envfactory_assets.config_checks import SettingError
from envfactory_assets.config_schema import REQUIRED
from envfactory_assets.envgen.run_settings import EnvironmentRunSpec, VerificationRunSpec
from envfactory_assets.evaluation.model_policy import SamplingSpec
from envfactory_assets.evaluation.run import EvalSpec
from envfactory_assets.evaluation.run_settings import EvaluationRunSpec
from envfactory_assets.exports.run_settings import ExportRunSpec
from envfactory_assets.graph.run_settings import ToolGraphRunSpec
from envfactory_assets.sources.run_settings import SourceRunSpec
from envfactory_assets.synth.datasets.datagaps import DataGapsConfig
from envfactory_assets.synth.refinement.calibrate import CalibrationConfig
from envfactory_assets.synth.run_settings import ChainRunSpec, DatasetRunSpec, TrajectoryRunSpec
from envfactory_assets.synth.sampling.sampler import SamplerConfig
from envfactory_assets.synth.trajectories.execution import SynthConfig
from envfactory_assets.training.checkpoint_settings import CheckpointRunSpec
from envfactory_assets.training.grpo import GRPOConfigSpec
from envfactory_assets.training.sft import SFTConfigSpec
from envfactory_assets.viewer import ShowTrajectorySpec

#: Dagster Config class name -> the plain specs it is built from, each with the prefix its fields carry there.
SPECS = {
    "SourceConfig": [(SourceRunSpec, "")],
    "EnvironmentsConfig": [(EnvironmentRunSpec, "")],
    "VerificationConfig": [(VerificationRunSpec, "")],
    "ToolGraphConfig": [(ToolGraphRunSpec, "")],
    "ChainsConfig": [(ChainRunSpec, ""), (SamplerConfig, "")],
    "TrajectoryConfig": [(TrajectoryRunSpec, ""), (SynthConfig, "")],
    "RefineConfig": [(CalibrationConfig, "")],
    "DatasetConfig": [(DatasetRunSpec, ""), (DataGapsConfig, "")],
    "CheckpointConfig": [(CheckpointRunSpec, ""), (SFTConfigSpec, ""), (GRPOConfigSpec, "grpo_")],
    "EvaluationConfig": [(EvaluationRunSpec, ""), (EvalSpec, ""), (SamplingSpec, "")],
    "ExportConfig": [(ExportRunSpec, "")],
    "ShowTrajectoryConfig": [(ShowTrajectorySpec, "")],
    "AblationDataConfig": [(AblationSynthesisSpec, "")],
}


def dagster_configs() -> dict[str, type[dg.Config]]:
    """Every ``dg.Config`` subclass (run config, not resources) defined in a module under
    ``envfactory_assets/defs``."""
    found: dict[str, type[dg.Config]] = {}
    for info in pkgutil.walk_packages(defs_package.__path__, defs_package.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, dg.Config)
                and obj.__module__ == module.__name__
                and not issubclass(obj, dg.ConfigurableResource)
            ):
                found[name] = obj
    return found


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def spec_defaults(spec: type) -> dict[str, object]:
    """Each field's default (:data:`REQUIRED` for a field without one)."""
    out = {}
    for field in dataclasses.fields(spec):
        if field.default is not dataclasses.MISSING:
            out[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            out[field.name] = field.default_factory()
        else:
            out[field.name] = REQUIRED
    return out


def test_every_dagster_config_is_classified():
    """A new Config under defs/ must say which spec it is built from (or that none is): otherwise its
    defaults could silently restate a spec's."""
    configs = set(dagster_configs())
    assert configs, "no Dagster Config found under defs/"
    assert configs == set(SPECS), (configs - set(SPECS), set(SPECS) - configs)


@pytest.mark.parametrize("config_name", sorted(SPECS))
def test_a_config_field_named_like_its_specs_field_has_the_specs_default(config_name):
    config = dagster_configs()[config_name]
    fields = config.model_fields
    for spec, prefix in SPECS[config_name]:
        shared = {name: default for name, default in spec_defaults(spec).items() if prefix + name in fields}
        assert shared, f"{config_name} shares no field with {spec.__name__}: the mapping above is stale"
        for name, default in shared.items():
            if default is REQUIRED:
                assert fields[prefix + name].is_required(), f"{config_name}.{prefix}{name} should be required"
                continue
            assert _same(fields[prefix + name].default, default), (
                f"{config_name}.{prefix}{name} defaults to {fields[prefix + name].default!r}, "
                f"{spec.__name__}.{name} to {default!r}: take it from the spec"
            )


@pytest.mark.parametrize(
    "build, expected, renamed",
    [
        (
            lambda: SamplerConfig(min_tools=20),
            "sampler setting min_tools=20: expected a whole number in [1, 15]",
            "tool_chains setting x_min_tools=20: expected a whole number in [1, 15]",
        ),
        (
            lambda: SynthConfig(max_turn_len=0),
            "trajectory setting max_turn_len=0: expected a whole number >= 1",
            "tool_chains setting x_max_turn_len=0: expected a whole number >= 1",
        ),
        (
            lambda: CalibrationConfig(k=0),
            "calibration setting k=0: expected a whole number >= 1",
            "tool_chains setting x_k=0: expected a whole number >= 1",
        ),
    ],
)
def test_a_spec_refusal_names_the_spec_and_can_be_named_for_a_config(build, expected, renamed):
    """Built directly, a spec names itself; a Dagster config renames the same refusal (owner and prefix)."""
    with pytest.raises(SettingError) as caught:
        build()
    assert str(caught.value) == expected
    assert str(caught.value.for_owner("tool_chains", prefix="x_")) == renamed
    assert str(SettingError("free text").for_owner("datasets")) == "datasets: free text"


def test_the_dagster_configs_check_through_their_specs():
    from envfactory_assets.defs.synth.assets import ChainsConfig, RefineConfig, TrajectoryConfig

    with pytest.raises(SettingError, match=r"^tool_chains setting max_depth=-1: expected a whole number >= 0$"):
        ChainsConfig(max_depth=-1).check_settings()
    with pytest.raises(SettingError, match=r"^raw_trajectories setting min_turns=0: expected a whole number >= 1$"):
        TrajectoryConfig(min_turns=0).check_settings()
    with pytest.raises(SettingError, match=r"^refined_trajectories setting conversational_share=2.0: "):
        RefineConfig(conversational_share=2.0).check_settings()
    assert ChainsConfig().check_settings() == (ChainRunSpec(), SamplerConfig())
    assert RefineConfig().check_settings() == CalibrationConfig()
    assert TrajectoryConfig().check_settings() == (TrajectoryRunSpec(), SynthConfig())


#: (config, spec field with its prefix) a Dagster config leaves unset on purpose, and why.
NOT_EXPOSED = {
    ("CheckpointConfig", "gradient_accumulation_steps"): "one micro-batch per step; set it in SFTConfigSpec",
    ("CheckpointConfig", "grpo_seed"): "GRPO takes the checkpoint run's seed",
    ("CheckpointConfig", "grpo_device"): "GRPO takes the checkpoint run's device",
    ("EvaluationConfig", "sampling"): "built from the sampling fields below",
    ("EvaluationConfig", "top_p"): "off (1.0) in every benchmark config",
    ("EvaluationConfig", "max_prompt_tokens"): "the prompt cut of the CPU budget; set it in SamplingSpec",
    ("ChainsConfig", "max_start_attempts"): "the sampler's internal search budget",
    ("ChainsConfig", "max_producer_candidates"): "the sampler's internal search budget",
}


@pytest.mark.parametrize("config_name", sorted(SPECS))
def test_every_spec_field_is_settable_from_its_dagster_config_or_listed_as_not_exposed(config_name):
    """A field added to a spec but not to the asset's config cannot be set from run config; every test would
    still pass. So each spec field is either a config field (with the spec's prefix) or listed above."""
    fields = dagster_configs()[config_name].model_fields
    missing = {
        (config_name, prefix + f.name)
        for spec, prefix in SPECS[config_name]
        for f in dataclasses.fields(spec)
        if prefix + f.name not in fields
    }
    listed = {key for key in NOT_EXPOSED if key[0] == config_name}
    assert missing == listed, (
        f"not settable and not listed: {sorted(missing - listed)}; listed but now settable: {sorted(listed - missing)}"
    )


def test_the_checkpoint_config_maps_every_grpo_field_but_the_shared_seed_and_device():
    from envfactory_assets.defs.training.assets import CheckpointConfig

    spec_fields = {f.name for f in dataclasses.fields(GRPOConfigSpec)} - {"seed", "device"}
    assert {f"grpo_{n}" for n in spec_fields} <= set(CheckpointConfig.model_fields)
    changed = CheckpointConfig(grpo_temperature=0.3, grpo_beta=0.01, grpo_replay_screened=True, seed=5)
    assert changed.grpo_spec() == GRPOConfigSpec(temperature=0.3, beta=0.01, replay_screened=True, seed=5)
    assert CheckpointConfig().grpo_spec() == GRPOConfigSpec()
    assert CheckpointConfig(device="cpu").grpo_spec().device == "cpu"  # one device setting for SFT and GRPO


@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda: ChainRunSpec(n_chains=0), "tool_chains setting n_chains=0: expected a whole number >= 1"),
        (lambda: ChainRunSpec(base_key=" "), "tool_chains setting base_key=' ': expected a non-blank string"),
        (
            lambda: TrajectoryRunSpec(sampler="bfs"),
            "raw_trajectories setting sampler='bfs': expected one of 'topology', 'random_walk'",
        ),
        (lambda: DatasetRunSpec(sft_share=1.5), "datasets setting sft_share=1.5: expected a finite number in [0, 1]"),
        (
            lambda: ToolGraphRunSpec(picture_nodes=0),
            "tool_graph setting picture_nodes=0: expected a whole number in [1, 200]",
        ),
        (
            lambda: VerificationRunSpec(max_workers=0),
            "verified_environments setting max_workers=0: expected a whole number >= 1",
        ),
        (lambda: SourceRunSpec(per_domain=-3), "source_resources setting per_domain=-3: expected a whole number >= 0"),
        (
            lambda: ShowTrajectorySpec(trajectory_id="  "),
            "show_trajectory setting trajectory_id='  ': expected a non-blank string (a trajectory id)",
        ),
    ],
)
def test_a_run_spec_refuses_a_bad_setting_under_its_assets_name(build, expected):
    """The settings no algorithm spec holds are checked by the asset's own run spec, built directly too."""
    with pytest.raises(SettingError) as caught:
        build()
    assert str(caught.value) == expected


def test_a_config_builds_its_specs_field_by_field():
    """Lists in the run config become the spec's tuples, and every spec field is taken from the config."""
    from envfactory_assets.defs.sources.assets import SourceConfig
    from envfactory_assets.defs.synth.assets import ChainsConfig

    spec = SourceConfig(include=["a_key"], domains=["productivity"]).check_settings()
    assert spec == SourceRunSpec(include=("a_key",), domains=("productivity",))
    assert SourceConfig().check_settings() == SourceRunSpec()
    run, changed = ChainsConfig(p_linked_start=0.25, max_tools=9, min_tools=4, n_chains=7).check_settings()
    assert changed == SamplerConfig(p_linked_start=0.25, max_tools=9, min_tools=4)
    assert run == ChainRunSpec(n_chains=7)
