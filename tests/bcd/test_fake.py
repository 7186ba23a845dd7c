"""The fake backend refuses what the hardware refuses, and loses what the hardware loses."""

from __future__ import annotations

from pathlib import Path

import pytest

from better_compute.bcd.fake import KEPT_STATE, FakeNode
from better_compute.bcd.fleet_file import read_fleet
from better_compute.bcd.gpu import (
    InstanceInUse,
    InstanceRefused,
    MigNotSupported,
    ResetFailed,
    UnknownGpu,
    UnknownInstance,
)
from better_compute.bcd.inventory import node_report
from better_compute.domain.kernel.errors import InvalidInput, NotFound
from better_compute.entrypoints.fleet import simulated_nodes
from better_compute.storage.store import Store
from tests.builders import T0, fleet_spec

DEMO = "examples/demo-fleet.yaml"


def empty_mig_node(model: str = "H100-80GB") -> tuple[FakeNode, str]:
    node = FakeNode.build("n", model, 2)
    node.apply_layout("all-disabled")
    gpu = node.gpus[0].uuid
    node.set_mig_mode(gpu, True)
    node.reset_gpu(gpu)
    return node, gpu


def placements(node: FakeNode, gpu: str) -> list[tuple[str, int, int]]:
    found = next(g for g in node.list_gpus() if g.uuid == gpu)
    return sorted((i.profile, i.placement_start, i.placement_size) for i in found.instances)


def test_an_instance_is_created_at_the_placement_asked() -> None:
    node, gpu = empty_mig_node()
    made = node.create_instance(gpu, "3g.40gb", 4)
    assert (made.profile, made.placement_start, made.placement_size, made.slices) == ("3g.40gb", 4, 4, 3)
    assert made.compute_instances[0].uuid.startswith("MIG-")
    node.create_instance(gpu, "2g.20gb", 0)
    assert placements(node, gpu) == [("2g.20gb", 0, 2), ("3g.40gb", 4, 4)]


@pytest.mark.parametrize(
    ("profile", "start", "why"),
    [
        ("3g.40gb", 2, "cannot start at 2"),  # 3g starts at 0 or 4 only
        ("2g.20gb", 5, "cannot start at 5"),
        ("1g.24gb", 0, "has no profile 1g.24gb"),  # an H100 NVL profile, not an H100 80GB one
        ("4g.40gb", 0, "overlaps"),  # the 3g.40gb at 0:4 holds 0..3
        ("1g.10gb", 3, "overlaps"),
    ],
)
def test_invalid_unknown_and_overlapping_placements_are_refused(profile: str, start: int, why: str) -> None:
    node, gpu = empty_mig_node()
    node.create_instance(gpu, "3g.40gb", 0)
    before = placements(node, gpu)
    with pytest.raises(InstanceRefused, match=why):
        node.create_instance(gpu, profile, start)
    assert placements(node, gpu) == before


def test_the_profile_limit_is_enforced_where_placements_would_allow_more() -> None:
    node, gpu = empty_mig_node()
    node.create_instance(gpu, "1g.10gb+me", 0)
    with pytest.raises(InstanceRefused, match=r"at most 1 1g\.10gb\+me"):
        node.create_instance(gpu, "1g.10gb+me", 1)


def test_a_full_gpu_takes_nothing_more() -> None:
    node, gpu = empty_mig_node()
    for start in range(7):
        node.create_instance(gpu, "1g.10gb", start)
    with pytest.raises(InstanceRefused, match="overlaps"):
        node.create_instance(gpu, "1g.10gb", 6)


def test_instances_need_mig_mode_and_a_mig_gpu() -> None:
    node = FakeNode.build("n", "H100-80GB", 1)
    gpu = node.gpus[0].uuid
    with pytest.raises(InstanceRefused, match="MIG mode is not enabled"):
        node.create_instance(gpu, "3g.40gb", 0)
    plain = FakeNode.build("p", "L40S-48GB", 1)
    with pytest.raises(InstanceRefused, match="does not support MIG"):
        plain.create_instance(plain.gpus[0].uuid, "1g.10gb", 0)
    with pytest.raises(MigNotSupported):
        plain.set_mig_mode(plain.gpus[0].uuid, True)
    with pytest.raises(UnknownGpu):
        node.create_instance("GPU-nope", "3g.40gb", 0)


def test_a_busy_instance_is_not_destroyed_and_an_idle_one_is() -> None:
    node, gpu = empty_mig_node()
    gi = node.create_instance(gpu, "3g.40gb", 0).gi_id
    node.mark_busy(gpu, gi)
    with pytest.raises(InstanceInUse, match="in use"):
        node.destroy_instance(gpu, gi)
    assert placements(node, gpu) == [("3g.40gb", 0, 4)]
    node.mark_busy(gpu, gi, busy=False)
    node.destroy_instance(gpu, gi)
    assert placements(node, gpu) == []
    with pytest.raises(UnknownInstance):
        node.destroy_instance(gpu, gi)
    with pytest.raises(UnknownInstance):
        node.mark_busy(gpu, gi)


def test_mig_mode_stays_pending_until_a_reset() -> None:
    node = FakeNode.build("n", "A100-80GB", 1)
    gpu = node.gpus[0].uuid
    assert node.set_mig_mode(gpu, True) is True
    report = node.report().gpus[0]
    assert (report.mig_mode_current, report.mig_mode_pending, report.partition_pending) == (False, True, True)
    node.reset_gpu(gpu)
    report = node.report().gpus[0]
    assert (report.mig_mode_current, report.mig_mode_pending) == (True, True)
    assert node.set_mig_mode(gpu, True) is False  # already on: nothing waits


def test_mig_cannot_be_disabled_under_instances() -> None:
    node, gpu = empty_mig_node()
    node.create_instance(gpu, "7g.80gb", 0)
    with pytest.raises(InstanceInUse, match="destroy them"):
        node.set_mig_mode(gpu, False)


def test_a_reset_told_to_fail_fails_and_leaves_the_mode_pending() -> None:
    node = FakeNode.build("n", "H100-80GB", 1)
    gpu = node.gpus[0].uuid
    node.set_mig_mode(gpu, True)
    node.fail_resets(gpu)
    with pytest.raises(ResetFailed, match="did not complete"):
        node.reset_gpu(gpu)
    assert node.report().gpus[0].partition_pending
    node.fail_resets(gpu, fail=False)
    node.reset_gpu(gpu)
    assert not node.report().gpus[0].partition_pending


def test_a_reset_is_refused_while_an_instance_is_busy_and_loses_instances_otherwise() -> None:
    node, gpu = empty_mig_node()
    gi = node.create_instance(gpu, "3g.40gb", 0).gi_id
    node.mark_busy(gpu, gi)
    with pytest.raises(ResetFailed, match="in use"):
        node.reset_gpu(gpu)
    node.mark_busy(gpu, gi, busy=False)
    node.reset_gpu(gpu)
    assert placements(node, gpu) == []


def test_a_reboot_loses_every_instance_and_applies_pending_modes() -> None:
    node = FakeNode.build("n", "H100-80GB", 2)
    node.apply_layout("all-1g.10gb")
    node.mark_busy(node.gpus[0].uuid, 1)
    for gi in [i.gi_id for i in node.gpus[1].instances]:
        node.destroy_instance(node.gpus[1].uuid, gi)
    assert node.set_mig_mode(node.gpus[1].uuid, False) is True
    node.reboot()
    first, second = node.report().gpus
    assert first.mig_mode_current and first.mig_instances == ()
    assert not second.mig_mode_current and not second.partition_pending
    assert node.gpus[0].busy == set()


def test_mig_mode_that_does_not_persist_is_lost_on_reboot() -> None:
    node = FakeNode.build("n", "H100-80GB", 1)
    node.apply_layout("all-3g.40gb")
    node.gpus[0].mig_mode_persists = False
    node.reboot()
    gpu = node.report().gpus[0]
    assert (gpu.mig_mode_current, gpu.mig_mode_pending, gpu.mig_instances) == (False, False, ())


def test_a_recreated_instance_gets_a_new_mig_uuid() -> None:
    node, gpu = empty_mig_node()
    first = node.create_instance(gpu, "3g.40gb", 0)
    node.destroy_instance(gpu, first.gi_id)
    again = node.create_instance(gpu, "3g.40gb", 0)
    assert again.gi_id == first.gi_id
    assert again.compute_instances[0].uuid != first.compute_instances[0].uuid


def test_a_fleet_node_keeps_its_ids_and_layout() -> None:
    spec = read_fleet(DEMO)
    node = FakeNode.from_fleet(spec, "euw-h100-b")
    simulated = next(n for n in simulated_nodes(spec) if n.name == "euw-h100-b")
    assert node.report() == simulated.report() == node_report(node, "euw-h100-b")
    gpu = node.report().gpus[0]
    assert sorted(m.profile for m in gpu.mig_instances) == ["2g.20gb", "2g.20gb", "3g.40gb"]
    assert len(gpu.nvlink_peers) == 7
    # Ids derive from the node name, the GPU index, the GI id and the profile, nothing random.
    assert FakeNode.from_fleet(read_fleet(DEMO), "euw-h100-b").report() == node.report()


def test_an_unknown_fleet_node_is_named() -> None:
    with pytest.raises(NotFound, match=r"no node 'nope'.*euw-h100-b"):
        FakeNode.from_fleet(read_fleet(DEMO), "nope")


def test_read_gpus_describe_health_and_pci() -> None:
    node = FakeNode.build("n", "L40S-48GB", 2, numa_nodes=2)
    node.gpus[1].healthy = False
    first, second = node.list_gpus()
    assert (first.numa_node, second.numa_node) == (0, 1)
    assert first.pci_bus_id == "00000000:18:00.0" and not first.mig_capable
    assert first.health.healthy and second.health.problems == ("marked unhealthy",)
    node.close()


def test_a_kept_node_built_again_finds_its_gpus_as_they_were_left(tmp_path: Path) -> None:
    spec = fleet_spec(nodes=1, layout="all-1g.10gb")
    path = tmp_path / KEPT_STATE
    first = FakeNode.from_fleet(spec, "n").keep(path)
    gpu = first.gpus[0].uuid
    for gi in (1, 2, 3, 4, 5, 6, 7):
        first.destroy_instance(gpu, gi)
    first.create_instance(gpu, "3g.40gb", 0)
    left = first.list_gpus()
    # A daemon started again reads the fleet file (whose layout is all-1g.10gb) and the kept state.
    again = FakeNode.from_fleet(spec, "n").keep(path)
    assert again.list_gpus() == left
    assert placements(again, gpu) == [("3g.40gb", 0, 4)]
    made = again.create_instance(gpu, "3g.40gb", 4)  # numbered after the one made before the restart
    assert made.compute_instances[0].uuid not in {i.compute_instances[0].uuid for i in left[0].instances}


def test_a_kept_node_rebooted_comes_back_without_instances_after_a_restart(tmp_path: Path) -> None:
    spec = fleet_spec(nodes=1, layout="all-1g.10gb")
    path = tmp_path / KEPT_STATE
    node = FakeNode.from_fleet(spec, "n").keep(path)
    node.gpus[0].mig_mode_persists = False  # Hopper: MIG mode is lost on reboot
    node.reboot()
    again = FakeNode.from_fleet(spec, "n").keep(path)
    assert [(g.mig_current, g.instances) for g in again.list_gpus()] == [(False, ()), (True, ())]


def test_a_node_kept_where_no_file_is_starts_from_the_fleet_file_and_writes_it(tmp_path: Path) -> None:
    spec = fleet_spec(nodes=1, layout="all-3g.40gb")
    kept = FakeNode.from_fleet(spec, "n").keep(tmp_path / KEPT_STATE)
    assert kept.list_gpus() == FakeNode.from_fleet(spec, "n").list_gpus()
    again = FakeNode.from_fleet(fleet_spec(nodes=1, layout="all-1g.10gb"), "n").keep(tmp_path / KEPT_STATE)
    assert again.list_gpus() == kept.list_gpus()


def test_a_served_fleet_file_refuses_generic_models_which_replay_alone_simulates(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "tenants: [{id: t}]\n"
        "gpuModels: [{name: T4, memoryGiB: 16}]\n"
        "clusters: [{name: c, region: r, nodes: [{name: n, gpus: {model: T4, count: 2}}]}]\n"
    )
    with pytest.raises(InvalidInput, match=r"gpuModels \(T4\) are for replay fleets only"):
        read_fleet(fleet)


def test_a_replay_fleets_generic_gpus_report_their_name_and_keep_it_as_their_model(store: Store) -> None:
    from better_compute.domain.ops.fleet import parse_fleet
    from better_compute.entrypoints.fleet import load_fleet
    from better_compute.service.fleet import inventory

    spec = parse_fleet(
        {
            "tenants": [{"id": "t"}],
            "gpuModels": [{"name": "V100M32", "memoryGiB": 32}],
            "clusters": [
                {
                    "name": "c",
                    "region": "r",
                    "nodes": [{"name": "n", "gpus": {"model": "V100M32", "count": 2}}],
                }
            ],
            "pools": [
                {
                    "name": "p",
                    "cluster": "c",
                    "mode": "timeslice",
                    "owner": "t",
                    "policy": {"replicas": 4},
                    "nodes": ["n"],
                }
            ],
        }
    )
    gpus = FakeNode.for_node(spec, spec.nodes[0]).report().gpus
    assert [(g.product, g.memory_mib, g.mig_mode_current) for g in gpus] == [("V100M32", 32768, False)] * 2
    load_fleet(store, spec, T0)
    slots = list(inventory.list_atoms(store, pool="p", cls="gpu.slot").items)
    assert len(slots) == 8
    assert {(a.attributes["gpuModel"], a.attributes["vramGiB"]) for a in slots} == {("V100M32", 32)}
