"""Where training and generation run: the one decision of device and precision (plain Python, no Dagster).

Every model-loading path (SFT, GRPO, the checkpoints' validity pass, the evaluation policy) asks
:func:`select_device` and follows its :class:`DevicePlan`, so a CUDA machine uses its GPU with the same assets
and configs, and the CPU run stays float32 exactly as before.

Precision: bf16 where the device supports it (Ampere and later), else fp16; float32 on the CPU. Training keeps
float32 master weights and lets the HF ``Trainer`` autocast (its ``bf16``/``fp16`` mixed-precision flags, with a
gradient scaler for fp16), because optimizer updates of a small learning rate vanish in 16-bit weights;
generation loads the weights directly in the 16-bit type (half the memory, no accuracy loss that matters for
sampling).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from envfactory_assets.training.base_model import cuda_available

DeviceSetting = Literal["auto", "cpu", "cuda"]
DEVICE_SETTINGS = ("auto", "cpu", "cuda")
"""Accepted values of the ``device`` setting of the training and evaluation specs."""


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


def check_device_setting(value: Any, setting: str = "device") -> None:
    """Raise ValueError naming ``setting`` when ``value`` is not one of :data:`DEVICE_SETTINGS`."""
    if value not in DEVICE_SETTINGS:
        raise ValueError(f"{setting}={value!r}: expected one of {', '.join(DEVICE_SETTINGS)}")


def select_device(prefer: str = "auto", setting: str = "device") -> DevicePlan:
    """Resolve a ``device`` setting to a :class:`DevicePlan`.

    Args:
        prefer: ``"auto"`` (CUDA when ``torch.cuda.is_available()``, else the CPU), ``"cpu"`` or ``"cuda"``.
        setting: the setting's name as the user wrote it, for the error message.

    Returns:
        On the CPU: float32, no mixed precision. On CUDA: bfloat16 and ``bf16`` when
        ``torch.cuda.is_bf16_supported()``, else float16 and ``fp16``.

    Raises:
        ValueError: ``prefer`` is not auto/cpu/cuda, or is ``"cuda"`` while no CUDA device is visible.
    """
    check_device_setting(prefer, setting)
    if prefer == "cpu":
        return CPU_PLAN
    import torch

    if not cuda_available():
        if prefer == "cuda":
            raise ValueError(f"{setting}='cuda' but torch sees no CUDA device (torch.cuda.is_available() is "
                             f"False; torch {torch.__version__}); set {setting}: auto or cpu")
        return CPU_PLAN
    if torch.cuda.is_bf16_supported():
        return DevicePlan("cuda", "bfloat16", bf16=True, fp16=False)
    return DevicePlan("cuda", "float16", bf16=False, fp16=True)
