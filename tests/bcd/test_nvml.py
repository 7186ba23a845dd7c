"""The real backend over a stub of `pynvml`: the right report for MIG and plain GPUs, changes only
where asked, NVML's errors in an operator's words."""

from __future__ import annotations

import ctypes.util
import inspect
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pynvml
import pytest

from better_compute.bcd.gpu import (
    GpuError,
    InstanceInUse,
    InstanceRefused,
    MigNotSupported,
    NvmlUnavailable,
    ResetFailed,
    UnknownGpu,
    UnknownInstance,
    ZeroingFailed,
)
from better_compute.bcd.inventory import node_report
from better_compute.bcd.nvml import MUTATING_CALLS, NVML_MISSING, NvmlBackend, profile_name, sysfs_numa_node
from tests.bcd.pynvml_stub import READINGS, StubGi, StubLink, StubNvml, h100, l40s


def backend(stub: StubNvml, tmp_path: Path) -> NvmlBackend:
    return NvmlBackend(stub.module, sysfs=tmp_path)


def test_the_stub_has_the_real_packages_names_and_parameters() -> None:
    stub = StubNvml([])
    names = [n for n in dir(stub) if n.startswith("nvml")]
    assert len(names) >= 30
    for name in names:
        real = inspect.signature(getattr(pynvml, name)).parameters
        assert list(inspect.signature(getattr(stub, name)).parameters) == list(real), name


def partitioned(stub: StubNvml, b: NvmlBackend, gpu: str) -> None:
    b.create_instance(gpu, "3g.40gb", 4)
    b.create_instance(gpu, "2g.20gb", 0)
    b.create_instance(gpu, "2g.20gb", 2)
    stub.calls.clear()


@pytest.mark.parametrize("reading", READINGS)
def test_a_mig_gpu_and_a_plain_gpu_are_reported(tmp_path: Path, reading: str) -> None:
    gpus = [h100(0, mig=True, numa_node=1, links=[StubLink(remote_bus="00000000:19:00.0")]), h100(1), l40s(0)]
    gpus[1].links = [StubLink(remote_bus="00000000:18:00.0"), StubLink(active=False)]
    stub = StubNvml(gpus, reading=reading)
    b = backend(stub, tmp_path)
    partitioned(stub, b, gpus[0].uuid)

    report = node_report(b, "node-1")

    mig, plain, l40 = report.gpus
    assert (mig.uuid, mig.product, mig.memory_mib, mig.index) == (
        gpus[0].uuid,
        "NVIDIA H100 80GB HBM3",
        81559,
        0,
    )
    assert (mig.numa_node, mig.nvlink_peers, mig.healthy) == (1, (gpus[1].uuid,), True)
    assert (mig.mig_mode_current, mig.mig_mode_pending) == (True, True)
    assert [(m.profile, m.placement_start, m.placement_size, m.ci_id) for m in mig.mig_instances] == [
        ("2g.20gb", 0, 2, 0),
        ("2g.20gb", 2, 2, 0),
        ("3g.40gb", 4, 4, 0),
    ]
    # GPU instance ids come from NVML, unrelated to placements (13, 12, 11 as created here).
    assert [m.gi_id for m in mig.mig_instances] == [12, 11, 13]
    made = {(gi.gi_id, ci.ci_id): ci.uuid for gi in gpus[0].gis for ci in gi.cis}
    assert [m.uuid for m in mig.mig_instances] == [made[(m.gi_id, m.ci_id)] for m in mig.mig_instances]
    assert all(m.uuid.startswith("MIG-") for m in mig.mig_instances)
    assert (plain.mig_mode_current, plain.mig_instances, plain.nvlink_peers) == (False, (), (gpus[0].uuid,))
    assert (l40.product, l40.memory_mib, l40.mig_mode_current, l40.numa_node) == (
        "NVIDIA L40S",
        46068,
        False,
        None,
    )
    assert not MUTATING_CALLS & set(stub.calls)


def test_reading_never_calls_a_mutating_function(tmp_path: Path) -> None:
    stub = StubNvml([h100(0, mig=True), l40s(1)])
    b = backend(stub, tmp_path)
    partitioned(stub, b, stub.gpus[0].uuid)
    b.list_gpus()
    b.close()
    assert stub.calls and not MUTATING_CALLS & set(stub.calls)
    assert "nvmlShutdown" in stub.calls


def test_nvswitch_links_make_every_switched_gpu_a_peer(tmp_path: Path) -> None:
    gpus = [h100(i, links=[StubLink(switch=True)] * 2) for i in range(3)] + [l40s(0)]
    report = node_report(backend(StubNvml(gpus), tmp_path), "n")
    assert report.gpus[0].nvlink_peers == (gpus[1].uuid, gpus[2].uuid)
    assert report.gpus[3].nvlink_peers == ()


def test_health_counts_uncorrected_ecc_and_hardware_throttling(tmp_path: Path) -> None:
    gpus = [
        h100(0, ecc_uncorrected=2),
        h100(1, throttle_mask=pynvml.nvmlClocksEventReasonHwThermalSlowdown | 0x1),
        h100(2, throttle_mask=pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonGpuIdle),
        l40s(0, ecc_uncorrected=None),
    ]
    read = backend(StubNvml(gpus), tmp_path).list_gpus()
    assert read[0].health.problems == ("2 uncorrected ECC errors",)
    assert read[1].health.throttle_reasons == ("HwThermalSlowdown",) and not read[1].health.healthy
    assert read[2].health.healthy  # a software power cap and idling are how a working GPU runs
    assert read[3].health.ecc_uncorrected is None and read[3].health.healthy


def test_numa_falls_back_to_sysfs(tmp_path: Path) -> None:
    device = tmp_path / "bus" / "pci" / "devices" / "0000:18:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    other = tmp_path / "bus" / "pci" / "devices" / "0000:19:00.0"
    other.mkdir(parents=True)
    (other / "numa_node").write_text("-1\n")
    stub = StubNvml([h100(0), h100(1), h100(2)], has_numa_call=False)
    assert [g.numa_node for g in backend(stub, tmp_path).list_gpus()] == [1, None, None]
    assert sysfs_numa_node(tmp_path, "00000000:18:00.0") == 1


def test_profile_names_are_the_catalogs() -> None:
    assert profile_name(b"MIG 3g.40gb") == "3g.40gb"
    assert profile_name("MIG 1g.10gb+me") == "1g.10gb+me"


def test_create_places_explicitly_with_the_full_compute_instance(tmp_path: Path) -> None:
    stub = StubNvml([h100(0, mig=True)])
    b = backend(stub, tmp_path)
    made = b.create_instance(stub.gpus[0].uuid, "3g.40gb", 4)
    assert (made.profile, made.profile_id, made.placement_start, made.placement_size) == ("3g.40gb", 9, 4, 4)
    assert [c.slices for c in made.compute_instances] == [3]
    assert "nvmlDeviceCreateGpuInstanceWithPlacement" in stub.calls
    assert "nvmlDeviceCreateGpuInstance" not in stub.calls


@pytest.mark.parametrize(
    ("profile", "start", "error", "why"),
    [
        ("3g.40gb", 2, InstanceRefused, "placements start at 0, 4"),
        ("1g.24gb", 0, InstanceRefused, "has no profile 1g.24gb"),
        ("4g.40gb", 0, InstanceRefused, "insufficient resources"),
    ],
)
def test_refused_creations(tmp_path: Path, profile: str, start: int, error: type[GpuError], why: str) -> None:
    stub = StubNvml([h100(0, mig=True)])
    b = backend(stub, tmp_path)
    b.create_instance(stub.gpus[0].uuid, "3g.40gb", 0)
    with pytest.raises(error, match=why):
        b.create_instance(stub.gpus[0].uuid, profile, start)
    assert len(stub.gpus[0].gis) == 1


def test_create_on_a_gpu_without_mig(tmp_path: Path) -> None:
    stub = StubNvml([l40s(0), h100(1)])
    b = backend(stub, tmp_path)
    with pytest.raises(InstanceRefused, match=r"1g\.10gb instance: it does not support MIG"):
        b.create_instance(stub.gpus[0].uuid, "1g.10gb", 0)
    with pytest.raises(InstanceRefused, match=r"1g\.10gb instance: MIG mode is not enabled"):
        b.create_instance(stub.gpus[1].uuid, "1g.10gb", 0)
    with pytest.raises(UnknownGpu):
        b.create_instance("GPU-nope", "1g.10gb", 0)
    assert not {"nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlDeviceCreateGpuInstance"} & set(stub.calls)


def test_destroy_takes_compute_instances_then_the_gpu_instance(tmp_path: Path) -> None:
    stub = StubNvml([h100(0, mig=True)])
    b = backend(stub, tmp_path)
    gpu = stub.gpus[0].uuid
    gi = b.create_instance(gpu, "7g.80gb", 0).gi_id
    stub.calls.clear()
    b.destroy_instance(gpu, gi)
    assert stub.calls.index("nvmlComputeInstanceDestroy") < stub.calls.index("nvmlGpuInstanceDestroy")
    assert stub.gpus[0].gis == []
    with pytest.raises(UnknownInstance):
        b.destroy_instance(gpu, gi)


def test_destroying_a_busy_instance_is_in_use(tmp_path: Path) -> None:
    stub = StubNvml([h100(0, mig=True)])
    b = backend(stub, tmp_path)
    gi = b.create_instance(stub.gpus[0].uuid, "7g.80gb", 0).gi_id
    busy: StubGi = stub.gpus[0].gis[0]
    busy.busy = True
    with pytest.raises(InstanceInUse):
        b.destroy_instance(stub.gpus[0].uuid, gi)


def test_set_mig_mode_says_whether_a_reset_is_needed(tmp_path: Path) -> None:
    stub = StubNvml([h100(0), l40s(1)])
    b = backend(stub, tmp_path)
    assert b.set_mig_mode(stub.gpus[0].uuid, True) is True
    assert b.list_gpus()[0].mig_pending and not b.list_gpus()[0].mig_current
    assert b.set_mig_mode(stub.gpus[0].uuid, False) is False
    with pytest.raises(MigNotSupported):
        b.set_mig_mode(stub.gpus[1].uuid, True)


def test_a_zeroing_pass_is_refused_in_words_since_nvml_has_none(tmp_path: Path) -> None:
    stub = StubNvml([h100(0)])
    b = backend(stub, tmp_path)
    with pytest.raises(ZeroingFailed, match="NVML has no call that zeroes GPU memory"):
        b.zero_memory(stub.gpus[0].uuid, None)
    with pytest.raises(ZeroingFailed, match="GPU instance 1 of"):
        b.zero_memory(stub.gpus[0].uuid, 1)


def test_reset_runs_nvidia_smi_and_reports_its_failure(tmp_path: Path) -> None:
    ran: list[Sequence[str]] = []

    def run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        ran.append(command)
        status = 0 if len(ran) == 1 else 255
        return subprocess.CompletedProcess(command, status, "", "" if status == 0 else "GPU is in use\n")

    stub = StubNvml([h100(0)])
    b = NvmlBackend(stub.module, sysfs=tmp_path, run=run)
    b.reset_gpu(stub.gpus[0].uuid)
    assert ran == [["nvidia-smi", "--gpu-reset", "-i", stub.gpus[0].uuid]]
    with pytest.raises(ResetFailed, match="GPU is in use"):
        b.reset_gpu(stub.gpus[0].uuid)

    def missing(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError("nvidia-smi")

    with pytest.raises(ResetFailed, match="did not run"):
        NvmlBackend(stub.module, run=missing).reset_gpu(stub.gpus[0].uuid)


@pytest.mark.parametrize(
    ("code", "error", "why"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, NvmlUnavailable, "libnvidia-ml.so.1 not found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, NvmlUnavailable, "driver is not loaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, NvmlUnavailable, "different versions"),
        (pynvml.NVML_ERROR_NO_PERMISSION, GpuError, "permission denied"),
        (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, GpuError, "newer driver"),
        (pynvml.NVML_ERROR_UNKNOWN, GpuError, "nvmlInit failed"),
    ],
)
def test_nvml_errors_become_clear_ones(code: int, error: type[GpuError], why: str) -> None:
    stub = StubNvml([])

    def init() -> None:
        raise pynvml.NVMLError(code)

    stub.module.nvmlInit = init
    with pytest.raises(error, match=why):
        NvmlBackend(stub.module)


def test_a_missing_library_says_the_driver_is_missing() -> None:
    with pytest.raises(NvmlUnavailable) as caught:
        NvmlBackend(StubNvml([], library_missing=True).module)
    assert str(caught.value) == NVML_MISSING


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has NVML")
def test_the_real_package_on_a_machine_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    with pytest.raises(NvmlUnavailable, match=r"libnvidia-ml\.so\.1 not found"):
        NvmlBackend()
