"""Each setting is stated once: the generated run configs match the settings dataclasses field by field, the
checker rejects a hand-made drift, docs/configuration.md is what the generator writes, and every file in
configs/ passes the checks a run applies."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import dagster as dg
import pydantic
import pytest
import yaml

from envfactory_assets.ablations.plan import AblationSynthesisSpec
from envfactory_assets.config_checks import setting
from envfactory_assets.config_schema import REQUIRED, Source, config_drift, settings_of
from envfactory_assets.defs.ablations.assets import AblationDataConfig
from envfactory_assets.defs.config_docs import RUN_CONFIGS, configuration_markdown, run_config_class
from envfactory_assets.defs.config_fields import generated_config, sources_of
from envfactory_assets.defs.envgen.assets import EnvironmentsConfig
from envfactory_assets.defs.evaluation.assets import EvaluationConfig
from envfactory_assets.defs.sources.assets import SourceConfig
from envfactory_assets.defs.synth.assets import CHAIN_SOURCES, ChainsConfig, TrajectoryConfig
from envfactory_assets.defs.training.assets import CheckpointConfig
from envfactory_assets.defs.viewer.jobs import ShowTrajectoryConfig
from envfactory_assets.training.sft import SFTConfigSpec
from envfactory_assets_tests.test_config_sources import dagster_configs

ROOT = Path(__file__).resolve().parents[1]
RUN_CONFIG_CLASSES = [run_config_class(path) for _, path in RUN_CONFIGS]


def test_every_run_config_under_defs_is_documented():
    """docs/configuration.md lists every run config an asset or job of defs/ takes."""
    assert {c.__name__ for c in RUN_CONFIG_CLASSES} == set(dagster_configs())
    assert len(RUN_CONFIG_CLASSES) == 13


@pytest.mark.parametrize("config", RUN_CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_every_run_config_is_generated_from_its_settings_dataclasses(config):
    """No run config states a setting itself: each is generated from settings dataclasses, and each of its
    fields (name, type, default, help) is exactly one a dataclass states, so a hand-written field added to it
    (stated by no dataclass) fails here."""
    sources = sources_of(config)
    assert sources, f"{config.__name__} is hand-written: generate it with generated_config from its specs"
    expected = settings_of(*sources)
    assert config_drift(config.model_fields, expected) == []
    assert all(s.help.strip() for s in expected)
    # the Dagster schema carries the help text as each field's description (shown in the UI)
    schema = config.to_config_schema().as_field().config_type.fields
    assert {name: field.description for name, field in schema.items()} == {s.name: s.help for s in expected}


def test_a_hand_written_field_on_a_generated_config_is_caught():
    """The way a setting could be restated: a field typed into the subclass that builds the specs."""

    class Patched(ChainsConfig):
        n_chains: int = 50
        extra_knob: float = 0.5

    problems = config_drift(Patched.model_fields, settings_of(*sources_of(Patched)))
    assert problems == [
        "extra_knob: in the run config but stated by no settings dataclass",
        "n_chains: default 50, ChainRunSpec.n_chains says 3000",
        f"n_chains: help None, ChainRunSpec.n_chains says {settings_of(CHAIN_SOURCES[0])[0].help!r}",
    ]
    assert sources_of(dg.Config) is None  # a config written by hand has no sources to compare with


def test_a_required_setting_is_required_in_the_run_config():
    @dataclasses.dataclass(frozen=True)
    class Pick:
        item: str = setting(help="which item.", required=True)
        count: int = setting(2, "how many.")

    (item, count) = settings_of(Source(Pick))
    assert item.default is REQUIRED and count.default == 2
    config = generated_config("PickSettings", Source(Pick))
    assert config.model_fields["item"].is_required() and config(item="a").count == 2
    assert config_drift(config.model_fields, [item, count]) == []
    loose = pydantic.create_model(
        "Loose", __base__=dg.Config, item=(str, pydantic.Field(default="", description="which item."))
    )
    assert config_drift(loose.model_fields, [item]) == ["item: default '', Pick.item says required"]
    assert ShowTrajectoryConfig.model_fields["trajectory_id"].is_required()
    with pytest.raises(ValueError, match="exactly one of default, factory and required"):
        setting(1, "both a default and required.", required=True)


def test_the_checker_rejects_a_hand_made_drift_in_name_type_default_and_help():
    """A hand-copied mirror of SFTConfigSpec that drifted, the way the old CheckpointConfig could."""
    expected = settings_of(Source(SFTConfigSpec, skip=("gradient_accumulation_steps",)))
    fields = {s.name: (s.annotation, pydantic.Field(default=s.default, description=s.help)) for s in expected}
    fields["max_steps"] = (int, pydantic.Field(default=12, description=fields["max_steps"][1].description))
    fields["learning_rate"] = (
        str,
        pydantic.Field(default=SFTConfigSpec().learning_rate, description=fields["learning_rate"][1].description),
    )
    fields["seed"] = (int, pydantic.Field(default=0, description="a seed"))
    del fields["device"]
    fields["max_len"] = (int, pydantic.Field(default=1024, description="renamed"))
    drifted = pydantic.create_model("DriftedConfig", __base__=dg.Config, **fields)

    problems = config_drift(drifted.model_fields, expected)
    assert problems == [
        "max_len: in the run config but stated by no settings dataclass",
        f"max_steps: default 12, SFTConfigSpec.max_steps says {SFTConfigSpec().max_steps}",
        "learning_rate: type <class 'str'>, SFTConfigSpec.learning_rate says <class 'float'>",
        f"seed: help 'a seed', SFTConfigSpec.seed says {expected[5].help!r}",
        "device: stated by SFTConfigSpec.device but missing from the run config",
    ]
    undrifted = pydantic.create_model(
        "Undrifted",
        __base__=dg.Config,
        **{s.name: (s.annotation, pydantic.Field(default=s.default, description=s.help)) for s in expected},
    )
    assert config_drift(undrifted.model_fields, expected) == []


def test_a_setting_without_help_or_with_an_unknown_skip_is_refused():
    @dataclasses.dataclass
    class Bare:
        n: int = 3

    with pytest.raises(KeyError, match="Bare.n has no help text"):
        settings_of(Source(Bare))
    with pytest.raises(KeyError, match="no fields"):
        settings_of(Source(SFTConfigSpec, skip=("max_stepz",)))


def test_docs_configuration_md_is_what_the_generator_writes():
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == configuration_markdown(), (
        "docs/configuration.md is stale: run `envfactory config-docs --output docs/configuration.md`"
    )
    for name, info in CheckpointConfig.model_fields.items():
        assert f"| `{name}` |" in committed and " ".join(info.description.split()) in committed


def _checked(asset: str, settings: dict) -> None:
    """What a run does with an op's config before it reads anything: Dagster's type check of the run config
    (pydantic), then the asset's own range checks."""
    if asset in ("checkpoints", "ablation_checkpoint"):
        CheckpointConfig(**settings).validate()
    elif asset in ("evaluations", "ablation_evaluation"):
        EvaluationConfig(**settings).eval_spec()
    elif asset == "ablation_data":
        AblationSynthesisSpec(**AblationDataConfig(**settings).model_dump()).run_config()
    elif asset == "source_resources":
        SourceConfig(**settings).check_settings()
    elif asset == "environments":
        EnvironmentsConfig(**settings).check_settings()
    elif asset == "tool_chains":
        ChainsConfig(**settings).check_settings()
    elif asset == "raw_trajectories":
        TrajectoryConfig(**settings).check_settings()
    else:
        raise AssertionError(f"configs/ sets {asset}, which this test does not check yet")


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_file_passes_the_checks_a_run_applies(path):
    data = yaml.safe_load(path.read_text())
    ops = data["ops"]
    assert ops
    for asset, body in ops.items():
        _checked(asset, body["config"])


def test_the_checks_do_refuse_a_bad_config_file_value():
    with pytest.raises(ValueError, match=r"^checkpoint setting grpo_num_generations=1: expected a whole number >= 2"):
        _checked("checkpoints", {"grpo_num_generations": 1})
    with pytest.raises(pydantic.ValidationError):
        _checked("evaluations", {"n_bfcl": "two"})


def test_a_task_draw_reaches_the_evaluation_and_is_refused_with_full_sets():
    assert EvaluationConfig(task_draw=2).eval_spec().task_draw == 2
    with pytest.raises(ValueError, match="full_sets: true and task_draw: 1"):
        EvaluationConfig(full_sets=True, task_draw=1).eval_spec()
    with pytest.raises(ValueError, match="task_draw"):
        EvaluationConfig(task_draw=-1).eval_spec()
