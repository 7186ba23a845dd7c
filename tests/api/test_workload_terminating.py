"""Terminating replicas, through the real app and signed node reports, on SQLite and PostgreSQL.

Seed 001, "Capacity checks": "A device allocated to a replica that's terminating still counts as
allocated until the allocation is removed." A replica taken away while its node has it handed over
keeps its devices booked; the node's spec stops assigning it; its node's `AllocationReleased`
removes the allocation, and the devices are free from then on."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from better_compute.storage.store import Store
from tests.node_world import NodeWorld

CLASS = {
    "name": "mig-1g",
    "class": "gpu.mig",
    "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["1g.10gb"]}]},
}


class Fleet(NodeWorld):
    def __init__(self, store: Store, tmp_path: Path) -> None:
        super().__init__(store, tmp_path)
        made = self.http.post("/v1/device-classes", json=CLASS, headers=self.admin)
        assert made.status_code == 201, made.text
        self.ids = {n: self.join(n) for n in ("n-1", "n-2")}

    def workload(self, replicas: int) -> dict[str, Any]:
        body = {"name": "w", "shape": {"device_class": "mig-1g", "device_count": 1}, "replicas": replicas}
        got = self.http.post("/v1/workloads", json=body, headers=self.platform)
        assert got.status_code == 201, got.text
        out: dict[str, Any] = got.json()
        return out

    def scale(self, workload: dict[str, Any], replicas: int) -> dict[str, Any]:
        got = self.http.post(
            f"/v1/workloads/{workload['id']}/scale", json={"replicas": replicas}, headers=self.platform
        )
        assert got.status_code == 200, got.text
        out: dict[str, Any] = got.json()
        return out

    def replicas(self, workload: dict[str, Any]) -> dict[str, str]:
        """The workload's replicas now: allocation id -> the node holding its atom."""
        with self.store.begin() as tx:
            node_of = {a.id: a.node for a in tx.atoms.of_pool("p1")}
            deps = tx.workloads.deployments_of([workload["id"]])[workload["id"]]
            out = {}
            for rs in tx.workloads.replicas_of([d.id for d in deps]).values():
                for _, allocation in rs:
                    (booking,) = [b for b in tx.ledger.allocation_bookings(allocation) if b.state == "live"]
                    out[allocation] = node_of[booking.atom_id]
        return out

    def report(self, node: str, body: dict[str, Any]) -> None:
        self.node(self.ids[node]).nodes.report(node, body)

    def free(self) -> int:
        got = self.http.post(
            "/v1/placement/preview",
            json={"project": "platform", "shape": {"device_class": "mig-1g", "device_count": 1}},
            headers=self.admin,
        )
        assert got.status_code == 200, got.text
        return sum(int(v["freeDevices"]) for v in got.json()["verdicts"])

    def live(self, allocation: str) -> bool:
        with self.store.begin() as tx:
            return any(
                b.state == "live" and b.span.end is None for b in tx.ledger.allocation_bookings(allocation)
            )

    def assigned(self, node: str) -> set[str]:
        return {a.allocation_id for a in self.node(self.ids[node]).nodes.spec(node).assignments}


@pytest.fixture
def fleet(store: Store, tmp_path: Path) -> Fleet:
    return Fleet(store, tmp_path)


def test_a_device_allocated_to_a_terminating_replica_still_counts_as_allocated_until_the_allocation_is_removed(
    fleet: Fleet,
) -> None:
    total = fleet.free()
    made = fleet.workload(2)
    replicas = fleet.replicas(made)
    (first, node_a), (second, node_b) = sorted(replicas.items())
    assert fleet.free() == total - 2
    fleet.report(node_b, {"kind": "AllocationBound", "allocationId": second, "binding": "bound"})
    # scaling down takes the last replica: its node has it handed over, so it terminates
    down = fleet.scale(made, 1)
    (dep,) = down["deployments"]
    assert (dep["placedReplicas"], dep["terminatingReplicas"], down["terminatingReplicas"]) == (1, 1, 1)
    assert fleet.live(second)
    assert fleet.free() == total - 2  # still allocated
    assert second not in fleet.assigned(node_b)  # the node is told to take it back
    assert first in fleet.assigned(node_a)
    shown = fleet.http.get(f"/v1/workloads/{made['id']}", headers=fleet.platform).json()
    assert shown["terminatingReplicas"] == 1
    fleet.report(node_b, {"kind": "AllocationReleased", "allocationId": second})
    assert not fleet.live(second)
    assert fleet.free() == total - 1
    again = fleet.http.get(f"/v1/workloads/{made['id']}", headers=fleet.platform).json()
    assert (again["terminatingReplicas"], again["deployments"][0]["terminatingReplicas"]) == (0, 0)


def test_a_replica_no_node_holds_handed_over_ends_at_once(fleet: Fleet) -> None:
    total = fleet.free()
    made = fleet.workload(3)
    (first, node_a), (second, node_b), (third, node_c) = sorted(fleet.replicas(made).items())
    fleet.report(node_b, {"kind": "AllocationBound", "allocationId": second, "binding": "refused"})
    fleet.report(node_c, {"kind": "AllocationBound", "allocationId": third, "binding": "device-missing"})
    # bound, then released by its node before the scale down: nothing left to wait for
    fleet.report(node_a, {"kind": "AllocationBound", "allocationId": first, "binding": "bound"})
    fleet.report(node_a, {"kind": "AllocationReleased", "allocationId": first})
    assert fleet.live(first)
    down = fleet.scale(made, 0)
    assert (down["terminatingReplicas"], down["deployments"]) == (0, [])
    assert not any(fleet.live(a) for a in (first, second, third))
    assert fleet.free() == total


def test_a_deleted_workloads_handed_over_replicas_hold_their_devices_until_their_node_releases_them(
    fleet: Fleet,
) -> None:
    total = fleet.free()
    made = fleet.workload(2)
    replicas = fleet.replicas(made)
    for allocation, node in replicas.items():
        fleet.report(node, {"kind": "AllocationBound", "allocationId": allocation, "binding": "bound"})
    gone = fleet.http.delete(f"/v1/workloads/{made['id']}", headers=fleet.platform)
    assert gone.status_code == 200, gone.text
    assert fleet.http.get(f"/v1/workloads/{made['id']}", headers=fleet.platform).status_code == 404
    assert fleet.free() == total - 2
    events = fleet.http.get(
        "/v1/events", params={"type": "workload.replicas.terminating"}, headers=fleet.platform
    ).json()["items"]
    assert sorted(a for e in events for a in e["payload"]["allocations"]) == sorted(replicas)
    for allocation, node in sorted(replicas.items()):
        assert allocation not in fleet.assigned(node)
        fleet.report(node, {"kind": "AllocationReleased", "allocationId": allocation})
    assert fleet.free() == total
    # a second release report of the same allocation changes nothing
    allocation, node = next(iter(sorted(replicas.items())))
    fleet.report(node, {"kind": "AllocationReleased", "allocationId": allocation})
    assert fleet.free() == total


@pytest.mark.postgres
def test_a_release_reported_while_a_scale_down_decides_ends_the_replica_it_made_terminate(
    pg_store_url: str, tmp_path: Path
) -> None:
    """A regression: the node's release report committed between the scale down's read of the
    replica's binding (bound) and its commit, so it found no terminating replica to end, and the
    replica stayed terminating, its devices booked, with nothing left to release them. The
    scale down now locks the binding rows it reads: the report waits for it, then ends the
    replica."""
    from sqlalchemy import text

    from better_compute.service.placement.workloads import _take_away
    from tests.conftest import _truncate_all

    store = Store.open(pg_store_url, migrate_schema=False)
    _truncate_all(store)
    try:
        fleet = Fleet(store, tmp_path)
        made = fleet.workload(1)
        ((allocation, node),) = fleet.replicas(made).items()
        fleet.report(node, {"kind": "AllocationBound", "allocationId": allocation, "binding": "bound"})
        done = threading.Event()
        failed: list[BaseException] = []

        def release() -> None:
            try:
                fleet.report(node, {"kind": "AllocationReleased", "allocationId": allocation})
            except BaseException as error:
                failed.append(error)
            finally:
                done.set()

        with store.begin() as tx:
            (dep,) = tx.workloads.deployments_of([made["id"]])[made["id"]]
            gone = tx.workloads.replicas_of([dep.id])[dep.id]
            assert _take_away(tx, dep, gone, fleet.clock.now) == 1
            reporter = threading.Thread(target=release)
            reporter.start()
            with store.engine.connect() as watch:  # the report waits on this write's row lock
                while not done.is_set():
                    waiting = watch.execute(
                        text("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'")
                    ).scalar_one()
                    watch.commit()
                    if waiting:
                        break
            assert not done.is_set()
        reporter.join(timeout=30)
        assert failed == []
        assert not fleet.live(allocation)
        with store.begin() as tx:
            assert tx.workloads.terminating_of([made["id"]]) == []
    finally:
        store.close()


def test_a_replica_terminating_for_a_day_shows_in_doctor_and_an_admin_may_release_it(fleet: Fleet) -> None:
    total = fleet.free()
    made = fleet.workload(1)
    ((allocation, node),) = fleet.replicas(made).items()
    fleet.report(node, {"kind": "AllocationBound", "allocationId": allocation, "binding": "bound"})
    fleet.scale(made, 0)  # the node goes away for good and never releases it

    def stuck() -> list[str]:
        got = fleet.http.get("/v1/doctor", headers=fleet.admin)
        assert got.status_code == 200, got.text
        return [f["subject"] for f in got.json()["findings"] if f["code"] == "workload.terminating-stuck"]

    start = fleet.clock.now
    fleet.clock.now = start + timedelta(hours=23, minutes=59)
    assert stuck() == []
    fleet.clock.now = start + timedelta(hours=24)
    assert stuck() == [allocation]
    assert fleet.free() == total - 1  # no timer freed it
    body = {"type": "replica.release", "payload": {"allocation": allocation}}
    refused = fleet.http.post("/v1/operations", json=body, headers=fleet.platform)
    assert refused.status_code == 403, refused.text
    done = fleet.http.post("/v1/operations", json=body, headers=fleet.admin)
    assert done.status_code == 201, done.text
    op = done.json()
    assert (op["type"], op["status"], op["workloadId"]) == ("replica.release", "succeeded", made["id"])
    assert fleet.http.get(f"/v1/operations/{op['id']}", headers=fleet.platform).json()["id"] == op["id"]
    assert not fleet.live(allocation)
    assert fleet.free() == total
    assert stuck() == []
    again = fleet.http.post("/v1/operations", json=body, headers=fleet.admin)
    assert again.status_code == 404, again.text
    assert again.json()["error"]["message"] == f"no replica with allocation {allocation} is terminating"


def test_an_operation_is_refused_without_what_its_type_needs(fleet: Fleet) -> None:
    made = fleet.workload(1)
    cases = [
        ({"type": "workload.drain", "payload": {"cluster": "c1"}}, "workloadId"),
        ({"type": "replica.release", "payload": {"cluster": "c1"}}, "payload"),
        ({"type": "replica.release", "workloadId": made["id"], "payload": {"allocation": "a"}}, "workloadId"),
        ({"type": "workload.drain", "workloadId": made["id"], "payload": {"allocation": "a"}}, "payload"),
    ]
    for body, field in cases:
        got = fleet.http.post("/v1/operations", json=body, headers=fleet.admin)
        assert got.status_code == 400, (body, got.text)
        assert got.json()["error"]["code"] == "INVALID_INPUT"
        assert got.json()["error"]["details"]["field"] == field, got.text


def test_a_forced_drain_counts_the_replicas_it_took_away_and_those_that_terminate(fleet: Fleet) -> None:
    """A regression: a drain that left replicas with nowhere to go emptied the workload while its
    answer did not say how many terminate. Here the workload's one cluster is drained: refused
    without force, naming how many would have nowhere to go; forced, it says what it took away."""
    made = fleet.workload(3)
    replicas = fleet.replicas(made)
    bound = sorted(replicas)[:2]
    for allocation in bound:
        fleet.report(
            replicas[allocation], {"kind": "AllocationBound", "allocationId": allocation, "binding": "bound"}
        )
    (cluster,) = {d["clusterId"] for d in made["deployments"]}
    body = {"type": "workload.drain", "workloadId": made["id"], "payload": {"cluster": cluster}}
    refused = fleet.http.post("/v1/operations", json=body, headers=fleet.platform)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["details"]["replicas"] == 3
    assert all(fleet.live(a) for a in replicas) and fleet.replicas(made) == replicas
    forced = fleet.http.post("/v1/operations", json={**body, "force": True}, headers=fleet.platform)
    assert forced.status_code == 201, forced.text
    result = forced.json()["result"]
    assert (result["removedReplicas"], result["terminatingReplicas"], result["strandedReplicas"]) == (3, 2, 3)
    shown = fleet.http.get(f"/v1/workloads/{made['id']}", headers=fleet.platform).json()
    assert (shown["terminatingReplicas"], shown["unplacedReplicas"], shown["deployments"]) == (2, 3, [])
