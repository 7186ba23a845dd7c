"""Usage read from the ledger, on SQLite and on PostgreSQL alike: the database's sums agree with the
domain's rule applied booking by booking, read twice they are the same, and a booking bills the
share its atom had when it was booked."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

import pytest
from sqlalchemy import text

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.metering import (
    HeldTotal,
    MeteredBooking,
    held,
    hours,
    microseconds,
    usage_of,
)
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import inventory, pools
from better_compute.service.ledger import ledger
from better_compute.storage.store import Store
from tests.builders import T0, at, settle_gate

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="test")

FLEET: dict[str, Any] = {
    "tenants": [{"id": "platform"}, {"id": "acme"}],
    "clusters": [
        {
            "name": "c1",
            "region": "r1",
            "nodes": [
                {"name": "mig", "gpus": {"model": "H100-80GB", "count": 2}},
                {"name": "ts", "gpus": {"model": "H100-80GB", "count": 1}},
                {"name": "mps", "gpus": {"model": "L40S-48GB", "count": 1}},
                {"name": "ex", "gpus": {"model": "A100-80GB", "count": 2}},
            ],
        }
    ],
    "pools": [
        {
            "name": "mig",
            "cluster": "c1",
            "mode": "mig",
            "owner": "platform",
            "policy": {"migLayout": "mixed:3g.40gb+2x2g.20gb"},
            "nodes": ["mig"],
        },
        {
            "name": "ts",
            "cluster": "c1",
            "mode": "timeslice",
            "owner": "platform",
            "policy": {"replicas": 4},
            "nodes": ["ts"],
        },
        {
            "name": "mps",
            "cluster": "c1",
            "mode": "mps",
            "owner": "platform",
            "policy": {"replicas": 3},
            "nodes": ["mps"],
        },
        {"name": "ex", "cluster": "c1", "mode": "exclusive", "owner": "platform", "nodes": ["ex"]},
    ],
}


@pytest.fixture
def fleet(store: Store) -> Store:
    load_fleet(store, parse_fleet(FLEET), T0)
    return store


def bookable(store: Store) -> list[Atom]:
    return [a for a in inventory.list_atoms(store, limit=1000).items if a.bookable]


DAY = Window(at(-9), at(15))  # 2026-12-01, all day


def read(
    store: Store, period: Window, now: datetime, tenant: str | None = None
) -> tuple[list[HeldTotal], list[MeteredBooking]]:
    with store.read() as tx:
        totals = tx.usage.totals(period, now, tenant, None)
        rows: list[MeteredBooking] = []
        after: str | None = None
        while True:
            page = tx.usage.bookings(period, now, tenant, None, after, 3)
            rows.extend(page)
            if len(page) < 3:
                return totals, rows
            after = page[-1].booking_id


def by_key(totals: list[HeldTotal]) -> dict[tuple[str, str | None, Fraction], tuple[int, int]]:
    return {(t.tenant_id, t.pool_id, t.share): (t.microseconds, t.bookings) for t in totals}


def summed(
    rows: list[MeteredBooking], period: Window, now: datetime
) -> dict[tuple[str, str | None, Fraction], tuple[int, int]]:
    """The domain's rule applied to each booking, summed as the database sums."""
    out: dict[tuple[str, str | None, Fraction], tuple[int, int]] = {}
    for row in rows:
        usage = usage_of(row, period, now)
        assert usage is not None, row
        assert usage.held.duration is not None
        key = (row.tenant_id, row.pool_id, row.share)
        micros, count = out.get(key, (0, 0))
        out[key] = (micros + microseconds(usage.held.duration), count + 1)
    return out


@pytest.fixture
def booked(fleet: Store) -> tuple[Store, list[tuple[str, str, Window]]]:
    """A seeded mix: back-to-back bookings of random lengths (to the microsecond) on every atom, some
    released, some open-ended, for two tenants; the last atom is left free (`spare`)."""
    rng = random.Random(7)
    made: list[tuple[str, str, Window]] = []
    n = 0
    for a in bookable(fleet)[:-1]:
        start = at(-12) + timedelta(microseconds=rng.randrange(10**9))
        for _ in range(4):
            length = timedelta(minutes=rng.randrange(5, 400), microseconds=rng.randrange(10**6))
            n += 1
            tenant = rng.choice(("platform", "acme"))
            span = Window(start, start + length)
            ledger.book(fleet, [a.id], span, f"alloc-{n}", tenant, T0)
            made.append((f"alloc-{n}", tenant, span))
            start += length + timedelta(minutes=rng.randrange(0, 60))
        n += 1
        ledger.book(fleet, [a.id], Window(start), f"alloc-{n}", "acme", T0)  # open-ended
        made.append((f"alloc-{n}", "acme", Window(start)))
    for allocation, _, span in made[::5]:
        if span.start < at(2):
            ledger.release(fleet, allocation, max(span.start + timedelta(seconds=1), at(2)))
    return fleet, made


@pytest.mark.parametrize(
    "period",
    [DAY, Window(at(-1), at(3)), Window(at(0), at(0) + timedelta(microseconds=1)), Window(at(-100), at(100))],
    ids=["a day", "four hours", "a microsecond", "every booking"],
)
def test_the_databases_sums_are_the_domain_rule_booking_by_booking(
    booked: tuple[Store, list[Any]], period: Window
) -> None:
    store, _ = booked
    now = at(5)
    totals, rows = read(store, period, now)
    assert rows, "the period holds bookings"
    assert by_key(totals) == summed(rows, period, now)
    assert len({r.booking_id for r in rows}) == len(rows)  # pages neither repeat nor skip
    mine, mine_rows = read(store, period, now, "acme")
    assert {k: v for k, v in by_key(totals).items() if k[0] == "acme"} == by_key(mine)
    assert {r.booking_id for r in mine_rows} == {r.booking_id for r in rows if r.tenant_id == "acme"}


def test_usage_read_twice_is_the_same(booked: tuple[Store, list[Any]]) -> None:
    store, _ = booked
    assert read(store, DAY, at(5)) == read(store, DAY, at(5))


def test_the_rows_are_every_billed_booking_and_nothing_else(booked: tuple[Store, list[Any]]) -> None:
    store, made = booked
    change = ledger.book_partition_change(store, bookable(store)[0].gpu_id, Window(at(-200), at(-199)), T0)
    assert getattr(change, "booking_id", "").startswith("partition:")
    future = made[-1][2].start + timedelta(days=30)
    target = bookable(store)[-1].id
    ledger.book(store, [target], Window(future, future + timedelta(hours=1)), "cancelled-1", "acme", T0)
    ledger.cancel(store, "cancelled-1", T0)
    everything = Window(at(-300), at(2000))
    now = at(5)
    _, rows = read(store, everything, now)
    with store.read() as tx:
        spans = {a: [b.span for b in tx.ledger.allocation_bookings(a)] for a, _, _ in made}
    expected = {a for a, _, _ in made if any(held(s, everything, now) for s in spans[a])}
    assert {r.reservation_id for r in rows} == expected  # no partition change, nothing cancelled


def test_a_booking_bills_the_share_its_atom_had_when_booked(fleet: Store) -> None:
    slot = next(a for a in bookable(fleet) if a.pool_id == "ts")
    ledger.book(fleet, [slot.id], Window(at(0), at(1)), "before", "platform", T0)
    # Two slots instead of four, once the booking is over: the same atom id now is half a GPU.
    pools.update(fleet, ADMIN, "ts", policy={"replicas": 2}, now=at(2))
    settle_gate(fleet, at(2))  # no daemon runs the node: the new count applies at the grant
    again = next(a for a in bookable(fleet) if a.id == slot.id)
    assert again.attributes["slots"] == 2
    ledger.book(fleet, [slot.id], Window(at(3), at(4)), "after", "platform", T0)
    _, rows = read(fleet, DAY, at(5))
    assert {r.reservation_id: r.share for r in rows} == {"before": Fraction(1, 4), "after": Fraction(1, 2)}


def test_a_booking_written_without_its_share_bills_its_atoms(fleet: Store) -> None:
    slot = next(a for a in bookable(fleet) if a.pool_id == "mps")
    with fleet.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO bookings (atom_id, gpu_id, pool_id, class, tenant_id, allocation_id, starts_at,"
                " ends_at, state, created_at) VALUES (:a, :g, 'mps', 'gpu.slot', 'acme', 'by-hand', :s, :e, 'live', :s)"
            ),
            {"a": slot.id, "g": slot.gpu_id, "s": at(0), "e": at(2)},
        )
    totals, rows = read(fleet, DAY, at(5))
    assert [(r.reservation_id, r.share) for r in rows] == [("by-hand", Fraction(33, 100))]
    assert [(t.share, t.microseconds) for t in totals] == [(Fraction(33, 100), 2 * 3_600_000_000)]
    assert totals[0].hours == hours(Fraction(33, 100), 2 * 3_600_000_000) == Fraction(66, 100)


def test_held_time_is_exact_to_the_microsecond_even_just_under_a_second(fleet: Store) -> None:
    # SQLite's date functions keep milliseconds: .999776 read by them is the next whole second.
    whole = next(a for a in bookable(fleet) if a.pool_id == "ex")
    start, end = at(0) + timedelta(microseconds=999_776), at(1) + timedelta(microseconds=999_999)
    ledger.book(fleet, [whole.id], Window(start, end), "fine", "acme", T0)
    totals, rows = read(fleet, DAY, at(5))
    assert [t.microseconds for t in totals] == [3_600_000_223]
    assert summed(rows, DAY, at(5)) == by_key(totals)


def test_migration_0006_gives_atoms_and_earlier_bookings_their_share(fleet: Store) -> None:
    from better_compute.storage.kernel import migrate

    slot = next(a for a in bookable(fleet) if a.pool_id == "mps")
    instance = next(a for a in bookable(fleet) if a.attributes.get("migProfile") == "3g.40gb")
    ledger.book(fleet, [slot.id, instance.id], Window(at(0), at(1)), "earlier", "acme", T0)
    migrate.downgrade(fleet.engine, "0004")
    migrate.upgrade(fleet.engine)
    with fleet.engine.connect() as conn:
        atoms = dict(conn.execute(text("SELECT id, gpu_share FROM atoms")).all())
        booked = dict(conn.execute(text("SELECT atom_id, gpu_share FROM bookings")).all())
    assert (atoms[slot.id], atoms[instance.id]) == ("33/100", "3/7")
    assert booked == {slot.id: "33/100", instance.id: "3/7"}
    assert None not in atoms.values()
