"""Placements from `nvmlDeviceGetGpuInstancePossiblePlacements` (pynvml calls the `_v2` symbol), read
by the two-call pattern NVIDIA's go-nvml uses: a NULL array for the count, then an array that size."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pynvml
import pytest

from better_compute.bcd.gpu import InstanceRefused
from better_compute.bcd.nvml import InstanceProfile, NvmlBackend
from better_compute.domain import catalog
from tests.bcd.pynvml_stub import StubNvml, h100, l40s


def test_profiles_and_placements_are_nvmls_and_match_the_catalog(tmp_path: Path) -> None:
    stub = StubNvml([h100(0, mig=True)])
    profiles = NvmlBackend(stub.module, sysfs=tmp_path).instance_profiles(stub.gpus[0].uuid)
    model = catalog.get_model("H100-80GB")
    assert sorted(profiles, key=lambda p: p.profile_id) == sorted(
        (
            InstanceProfile(
                profile=p.name,
                profile_id=p.profile_id,
                slices=p.compute_slices,
                max_instances=p.max_instances,
                memory_mib=int(p.memory_gib * 1024),
                multiprocessors=p.multiprocessors or 0,
                placements=tuple((start, p.size) for start in p.starts),
            )
            for p in model.profiles
        ),
        key=lambda p: p.profile_id,
    )
    by_id = {p.profile_id: p.placements for p in profiles}
    # `nvidia-smi mig -lgipp` on an H100 80GB HBM3 (docs/bcd.md): 9 Placements: {0,4}:4, 0 Placement : {0}:8
    assert (by_id[9], by_id[0], by_id[15]) == (((0, 4), (4, 4)), ((0, 8),), ((0, 2), (2, 2), (4, 2), (6, 2)))
    assert not {"nvmlDeviceCreateGpuInstanceWithPlacement"} & set(stub.calls)


def test_placements_are_read_with_the_two_call_count_pattern(tmp_path: Path) -> None:
    stub = StubNvml([h100(0, mig=True)])
    seen: list[tuple[int | None, int]] = []
    real = stub.module.nvmlDeviceGetGpuInstancePossiblePlacements

    def spy(device: Any, profileId: int, placementsRef: Any, countRef: Any) -> int:
        before = countRef._obj.value
        result = real(device, profileId, placementsRef, countRef)
        seen.append((None if placementsRef is None else len(placementsRef), before))
        return int(result)

    stub.module.nvmlDeviceGetGpuInstancePossiblePlacements = spy
    b = NvmlBackend(stub.module, sysfs=tmp_path)
    b.create_instance(stub.gpus[0].uuid, "2g.20gb", 2)
    # First NULL for the count, then an array of exactly that many, with the count it was told.
    assert seen == [(None, 0), (3, 3)]
    assert (stub.gpus[0].gis[0].start, stub.gpus[0].gis[0].size) == (2, 2)


def test_a_profile_nvml_gives_no_placement_is_refused_without_a_second_call(tmp_path: Path) -> None:
    stub = StubNvml([h100(0, mig=True)])
    calls: list[Any] = []

    def none(device: Any, profileId: int, placementsRef: Any, countRef: Any) -> int:
        calls.append(placementsRef)
        countRef._obj.value = 0
        return int(pynvml.NVML_SUCCESS)

    stub.module.nvmlDeviceGetGpuInstancePossiblePlacements = none
    b = NvmlBackend(stub.module, sysfs=tmp_path)
    with pytest.raises(
        InstanceRefused, match=r"cannot start at 0 \(placements start at nowhere: NVML lists none\)"
    ):
        b.create_instance(stub.gpus[0].uuid, "7g.80gb", 0)
    assert calls == [None] and stub.gpus[0].gis == []


def test_a_gpu_without_mig_mode_has_no_profiles_to_read(tmp_path: Path) -> None:
    """nvml.h: profile infos answer NOT_SUPPORTED "If device doesn't have MIG mode enabled"."""
    stub = StubNvml([h100(0), l40s(1)])
    b = NvmlBackend(stub.module, sysfs=tmp_path)
    assert b.instance_profiles(stub.gpus[0].uuid) == ()
    assert b.instance_profiles(stub.gpus[1].uuid) == ()


def test_the_stub_refuses_an_array_too_small_as_nvml_would_overrun_it() -> None:
    """The stub holds a caller to "If non-NULL must be large enough" (nvml.h)."""
    stub = StubNvml([h100(0, mig=True)])
    count = ctypes.c_uint(0)
    small = (pynvml.c_nvmlGpuInstancePlacement_t * 1)()
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        stub.module.nvmlDeviceGetGpuInstancePossiblePlacements(
            stub.gpus[0].handle, 9, small, ctypes.byref(count)
        )
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        stub.module.nvmlDeviceGetGpuInstancePossiblePlacements(stub.gpus[0].handle, 9, None, None)
