"""A GPU's compute mode as NVML gives it (`nvmlDeviceGetComputeMode`, nvml.h's `nvmlComputeMode_t`),
and `unknown` where it does not: never read as `default`, never set."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from better_compute.bcd.fake import FakeNode
from better_compute.bcd.gpu import COMPUTE_MODES, UNKNOWN_COMPUTE_MODE, ComputeModeRefused
from better_compute.bcd.nvml import NvmlBackend
from tests.bcd.pynvml_stub import StubNvml, h100


def test_each_compute_mode_nvml_documents_is_read_by_its_name(tmp_path: Path) -> None:
    stub = StubNvml([h100(0, compute_mode=0), h100(1, compute_mode=2), h100(2, compute_mode=3)])
    backend = NvmlBackend(stub.module, sysfs=tmp_path)
    assert [g.compute_mode for g in backend.list_gpus()] == ["default", "prohibited", "exclusive-process"]


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_UNKNOWN]
)
def test_a_compute_mode_nvml_would_not_give_is_unknown_not_default(tmp_path: Path, code: int) -> None:
    """Read as `default`, an exclusive-process GPU whose mode NVML refused would be set again, and
    its MPS daemon restarted, on every pass."""
    stub = StubNvml([h100(0, compute_mode=3, errors={"nvmlDeviceGetComputeMode": code}), h100(1)])
    gpus = NvmlBackend(stub.module, sysfs=tmp_path).list_gpus()
    assert [g.compute_mode for g in gpus] == [UNKNOWN_COMPUTE_MODE, "default"]


def test_a_compute_mode_nvml_no_longer_documents_is_unknown(tmp_path: Path) -> None:
    """1 was EXCLUSIVE_THREAD, gone since CUDA 8: not a mode `bcd` can name, so not `default`."""
    stub = StubNvml([h100(0, compute_mode=1)])
    assert NvmlBackend(stub.module, sysfs=tmp_path).list_gpus()[0].compute_mode == UNKNOWN_COMPUTE_MODE


def test_unknown_is_no_compute_mode_a_gpu_can_be_set_to(tmp_path: Path) -> None:
    assert UNKNOWN_COMPUTE_MODE not in COMPUTE_MODES
    stub = StubNvml([h100(0)])
    backend = NvmlBackend(stub.module, sysfs=tmp_path)
    with pytest.raises(ComputeModeRefused, match="'unknown' is not a compute mode"):
        backend.set_compute_mode(stub.gpus[0].uuid, UNKNOWN_COMPUTE_MODE)
    assert stub.gpus[0].compute_mode == 0
    node = FakeNode.build("n", "H100-80GB", 1)
    with pytest.raises(ComputeModeRefused, match="'unknown' is not a compute mode"):
        node.set_compute_mode(node.gpus[0].uuid, UNKNOWN_COMPUTE_MODE)
