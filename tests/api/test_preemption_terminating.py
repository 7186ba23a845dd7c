"""A victim its node has handed over terminates, on SQLite and PostgreSQL, through signed node
reports: the preemptor waits for its devices and evicts nobody more meanwhile, and once the node
releases them the retrier places the preemptor before its victim."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.placement import workloads
from better_compute.service.placement.placement_stock import Stock
from better_compute.storage.store import Store
from tests.api.test_workload_terminating import Fleet
from tests.builders import CountingIds


@pytest.fixture
def fleet(store: Store, tmp_path: Path) -> Fleet:
    made = Fleet(store, tmp_path)
    for name, priority, preemptible in (("batch", 1, True), ("prod", 100, False)):
        got = made.http.post(
            "/v1/priority-classes",
            json={"name": name, "priority": priority, "preemptible": preemptible},
            headers=made.admin,
        )
        assert got.status_code == 201, got.text
    return made


def create(fleet: Fleet, name: str, replicas: int, cls: str) -> dict[str, Any]:
    body = {
        "name": name,
        "shape": {"device_class": "mig-1g", "device_count": 1},
        "replicas": replicas,
        "priority_class": cls,
    }
    got = fleet.http.post("/v1/workloads", json=body, headers=fleet.platform)
    assert got.status_code == 201, got.text
    out: dict[str, Any] = got.json()
    return out


def shown(fleet: Fleet, workload: dict[str, Any]) -> dict[str, Any]:
    got = fleet.http.get(f"/v1/workloads/{workload['id']}", headers=fleet.platform)
    assert got.status_code == 200, got.text
    out: dict[str, Any] = got.json()
    return out


def evictions(fleet: Fleet) -> int:
    got = fleet.http.get("/v1/events", params={"type": "workload.preempted"}, headers=fleet.admin)
    assert got.status_code == 200, got.text
    return len(got.json()["items"])


def test_a_preemptor_waits_for_a_terminating_victim_without_evicting_more_and_is_placed_first(
    fleet: Fleet, store: Store
) -> None:
    total = fleet.free()
    filler = create(fleet, "filler", total, "batch")
    running = fleet.replicas(filler)
    assert len(running) == total
    for allocation, node in running.items():
        fleet.report(node, {"kind": "AllocationBound", "allocationId": allocation, "binding": "bound"})

    prod = create(fleet, "prod", 1, "prod")
    (victim,) = [p["allocationId"] for p in prod["preemptions"]]
    assert prod["placedReplicas"] == 0  # its devices come when the node lets the victim go
    assert shown(fleet, prod)["deployments"][0]["phase"] == "admitted"
    assert fleet.live(victim)
    assert evictions(fleet) == 1

    wiring = workloads.Wiring(store, BookingIndex(), Stock(), CountingIds())
    now = fleet.clock.now + timedelta(minutes=1)
    for _ in range(3):  # waiting, it evicts nobody more
        workloads.retry(wiring, now)
    assert evictions(fleet) == 1
    assert shown(fleet, filler)["placedReplicas"] == total - 1

    fleet.report(running[victim], {"kind": "AllocationReleased", "allocationId": victim})
    workloads.retry(wiring, now)
    # the preemptor took the freed device; the victim (placed again only after it) found none
    assert shown(fleet, prod)["placedReplicas"] == 1
    assert shown(fleet, filler)["placedReplicas"] == total - 1
    assert evictions(fleet) == 1
