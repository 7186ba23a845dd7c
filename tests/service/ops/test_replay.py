"""Replay runs the server's own use cases over demand in virtual time: a deployment's recorded
history replayed with its policy unchanged meets the same fate, request by request; a floor added
for one tenant changes its waits and another tenant's preemptions as worked out by hand."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.ops.replay import PolicySet, check_window, parse_demand, parse_policy_set
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.entrypoints.replay import scratch
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ops import replay
from better_compute.service.ops.placement_retry import Retrier
from better_compute.service.placement import priority_classes, workloads
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.tenancy import quotas
from better_compute.storage.store import Store

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="test-admin")
T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def fleet_file() -> dict[str, Any]:
    """One cluster of two nodes of 4 H100s (8 devices), acme's pool, offered to globex."""
    return {
        "tenants": [{"id": "acme"}, {"id": "globex"}],
        "deviceClasses": [
            {
                "name": "h100",
                "class": "gpu",
                "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
            }
        ],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [{"name": "n", "replicas": 2, "gpus": {"model": "H100-80GB", "count": 4}}],
            }
        ],
        "pools": [
            {"name": "p1", "cluster": "c1", "mode": "exclusive", "owner": "acme", "nodes": ["n-1", "n-2"]}
        ],
    }


def shape(count: int) -> dict[str, Any]:
    return {"deviceClass": "h100", "deviceCount": count}


class Deployment:
    """A deployment as the server runs it, in miniature: the use cases the routes call, with the
    placement retrier's pass after each write (the server runs it on the write's wake-up)."""

    def __init__(self, store: Store) -> None:
        self.now = T0
        self.wiring = workloads.Wiring(store, BookingIndex(), Stock(), RandomIds())
        self.retrier = Retrier(self.wiring, lambda: self.now)  # type: ignore[arg-type]

    def at(self, when: datetime, action: Callable[[datetime], object] | None = None) -> object:
        self.now = when
        done = None if action is None else action(when)
        self.retrier.tick()
        return done


def record(store: Store) -> dict[str, str]:
    """Six hours of a deployment: globex's preemptible batch, acme's reservation and a production
    workload that evicts batch replicas, a delete that lets them back, a scale that cannot all be
    placed, and a reservation's end that frees devices for it."""
    load_fleet(store, parse_fleet(fleet_file()), T0)
    priority_classes.create(store, ADMIN, "batch", 1, True, T0)
    priority_classes.create(store, ADMIN, "prod", 100, False, T0)
    quotas.set_quota(store, ADMIN, "globex", "p1", "gpu", 8, T0)
    d = Deployment(store)
    w = d.wiring
    ids: dict[str, str] = {}

    def create(tenant: str, name: str, count: int, replicas: int, priority: str) -> Callable[[datetime], None]:
        def go(now: datetime) -> None:
            body = {"tenantId": tenant, "name": name, "shape": shape(count), "replicas": replicas,
                    "priorityClass": priority}
            ids[name] = workloads.create(w, ADMIN, body, now).id

        return go

    def reserve(now: datetime) -> None:
        asked = {"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 2}], "duration": "4h"}
        ids["rsv"] = reservations.create(store, w.index, ADMIN, asked, now, w.ids.reservation).id

    d.at(T0, create("globex", "batch", 1, 6, "batch"))
    d.at(at(30), reserve)
    d.at(at(60), create("acme", "prod", 4, 1, "prod"))
    d.at(at(180), lambda now: workloads.delete(w, ADMIN, ids["prod"], now))
    d.at(at(210), lambda now: workloads.scale(w, ADMIN, ids["batch"], 9, now))
    d.at(at(270))  # the reservation ends: the retrier finds its devices free
    d.at(at(360))
    return ids


def test_replaying_a_recorded_history_with_its_policy_unchanged_reproduces_each_requests_fate(
    store: Store,
) -> None:
    record(store)
    window = check_window(T0, at(360))
    past = replay.history(store, window)
    assert [type(a).__name__ for a in past.demand.asks] == ["WorkloadAsk", "ReservationAsk", "WorkloadAsk"]
    happened = replay.recorded(store, past, window)
    again = replay.run(scratch, parse_fleet(fleet_file()), replay.today(store), PolicySet(), past.demand, window)

    # What happened, worked out by hand: 8 devices. batch holds 6 from 9:00; the reservation 2
    # from 9:30 to 13:30; prod (4 on one node, priority 100) evicts 4 batch replicas at 10:00 and
    # is deleted at 12:00, when batch is placed again; batch scaled to 9 at 12:30 gets 6 until the
    # reservation ends at 13:30, then 8 of 9.
    batch, rsv, prod = happened.outcomes
    assert (batch.preempted, batch.granted_hours, batch.refused_reason) == (4, 6 + 2 * 2 + 3 + 6 * 1 + 8 * 1.5, "insufficient_capacity")
    assert (rsv.granted_hours, prod.granted_hours, prod.wait_s) == (8.0, 8.0, 0.0)
    assert happened.overall.preemptions == 4
    # ... and the replay, on a scratch store of its own, meets the same, request by request.
    assert again.outcomes == happened.outcomes
    assert again.tenants == happened.tenants
    assert again.overall == happened.overall
