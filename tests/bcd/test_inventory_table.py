"""`bcd inventory`'s table over the real backend: each MIG device's memory, why an instance is left
out, why a GPU is unhealthy, and a warning for a GPU NVML counts but will not name."""

from __future__ import annotations

import sys
from typing import Any

import pynvml
import pytest
from typer.testing import CliRunner

from better_compute.bcd.nvml import NvmlBackend
from better_compute.bcd.nvml_errors import GPU_LOST_NOTE
from better_compute.entrypoints.bcd import bcd_app
from tests.bcd.pynvml_stub import LOST, StubNvml, h100, l40s


def invoke(stub: StubNvml, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.setitem(sys.modules, "pynvml", stub.module)
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(bcd_app, ["inventory", "--nvml", "real", *args])
    return result.exit_code, result.stdout, result.stderr


def cut(stub: StubNvml) -> None:
    b = NvmlBackend(stub.module)
    b.create_instance(stub.gpus[0].uuid, "3g.40gb", 4)
    b.create_instance(stub.gpus[0].uuid, "1g.20gb", 0)


def test_the_table_shows_each_mig_devices_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    stub = StubNvml([h100(0, mig=True), l40s(1)])
    cut(stub)
    status, out, err = invoke(stub, monkeypatch, "--node", "n")
    assert (status, err) == (0, "")
    three = stub.gpus[0].gis[0].cis[0]
    assert f"CI 0 {three.uuid} 40448 MiB" in out and "1g.20gb @0:2" in out and "20090 MiB" in out


def test_the_table_says_why_an_instance_or_a_gpu_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    stub = StubNvml(
        [
            h100(0, mig=True),
            h100(1, errors={**LOST, "nvmlDeviceGetUUID": 0, "nvmlDeviceGetHandleByIndex": 0}),
            l40s(2, errors=dict(LOST)),
        ]
    )
    cut(stub)
    real: Any = stub.module.nvmlDeviceGetMigDeviceHandleByIndex

    def none(device: Any, index: int) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    stub.module.nvmlDeviceGetMigDeviceHandleByIndex = none
    status, out, err = invoke(stub, monkeypatch, "--node", "n")
    assert status == 0
    assert "compute instance 0: not listed: NVML has no MIG device for it" in out
    assert GPU_LOST_NOTE in out
    assert "n: 2 GPUs" in out
    assert err == (
        "warning: GPU 2: not listed: NVML would not give its uuid: "
        "the GPU is lost (it has fallen off the bus or is otherwise inaccessible)\n"
    )
    stub.module.nvmlDeviceGetMigDeviceHandleByIndex = real
    status, out, err = invoke(stub, monkeypatch, "--json")
    assert status == 0 and err.startswith("warning: GPU 2: not listed") and out.startswith("{")
