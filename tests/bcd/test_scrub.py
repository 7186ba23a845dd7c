"""The devices converger's scrub between tenants, against the fake backend: a released atom is
scrubbed at once and reported once; another tenant's allocation waits (pending, no report) until the
scrub succeeds; a failed scrub is tried again; the tenant that left an atom gets it back unscrubbed;
what the node knows survives a restart."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from better_compute.bcd.devices import DevicesConverger, DevicesPass
from better_compute.bcd.fake import FakeNode
from better_compute.bcd.gpu import GpuError, ZeroingFailed
from better_compute.bcd.inventory import mig_instances
from better_compute.bcd.logs import Log
from better_compute.bcd.node_tree import simulated
from better_compute.bcd.scrub import Scrubber, ScrubState, Target
from better_compute.domain.fleet.atoms import atom_id_for, mig_atom_key
from better_compute.wire.nodes import NodeSpecPublic
from tests.builders import fleet_spec


def spec_of(fake: FakeNode, mode: str, scrub: str, assignments: list[dict[str, Any]]) -> NodeSpecPublic:
    return NodeSpecPublic.model_validate(
        {
            "node": fake.name,
            "generation": 1,
            "gpus": [{"uuid": g.uuid, "migLayout": "all-disabled"} for g in fake.list_gpus()],
            "sharing": {"mode": mode, "replicas": 1, "scrub": scrub},
            "assignments": assignments,
        }
    )


def held(allocation: str, tenant: str, atom: str) -> dict[str, Any]:
    return {"allocationId": allocation, "tenantId": tenant, "atoms": [atom], "env": {}}


class Node:
    """One exclusive node's devices converger over a fake backend, with its state in `tmp`."""

    def __init__(self, tmp: Path, fake: FakeNode | None = None) -> None:
        self.tmp = tmp
        self.fake = fake or FakeNode.from_fleet(fleet_spec(nodes=1, mode="exclusive"), "n")
        self.stream = io.StringIO()
        self.devices = DevicesConverger(
            tmp / "cdi",
            tmp / "env",
            scrubber=Scrubber(self.fake, ScrubState(tmp / "scrub.json")),
            log=Log(self.stream, node="n"),
            node=simulated(tmp / "node-root"),
        )

    def converge(self, scrub: str, *assignments: dict[str, Any], mode: str = "exclusive") -> DevicesPass:
        return self.devices.converge(
            spec_of(self.fake, mode, scrub, list(assignments)), self.fake.list_gpus()
        )

    def logged(self, event: str) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.stream.getvalue().splitlines()]
        return [line for line in lines if line["event"] == event]


def kinds(done: DevicesPass) -> list[tuple[str, Any]]:
    return [(r["kind"], r.get("allocationId") or r.get("atoms")) for r in done.reports]


def test_a_released_gpu_is_reset_and_reported_clean_once(tmp_path: Path) -> None:
    node = Node(tmp_path)
    gpu = node.fake.gpus[0]
    atom = atom_id_for(gpu.uuid, "gpu")
    assert kinds(node.converge("reset", held("res-a", "platform", atom))) == [("AllocationBound", "res-a")]
    assert gpu.resets == 0
    released = node.converge("reset")
    assert kinds(released) == [("AllocationReleased", "res-a"), ("ScrubDone", [atom])]
    assert gpu.resets == 1 and released.settled
    assert kinds(node.converge("reset")) == []  # clean: nothing scrubbed or reported again
    assert gpu.resets == 1


def test_another_tenants_allocation_waits_for_the_scrub_and_a_failed_one_is_tried_again(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path)
    gpu = node.fake.gpus[0]
    atom = atom_id_for(gpu.uuid, "gpu")
    node.converge("zero", held("res-a", "platform", atom))
    node.fake.fail_zeroing(gpu.uuid)
    failed = node.converge("zero", held("res-b", "acme", atom))
    assert kinds(failed) == [("AllocationReleased", "res-a")]  # no ScrubDone, res-b not bound
    assert not failed.settled
    assert not (tmp_path / "env" / "res-b.env").exists()
    assert [e["atom"] for e in node.logged("scrub.failed")] == [atom]
    assert gpu.zeroed == []
    again = node.converge("zero", held("res-b", "acme", atom))
    assert kinds(again) == [] and not again.settled  # still failing: still pending
    node.fake.fail_zeroing(gpu.uuid, False)
    done = node.converge("zero", held("res-b", "acme", atom))
    assert kinds(done) == [("ScrubDone", [atom]), ("AllocationBound", "res-b")]
    assert gpu.zeroed == [None] and done.settled
    assert (tmp_path / "env" / "res-b.env").exists()


def test_the_tenant_that_left_an_atom_gets_it_back_without_a_scrub(tmp_path: Path) -> None:
    node = Node(tmp_path)
    gpu = node.fake.gpus[0]
    atom = atom_id_for(gpu.uuid, "gpu")
    node.converge("reset", held("res-a", "platform", atom))
    back = node.converge("reset", held("res-c", "platform", atom))
    assert kinds(back) == [("AllocationReleased", "res-a"), ("AllocationBound", "res-c")]
    assert gpu.resets == 0


def test_a_restarted_daemon_still_knows_whose_data_is_where(tmp_path: Path) -> None:
    node = Node(tmp_path)
    gpu = node.fake.gpus[0]
    atom = atom_id_for(gpu.uuid, "gpu")
    node.converge("reset", held("res-a", "platform", atom))
    node.fake.fail_resets(gpu.uuid)
    node.converge("reset")  # released; the reset failed
    restarted = Node(tmp_path, node.fake)
    waiting = restarted.converge("reset", held("res-b", "acme", atom))
    assert kinds(waiting) == [] and not waiting.settled
    node.fake.fail_resets(gpu.uuid, False)
    done = restarted.converge("reset", held("res-b", "acme", atom))
    assert kinds(done) == [("ScrubDone", [atom]), ("AllocationBound", "res-b")]


def test_a_mig_instance_is_zeroed_alone(tmp_path: Path) -> None:
    fake = FakeNode.from_fleet(fleet_spec(nodes=1, mode="mig", layout="all-3g.40gb"), "n")
    node = Node(tmp_path, fake)
    gpu = fake.list_gpus()[0]
    gi = gpu.instances[1]
    atom = atom_id_for(gpu.uuid, mig_atom_key(mig_instances(gi)[0]))
    node.converge("zero", held("res-a", "platform", atom), mode="mig")
    done = node.converge("zero", mode="mig")
    assert kinds(done) == [("AllocationReleased", "res-a"), ("ScrubDone", [atom])]
    assert fake.gpus[0].zeroed == [gi.gi_id]


def test_a_mig_instance_left_unclean_under_its_driver_ids_is_scrubbed_before_another_tenant_gets_it(
    tmp_path: Path,
) -> None:
    """A scrub record written before MIG atoms were named by their slice keeps an unclean instance
    under its old id (`mig:<gi>.<ci>`): the daemon reads it as the instance's atom now, so another
    tenant waits for the zeroing pass rather than getting the last tenant's data."""
    fake = FakeNode.from_fleet(fleet_spec(nodes=1, mode="mig", layout="all-3g.40gb"), "n")
    gpu = fake.list_gpus()[0]
    gi = gpu.instances[1]
    inst = mig_instances(gi)[0]
    legacy = atom_id_for(gpu.uuid, f"mig:{inst.gi_id}.{inst.ci_id}")
    (tmp_path / "scrub.json").write_text(
        json.dumps({"atoms": {legacy: {"tenant": "platform", "allocation": "res-a", "clean": False}}}),
        encoding="utf-8",
    )
    node = Node(tmp_path, fake)
    atom = atom_id_for(gpu.uuid, mig_atom_key(inst))
    done = node.converge("zero", held("res-b", "acme", atom), mode="mig")
    assert kinds(done) == [("ScrubDone", [atom]), ("AllocationBound", "res-b")]
    assert fake.gpus[0].zeroed == [gi.gi_id]
    assert legacy not in json.loads((tmp_path / "scrub.json").read_text(encoding="utf-8"))["atoms"]


def test_without_a_scrub_policy_nothing_is_scrubbed_and_nothing_waits(tmp_path: Path) -> None:
    node = Node(tmp_path)
    gpu = node.fake.gpus[0]
    atom = atom_id_for(gpu.uuid, "gpu")
    node.converge("none", held("res-a", "platform", atom))
    done = node.converge("none", held("res-b", "acme", atom))
    assert kinds(done) == [("AllocationReleased", "res-a"), ("AllocationBound", "res-b")]
    assert gpu.resets == 0 and gpu.zeroed == []


def test_a_scrub_the_daemon_cannot_run_is_refused_in_words() -> None:
    fake = FakeNode.from_fleet(fleet_spec(nodes=1, mode="mig", layout="all-3g.40gb"), "n")
    scrubber = Scrubber(fake, ScrubState(Path("/nonexistent/scrub.json")))
    uuid = fake.gpus[0].uuid
    with pytest.raises(GpuError, match="whole GPUs only"):
        scrubber.scrub(Target("atm-x", uuid, 1, False), "reset")
    with pytest.raises(GpuError, match="not known"):
        scrubber.scrub(Target("atm-x", uuid, None, True), "shred")
    fake.fail_zeroing(uuid)
    with pytest.raises(ZeroingFailed):
        scrubber.scrub(Target("atm-x", uuid, None, True), "zero")
