"""`bcd inventory`: the node report from the active backend, as JSON or a table; one-line errors."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
from typer.testing import CliRunner

from better_compute.bcd.fake import FakeNode
from better_compute.bcd.fleet_file import read_fleet
from better_compute.bcd.inventory import report_json, report_of
from better_compute.entrypoints.bcd import bcd_app
from better_compute.wire.nodes import NodeReportSend
from tests.bcd.pynvml_stub import StubNvml, h100, l40s

DEMO = "examples/demo-fleet.yaml"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "240"}).invoke(bcd_app, ["inventory", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_from_the_fake_backend_is_the_fleet_nodes_report() -> None:
    status, out, err = invoke("--json", "--nvml", "fake", "--fleet", DEMO, "--node", "euw-h100-b")
    assert (status, err) == (0, "")
    body = json.loads(out)
    assert body == report_json(FakeNode.from_fleet(read_fleet(DEMO), "euw-h100-b").report())
    assert body["node"] == "euw-h100-b" and body["report"]["kind"] == "Inventory"
    assert len(body["report"]["gpus"]) == 8
    gpu = body["report"]["gpus"][0]
    assert set(gpu) == {
        "uuid",
        "product",
        "memoryMiB",
        "index",
        "numaNode",
        "nvlinkPeers",
        "healthy",
        "migMode",
        "migInstances",
    }
    assert (gpu["product"], gpu["memoryMiB"], gpu["migMode"]) == (
        "NVIDIA H100 80GB HBM3",
        81920,
        {"current": True, "pending": True},
    )
    assert [(m["profile"], m["placementStart"], m["placementSize"]) for m in gpu["migInstances"]] == [
        ("3g.40gb", 4, 4),
        ("2g.20gb", 0, 2),
        ("2g.20gb", 2, 2),
    ]
    assert all(m["uuid"].startswith("MIG-") and m["ciId"] == 0 for m in gpu["migInstances"])


def test_a_node_without_mig_has_no_instances() -> None:
    status, out, _ = invoke("--json", "--nvml", "fake", "--fleet", DEMO, "--node", "euw-l40s-1")
    gpus = json.loads(out)["report"]["gpus"]
    assert status == 0 and len(gpus) == 4
    assert all(not g["migMode"]["current"] and g["migInstances"] == [] for g in gpus)


def test_the_table_names_each_gpu_and_instance() -> None:
    status, out, _ = invoke("--nvml", "fake", "--fleet", DEMO, "--node", "euw-h100-b")
    assert status == 0
    assert "euw-h100-b: 8 GPUs" in out and "3g.40gb @4:4" in out and "NVIDIA H100" in out


def test_the_real_backend_reads_nvml_only(monkeypatch: pytest.MonkeyPatch) -> None:
    stub = StubNvml([h100(0, mig=True), l40s(1)])
    monkeypatch.setitem(sys.modules, "pynvml", stub.module)
    status, out, err = invoke("--json", "--nvml", "real", "--node", "gpu-7")
    assert (status, err) == (0, "")
    body = json.loads(out)
    assert body["node"] == "gpu-7"
    assert [g["product"] for g in body["report"]["gpus"]] == ["NVIDIA H100 80GB HBM3", "NVIDIA L40S"]
    from better_compute.bcd.nvml import MUTATING_CALLS

    assert not MUTATING_CALLS & set(stub.calls)
    status, out, _ = invoke("--nvml", "real")  # the table, named after this host
    assert status == 0 and "2 GPUs" in out and "PCI" in out


def test_real_without_nvml_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", StubNvml([], library_missing=True).module)
    status, out, err = invoke("--json", "--nvml", "real")
    assert (status, out) == (1, "")
    assert err == (
        "error: NVML is not available on this machine (libnvidia-ml.so.1 not found); "
        "is the NVIDIA driver installed?\n"
    )


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["--nvml", "fake"], 2, "error: --nvml fake needs --fleet FILE and --node NAME\n"),
        (["--nvml", "fake", "--fleet", DEMO], 2, "error: --nvml fake needs --fleet FILE and --node NAME\n"),
        (["--nvml", "real", "--fleet", DEMO], 2, "error: --fleet is for --nvml fake\n"),
        (
            ["--nvml", "fake", "--fleet", "missing.yaml", "--node", "x"],
            1,
            "error: cannot read fleet file missing.yaml",
        ),
        (
            ["--nvml", "fake", "--fleet", DEMO, "--node", "nope"],
            1,
            "error: the fleet file has no node 'nope'",
        ),
    ],
)
def test_errors_are_one_line(args: list[str], status: int, message: str) -> None:
    code, out, err = invoke(*args)
    assert (code, out) == (status, "")
    assert err.startswith(message) and err.count("\n") == 1 and "Traceback" not in err


def test_an_unknown_backend_is_a_usage_error() -> None:
    code, _, err = invoke("--nvml", "gpu")
    assert code == 2 and "gpu" in err


def test_mig_state_unknown_is_sent_only_for_a_gpu_read_in_part_so_an_older_server_takes_the_rest() -> None:
    """`migStateUnknown` is new: a server that does not know it refuses a report carrying it
    (requests refuse unknown fields). A GPU read whole leaves it out, in `bcd inventory --json` and
    in what the client sends."""
    gpus = FakeNode.from_fleet(read_fleet(DEMO), "euw-h100-b").list_gpus()
    read = [dataclasses.replace(gpus[0], partial=True), *gpus[1:]]
    body = report_json(report_of("euw-h100-b", read))
    sent = NodeReportSend.model_validate(body).model_dump(mode="json", exclude_unset=True)
    for report in (body, sent):
        first, *rest = report["report"]["gpus"]
        assert first["migStateUnknown"] is True
        assert not any("migStateUnknown" in g for g in rest)
    whole = report_json(report_of("euw-h100-b", gpus))
    assert "migStateUnknown" not in json.dumps(whole)


@pytest.mark.parametrize("env", [{"COLUMNS": "80"}, {"COLUMNS": None}], ids=["80-columns", "piped"])
def test_inventory_reads_in_80_columns_with_every_uuid_whole(env: dict[str, str | None]) -> None:
    """Regression: the ten-column table was shrunk to the terminal until uuids were cut (`GPU-5f…`)."""
    args = ["--nvml", "fake", "--fleet", DEMO, "--node", "euw-h100-b"]
    report = json.loads(CliRunner(env=env).invoke(bcd_app, ["inventory", "--json", *args]).stdout)["report"]
    result = CliRunner(env=env).invoke(bcd_app, ["inventory", *args])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines) and "…" not in result.stdout
    words = result.stdout.split()
    for gpu in report["gpus"]:
        assert f"GPU {gpu['index']}  {gpu['uuid']}" in lines
        assert all(m["uuid"] in words for m in gpu["migInstances"])


@pytest.mark.parametrize("columns", ["80", "240"])
def test_bcd_usage_errors_use_the_clis_one_error_format_and_exit_2(columns: str) -> None:
    """bcd speaks as better-compute does (docs/cli.md#exit-codes): `error: ...` on one line, where
    help is, exit status 2; its help shows flags without `<bool>`."""
    runner = CliRunner(env={"COLUMNS": columns})
    refused = runner.invoke(bcd_app, ["run", "--server", "http://x"])
    assert refused.exit_code == 2
    assert refused.stderr.splitlines()[0] == "error: No such option: --server"
    assert "╭" not in refused.stderr and "Try 'bcd run --help' for help." in refused.stderr
    shown = runner.invoke(bcd_app, ["--help"])
    assert shown.exit_code == 0 and "<bool>" not in shown.stdout and "--version" in shown.stdout
    assert all(len(line) <= int(columns) for line in shown.stdout.splitlines())
