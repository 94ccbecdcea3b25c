"""The device plan (training/base_model.py) and its wiring into SFT, GRPO, the evaluation policy and configs.

No GPU is needed: what the machine reports (``torch.cuda.is_available`` / ``is_bf16_supported``) is
monkeypatched, and the decision made from it is what is tested.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from envfactory_assets.training.base_model import CPU_PLAN, DevicePlan, select_device

ROOT = Path(__file__).resolve().parents[1]


def _machine(monkeypatch, cuda: bool, bf16: bool = False) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)


@pytest.mark.parametrize(
    "cuda, bf16, prefer, expected",
    [
        (False, False, "auto", CPU_PLAN),
        (False, False, "cpu", CPU_PLAN),
        (True, True, "cpu", CPU_PLAN),
        (True, True, "auto", DevicePlan("cuda", "bfloat16", bf16=True, fp16=False)),
        (True, True, "cuda", DevicePlan("cuda", "bfloat16", bf16=True, fp16=False)),
        (True, False, "auto", DevicePlan("cuda", "float16", bf16=False, fp16=True)),
        (True, False, "cuda", DevicePlan("cuda", "float16", bf16=False, fp16=True)),
    ],
)
def test_the_plan_follows_the_setting_and_the_machine(monkeypatch, cuda, bf16, prefer, expected):
    _machine(monkeypatch, cuda, bf16)
    plan = select_device(prefer)
    assert plan == expected
    assert plan.use_cpu is (plan.device == "cpu")
    assert plan.torch_dtype() == {"cpu": torch.float32, "cuda": torch.bfloat16 if bf16 else torch.float16}[plan.device]


def test_cuda_is_refused_without_a_device_naming_the_setting(monkeypatch):
    _machine(monkeypatch, cuda=False)
    with pytest.raises(ValueError, match=r"checkpoint setting device='cuda'.*no CUDA device"):
        select_device("cuda", "checkpoint setting device")
    with pytest.raises(ValueError, match=r"device='gpu'.*auto, cpu, cpu_bf16, cuda"):
        select_device("gpu")


def test_specs_refuse_an_unknown_device_value():
    from envfactory_assets.evaluation.model_policy import SamplingSpec
    from envfactory_assets.training.grpo import GRPOConfigSpec
    from envfactory_assets.training.sft import SFTConfigSpec

    for make, named in (
        (SFTConfigSpec, "device="),
        (GRPOConfigSpec, "device="),
        (SamplingSpec, "sampling setting device="),
    ):
        with pytest.raises(ValueError, match=named):
            make(device="tpu")


def test_the_trl_configs_carry_the_plans_precision(monkeypatch, tmp_path):
    """A CUDA plan turns on bf16 mixed precision and off ``use_cpu``; the CPU plan builds a real SFTConfig /
    GRPOConfig that trains in float32 on the CPU (a CUDA config cannot be constructed without a device: it
    initialises it, so its keyword arguments are checked against the config's fields instead)."""
    import dataclasses

    from trl import GRPOConfig, SFTConfig

    from envfactory_assets.training import grpo, sft

    _machine(monkeypatch, cuda=True, bf16=True)
    for module, spec, config_class in (
        (sft, sft.SFTConfigSpec(), SFTConfig),
        (grpo, grpo.GRPOConfigSpec(), GRPOConfig),
    ):
        kwargs = module.trl_config_kwargs(tmp_path, spec)  # device "auto" on a (patched) bf16 GPU
        assert (kwargs["bf16"], kwargs["fp16"], kwargs["use_cpu"]) == (True, False, False)
        assert set(kwargs) <= {f.name for f in dataclasses.fields(config_class)}
        half = module.trl_config_kwargs(tmp_path, spec, DevicePlan("cuda", "float16", bf16=False, fp16=True))
        assert (half["bf16"], half["fp16"]) == (False, True)
    _machine(monkeypatch, cuda=False)
    for module, spec in ((sft, sft.SFTConfigSpec()), (grpo, grpo.GRPOConfigSpec())):
        built = module._trl_config(tmp_path, spec)
        assert (built.bf16, built.fp16, built.use_cpu) == (False, False, True)


def test_the_checkpoints_and_evaluations_configs_take_the_device_from_the_specs(monkeypatch):
    from envfactory_assets.defs.evaluation.assets import EvaluationConfig
    from envfactory_assets.defs.training.assets import CheckpointConfig
    from envfactory_assets.evaluation.model_policy import SamplingSpec
    from envfactory_assets.training.sft import SFTConfigSpec

    assert CheckpointConfig().device == SFTConfigSpec.device == "auto"
    assert EvaluationConfig().device == SamplingSpec.device == "auto"
    sft, grpo = CheckpointConfig(device="cpu").validate()
    assert sft.device == grpo.device == "cpu"
    _machine(monkeypatch, cuda=False)
    with pytest.raises(ValueError, match="checkpoint setting device='cuda'"):
        CheckpointConfig(device="cuda").validate()


@pytest.mark.parametrize(
    "asset, named",
    [("checkpoints", "checkpoint setting device='cuda'"), ("evaluations", "evaluation setting device='cuda'")],
)
def test_the_assets_refuse_cuda_without_a_device_before_reading_the_store(tmp_path, asset, named):
    """The home has no store: the failure must be the setting, raised before the store or a model is read."""
    from envfactory_assets.defs.evaluation.assets import evaluations
    from envfactory_assets.defs.training.assets import checkpoints
    from envfactory_assets_tests.config_failures import step_failure

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: 'cuda' is a valid setting here")
    success, message = step_failure(
        {"checkpoints": checkpoints, "evaluations": evaluations}[asset], {"device": "cuda"}, tmp_path
    )
    assert not success and named in message and "no CUDA device" in message
    assert "does not exist" not in message and not (tmp_path / "models").exists()


def test_the_gpu_config_loads_and_validates_through_the_run_config_loader():
    from envfactory_assets.cli import _load_run_config
    from envfactory_assets.defs.evaluation.assets import EvaluationConfig
    from envfactory_assets.defs.training.assets import CheckpointConfig

    data = _load_run_config(str(ROOT / "configs" / "gpu.yaml"))
    checkpoints = CheckpointConfig(**data["ops"]["checkpoints"]["config"])
    sft, grpo = checkpoints.validate()
    evaluations = EvaluationConfig(**data["ops"]["evaluations"]["config"])
    cpu = _load_run_config(str(ROOT / "configs" / "cpu_benchmark.yaml"))["ops"]
    # larger than the CPU benchmark where it costs GPU time; evaluation sizes at least the CPU benchmark's
    assert sft.max_steps > cpu["checkpoints"]["config"]["max_steps"]
    assert checkpoints.max_train_rows > cpu["checkpoints"]["config"]["max_train_rows"]
    assert grpo.max_steps > cpu["checkpoints"]["config"]["grpo_max_steps"]
    assert grpo.num_generations == 8 and sft.device == grpo.device == evaluations.device == "auto"
    for key in ("n_synthetic", "n_bfcl_single_turn"):
        assert getattr(evaluations, key) >= cpu["evaluations"]["config"][key]
    assert checkpoints.base_model == evaluations.base_model != CheckpointConfig().base_model


def test_policy_on_the_cpu_keeps_float32_weights_and_generates(base_model_dir):
    from envfactory_assets.evaluation.model_policy import Policy, SamplingSpec

    base = base_model_dir
    policy = Policy(base, SamplingSpec(temperature=0, max_new_tokens=3, batch_size=2, device="cpu"), num_threads=1)
    assert policy.plan == CPU_PLAN
    assert policy.model.device.type == "cpu" and policy.model.dtype == torch.float32
    texts = policy.generate(
        [([{"role": "user", "content": "Hi"}], []), ([{"role": "user", "content": "Hello"}], [])], seed=0
    )
    assert len(texts) == 2 and policy.generated_tokens > 0


def test_the_base_model_result_cache_keys_on_the_device_the_setting_resolves_to(monkeypatch):
    """``device: auto`` on a GPU machine generates in bf16 and on a CPU in float32: texts differ, so a cached
    base-model result must not cross machines; ``auto`` and ``cpu`` on the same CPU machine are one entry."""
    from envfactory_assets.evaluation.model_policy import SamplingSpec
    from envfactory_assets.evaluation.run import EvalSpec, ResultCache

    def key(device: str) -> str:
        return ResultCache.key("weights", "synthetic_held_out", [], EvalSpec(sampling=SamplingSpec(device=device)), 0)

    _machine(monkeypatch, cuda=False)
    on_cpu = key("auto")
    assert on_cpu == key("cpu")
    _machine(monkeypatch, cuda=True, bf16=True)
    on_gpu = key("auto")
    assert on_gpu != on_cpu and on_gpu == key("cuda")
    _machine(monkeypatch, cuda=True, bf16=False)
    assert key("auto") not in (on_cpu, on_gpu)  # fp16 is another precision again


def test_native_bf16_flags_are_read_from_the_cpuinfo_flags_line(tmp_path):
    from envfactory_assets.training.base_model import cpu_bf16_flags

    zen4 = tmp_path / "zen4"
    zen4.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 fma\n\n")
    older = tmp_path / "older"
    older.write_text(
        "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\nbugs\t\t: avx512_bf16_is_not_a_flag_here\n"
    )
    assert cpu_bf16_flags(zen4) == {"avx512_bf16"}
    assert cpu_bf16_flags(older) == frozenset()
    assert cpu_bf16_flags(tmp_path / "missing") == frozenset()


def test_cpu_bf16_is_refused_on_a_cpu_without_native_bf16_and_never_chosen_by_auto(monkeypatch):
    from envfactory_assets.training import base_model

    _machine(monkeypatch, cuda=False)
    monkeypatch.setattr(base_model, "cpu_bf16_flags", lambda *a: frozenset())
    with pytest.raises(
        ValueError, match=r"checkpoint setting device='cpu_bf16'.*avx512_bf16.*set checkpoint setting device: cpu"
    ):
        select_device("cpu_bf16", "checkpoint setting device")
    monkeypatch.setattr(base_model, "cpu_bf16_flags", lambda *a: frozenset({"amx_bf16"}))
    assert select_device("auto") == CPU_PLAN  # auto keeps the CPU in float32 on any CPU
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("this torch has no oneDNN bf16 kernels")
    plan = select_device("cpu_bf16")
    assert plan == base_model.CPU_BF16_PLAN and plan.use_cpu and plan.torch_dtype() == torch.bfloat16


def test_cpu_bf16_results_never_share_a_cache_entry_with_float32(monkeypatch):
    from envfactory_assets.evaluation.model_policy import SamplingSpec
    from envfactory_assets.evaluation.run import EvalSpec, ResultCache
    from envfactory_assets.training import base_model

    monkeypatch.setattr(base_model, "cpu_bf16_flags", lambda *a: frozenset({"avx512_bf16"}))
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("this torch has no oneDNN bf16 kernels")

    def key(device: str) -> str:
        return ResultCache.key("weights", "synthetic_held_out", [], EvalSpec(sampling=SamplingSpec(device=device)), 0)

    assert key("cpu_bf16") != key("cpu")


def _native_bf16() -> bool:
    from envfactory_assets.training.base_model import cpu_bf16_flags

    return bool(cpu_bf16_flags()) and torch.ops.mkldnn._is_mkldnn_bf16_supported()


@pytest.mark.skipif(not _native_bf16(), reason="this CPU has no native bf16 instructions")
def test_cpu_bf16_trains_float32_weights_under_bf16_autocast_and_generates_in_bf16(one_layer_model_dir, tmp_path):
    """On a CPU with native bf16: an SFT step under ``cpu_bf16`` runs in bf16 autocast (the TRL config says so),
    gives a finite loss, and saves float32 weights that moved; the policy then loads them in bf16 and
    generates."""
    from transformers import AutoModelForCausalLM

    from envfactory_assets.evaluation.model_policy import Policy, SamplingSpec
    from envfactory_assets.training import sft
    from envfactory_assets_tests.test_training_sft import crm_row

    spec = sft.SFTConfigSpec(max_steps=2, per_device_train_batch_size=2, max_length=512, device="cpu_bf16")
    built = sft._trl_config(tmp_path / "trainer", spec)
    assert (built.bf16, built.fp16, built.use_cpu) == (True, False, True)
    metrics = sft.train_sft([crm_row(i) for i in range(4)], one_layer_model_dir, tmp_path / "sft", spec)
    assert metrics["steps"] == 2 and math.isfinite(metrics["train_loss"])
    assert metrics["dtype"] == "bfloat16" and metrics["bf16"] is True
    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "sft")
    before = AutoModelForCausalLM.from_pretrained(one_layer_model_dir)
    assert trained.dtype == torch.float32
    assert any(not torch.equal(a, b) for a, b in zip(trained.parameters(), before.parameters(), strict=True))
    policy = Policy(tmp_path / "sft", SamplingSpec(temperature=0, max_new_tokens=3, device="cpu_bf16"), num_threads=1)
    assert policy.model.dtype == torch.bfloat16
    assert len(policy.generate([([{"role": "user", "content": "Hi"}], [])], seed=0)) == 1
