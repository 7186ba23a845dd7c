"""The pynvml stub answers as nvml.h says NVML does, whatever this project's code expects: a parent GPU
and its MIG devices are different handles, MIG devices are reached by index with NOT_FOUND for an
empty one, and `nvmlComputeInstanceGetInfo().device` follows the reading asked for."""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml
import pytest

from tests.bcd.pynvml_stub import DRA, HEADER, NULL, StubNvml, h100


def cut(reading: str = HEADER) -> tuple[StubNvml, Any]:
    """An H100 in MIG mode with a 3g.40gb at 4 and a 1g.10gb at 0, made through the stub's own calls."""
    stub = StubNvml([h100(0, mig=True)], reading=reading)
    nv, gpu = stub.module, stub.gpus[0].handle
    for profile_id, start, size, ci_profile in ((9, 4, 4, 2), (19, 0, 1, 0)):
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, size
        gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(gpu, profile_id, ctypes.byref(placement))
        nv.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile)
    return stub, gpu


def same(a: Any, b: Any) -> bool:
    return bool(ctypes.addressof(a.contents) == ctypes.addressof(b.contents))


def test_mig_devices_are_other_handles_than_their_gpu() -> None:
    stub, gpu = cut()
    nv = stub.module
    assert nv.nvmlDeviceGetMaxMigDeviceCount(gpu) == 7
    migs = [nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i) for i in (0, 1)]
    assert not any(same(m, gpu) for m in migs)
    assert [nv.nvmlDeviceIsMigDeviceHandle(m).value for m in migs] == [1, 1]
    assert isinstance(nv.nvmlDeviceIsMigDeviceHandle(gpu), ctypes.c_uint)
    assert nv.nvmlDeviceIsMigDeviceHandle(gpu).value == 0
    assert [nv.nvmlDeviceGetUUID(m)[:4] for m in migs] == ["MIG-", "MIG-"]
    assert nv.nvmlDeviceGetUUID(gpu).startswith("GPU-")
    assert all(same(nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m), gpu) for m in migs)
    assert [(nv.nvmlDeviceGetGpuInstanceId(m), nv.nvmlDeviceGetComputeInstanceId(m)) for m in migs] == [
        (13, 0),
        (12, 0),
    ]
    assert [nv.nvmlDeviceGetMemoryInfo(m).total >> 20 for m in migs] == [40448, 9984]
    assert nv.nvmlDeviceGetMemoryInfo(gpu).total >> 20 == 81559
    assert same(nv.nvmlDeviceGetHandleByUUID(nv.nvmlDeviceGetUUID(migs[0])), migs[0])


def test_an_empty_index_is_not_found_and_past_the_last_invalid() -> None:
    stub, gpu = cut()
    with pytest.raises(pynvml.NVMLError_NotFound):
        stub.module.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 2)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        stub.module.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 7)


def test_mig_queries_on_a_gpu_handle_and_gpu_queries_on_a_mig_handle_are_refused() -> None:
    stub, gpu = cut()
    nv = stub.module
    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceGetGpuInstanceId(gpu)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceGetMigMode(mig)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(gpu)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceIsMigDeviceHandle(pynvml.c_nvmlDevice_t())  # NULL


def test_a_gpu_with_mig_off_has_no_mig_devices_and_no_profiles() -> None:
    stub = StubNvml([h100(0)])
    nv, gpu = stub.module, stub.gpus[0].handle
    assert nv.nvmlDeviceGetMaxMigDeviceCount(gpu) == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    count = ctypes.c_uint(0)
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(gpu, 9, None, ctypes.byref(count))
    assert count.value == 2  # placements are answered regardless of MIG mode


@pytest.mark.parametrize(("reading", "points_at"), [(HEADER, "gpu"), (DRA, "mig"), (NULL, None)])
def test_compute_instance_info_device_follows_the_reading(reading: str, points_at: str | None) -> None:
    stub, gpu = cut(reading)
    ci = stub.gpus[0].gis[0].cis[0]
    device = stub.module.nvmlComputeInstanceGetInfo(ci.handle).device
    expected = {"gpu": gpu, "mig": ci.mig.handle if ci.mig else None}.get(points_at or "")
    if expected is None:
        assert not device
    else:
        assert same(device, expected)


def test_errors_are_injected_per_gpu_and_per_call() -> None:
    stub, gpu = cut()
    stub.gpus[0].errors = {"*": pynvml.NVML_ERROR_GPU_IS_LOST, "nvmlDeviceGetUUID": 0}
    nv = stub.module
    assert nv.nvmlDeviceGetUUID(gpu).startswith("GPU-")
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nv.nvmlDeviceGetName(gpu)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nv.nvmlGpuInstanceGetInfo(stub.gpus[0].gis[0].handle)  # a GPU instance's calls are its GPU's
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nv.nvmlDeviceGetHandleByIndex(0)
