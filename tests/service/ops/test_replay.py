"""Replay runs the server's own use cases over demand in virtual time: a deployment's recorded
history replayed with its policy unchanged meets the same fate, request by request; a floor added
for one tenant changes its waits and another tenant's preemptions as worked out by hand."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.ops.replay import (
    PolicySet,
    WorkloadAsk,
    check_window,
    parse_demand,
    parse_policy_set,
)
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.records import Quota
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
            {
                "name": "p1",
                "cluster": "c1",
                "mode": "exclusive",
                "owner": "acme",
                "nodes": ["n-1", "n-2"],
                "meter": "gpu.h100.hours",
            }
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
        self.retrier = Retrier(self.wiring, lambda: self.now)

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

    def create(
        tenant: str, name: str, count: int, replicas: int, priority: str
    ) -> Callable[[datetime], None]:
        def go(now: datetime) -> None:
            body = {
                "tenantId": tenant,
                "name": name,
                "shape": shape(count),
                "replicas": replicas,
                "priorityClass": priority,
            }
            ids[name] = workloads.create(w, ADMIN, body, now).id

        return go

    def reserve(now: datetime) -> None:
        asked = {
            "tenantId": "acme",
            "poolId": "p1",
            "devices": [{"class": "gpu", "count": 2}],
            "duration": "4h",
        }
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
    again = replay.run(
        scratch, replay.today_fleet(store), replay.today(store), PolicySet(), past.demand, window
    )

    # What happened, worked out by hand: 8 devices. batch holds 6 from 9:00; the reservation 2
    # from 9:30 to 13:30; prod (4 on one node, priority 100) evicts 4 batch replicas at 10:00 and
    # is deleted at 12:00, when batch is placed again; batch scaled to 9 at 12:30 gets 6 until the
    # reservation ends at 13:30, then 8 of 9.
    batch, rsv, prod = happened.outcomes
    assert (batch.preempted, batch.granted_hours, batch.refused_reason) == (
        4,
        6 + 2 * 2 + 3 + 6 * 1 + 8 * 1.5,
        "insufficient_capacity",
    )
    assert (rsv.granted_hours, prod.granted_hours, prod.wait_s) == (8.0, 8.0, 0.0)
    assert happened.overall.preemptions == 4
    # ... and the replay, on a scratch store of its own, meets the same, request by request.
    assert again.outcomes == happened.outcomes
    assert again.tenants == happened.tenants
    # (the fragmentation share is the replay's own figure: the recorded run has none)
    assert replace(again.overall, fragmentation=None) == happened.overall


def what_if_demand() -> dict[str, Any]:
    return {
        "requests": [
            {
                "kind": "workload",
                "at": T0.isoformat(),
                "tenant": "globex",
                "name": "batch",
                "shape": shape(1),
                "replicas": 8,
                "priorityClass": "batch",
                "until": at(180).isoformat(),
            },
            {
                "kind": "workload",
                "at": at(60).isoformat(),
                "tenant": "acme",
                "name": "svc",
                "shape": shape(1),
                "replicas": 4,
            },
        ]
    }


def test_a_floor_for_one_tenant_ends_its_wait_and_costs_the_other_tenant_the_preemptions_worked_out_by_hand() -> (
    None
):
    """8 devices in c1; globex may use all 8 (a pool row), and runs `batch` (priority 1,
    preemptible) with 8 one-device replicas from 9:00 until it is deleted at 12:00. acme asks for
    `svc`, 4 one-device replicas of the `standard` class (priority 0), at 10:00. The window is
    9:00 to 15:00.

    Today (no floor): svc's priority is below batch's, so it evicts nothing; it waits from 10:00
    until batch is deleted at 12:00: a wait of 7,200 s, then holds 4 devices for 3 h (12 GPU-h).
    globex suffers no preemption and holds 8 devices for 3 h (24 GPU-h).

    With a floor of 4 for acme in c1 (`floorDevices: 4`, `guaranteedDevices: 8`): batch borrows
    acme's unused floor at 9:00 (it is preemptible), and at 10:00 svc takes it back by evicting 4
    batch replicas (`why: floor`), whatever their priority: svc waits 0 s and holds 4 devices for
    5 h (20 GPU-h). globex suffers 4 preemptions; batch holds 8 devices for 1 h and 4 for 2 h
    (16 GPU-h) and is short 4 for those 2 h (8 GPU-h refused, waiting for capacity).

    At 2.50 USD a GPU-hour: 30.00 and 60.00 without the floor, 50.00 and 40.00 with it."""
    window = check_window(T0, at(360))
    demand = parse_demand(what_if_demand())
    base = replay.Today(pool_quotas=(quotas_row("globex"),))
    classes = {
        "priorityClasses": [{"name": "batch", "priority": 1, "preemptible": True}],
        "prices": [{"meter": "gpu.h100.hours", "perHour": "2.50", "currency": "USD"}],
    }
    floor = {
        **classes,
        "quotas": [
            {
                "tenantId": "acme",
                "deviceClass": "h100",
                "scope": "cluster",
                "clusterId": "c1",
                "guaranteedDevices": 8,
                "floorDevices": 4,
            }
        ],
    }
    fleet = parse_fleet(fleet_file())
    without = replay.run(scratch, fleet, base, parse_policy_set(classes), demand, window)
    with_floor = replay.run(scratch, fleet, base, parse_policy_set(floor), demand, window)

    acme, globex = without.tenants["acme"], without.tenants["globex"]
    assert (acme.wait_p50_s, acme.wait_p99_s, acme.gpu_hours_granted) == (7200.0, 7200.0, 12.0)
    assert (globex.preemptions, globex.gpu_hours_granted, globex.gpu_hours_refused) == (0, 24.0, {})
    assert (acme.cost, globex.cost, without.overall.cost, acme.currency) == ("30.00", "60.00", "90.00", "USD")

    acme, globex = with_floor.tenants["acme"], with_floor.tenants["globex"]
    assert (acme.wait_p50_s, acme.wait_p99_s, acme.gpu_hours_granted) == (0.0, 0.0, 20.0)
    assert (globex.preemptions, globex.gpu_hours_granted) == (4, 16.0)
    assert globex.gpu_hours_refused == {"insufficient_capacity": 8.0}
    assert (acme.cost, globex.cost) == ("50.00", "40.00")
    # Every request takes whole GPUs one at a time: no free GPU is ever one they cannot use.
    assert without.overall.fragmentation == with_floor.overall.fragmentation == 0.0


def quotas_row(tenant: str) -> Quota:
    return Quota(tenant, "p1", "gpu", 8, T0)


def test_a_policy_change_naming_a_tenant_the_fleet_lacks_is_refused_by_name() -> None:
    changes = parse_policy_set(
        {"quotas": [{"tenantId": "initech", "deviceClass": "h100", "scope": "fleet", "guaranteedDevices": 1}]}
    )
    with pytest.raises(InvalidInput) as refused:
        replay.run(
            scratch,
            parse_fleet(fleet_file()),
            replay.Today(),
            changes,
            parse_demand(what_if_demand()),
            check_window(T0, at(60)),
        )
    assert (
        refused.value.message
        == "the policy set names tenant(s) ['initech'] that the replayed fleet does not have"
    )


def test_a_window_that_ends_before_it_begins_is_refused() -> None:
    with pytest.raises(InvalidInput) as refused:
        check_window(at(60), T0)
    assert (
        "ends (2026-12-01T09:00:00+00:00) before it begins (2026-12-01T10:00:00+00:00)"
        in refused.value.message
    )


def test_a_replay_repeats_in_whatever_process_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the scratch store's stock took its tie-break among equally good devices from
    the process id, as a server process does, so the same demand replayed in two processes chose
    other atoms and ended with other preemptions and waits."""
    from bench.policy_replay import demand, fleet

    spec = parse_fleet(fleet(4))
    asked = parse_demand(demand(80, random.Random(41)))
    classes = parse_policy_set(
        {
            "priorityClasses": [
                {"name": "batch", "priority": 1, "preemptible": True},
                {"name": "prod", "priority": 100},
            ]
        }
    )
    base = replay.Today(
        pool_quotas=tuple(Quota(t, "p1", "gpu", 32, T0) for t in ("globex", "initech", "umbrella"))
    )
    window = check_window(datetime(2026, 11, 23, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    runs = []
    for pid in (1234, 5678):
        monkeypatch.setattr(os, "getpid", lambda pid=pid: pid)
        runs.append(replay.run(scratch, spec, base, classes, asked, window).outcomes)
    assert runs[0] == runs[1]


def test_the_fragmentation_share_is_the_time_weighted_share_of_free_gpus_the_request_sizes_cannot_use() -> (
    None
):
    """8 GPUs on two nodes of 4; the demand asks for 1 GPU (a: 3 replicas from 9:00) and 2 GPUs on
    one node (b: 1 replica from 10:00 to 11:00), so its request sizes are 1 and 2 GPUs, half each.

    Best fit puts a's 3 replicas on n-1, leaving it 1 free GPU, which a 2-GPU request cannot use:
    node n-1's expected fragment is 1/2 x 0 + 1/2 x 1000 = 500 milli-GPUs. 9:00-10:00: n-2 has 4
    free, share 500 / 5000 = 0.1. 10:00-11:00: b takes 2 of n-2, share 500 / 3000 = 1/6. 11:00-13:00:
    0.1 again. Over the window's 4 hours: (0.1 + 1/6 + 2 x 0.1) / 4 = 0.116667."""
    demand = parse_demand(
        {
            "requests": [
                {"at": T0.isoformat(), "tenant": "acme", "name": "a", "shape": shape(1), "replicas": 3},
                {
                    "at": at(60).isoformat(),
                    "tenant": "acme",
                    "name": "b",
                    "shape": shape(2),
                    "replicas": 1,
                    "until": at(120).isoformat(),
                },
            ]
        }
    )
    done = replay.run(
        scratch, parse_fleet(fleet_file()), replay.Today(), PolicySet(), demand, check_window(T0, at(240))
    )
    assert done.overall.fragmentation == 0.116667
    assert done.tenants["acme"].fragmentation is None


def two_cluster_fleet() -> dict[str, Any]:
    """Two clusters of one node of 4 H100s each, a pool of acme's in each."""
    return {
        "tenants": [{"id": "acme"}],
        "deviceClasses": fleet_file()["deviceClasses"],
        "clusters": [
            {
                "name": c,
                "region": "r1",
                "nodes": [{"name": f"{c}-n", "gpus": {"model": "H100-80GB", "count": 4}}],
            }
            for c in ("c1", "c2")
        ],
        "pools": [
            {
                "name": f"p-{c}",
                "cluster": c,
                "mode": "exclusive",
                "owner": "acme",
                "nodes": [f"{c}-n"],
                "meter": "gpu.h100.hours",
            }
            for c in ("c1", "c2")
        ],
    }


def test_a_recorded_drain_is_replayed_at_its_instant_and_each_request_meets_the_same_fate(
    store: Store,
) -> None:
    """acme's `web` (3 replicas of 1 H100) from 9:00; at 10:00 it is drained from whichever
    cluster holds its replicas (they move to the other, which has room for all 3); at 12:00 it is
    drained, forced, from the other too, so its 3 replicas have nowhere to go and wait unplaced
    until the window ends at 15:00: 3 GPU-h an hour for 3 h granted (9), 3 for 3 h refused (9)."""
    load_fleet(store, parse_fleet(two_cluster_fleet()), T0)
    d = Deployment(store)
    w = d.wiring
    body = {"tenantId": "acme", "name": "web", "shape": shape(1), "replicas": 3}
    web = d.at(T0, lambda now: workloads.create(w, ADMIN, body, now))
    assert isinstance(web, workloads.WorkloadView)
    with store.read() as tx:
        deps = tx.workloads.deployments_of([web.workload.id])[web.workload.id]
    held = sorted(dep.cluster_id for dep in deps)
    assert len(held) == 1, held  # 3 replicas fit in one cluster's 4 GPUs
    other = "c2" if held == ["c1"] else "c1"
    d.at(at(60), lambda now: workloads.drain(w, ADMIN, web.workload.id, held[0], now))
    d.at(at(180), lambda now: workloads.drain(w, ADMIN, web.workload.id, other, now, force=True))
    d.at(at(360))

    window = check_window(T0, at(360))
    past = replay.history(store, window)
    (asked,) = past.demand.asks
    assert isinstance(asked, WorkloadAsk)
    assert asked.drains == ((at(60), held[0], False), (at(180), other, True))
    happened = replay.recorded(store, past, window)
    (recorded_web,) = happened.outcomes
    assert (recorded_web.granted_hours, recorded_web.refused_hours, recorded_web.wait_s) == (9.0, 9.0, 0.0)
    again = replay.run(
        scratch, replay.today_fleet(store), replay.today(store), PolicySet(), past.demand, window
    )
    assert again.outcomes == happened.outcomes
    assert again.tenants == happened.tenants


def test_a_demand_files_drain_steps_are_read_in_order_and_a_bad_force_is_refused_by_name() -> None:
    item = {
        "at": T0.isoformat(),
        "tenant": "acme",
        "name": "web",
        "shape": shape(1),
        "drain": [
            {"at": at(120).isoformat(), "cluster": "c2", "force": True},
            {"at": at(60).isoformat(), "cluster": "c1"},
        ],
    }
    (asked,) = parse_demand({"requests": [item]}).asks
    assert isinstance(asked, WorkloadAsk)
    assert asked.drains == ((at(60), "c1", False), (at(120), "c2", True))
    bad = {**item, "drain": [{"at": at(60).isoformat(), "cluster": "c1", "force": "yes"}]}
    with pytest.raises(InvalidInput) as refused:
        parse_demand({"requests": [bad]})
    assert refused.value.details == {"field": "requests[0].drain[0].force"}
