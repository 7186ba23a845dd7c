"""`bench/gpu_check.py`: bcd's NVML reading against nvidia-smi's recorded outputs of an H100 node
(tests/bcd/nvidia_smi/h100_mig), field by field; it only ever reads."""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from bench import gpu_check

from better_compute.bcd.nvml import MUTATING_CALLS, NvmlBackend
from tests.bcd.pynvml_stub import DRA, HEADER, READINGS, StubNvml, h100

RECORDED = Path(__file__).parent / "nvidia_smi" / "h100_mig"
FILES = {
    ("nvidia-smi", "-q", "-x"): "q.xml",
    ("nvidia-smi", "-L"): "L.txt",
    ("nvidia-smi", "mig", "-lgi"): "lgi.txt",
    ("nvidia-smi", "mig", "-lgip"): "lgip.txt",
    ("nvidia-smi", "mig", "-lgipp"): "lgipp.txt",
}
GPU0 = "GPU-5d3c0a7e-8b1f-4f7e-9c3a-2e6b1d4f8a90"
GPU1 = "GPU-c1e2d3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f"
# (profile, placement start, GPU instance id, MIG uuid, MIG memory MiB), in the order made (MIG index).
LAYOUT = [
    ("3g.40gb", 4, 2, "MIG-2b1f4c6e-0c8d-5a4e-9f37-1d2e3c4b5a61", 40448),
    ("2g.20gb", 0, 3, "MIG-7a9e3d12-4b5c-5e6f-8a7b-9c0d1e2f3a4b", 20096),
    ("1g.10gb", 2, 9, "MIG-0e1f2a3b-4c5d-5e6f-a7b8-c9d0e1f2a3b4", 9984),
    ("1g.10gb", 3, 10, "MIG-9f8e7d6c-5b4a-5392-8170-6f5e4d3c2b1a", 9984),
]


def recorded_node(reading: str = HEADER) -> StubNvml:
    """The recorded node in the pynvml stub: the same GPUs, instances, ids and MIG devices."""
    gpus = [h100(0, mig=True), h100(1)]
    gpus[0].uuid, gpus[1].uuid = GPU0, GPU1
    gpus[1].bus_id = "00000000:2A:00.0"
    stub = StubNvml(gpus, reading=reading)
    b = NvmlBackend(stub.module)
    for profile, start, gi_id, mig_uuid, memory in LAYOUT:
        b.create_instance(GPU0, profile, start)
        gi = gpus[0].gis[-1]
        gi.gi_id = gi_id
        gi.cis[0].uuid, gi.cis[0].memory_mib = mig_uuid, memory
    stub.calls.clear()
    return stub


class Recorded:
    """nvidia-smi answering from the recorded files, with edits; every command it was asked is kept."""

    def __init__(self, edits: dict[str, tuple[str, str]] | None = None) -> None:
        self.edits = edits or {}
        self.ran: list[tuple[str, ...]] = []

    def __call__(self, command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.ran.append(tuple(command))
        name = FILES[tuple(command)]
        text = (RECORDED / name).read_text()
        if name in self.edits:
            old, new = self.edits[name]
            assert old in text, (name, old)
            text = text.replace(old, new)
        return subprocess.CompletedProcess(list(command), 0, text, "")


def run_check(
    stub: StubNvml, run: Recorded | None = None, *args: str
) -> tuple[int, list[str], dict[str, object], Recorded]:
    runner = run or Recorded()
    out = io.StringIO()
    status = gpu_check.main(list(args), backend=lambda: NvmlBackend(stub.module), run=runner, out=out)
    lines = out.getvalue().splitlines()
    return status, lines, json.loads(lines[-1]), runner


@pytest.mark.parametrize("reading", READINGS)
def test_the_recorded_node_agrees_with_bcd_field_by_field(reading: str) -> None:
    stub = recorded_node(reading)
    status, lines, summary, runner = run_check(stub)
    assert [line for line in lines if line.startswith("differs")] == []
    assert status == 0
    assert summary == {
        "gpus": 2,
        "mig_instances": 4,
        "profiles": 7,
        "differences": 0,
        "quick": False,
        "fields": 2 * 8 + 4 * 3 + 4 * 3 + 7 * 7,
    }
    # The only commands run are the read-only listings, and of NVML only queries.
    assert set(runner.ran) == set(gpu_check.READ_ONLY_COMMANDS)
    assert stub.calls and not MUTATING_CALLS & set(stub.calls)


def test_where_the_two_disagree_each_field_is_named() -> None:
    run = Recorded(
        {
            "q.xml": ("<minor_number>1</minor_number>", "<minor_number>3</minor_number>"),
            "L.txt": ("MIG-0e1f2a3b-4c5d-5e6f-a7b8-c9d0e1f2a3b4", "MIG-11111111-4c5d-5e6f-a7b8-c9d0e1f2a3b4"),
            "lgi.txt": ("19        9          2:1", "19        9          6:1"),
            "lgipp.txt": ("Profile ID  9 Placements: {0,4}:4", "Profile ID  9 Placements: {0,2,4}:4"),
        }
    )
    status, lines, summary, _ = run_check(recorded_node(), run)
    assert status == 1 and summary["differences"] == 5
    assert [line for line in lines if line.startswith("differs")] == [
        f"differs: GPU 0 {GPU0} GPU instance 9: placement: bcd '2:1', nvidia-smi '6:1'",
        f"differs: GPU 0 {GPU0} MIG device GI 9 CI 0: MIG uuid: bcd 'MIG-0e1f2a3b-4c5d-5e6f-a7b8-c9d0e1f2a3b4',"
        " nvidia-smi 'MIG-11111111-4c5d-5e6f-a7b8-c9d0e1f2a3b4'",
        f"differs: GPU 0 {GPU0} profile 9: placements: bcd '{{0,4}}:4', nvidia-smi mig -lgipp '{{0,2,4}}:4'",
        f"differs: GPU 0 {GPU0} profile 9: placements (catalog): bcd '{{0,4}}:4', nvidia-smi mig -lgipp"
        " '{0,2,4}:4'",
        f"differs: GPU 1 {GPU1}: minor number: bcd 1, nvidia-smi 3",
    ]


def test_mig_devices_bcd_cannot_find_are_differences_never_the_gpu() -> None:
    """A driver whose MIG device indexes answer with the parent GPU: bcd finds no MIG device for its
    compute instances and leaves them out (never reporting the GPU's uuid for them), and the check
    names each one against what nvidia-smi lists."""
    stub = recorded_node(HEADER)
    stub.module.nvmlDeviceGetMigDeviceHandleByIndex = lambda device, index: device
    status, lines, summary, _ = run_check(stub, None, "--quick")
    differs = [line for line in lines if line.startswith("differs")]
    assert status == 1 and summary["differences"] == 8 == len(differs)
    assert sum("bcd left out GPU instance" in line and "not listed" in line for line in differs) == 4
    assert sum("nvidia-smi lists it (MIG-" in line and "bcd does not" in line for line in differs) == 4
    assert not any("MIG uuid: bcd 'GPU-" in line for line in lines)
    assert any(
        line.startswith(f"note: GPU 0 {GPU0}: bcd says unhealthy: cannot read the GPU's MIG devices")
        for line in lines
    )


def test_quick_compares_gpus_and_instances_only() -> None:
    status, _, summary, runner = run_check(recorded_node(DRA), None, "--quick")
    assert (status, summary["profiles"], summary["quick"]) == (0, 0, True)
    assert set(runner.ran) == {
        ("nvidia-smi", "-q", "-x"),
        ("nvidia-smi", "-L"),
        ("nvidia-smi", "mig", "-lgi"),
    }


def test_a_missing_nvidia_smi_is_status_2() -> None:
    def missing(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(2, "No such file or directory", "nvidia-smi")

    out = io.StringIO()
    stub = recorded_node()
    status = gpu_check.main([], backend=lambda: NvmlBackend(stub.module), run=missing, out=out)
    lines = out.getvalue().splitlines()
    assert status == 2 and lines[0].startswith("missing: nvidia-smi is not installed")
    assert json.loads(lines[-1])["missing"].startswith("nvidia-smi is not installed")


def test_missing_nvml_is_status_2() -> None:
    out = io.StringIO()
    status = gpu_check.main(
        [], backend=lambda: NvmlBackend(StubNvml([], library_missing=True).module), run=Recorded(), out=out
    )
    assert status == 2 and "libnvidia-ml.so.1 not found" in out.getvalue().splitlines()[0]


def test_a_listing_nvidia_smi_refuses_is_a_difference() -> None:
    stub = recorded_node()

    def refused(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if tuple(command) == ("nvidia-smi", "mig", "-lgi"):
            return subprocess.CompletedProcess(
                list(command), 4, "", "Failed to display GPU instances: Insufficient Permissions\n"
            )
        return Recorded()(command)

    out = io.StringIO()
    status = gpu_check.main([], backend=lambda: NvmlBackend(stub.module), run=refused, out=out)
    text = out.getvalue()
    assert status == 1
    assert (
        "differs: nvidia-smi mig -lgi failed (exit 4): Failed to display GPU instances: Insufficient Permissions"
        in text
    )


def test_no_mig_devices_is_not_a_failure() -> None:
    stub = StubNvml([h100(1)])
    stub.gpus[0].uuid, stub.gpus[0].bus_id = GPU1, "00000000:2A:00.0"
    stub.gpus[0].minor = 1
    xml = (RECORDED / "q.xml").read_text()
    one_gpu = (
        xml[: xml.index('\t<gpu id="00000000:18:00.0">')] + xml[xml.index('\t<gpu id="00000000:2A:00.0">') :]
    )

    def plain(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if tuple(command) == ("nvidia-smi", "-q", "-x"):
            return subprocess.CompletedProcess(list(command), 0, one_gpu, "")
        if tuple(command) == ("nvidia-smi", "-L"):
            return subprocess.CompletedProcess(
                list(command), 0, f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {GPU1})\n", ""
            )
        return subprocess.CompletedProcess(list(command), 6, "No MIG-enabled devices found.\n", "")

    stub.gpus[0].minor = 1
    out = io.StringIO()
    status = gpu_check.main([], backend=lambda: NvmlBackend(stub.module), run=plain, out=out)
    assert status == 0, out.getvalue()


def test_only_read_only_commands_can_run() -> None:
    with pytest.raises(ValueError, match="not a read-only command: nvidia-smi -mig 1"):
        gpu_check._smi(Recorded(), ("nvidia-smi", "-mig", "1"), gpu_check.Check())
    for command in gpu_check.READ_ONLY_COMMANDS:
        assert command[0] == "nvidia-smi"
        assert not {"-mig", "-r", "--gpu-reset", "-cgi", "-dgi", "-cci", "-dci", "-c", "-pm"} & set(command)
        assert command[1:] in (("-q", "-x"), ("-L",)) or command[2] in ("-lgi", "-lgip", "-lgipp")


def test_the_recorded_outputs_parse_as_nvidia_prints_them() -> None:
    query = gpu_check.parse_query((RECORDED / "q.xml").read_text())
    assert [
        (g.uuid, g.pci_bus_id, g.minor_number, g.mig_current, g.compute_mode, g.memory_mib) for g in query
    ] == [
        (GPU0, "00000000:18:00.0", 0, True, "default", 81559),
        (GPU1, "00000000:2A:00.0", 1, False, "default", 81559),
    ]
    assert [(m.index, m.gi_id, m.ci_id, m.memory_mib) for m in query[0].migs] == [
        (0, 2, 0, 40448),
        (1, 3, 0, 20096),
        (2, 9, 0, 9984),
        (3, 10, 0, 9984),
    ]
    listed = gpu_check.parse_list((RECORDED / "L.txt").read_text())
    assert listed[GPU1] == (1, {})
    assert listed[GPU0][1][3] == ("1g.10gb", LAYOUT[3][3])
    lgi = gpu_check.parse_lgi((RECORDED / "lgi.txt").read_text())
    assert [(g.gi_id, g.profile, g.profile_id, g.start, g.size) for g in lgi[0]] == [
        (9, "1g.10gb", 19, 2, 1),
        (10, "1g.10gb", 19, 3, 1),
        (3, "2g.20gb", 14, 0, 2),
        (2, "3g.40gb", 9, 4, 4),
    ]
    lgip = gpu_check.parse_lgip((RECORDED / "lgip.txt").read_text())[0]
    assert (lgip[20].profile, lgip[20].total, lgip[0].memory_gib, lgip[0].multiprocessors) == (
        "1g.10gb+me",
        1,
        79.25,
        132,
    )
    lgipp = gpu_check.parse_lgipp((RECORDED / "lgipp.txt").read_text())[0]
    assert (lgipp[19], lgipp[5], lgipp[0]) == (((0, 1, 2, 3, 4, 5, 6), 1), ((0,), 4), ((0,), 8))
