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

from envfactory_assets.config_schema import Source, config_drift, settings_of
from envfactory_assets.defs.config_docs import configuration_markdown
from envfactory_assets.defs.evaluation.assets import EVALUATION_SOURCES, EvaluationConfig
from envfactory_assets.defs.training.assets import CHECKPOINT_SOURCES, CheckpointConfig
from envfactory_assets.training.sft import SFTConfigSpec

ROOT = Path(__file__).resolve().parents[1]
GENERATED = [(CheckpointConfig, CHECKPOINT_SOURCES), (EvaluationConfig, EVALUATION_SOURCES)]


@pytest.mark.parametrize("config, sources", GENERATED, ids=lambda x: getattr(x, "__name__", ""))
def test_a_generated_run_config_matches_its_settings_dataclasses(config, sources):
    expected = settings_of(*sources)
    assert config_drift(config.model_fields, expected) == []
    assert all(s.help.strip() for s in expected)
    # the Dagster schema carries the help text as each field's description (shown in the UI)
    schema = config.to_config_schema().as_field().config_type.fields
    assert schema["max_steps" if config is CheckpointConfig else "n_bfcl"].description == next(
        s.help for s in expected if s.name in ("max_steps", "n_bfcl")
    )


def test_the_checker_rejects_a_hand_made_drift_in_name_type_default_and_help():
    """A hand-copied mirror of SFTConfigSpec that drifted, the way the old CheckpointConfig could."""
    expected = settings_of(Source(SFTConfigSpec, skip=("gradient_accumulation_steps",)))
    fields = {s.name: (s.annotation, pydantic.Field(default=s.default, description=s.help)) for s in expected}
    fields["max_steps"] = (int, pydantic.Field(default=12, description=fields["max_steps"][1].description))
    fields["learning_rate"] = (str, pydantic.Field(default=5e-5, description=fields["learning_rate"][1].description))
    fields["seed"] = (int, pydantic.Field(default=0, description="a seed"))
    del fields["device"]
    fields["max_len"] = (int, pydantic.Field(default=1024, description="renamed"))
    drifted = pydantic.create_model("DriftedConfig", __base__=dg.Config, **fields)

    problems = config_drift(drifted.model_fields, expected)
    assert problems == [
        "max_len: in the run config but stated by no settings dataclass",
        "max_steps: default 12, SFTConfigSpec.max_steps says 24",
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
    if asset == "checkpoints":
        CheckpointConfig(**settings).validate()
    elif asset == "evaluations":
        EvaluationConfig(**settings).eval_spec()
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
