"""Showback (docs/billing.md#showback-endpoints-cost-per-component; seed 003): an endpoint is paid by the
instance, and its cost is shown split per component, each copy at its partition's share of its GPU for the
time it held it, at the endpoint's price per GPU-hour. On SQLite and PostgreSQL, through `bills.get`."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path

from sqlalchemy import text

from better_compute.domain.metering.showback import ShowbackLine
from better_compute.service.endpoints import components, endpoints
from better_compute.service.fleet import inventory
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.service.metering.bills import get_bill
from better_compute.storage.kernel import migrate
from better_compute.storage.store import Store
from tests.node_world import NodeWorld
from tests.service.endpoints.test_endpoints import (
    PLATFORM,
    body,
    component,
    in_service,
    relayout,
    two_instances,
)

HOUR = timedelta(hours=1)
PER_GPU_HOUR = Fraction(2525, 100) / 2
"""The endpoint's 25.25 an instance-hour over its node's two GPUs."""


def showback(world: NodeWorld, since: str, until: str) -> dict[str, ShowbackLine]:
    bill = get_bill(world.store, PLATFORM, "platform", since=since, until=until, now=world.clock.now)
    return {line.component: line for line in bill.showback}


def test_each_component_shows_its_copies_share_of_the_endpoints_cost_for_the_time_they_ran(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    in_service(world)
    start = world.clock.now
    components.create(store, PLATFORM, component("small", 3), start)  # three 2g.20gb: 2/7 each
    components.create(store, PLATFORM, component("big", 1, "mig-3g.40gb"), start)  # 3/7
    world.clock.now = start + HOUR
    components.scale(store, PLATFORM, "small", 1, world.clock.now)
    world.clock.now = start + 2 * HOUR
    components.delete(store, PLATFORM, "big", world.clock.now)
    world.clock.now = start + 3 * HOUR  # the last copy of small still runs: counted up to now
    day = (start - timedelta(days=1)).isoformat(), (start + timedelta(days=1)).isoformat()
    lines = showback(world, *day)
    small = 3 * Fraction(2, 7) + 2 * Fraction(2, 7)  # three copies for 1 h, then one for 2 h
    big = 2 * Fraction(3, 7)
    assert lines["small"].gpu_hours == small and lines["big"].gpu_hours == big
    assert str(lines["small"].amount) == f"{float(small * PER_GPU_HOUR):.2f}" == "18.04"
    assert str(lines["big"].amount) == "10.82"
    assert {line.endpoint for line in lines.values()} == {"chat"}
    # A period sees only its own part: the last half hour holds one copy of small.
    late = showback(world, (start + 2.5 * HOUR).isoformat(), day[1])
    assert late.keys() == {"small"} and late["small"].gpu_hours == Fraction(1, 7)


def test_showback_outlives_the_endpoint_and_shows_in_the_bills_answer(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    in_service(world)
    start = world.clock.now
    components.create(store, PLATFORM, component("small", 2), start)
    world.clock.now = start + HOUR
    endpoints.delete(store, PLATFORM, "chat", world.clock.now)
    world.clock.now = start + 5 * HOUR  # deleted copies bill nothing after their end
    day = (start - timedelta(days=1)).isoformat(), (start + timedelta(days=1)).isoformat()
    assert showback(world, *day)["small"].gpu_hours == 2 * Fraction(2, 7)
    answer = world.http.get(
        "/v1/bills/platform", params={"from": day[0], "to": day[1]}, headers=world.platform
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["showback"] == [
        {"endpoint": "chat", "component": "small", "gpuHours": "0.571429", "amount": "7.21"}
    ]


def test_a_component_made_again_under_its_name_counts_each_hour_once(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    in_service(world)
    start = world.clock.now
    components.create(store, PLATFORM, component("small", 2), start)
    world.clock.now = start + HOUR
    components.delete(store, PLATFORM, "small", world.clock.now)
    components.create(store, PLATFORM, component("small", 1), world.clock.now)  # the name again
    world.clock.now = start + 2 * HOUR
    day = (start - timedelta(days=1)).isoformat(), (start + timedelta(days=1)).isoformat()
    assert showback(world, *day)["small"].gpu_hours == 2 * Fraction(2, 7) + Fraction(2, 7)


def test_a_live_relayout_moves_copies_without_a_copy_ever_holding_two_partitions_at_once(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    daemons = two_instances(world)
    reconciler = Reconciler(store, world.clock, "r1")
    start = world.clock.now
    components.create(store, PLATFORM, component("small", 4), start)
    world.clock.now = start + HOUR
    endpoints.update(store, PLATFORM, relayout(["mig-2g.20gb"] * 3), world.clock.now)
    for step in range(2):
        world.clock.now = start + (2 + step) * HOUR
        for d in daemons:
            d.step(True)
        reconciler.tick()
    assert endpoints.get(store, PLATFORM, "chat", world.clock.now).status == "InService"
    world.clock.now = start + 4 * HOUR
    with store.engine.connect() as conn:
        spans = conn.execute(
            text("SELECT copy, gpu_share, started_at, ended_at FROM copy_spans WHERE component = 'small'")
        ).all()
    by_copy: dict[int, list[tuple[datetime, datetime]]] = {}
    expected = Fraction(0)
    for copy, share, began, stopped in spans:
        started, ended = utc(began), utc(stopped) if stopped is not None else world.clock.now
        by_copy.setdefault(copy, []).append((started, ended))
        expected += Fraction(share) * Fraction(int((ended - started).total_seconds()), 3600)
    assert sorted(by_copy) == [0, 1, 2, 3]
    for held in by_copy.values():  # one partition at a time: spans follow one another
        held.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(held))
    assert sum(1 for _, _, _, ended in spans if ended is None) == 4  # every copy runs again
    assert len(spans) > 4  # the relayout moved copies: their spans closed and new ones opened
    day = (start - timedelta(days=1)).isoformat(), (start + timedelta(days=1)).isoformat()
    assert showback(world, *day)["small"].gpu_hours == expected


def utc(at: datetime | str) -> datetime:
    """A time as the database hands it back (SQLite: text), made aware."""
    parsed = datetime.fromisoformat(at) if isinstance(at, str) else at
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def test_copies_placed_before_the_upgrade_get_an_open_unpriced_span(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    in_service(world)
    components.create(store, PLATFORM, component("small", 3), world.clock.now)
    migrate.downgrade(store.engine, "0021")
    migrate.upgrade(store.engine)
    with store.engine.connect() as conn:
        spans = conn.execute(
            text("SELECT copy, gpu_share, gpu_hour_price, ended_at FROM copy_spans ORDER BY copy")
        ).all()
    assert [(c, share, price, ended) for c, share, price, ended in spans] == [
        (0, "2/7", None, None),
        (1, "2/7", None, None),
        (2, "2/7", None, None),
    ]


def test_copies_on_a_gpu_that_disappears_wait_and_stop_counting(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    daemon, fake = world.daemon("n-1")
    assert daemon.step(False)
    endpoints.create(store, PLATFORM, body(), world.clock.now)
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    start = world.clock.now
    small = components.create(store, PLATFORM, component("small", 4), start)  # every 2g.20gb of n-1
    lost = small.copies[0].gpu_id
    world.clock.now = start + HOUR
    report = fake.report()
    inventory.ingest(
        store, [replace(report, gpus=tuple(g for g in report.gpus if g.uuid != lost))], world.clock.now
    )
    after = components.get(store, PLATFORM, "small", world.clock.now)
    assert sorted(c.state for c in after.copies) == ["pending", "pending", "placed", "placed"]
    assert all(c.gpu_id != lost for c in after.copies if c.state == "placed")
    world.clock.now = start + 2 * HOUR
    day = (start - timedelta(days=1)).isoformat(), (start + timedelta(days=1)).isoformat()
    assert showback(world, *day)["small"].gpu_hours == 4 * Fraction(2, 7) + 2 * Fraction(2, 7)
