"""CDI spec files for allocations: valid by the CDI spec's rules, one device per allocation, written
whole, removed once."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import jsonschema_rs
import pytest

from better_compute.bcd import cdi

SCHEMA = json.loads((Path(__file__).parent / "cdi_spec.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema_rs.Draft7Validator(SCHEMA)
MIG = "MIG-0b6a3d7e-95a4-4f0e-8f44-2f6d1c7a9b10"


def test_a_mig_allocation_is_one_device_making_exactly_its_instance_visible() -> None:
    spec = cdi.spec_for("rsv-0001", [MIG], {"BC_ALLOCATION": "rsv-0001"})
    VALIDATOR.validate(spec)
    assert spec["cdiVersion"] == "0.6.0" and spec["kind"] == "better-compute.io/gpu"
    (device,) = spec["devices"]
    assert device["name"] == "rsv-0001"
    assert device["containerEdits"]["env"] == ["BC_ALLOCATION=rsv-0001", f"NVIDIA_VISIBLE_DEVICES={MIG}"]
    assert cdi.qualified_name("rsv-0001") == "better-compute.io/gpu=rsv-0001"


def test_an_mps_slot_carries_its_pipe_directory() -> None:
    spec = cdi.spec_for("rsv-0002", ["GPU-1"], mps_pipe_directory="/run/bcd/mps/GPU-1")
    VALIDATOR.validate(spec)
    assert "CUDA_MPS_PIPE_DIRECTORY=/run/bcd/mps/GPU-1" in spec["devices"][0]["containerEdits"]["env"]


def test_the_schema_refuses_what_a_runtime_would_refuse() -> None:
    good = cdi.spec_for("rsv-0003", ["GPU-1"])
    for broken in (
        {**good, "cdiVersion": "0.9.0"},
        {**good, "kind": "better-compute.io"},
        {**good, "devices": []},
        {**good, "extra": 1},
        {**good, "devices": [{"name": "-bad", "containerEdits": {}}]},
    ):
        assert not VALIDATOR.is_valid(broken), broken


@pytest.mark.parametrize(
    "allocation", ["", "-rsv", "rsv-", "rsv/1", "partition:GPU-1:2026-12-01T09:00:00Z/x"]
)
def test_an_allocation_id_that_is_no_device_name_is_refused(allocation: str) -> None:
    with pytest.raises(cdi.CdiError, match="not a valid CDI device name"):
        cdi.spec_for(allocation, ["GPU-1"])


def test_no_devices_is_refused() -> None:
    with pytest.raises(cdi.CdiError, match="no device"):
        cdi.spec_for("rsv-0004", [])


def test_a_spec_is_written_whole_readable_by_runtimes_and_removed_once(tmp_path: Path) -> None:
    root = tmp_path / "cdi"
    path = cdi.write_spec(root, "rsv-0005", cdi.spec_for("rsv-0005", ["GPU-1"]))
    assert path == root / "better-compute.io-gpu_rsv-0005.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    VALIDATOR.validate(json.loads(path.read_text(encoding="utf-8")))
    assert [p.name for p in root.iterdir()] == [path.name]  # no partial file left behind
    assert cdi.remove_spec(root, "rsv-0005") is True
    assert cdi.remove_spec(root, "rsv-0005") is False


def test_env_files_are_sorted_lines_and_refuse_what_cannot_be_one() -> None:
    assert cdi.env_file_text({"B": "2", "A": "1"}) == "A=1\nB=2\n"
    with pytest.raises(cdi.CdiError):
        cdi.env_file_text({"A": "two\nlines"})
    with pytest.raises(cdi.CdiError):
        cdi.env_file_text({"1A": "x"})
