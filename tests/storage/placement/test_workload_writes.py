"""A workload's create and a placement's outcome are each written at once (one statement on
PostgreSQL), on both databases alike: all of it, in order, or nothing."""

from __future__ import annotations

from dataclasses import replace

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.placement.commands import parse_workload
from better_compute.domain.placement.events import DeploymentUpdated, WorkloadCreated
from better_compute.domain.placement.workloads import Deployment, Workload
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.kernel.event_tail import Cursor
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet


def _workload() -> Workload:
    raw = {"name": "w", "shape": {"deviceClass": "h100", "deviceCount": 1}, "replicas": 2}
    return Workload("wkl-1", parse_workload(raw, "acme"), 1, T0)


def _created() -> WorkloadCreated:
    return WorkloadCreated("wkl-1", "acme", "w", "h100", 1, 2)


def _deployment(dep_id: str, desired: int) -> Deployment:
    return Deployment(
        id=dep_id,
        workload_id="wkl-1",
        tenant_id="acme",
        cluster_id="c1",
        desired_replicas=desired,
        phase="placed",
        reason=None,
        message="",
        shortfall=0,
        created_at=T0,
        updated_at=T0,
    )


def _updated(dep_id: str, desired: int) -> DeploymentUpdated:
    return DeploymentUpdated(dep_id, "acme", "wkl-1", "c1", "placed", desired, desired, None)


def _workload_events(store: Store) -> list[tuple[str, str]]:
    with store.read() as tx:
        found, _, _ = tx.events.after(Cursor(0))
    return [
        (e.event.TYPE, e.event.subject)
        for e in found
        if e.event.TYPE.split(".")[0] in ("workload", "deployment")
    ]


def test_a_workload_is_created_with_its_event_and_a_name_taken_writes_nothing(store: Store) -> None:
    load_fleet(store, parse_fleet(small_fleet(nodes=1)), T0)
    with store.begin() as tx:
        assert tx.workloads.create(_workload(), _created(), T0)
    with store.begin() as tx:
        assert not tx.workloads.create(replace(_workload(), id="wkl-2"), _created(), T0)
    with store.read() as tx:
        assert tx.workloads.get("wkl-1") is not None
        assert tx.workloads.get("wkl-2") is None
    assert _workload_events(store) == [("workload.created", "wkl-1")]


def test_a_placement_is_recorded_whole_or_not_at_all(store: Store) -> None:
    load_fleet(store, parse_fleet(small_fleet(nodes=1)), T0)
    w = _workload()
    with store.begin() as tx:
        tx.workloads.create(w, _created(), T0)
    placed = replace(w, unplaced=1, reason="insufficient_capacity", generation=2)
    with store.begin() as tx:
        assert tx.workloads.record_placement(
            placed,
            1,
            [(_deployment("dep-1", 1), True)],
            [("dep-1", 0, "dep-1.r0")],
            [_updated("dep-1", 1)],
            T0,
        )
    # a stale generation writes nothing: not the deployment's change, its replica nor its event
    grown = replace(_deployment("dep-1", 2), generation=2)
    with store.begin() as tx:
        assert not tx.workloads.record_placement(
            replace(placed, generation=3),
            1,
            [(grown, False)],
            [("dep-1", 1, "dep-1.r1")],
            [_updated("dep-1", 2)],
            T0,
        )
    with store.read() as tx:
        assert tx.workloads.deployments_of(["wkl-1"])["wkl-1"] == [_deployment("dep-1", 1)]
        assert tx.workloads.replicas_of(["dep-1"])["dep-1"] == [(0, "dep-1.r0")]
        got = tx.workloads.get("wkl-1")
    assert got is not None and (got.unplaced, got.reason, got.generation) == (1, "insufficient_capacity", 2)
    with store.begin() as tx:
        assert tx.workloads.record_placement(
            replace(placed, unplaced=0, reason=None, generation=3),
            2,
            [(grown, False)],
            [("dep-1", 1, "dep-1.r1")],
            [_updated("dep-1", 2)],
            T0,
        )
    with store.read() as tx:
        assert tx.workloads.deployments_of(["wkl-1"])["wkl-1"] == [grown]
        assert tx.workloads.replicas_of(["dep-1"])["dep-1"] == [(0, "dep-1.r0"), (1, "dep-1.r1")]
    assert _workload_events(store) == [
        ("workload.created", "wkl-1"),
        ("deployment.updated", "dep-1"),
        ("deployment.updated", "dep-1"),
    ]
