"""The numeric precision of a training (``train.precision``).

``fp32``  everything in float32.
``bf16``  the forward pass under ``torch.autocast`` to bfloat16 (matrix products and
          convolutions; reductions and the loss stay float32). bfloat16 has float32's range, so
          gradients need no scaling.
``fp16``  the same autocast to float16, whose range is narrow: the loss is multiplied by a
          scale before the backward pass and the gradients divided by it before clipping
          (``torch.amp.GradScaler``); a step whose gradients overflowed is skipped and the scale
          halved. The scaler's state is part of a checkpoint, so a resume goes on with its scale.
``auto``  ``bf16`` on CUDA, ``fp32`` on the CPU.

The weights and the optimizer's state stay float32 in every case (autocast casts on the fly),
so a checkpoint or a registered model is the same kind of file whatever the precision.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch

from pipeline_steps.core.settings import PrecisionSetting

Name = Literal["fp32", "bf16", "fp16"]
CHOICES: tuple[str, ...] = get_args(PrecisionSetting)
"""The values of ``train.precision``."""
_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolved(setting: str, device_type: str) -> Name:
    """The precision ``setting`` trains in on a ``device_type`` device (``auto`` decided)."""
    if setting == "auto":
        return "bf16" if device_type == "cuda" else "fp32"
    if setting not in CHOICES:
        raise ValueError(f"train.precision: {setting!r} is not one of {', '.join(CHOICES)}")
    return setting  # type: ignore[return-value]


@dataclass(slots=True)
class Precision:
    """How one training's steps compute: the autocast of its forward passes and, for
    ``fp16``, the loss scaler its backward passes and optimizer steps go through."""

    name: Name
    device_type: str
    scaler: torch.amp.GradScaler | None = None

    @classmethod
    def of(cls, setting: str, device: torch.device) -> Precision:
        """The precision of ``train.precision`` = ``setting`` on ``device``."""
        name = resolved(setting, device.type)
        scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
        return cls(name=name, device_type=device.type, scaler=scaler)

    def autocast(self) -> AbstractContextManager[Any]:
        """The context of a forward pass: autocast to bfloat16 or float16, or none."""
        dtype = _DTYPES.get(self.name)
        return torch.autocast(self.device_type, dtype=dtype, enabled=dtype is not None)

    def backward(self, loss: torch.Tensor) -> None:
        """The backward pass of ``loss``, scaled under ``fp16``."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the accumulated gradients by the loss scale (before they are clipped)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer step: under ``fp16`` skipped when a gradient overflowed, and the
        scale updated."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state for a checkpoint (empty without one)."""
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint's scaler state (one written without a scaler changes nothing)."""
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)


FP32 = Precision(name="fp32", device_type="cpu")
"""Float32 on the CPU: the precision of callers that do not choose one."""
