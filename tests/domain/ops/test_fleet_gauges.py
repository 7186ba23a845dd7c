"""Nodes by state and the devices allocations hold, as /metrics' fleet gauges count them."""

from __future__ import annotations

from datetime import timedelta

from better_compute.domain.fleet.inventory import MigInstance
from better_compute.domain.fleet.records import Gpu, Node
from better_compute.domain.fleet.replica_states import READY_LEASE
from better_compute.domain.ops.fleet_gauges import HeldDevice, contact_age_seconds, held_devices, node_state
from tests.builders import T0, atom

JUST = timedelta(microseconds=1)


def test_a_node_is_live_within_the_ready_lease_silent_past_it_and_unjoined_until_first_heard() -> None:
    node = Node("n1", "c1", T0)
    assert node_state(node, T0) == "unjoined" and contact_age_seconds(node, T0) is None
    heard = Node("n1", "c1", T0, last_report_at=T0, last_spec_read_at=T0 + timedelta(seconds=30))
    at = T0 + timedelta(seconds=30) + READY_LEASE
    assert node_state(heard, at - JUST) == "live"
    assert node_state(heard, at) == "silent"
    assert contact_age_seconds(heard, at) == READY_LEASE.total_seconds()  # from the later spec read


def _gpu(uuid: str, *instances: MigInstance) -> Gpu:
    return Gpu(
        uuid,
        "n1",
        0,
        "NVIDIA H100 80GB HBM3",
        "H100-80GB",
        81559,
        0,
        (),
        True,
        True,
        bool(instances),
        False,
        instances,
        T0,
    )


def test_held_devices_name_the_gpu_instance_of_a_mig_atom_and_one_row_per_gpu_for_slots() -> None:
    instance = MigInstance("3g.40gb", gi_id=2, ci_id=0, placement_start=4, placement_size=4, uuid="MIG-1")
    gpus = {"GPU-a": _gpu("GPU-a", instance), "GPU-b": _gpu("GPU-b")}
    holders = [
        ("acme", "r-1", atom("GPU-a", "mig:3g.40gb@4")),
        ("acme", "r-1", atom("GPU-a", "mig:2g.20gb@0")),  # no longer reported: no GPU_I_ID to join on
        ("globex", "r-2", atom("GPU-b", "slot:0")),
        ("globex", "r-2", atom("GPU-b", "slot:1")),
        ("acme", "r-3", atom("GPU-b", "slot:2")),
        ("acme", "r-4", atom("GPU-c")),
    ]
    assert held_devices(holders, gpus) == [
        HeldDevice("acme", "r-1", "n1", "GPU-a", "2"),
        HeldDevice("acme", "r-3", "n1", "GPU-b", ""),
        HeldDevice("acme", "r-4", "n1", "GPU-c", ""),
        HeldDevice("globex", "r-2", "n1", "GPU-b", ""),
    ]
