"""``train.precision``: what ``auto`` means on each device, and the combination refused."""

import pytest
import torch

from pipeline_steps.core.settings import SettingsError, TrainSettings
from pipeline_steps.steps.train.precision import Precision, resolved


def test_auto_is_bf16_on_cuda_and_fp32_on_the_cpu() -> None:
    assert resolved("auto", "cuda") == "bf16" and resolved("auto", "cpu") == "fp32"
    assert resolved("fp16", "cpu") == "fp16"


def test_fp16_with_fsdp_is_refused_naming_the_setting() -> None:
    with pytest.raises(SettingsError, match=r"train\.precision: fp16 .* fsdp"):
        TrainSettings(precision="fp16", strategy="fsdp")
    assert TrainSettings(precision="bf16", strategy="fsdp").precision == "bf16"


def test_only_fp16_has_a_loss_scaler_and_its_state_round_trips() -> None:
    cpu = torch.device("cpu")
    assert Precision.of("bf16", cpu).scaler is None and Precision.of("bf16", cpu).state_dict() == {}
    fp16 = Precision.of("fp16", cpu)
    state = fp16.state_dict()
    assert state["scale"] == 2.0**16
    other = Precision.of("fp16", cpu)
    other.load_state_dict({**state, "scale": 1024.0})
    assert other.state_dict()["scale"] == 1024.0
