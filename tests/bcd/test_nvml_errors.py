"""The errors NVML really returns (nvml.h `nvmlReturn_t`), each a node state an operator can read: one
GPU that cannot be read does not hide the node's others."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pynvml
import pytest

from better_compute.bcd.gpu import GpuError, NvmlUnavailable, UnknownGpu
from better_compute.bcd.inventory import node_report, report_json
from better_compute.bcd.nvml import MUTATING_CALLS, UNKNOWN_NAME, NvmlBackend
from better_compute.bcd.nvml_errors import GPU_ACCESS_HINT, GPU_LOST_NOTE, MIG_READ_HINT, RESET_REQUIRED_NOTE
from tests.bcd.pynvml_stub import LOST, StubNvml, h100, l40s

LOST_UUID_READABLE = {**LOST, "nvmlDeviceGetHandleByIndex": 0, "nvmlDeviceGetUUID": 0}
"""A lost GPU whose handle and uuid NVML still gives (from what it knew before the GPU fell off)."""


def node(tmp_path: Path, *gpus: object) -> tuple[StubNvml, NvmlBackend]:
    stub = StubNvml([h100(0, mig=True), *gpus, l40s(2)])  # type: ignore[list-item]
    b = NvmlBackend(stub.module, sysfs=tmp_path)
    b.create_instance(stub.gpus[0].uuid, "3g.40gb", 0)
    stub.calls.clear()
    return stub, b


def test_one_gpu_that_cannot_be_read_does_not_hide_the_others(tmp_path: Path) -> None:
    """A GPU whose name NVML refuses used to abort the whole inventory; now it is reported, unhealthy."""
    stub, b = node(tmp_path, h100(1, errors={"nvmlDeviceGetName": pynvml.NVML_ERROR_UNKNOWN}))
    gpus = b.list_gpus()
    assert [g.uuid for g in gpus] == [g.uuid for g in stub.gpus]
    bad = gpus[1]
    assert bad.name == UNKNOWN_NAME and bad.memory_mib == 81559 and bad.pci_bus_id == "00000000:19:00.0"
    assert bad.health.notes == ("cannot read the product name: the driver reported an internal error",)
    assert [g.health.healthy for g in gpus] == [True, False, True]
    assert gpus[0].instances[0].compute_instances[0].uuid.startswith("MIG-")


def test_a_lost_gpu_whose_uuid_is_known_is_listed_unhealthy(tmp_path: Path) -> None:
    stub, b = node(tmp_path, h100(1, mig=True, errors=LOST_UUID_READABLE))
    gpus = b.list_gpus()
    lost = gpus[1]
    assert (lost.uuid, lost.name, lost.health.notes) == (stub.gpus[1].uuid, UNKNOWN_NAME, (GPU_LOST_NOTE,))
    assert "reboot the node" in GPU_LOST_NOTE
    assert (lost.mig_current, lost.instances, lost.memory_mib, lost.pci_bus_id) == (False, (), 0, "")
    assert lost.partial and not gpus[0].partial  # its MIG state is unknown, not "none"
    # Once NVML said the GPU is lost, nothing more is asked of it: each call could wait on the driver.
    after_lost = [c for c in stub.calls if c not in ("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID")]
    assert sum(1 for c in after_lost if c == "nvmlDeviceGetPciInfo") == 3
    assert "nvmlDeviceGetName" in stub.calls and stub.calls.count("nvmlDeviceGetName") == 2
    report = report_json(node_report(b, "n"))
    assert [g["healthy"] for g in report["report"]["gpus"]] == [True, False, True]
    assert report["report"]["gpus"][1]["product"] == UNKNOWN_NAME


def test_a_lost_gpu_without_a_uuid_is_named_as_unreadable(tmp_path: Path) -> None:
    stub, b = node(tmp_path, h100(1, errors=dict(LOST)))
    gpus = b.list_gpus()
    assert [g.uuid for g in gpus] == [stub.gpus[0].uuid, stub.gpus[2].uuid]
    assert [g.index for g in gpus] == [0, 2]
    assert b.unreadable == (
        "GPU 1: not listed: NVML would not give its uuid: "
        "the GPU is lost (it has fallen off the bus or is otherwise inaccessible)",
    )
    b.list_gpus()
    assert len(b.unreadable) == 1  # each listing says it afresh


def test_a_gpu_this_user_may_not_reach_is_named_with_what_to_do(tmp_path: Path) -> None:
    _, b = node(tmp_path, h100(1, errors={"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_NO_PERMISSION}))
    assert len(b.list_gpus()) == 2
    assert b.unreadable == (
        f"GPU 1: not listed: NVML would not give its uuid: permission denied; {GPU_ACCESS_HINT}",
    )


@pytest.mark.parametrize("where", ["*", "nvmlDeviceGetGpuInstances"])
def test_a_gpu_that_needs_a_reset_is_unhealthy_with_what_to_do(tmp_path: Path, where: str) -> None:
    errors = {
        where: pynvml.NVML_ERROR_RESET_REQUIRED,
        "nvmlDeviceGetHandleByIndex": 0,
        "nvmlDeviceGetUUID": 0,
    }
    _, b = node(tmp_path, h100(1, mig=True, errors=errors))
    gpus = b.list_gpus()
    assert gpus[1].health.notes == (RESET_REQUIRED_NOTE,)
    assert "nvidia-smi --gpu-reset -i <uuid>" in RESET_REQUIRED_NOTE
    assert [g.health.healthy for g in gpus] == [True, False, True]


def test_no_permission_on_mig_queries_says_which_capability(tmp_path: Path) -> None:
    stub, b = node(tmp_path)
    stub.gpus[0].errors = {"nvmlDeviceGetGpuInstances": pynvml.NVML_ERROR_NO_PERMISSION}
    gpu = b.list_gpus()[0]
    assert gpu.health.notes == (f"cannot read the GPU instances: permission denied; {MIG_READ_HINT}",)
    assert "mig/monitor" in MIG_READ_HINT and "/proc/driver/nvidia/capabilities/mig/monitor" in MIG_READ_HINT
    assert gpu.instances == () and gpu.mig_current and gpu.partial


def test_no_permission_on_the_gpus_memory_in_mig_mode_says_run_as_root(tmp_path: Path) -> None:
    """nvml.h: in MIG mode the GPU's memory is given "only if the caller has appropriate privileges"."""
    stub, b = node(tmp_path)
    real = stub.module.nvmlDeviceGetMemoryInfo

    def memory(handle: object, version: object = None) -> object:
        if stub._target(handle) is stub.gpus[0]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        return real(handle, version)

    stub.module.nvmlDeviceGetMemoryInfo = memory
    gpu = b.list_gpus()[0]
    assert gpu.health.notes == ("cannot read the memory size: permission denied; run bcd as root",)
    assert not gpu.partial  # its MIG state was read whole
    assert gpu.instances[0].compute_instances[0].memory_mib == 40448  # the MIG device's own still reads


@pytest.mark.parametrize(
    "call",
    [
        "nvmlDeviceGetNumaNodeId",
        "nvmlDeviceGetMinorNumber",
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetNvLinkState",
    ],
)
@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION])
def test_an_optional_query_refused_is_just_not_available(tmp_path: Path, call: str, code: int) -> None:
    _, b = node(tmp_path, h100(1, errors={call: code}, numa_node=1, ecc_uncorrected=0))
    gpu = b.list_gpus()[1]
    assert gpu.health.healthy and gpu.health.notes == ()
    field = {
        "nvmlDeviceGetNumaNodeId": gpu.numa_node,
        "nvmlDeviceGetMinorNumber": gpu.minor_number,
        "nvmlDeviceGetTotalEccErrors": gpu.health.ecc_uncorrected,
    }
    if call in field:
        assert field[call] is None


def test_an_unreadable_mig_mode_is_a_health_problem(tmp_path: Path) -> None:
    """Only NOT_SUPPORTED means "no MIG": a MIG mode NVML would not give might be on, so the GPU
    cannot be handed out whole."""
    _, b = node(tmp_path, h100(1, mig=True, errors={"nvmlDeviceGetMigMode": pynvml.NVML_ERROR_TIMEOUT}))
    gpu = b.list_gpus()[1]
    assert gpu.health.notes == ("cannot read the MIG mode: NVML timed out",)
    assert gpu.mig_capable and not gpu.health.healthy and gpu.partial


def test_the_driver_going_away_mid_listing_fails_the_whole_reading(tmp_path: Path) -> None:
    _, b = node(tmp_path, h100(1, errors={"nvmlDeviceGetName": pynvml.NVML_ERROR_DRIVER_NOT_LOADED}))
    with pytest.raises(NvmlUnavailable, match="driver is not loaded"):
        b.list_gpus()


def test_reading_a_node_with_bad_gpus_never_changes_one(tmp_path: Path) -> None:
    stub, b = node(
        tmp_path,
        h100(
            1,
            mig=True,
            errors={
                "*": pynvml.NVML_ERROR_RESET_REQUIRED,
                "nvmlDeviceGetUUID": 0,
                "nvmlDeviceGetHandleByIndex": 0,
            },
        ),
    )
    b.list_gpus()
    assert stub.calls and not MUTATING_CALLS & set(stub.calls)


@pytest.mark.parametrize(
    ("code", "error", "why"),
    [
        (pynvml.NVML_ERROR_GPU_IS_LOST, GpuError, "cannot be reached: the GPU is lost"),
        (pynvml.NVML_ERROR_NOT_FOUND, UnknownGpu, "this node has no GPU"),
        (pynvml.NVML_ERROR_NO_PERMISSION, GpuError, "cannot be reached: permission denied"),
    ],
)
def test_a_change_to_a_gpu_nvml_cannot_reach_says_why(
    tmp_path: Path, code: int, error: type[GpuError], why: str
) -> None:
    stub, b = node(tmp_path, h100(1, mig=True, errors={"nvmlDeviceGetHandleByUUID": code}))
    with pytest.raises(error, match=why):
        b.create_instance(stub.gpus[1].uuid, "1g.10gb", 0)


@pytest.mark.parametrize(
    ("code", "why"),
    [
        (pynvml.NVML_ERROR_GPU_IS_LOST, "GPU is lost: NVML says it has fallen off the bus"),
        (pynvml.NVML_ERROR_RESET_REQUIRED, "GPU needs a reset"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "permission denied: run as root"),
    ],
)
def test_a_change_nvml_refuses_says_why(tmp_path: Path, code: int, why: str) -> None:
    stub, b = node(tmp_path, h100(1, mig=True, errors={"nvmlDeviceCreateGpuInstanceWithPlacement": code}))
    with pytest.raises(GpuError, match=f"nvmlDeviceCreateGpuInstanceWithPlacement: {why}"):
        b.create_instance(stub.gpus[1].uuid, "1g.10gb", 0)


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_RESET_REQUIRED, pynvml.NVML_ERROR_GPU_IS_LOST])
def test_a_gpu_nvml_cannot_reach_is_still_nvidia_smis_to_reset(tmp_path: Path, code: int) -> None:
    """The GPU that needs a reset is exactly the one to reset: NVML refusing its handle does not stop it."""
    ran: list[Sequence[str]] = []

    def run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        ran.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    stub = StubNvml([h100(0, errors={"nvmlDeviceGetHandleByUUID": code})])
    NvmlBackend(stub.module, sysfs=tmp_path, run=run).reset_gpu(stub.gpus[0].uuid)
    assert ran == [["nvidia-smi", "--gpu-reset", "-i", stub.gpus[0].uuid]]
    with pytest.raises(UnknownGpu):
        NvmlBackend(stub.module, sysfs=tmp_path, run=run).reset_gpu("GPU-not-here")
    assert len(ran) == 1


def test_a_gpu_with_an_empty_uuid_is_not_listed(tmp_path: Path) -> None:
    stub, b = node(tmp_path, h100(1))
    real = stub.module.nvmlDeviceGetUUID
    stub.module.nvmlDeviceGetUUID = lambda handle: (
        "" if stub._target(handle) is stub.gpus[1] else real(handle)
    )
    assert [g.index for g in b.list_gpus()] == [0, 2]
    assert b.unreadable == ("GPU 1: not listed: NVML would not give its uuid: it was empty",)
