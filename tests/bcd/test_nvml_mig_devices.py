"""A MIG instance's uuid and memory come from its own MIG device, under either reading of
`nvmlComputeInstanceGetInfo().device`: nvml.h's (the parent GPU's handle) or NVIDIA's DRA driver's
(the MIG device's handle). The GPU's own uuid is never handed out as a MIG instance's."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

import pynvml
import pytest

from better_compute.bcd.gpu import Gpu
from better_compute.bcd.host import HostConverger
from better_compute.bcd.inventory import node_report, report_json
from better_compute.bcd.logs import Log
from better_compute.bcd.nvml import MUTATING_CALLS, NvmlBackend
from better_compute.bcd.nvml_errors import MIG_READ_HINT, UNLISTED_NOTE
from better_compute.wire.nodes import NodeSpecPublic
from tests.bcd.pynvml_stub import DRA, HEADER, NULL, READINGS, StubNvml, h100, l40s


def partitioned(reading: str, tmp_path: Path, gpus: int = 1) -> tuple[StubNvml, NvmlBackend]:
    """H100s cut into 3g.40gb@4, 2g.20gb@0, 1g.10gb@2, 1g.10gb@3, and an L40S."""
    stub = StubNvml([*(h100(i, mig=True) for i in range(gpus)), l40s(0)], reading=reading)
    b = NvmlBackend(stub.module, sysfs=tmp_path)
    for gpu in stub.gpus[:gpus]:
        for profile, start in (("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)):
            b.create_instance(gpu.uuid, profile, start)
    stub.calls.clear()
    return stub, b


def made(stub: StubNvml) -> dict[tuple[str, int, int], tuple[str, int]]:
    """What the stub made: (GPU uuid, GI id, CI id) -> (MIG uuid, MIG memory MiB)."""
    return {
        (gpu.uuid, gi.gi_id, ci.ci_id): (ci.uuid, ci.memory_mib)
        for gpu in stub.gpus
        for gi in gpu.gis
        for ci in gi.cis
    }


def read(gpus: tuple[Gpu, ...]) -> dict[tuple[str, int, int], tuple[str, int | None]]:
    return {
        (gpu.uuid, gi.gi_id, ci.ci_id): (ci.uuid, ci.memory_mib)
        for gpu in gpus
        for gi in gpu.instances
        for ci in gi.compute_instances
    }


@pytest.mark.parametrize("reading", READINGS)
def test_header_reading_mig_uuid_is_never_the_parent_gpu(tmp_path: Path, reading: str) -> None:
    """Under nvml.h's reading `ComputeInstanceInfo.device` is the GPU itself; taking its uuid would
    hand every MIG holder the whole GPU. Each instance gets its own MIG device's uuid."""
    stub, b = partitioned(reading, tmp_path, gpus=2)
    gpus = b.list_gpus()
    assert read(gpus) == made(stub) and len(made(stub)) == 8
    parents = {g.uuid for g in stub.gpus}
    report = node_report(b, "n")
    mig_uuids = [m.uuid for g in report.gpus for m in g.mig_instances]
    assert len(mig_uuids) == 8 and not parents & set(mig_uuids)
    assert all(u.startswith("MIG-") for u in mig_uuids)
    assert all(g.health.healthy and g.unlisted == () and not g.partial for g in gpus)


@pytest.mark.parametrize("reading", READINGS)
def test_a_mig_instance_has_its_mig_devices_memory(tmp_path: Path, reading: str) -> None:
    _, b = partitioned(reading, tmp_path)
    gpu = b.list_gpus()[0]
    memory = {gi.profile: [ci.memory_mib for ci in gi.compute_instances] for gi in gpu.instances}
    # NVML's per-instance memory (nvmlDeviceGetMemoryInfo on the MIG device handle), not the GPU's.
    assert memory == {"2g.20gb": [20090], "1g.10gb": [9984], "3g.40gb": [40448]}
    assert gpu.memory_mib == 81559


def test_the_header_reading_walks_each_gpus_mig_devices_once_per_listing(tmp_path: Path) -> None:
    stub, b = partitioned(HEADER, tmp_path, gpus=2)
    b.list_gpus()
    counted = Counter(stub.calls)
    assert counted["nvmlDeviceGetMaxMigDeviceCount"] == 2  # one walk per MIG GPU, not per instance
    assert counted["nvmlDeviceGetMigDeviceHandleByIndex"] == 2 * 7
    b.list_gpus()
    assert Counter(stub.calls)["nvmlDeviceGetMaxMigDeviceCount"] == 4  # and again next listing


def test_the_dra_reading_takes_the_mig_handle_without_a_walk(tmp_path: Path) -> None:
    stub, b = partitioned(DRA, tmp_path)
    b.list_gpus()
    assert "nvmlDeviceGetMaxMigDeviceCount" not in stub.calls
    assert Counter(stub.calls)["nvmlDeviceIsMigDeviceHandle"] == 4


def test_a_null_device_handle_is_walked_for(tmp_path: Path) -> None:
    stub, b = partitioned(NULL, tmp_path)
    assert read(b.list_gpus()) == made(stub)


def test_a_walk_is_not_kept_across_a_recut(tmp_path: Path) -> None:
    """GPU instance ids are reused once destroyed; a new instance with an old id is a new MIG device."""
    stub, b = partitioned(HEADER, tmp_path)
    gpu = stub.gpus[0].uuid
    before = read(b.list_gpus())
    gi = next(i for i in b.list_gpus()[0].instances if i.profile == "3g.40gb")
    b.destroy_instance(gpu, gi.gi_id)
    again = b.create_instance(gpu, "3g.40gb", 4)
    assert again.gi_id == gi.gi_id  # the id came back...
    after = read(b.list_gpus())
    assert after == made(stub)
    assert after[(gpu, gi.gi_id, 0)] != before[(gpu, gi.gi_id, 0)]  # ...on another MIG device


def test_create_reports_the_new_instances_mig_device(tmp_path: Path) -> None:
    stub = StubNvml([h100(0, mig=True)], reading=HEADER)
    b = NvmlBackend(stub.module, sysfs=tmp_path)
    made_now = b.create_instance(stub.gpus[0].uuid, "1g.20gb", 6)
    (ci,) = made_now.compute_instances
    assert (ci.uuid, ci.memory_mib) == (stub.gpus[0].gis[0].cis[0].uuid, 20090)


def hide_the_3g_instances_mig_device(stub: StubNvml) -> Any:
    """Make NVML list the 3g.40gb compute instance but name no MIG device for it (its info gives the
    parent's handle, and the walk finds none); returns the hidden compute instance."""
    hidden = next(ci for gi in stub.gpus[0].gis for ci in gi.cis if ci.slices == 3)
    real_info = stub.module.nvmlComputeInstanceGetInfo

    def info_without_device(ci: Any) -> Any:
        info = real_info(ci)
        if info.id == hidden.ci_id and stub._target(ci) is hidden:
            info.device = stub.gpus[0].handle  # the parent's handle, whatever the reading
        return info

    stub.module.nvmlComputeInstanceGetInfo = info_without_device
    real_index = stub.module.nvmlDeviceGetMigDeviceHandleByIndex

    def index_without_hidden(device: Any, index: int) -> Any:
        if index == hidden.mig_index:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return real_index(device, index)

    stub.module.nvmlDeviceGetMigDeviceHandleByIndex = index_without_hidden
    return hidden


@pytest.mark.parametrize("reading", [*READINGS, NULL])
def test_a_compute_instance_without_a_mig_device_is_left_out(tmp_path: Path, reading: str) -> None:
    """NVML lists the compute instance, but no MIG device answers for it: it is not reported at all,
    never as its GPU, and the reason is kept; the GPU's other instances stand."""
    stub, b = partitioned(reading, tmp_path)
    hidden = hide_the_3g_instances_mig_device(stub)
    gpu = b.list_gpus()[0]
    seen = read((gpu,))
    assert len(seen) == 3 and hidden.uuid not in {u for u, _ in seen.values()}
    assert stub.gpus[0].uuid not in {u for u, _ in seen.values()}
    three = next(gi for gi in gpu.instances if gi.profile == "3g.40gb")
    assert three.compute_instances == ()
    assert gpu.unlisted == (
        f"GPU instance {three.gi_id} (3g.40gb) compute instance 0: not listed: NVML has no MIG device for it",
    )
    report = node_report(b, "n").gpus[0]
    assert [m.profile for m in report.mig_instances] == ["2g.20gb", "1g.10gb", "1g.10gb"]


@pytest.mark.parametrize("reading", READINGS)
def test_an_unlisted_compute_instance_makes_its_gpu_partial_and_unhealthy_so_no_layout_is_cut_over_it(
    tmp_path: Path, reading: str
) -> None:
    """The GPU instance of an unlisted compute instance is on the GPU but in no report: planned from
    the report, the GPU lacks a 3g.40gb and the host would create one where this one is, refused
    pass after pass. The GPU's MIG state is not read whole: partial (no change), unhealthy (no
    booking), and the inventory says its MIG state is unknown."""
    stub, b = partitioned(reading, tmp_path)
    hide_the_3g_instances_mig_device(stub)
    gpu = b.list_gpus()[0]
    assert gpu.unlisted and gpu.partial
    assert gpu.health.notes == (UNLISTED_NOTE,) and not gpu.health.healthy
    report = node_report(b, "n")
    assert not report.gpus[0].healthy and report.gpus[0].mig_state_unknown
    assert report_json(report)["report"]["gpus"][0]["migStateUnknown"] is True
    host = HostConverger(b, Log(io.StringIO()))
    spec = NodeSpecPublic.model_validate(
        {
            "node": "n",
            "generation": 1,
            "gpus": [{"uuid": g.uuid, "migLayout": "mixed:3g.40gb+2g.20gb+2x1g.10gb"} for g in stub.gpus[:1]],
            "sharing": {"mode": "mig", "replicas": 1},
            "assignments": [],
        }
    )
    cut = [(g.gi_id, g.profile_id, g.start) for g in stub.gpus[0].gis]
    stub.calls.clear()
    host.converge(spec, set(), {})
    assert not MUTATING_CALLS & set(stub.calls)
    assert host.refused == {}
    assert [(g.gi_id, g.profile_id, g.start) for g in stub.gpus[0].gis] == cut


def test_a_mig_handle_of_another_instance_is_not_trusted(tmp_path: Path) -> None:
    """A MIG device handle in `ComputeInstanceInfo.device` is taken only when its ids are the compute
    instance's own; otherwise the MIG devices are walked."""
    stub, b = partitioned(DRA, tmp_path)
    cis = [ci for gi in stub.gpus[0].gis for ci in gi.cis]
    real_info = stub.module.nvmlComputeInstanceGetInfo

    def crossed(ci: Any) -> Any:
        info = real_info(ci)
        other = cis[(cis.index(stub._target(ci)) + 1) % len(cis)]
        assert other.mig is not None
        info.device = other.mig.handle
        return info

    stub.module.nvmlComputeInstanceGetInfo = crossed
    assert read(b.list_gpus()) == made(stub)
    assert "nvmlDeviceGetMaxMigDeviceCount" in stub.calls


def test_two_mig_devices_claiming_one_instance_are_both_refused(tmp_path: Path) -> None:
    stub, b = partitioned(HEADER, tmp_path)
    first = stub.gpus[0].gis[0].cis[0]
    real_index = stub.module.nvmlDeviceGetMigDeviceHandleByIndex
    twin = next(ci for gi in stub.gpus[0].gis for ci in gi.cis if ci is not first)

    def twice(device: Any, index: int) -> Any:
        if index == twin.mig_index:
            return real_index(device, first.mig_index)  # a second index answers with the first device
        return real_index(device, index)

    stub.module.nvmlDeviceGetMigDeviceHandleByIndex = twice
    gpu = b.list_gpus()[0]
    uuids = {u for u, _ in read((gpu,)).values()}
    assert first.uuid not in uuids and twin.uuid not in uuids and len(uuids) == 2
    assert len(gpu.unlisted) == 2


def test_a_walk_refused_for_permission_makes_the_gpu_unhealthy(tmp_path: Path) -> None:
    stub, b = partitioned(HEADER, tmp_path)
    stub.gpus[0].errors = {"nvmlDeviceGetMaxMigDeviceCount": pynvml.NVML_ERROR_NO_PERMISSION}
    gpu = b.list_gpus()[0]
    assert read((gpu,)) == {}
    assert len(gpu.unlisted) == 4 and all("walking the GPU's MIG devices failed" in u for u in gpu.unlisted)
    assert gpu.health.notes == (f"cannot read the GPU's MIG devices: permission denied; {MIG_READ_HINT}",)
    assert gpu.partial
    assert not node_report(b, "n").gpus[0].healthy


def test_an_empty_index_is_skipped_and_a_failing_one_is_not(tmp_path: Path) -> None:
    """NOT_FOUND (and INVALID_ARGUMENT) at an index is "no MIG device there", as NVIDIA's go-nvlib
    walks; any other error leaves the walk incomplete, which the GPU's health says."""
    stub, b = partitioned(HEADER, tmp_path)
    gpu = stub.gpus[0]
    kept = next(ci for gi in gpu.gis for ci in gi.cis if ci.slices == 2)
    b.destroy_instance(gpu.uuid, next(gi.gi_id for gi in gpu.gis if gi.profile_id == 9))
    assert kept.mig_index == 1  # index 0 is empty now: the walk steps over the hole
    assert read(b.list_gpus()) == made(stub) and len(made(stub)) == 3
    gpu.errors = {"nvmlDeviceGetMigDeviceHandleByIndex": pynvml.NVML_ERROR_UNKNOWN}
    listed = b.list_gpus()[0]
    assert not listed.health.healthy and len(listed.unlisted) == 3
    assert listed.health.notes == (
        "cannot read the GPU's MIG devices: the driver reported an internal error",
    )
