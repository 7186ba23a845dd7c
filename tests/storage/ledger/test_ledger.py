"""The booking ledger's contract, on SQLite and on PostgreSQL alike (docs/concepts.md#the-ledger)."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from sqlalchemy import text

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.kernel.errors import BookingConflict, InvalidInput, InvalidState, NotFound
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import partition_allocation_id
from better_compute.domain.ledger.records import Reservation
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import inventory
from better_compute.service.ledger import ledger
from better_compute.service.ledger.ports import Overlap
from better_compute.storage.store import Store
from tests.builders import T0, at, fleet_spec


@pytest.fixture
def fleet(store: Store) -> Store:
    load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
    return store


def mig_atoms(store: Store, gpu_index: int = 0) -> list[Atom]:
    rows = inventory.list_atoms(store, cls="gpu.mig").items
    gpus = sorted({r.gpu_id for r in rows})
    return [r for r in rows if r.gpu_id == gpus[gpu_index]]


def test_booking_is_exclusive_and_names_when_the_atom_is_free(fleet: Store) -> None:
    atom = mig_atoms(fleet)[0].id
    ledger.book(fleet, [atom], Window(at(0), at(2)), "a1", "acme", T0)
    with pytest.raises(BookingConflict) as err:
        ledger.book(fleet, [atom], Window(at(1), at(3)), "a2", "acme", T0)
    assert err.value.code == "CONFLICT"
    assert err.value.atom_id == atom
    assert err.value.free_from == at(2)
    assert err.value.details == {"atomId": atom, "freeFrom": at(2).isoformat(), "reason": "atom_booked"}
    # Back to back is not an overlap: windows are half-open.
    ledger.book(fleet, [atom], Window(at(2), at(3)), "a3", "acme", T0)


def test_free_from_skips_gaps_too_short_for_the_window(fleet: Store) -> None:
    atom = mig_atoms(fleet)[0].id
    ledger.book(fleet, [atom], Window(at(0), at(2)), "a1", None, T0)
    ledger.book(fleet, [atom], Window(at(3), at(5)), "a2", None, T0)
    with pytest.raises(BookingConflict) as err:
        ledger.book(fleet, [atom], Window(at(1), at(3)), "a3", None, T0)
    assert err.value.free_from == at(5)


def test_open_ended_booking_is_never_free(fleet: Store) -> None:
    atom = mig_atoms(fleet)[0].id
    ledger.book(fleet, [atom], Window(at(1)), "a1", None, T0)
    with pytest.raises(BookingConflict) as err:
        ledger.book(fleet, [atom], Window(at(5), at(6)), "a2", None, T0)
    assert err.value.free_from is None
    # ...but the time before it is still bookable.
    ledger.book(fleet, [atom], Window(at(0), at(1)), "a3", None, T0)


def test_booking_a_set_is_all_or_nothing(fleet: Store) -> None:
    a, b, c = (r.id for r in mig_atoms(fleet)[:3])
    ledger.book(fleet, [c], Window(at(0), at(1)), "held", None, T0)
    with pytest.raises(BookingConflict) as err:
        ledger.book(fleet, [a, b, c], Window(at(0), at(1)), "set", None, T0)
    assert err.value.atom_id == c
    with fleet.read() as tx:
        assert tx.ledger.allocation_bookings("set") == []
    ledger.book(fleet, [a, b], Window(at(0), at(1)), "set", None, T0)


def test_release_ends_now_and_frees_the_rest(fleet: Store) -> None:
    atom = mig_atoms(fleet)[0].id
    ledger.book(fleet, [atom], Window(at(0), at(4)), "a1", None, T0)
    assert ledger.release(fleet, "a1", at(1)) == 1
    with fleet.read() as tx:
        (booking,) = tx.ledger.allocation_bookings("a1")
    assert booking.span == Window(at(0), at(1))
    ledger.book(fleet, [atom], Window(at(1), at(4)), "a2", None, T0)


def test_cancel_before_start_and_refuse_after(fleet: Store) -> None:
    atom = mig_atoms(fleet)[0].id
    ledger.book(fleet, [atom], Window(at(2), at(4)), "a1", None, T0)
    with pytest.raises(InvalidState):
        ledger.cancel(fleet, "a1", at(3))
    assert ledger.cancel(fleet, "a1", at(1)) == 1
    ledger.book(fleet, [atom], Window(at(2), at(4)), "a2", None, T0)
    with pytest.raises(NotFound):
        ledger.cancel(fleet, "nope", at(1))


def test_parent_of_a_split_gpu_cannot_be_booked(fleet: Store) -> None:
    parent = next(r for r in inventory.list_atoms(fleet, cls="gpu").items)
    assert not parent.bookable
    with pytest.raises(InvalidState) as err:
        ledger.book(fleet, [parent.id], Window(at(0), at(1)), "a1", None, T0)
    assert err.value.details["atomIds"] == [parent.id]
    with pytest.raises(InvalidInput):
        ledger.book(fleet, [], Window(at(0), at(1)), "a1", None, T0)


def test_partition_change_books_the_whole_family(fleet: Store) -> None:
    family = mig_atoms(fleet)
    gpu_id = family[0].gpu_id
    change = ledger.book_partition_change(fleet, gpu_id, Window(at(1), at(2)), T0)
    assert isinstance(change, ledger.PartitionChange)
    assert change.booking_id == partition_allocation_id(gpu_id, at(1))
    assert change.booking_id == f"partition:{gpu_id}:2026-12-01T10:00:00Z"
    assert len(change.atom_ids) == 8  # the parent and seven 1g.10gb instances
    with fleet.read() as tx:
        held = tx.ledger.allocation_bookings(change.booking_id)
    assert {b.atom_id for b in held} == set(change.atom_ids)
    assert all(b.tenant_id is None for b in held)
    # While it holds, nothing of the GPU can be booked in the window...
    with pytest.raises(BookingConflict) as err:
        ledger.book(fleet, [family[3].id], Window(at(0), at(3)), "x", None, T0)
    assert err.value.free_from == at(2)
    # ...but the rest of the fleet can.
    ledger.book(fleet, [mig_atoms(fleet, 1)[0].id], Window(at(0), at(3)), "y", None, T0)
    assert ledger.release_partition_change(fleet, change.booking_id, at(1.5)) == 8
    ledger.book(fleet, [family[3].id], Window(at(1.5), at(3)), "z", None, T0)


def test_partition_change_conflicts_while_a_child_is_booked(fleet: Store) -> None:
    family = mig_atoms(fleet)
    ledger.book(fleet, [family[2].id], Window(at(0), at(3)), "child", None, T0)
    result = ledger.book_partition_change(fleet, family[0].gpu_id, Window(at(1), at(2)), T0)
    assert isinstance(result, ledger.PartitionConflict)
    assert result.status == "conflict"
    assert result.free_from == at(3)


def test_partition_change_on_unknown_gpu_is_not_found(fleet: Store) -> None:
    with pytest.raises(NotFound):
        ledger.book_partition_change(fleet, "GPU-nope", Window(at(1), at(2)), T0)
    with pytest.raises(NotFound):
        ledger.release_partition_change(fleet, "partition:GPU-nope:2026-12-01T10:00:00Z", T0)


def test_release_partition_change_accepts_one_of_its_booking_ids(fleet: Store) -> None:
    gpu_id = mig_atoms(fleet)[0].gpu_id
    change = ledger.book_partition_change(fleet, gpu_id, Window(at(1), at(2)), T0)
    assert isinstance(change, ledger.PartitionChange)
    with fleet.read() as tx:
        one = tx.ledger.allocation_bookings(change.booking_id)[0].id
    assert re.fullmatch(r"bkg-[0-9]+", one)
    assert ledger.release_partition_change(fleet, one, at(0)) == 8


def test_a_reservation_commit_with_an_unbookable_atom_writes_nothing(fleet: Store) -> None:
    from better_compute.service.ledger.ports import NotBookable

    good = mig_atoms(fleet)[0].id
    parent = next(r for r in inventory.list_atoms(fleet, cls="gpu").items).id
    row = Reservation(
        id="rsv-test",
        tenant_id="acme",
        pool_id="p1",
        status="scheduled",
        starts_at=at(0),
        ends_at=at(1),
        devices=(),
        gpu_count=0,
        gpu_slices=2,
        counts={"gpu.mig": 2},
        fingerprint="x",
        created_at=T0,
    )
    with pytest.raises(NotBookable), fleet.begin() as tx:
        tx.reservations.commit(row, [good, parent], T0)
    with fleet.read() as tx:
        assert tx.reservations.get("rsv-test") is None
        assert tx.ledger.allocation_bookings("rsv-test") == []
    ledger.book(fleet, [good], Window(at(0), at(1)), "after", None, T0)


def test_an_extension_over_another_booking_is_refused_by_the_store_itself(fleet: Store) -> None:
    """The last fence for `reservations.extend`: the write itself refuses (PostgreSQL's exclusion
    constraint; SQLite's check under its one writer), whatever the use case read before it."""
    from better_compute.domain.ledger.events import LedgerExtended
    from better_compute.service.ledger.ports import Overlap

    atom = mig_atoms(fleet)[0].id
    ledger.book(fleet, [atom], Window(at(0), at(2)), "a1", "acme", T0)
    ledger.book(fleet, [atom], Window(at(3), at(5)), "a2", "acme", T0)
    with pytest.raises(Overlap) as refused, fleet.begin() as tx:
        tx.ledger.extend_allocation("a1", at(4), LedgerExtended("a1", at(4)), T0)
    assert refused.value.atom_id == atom
    with fleet.read() as tx:
        assert [b.span for b in tx.ledger.allocation_bookings("a1")] == [Window(at(0), at(2))]
    with fleet.begin() as tx:  # up to the next booking's start is free
        assert tx.ledger.extend_allocation("a1", at(3), LedgerExtended("a1", at(3)), T0) == 1
    with fleet.read() as tx:
        assert [b.span for b in tx.ledger.allocation_bookings("a1")] == [Window(at(0), at(3))]


def test_try_book_answers_false_on_a_taken_atom_and_the_transaction_goes_on(fleet: Store) -> None:
    a, b, c = (r.id for r in mig_atoms(fleet)[:3])
    ledger.book(fleet, [b], Window(at(0)), "held", None, T0)
    with fleet.begin() as tx:
        assert tx.ledger.try_book([a, b], Window(at(0)), "first", "acme", T0) is False
        # After the refusal (an aborted statement on PostgreSQL) the same transaction still books.
        assert tx.ledger.try_book([a, c], Window(at(0)), "second", "acme", T0) is True
        tx.ledger.book([mig_atoms(fleet)[3].id], Window(at(0)), "third", "acme", T0)
    with fleet.read() as tx:
        assert tx.ledger.allocation_bookings("first") == []
        assert {x.atom_id for x in tx.ledger.allocation_bookings("second")} == {a, c}
        assert len(tx.ledger.allocation_bookings("third")) == 1


def test_tenants_booked_until_is_the_latest_live_tenant_end_on_the_node(fleet: Store) -> None:
    """What the layout gate plans from: tenants' live bookings that end after the instant, on any of
    the node's GPUs; partition holds (no tenant) and ended or cancelled bookings do not count, and
    an open-ended one says so."""
    first, second = mig_atoms(fleet, 0), mig_atoms(fleet, 1)
    node = first[0].node
    assert second[0].node == node  # one node, two GPUs
    with fleet.read() as tx:
        assert tx.ledger.tenants_booked_until(node, at(0)) == (None, False)
    ledger.book(fleet, [first[0].id], Window(at(0), at(3)), "a1", "acme", T0)
    ledger.book(fleet, [second[0].id], Window(at(1), at(5)), "a2", "acme", T0)
    ledger.book(fleet, [second[1].id], Window(at(2), at(9)), "a3", "acme", T0)
    ledger.book(fleet, [first[1].id], Window(at(4)), "hold", None, T0)  # no tenant: a hold
    ledger.cancel(fleet, "a3", T0)
    with fleet.read() as tx:
        assert tx.ledger.tenants_booked_until(node, at(0)) == (at(5), False)
        assert tx.ledger.tenants_booked_until(node, at(5)) == (None, False)
    ledger.book(fleet, [first[2].id], Window(at(6)), "a4", "acme", T0)
    with fleet.read() as tx:
        assert tx.ledger.tenants_booked_until(node, at(0)) == (at(5), True)


def test_book_holds_books_every_gpus_family_under_its_own_allocation_or_nothing(fleet: Store) -> None:
    first, second = mig_atoms(fleet, 0), mig_atoms(fleet, 1)
    ledger.book(fleet, [second[2].id], Window(at(0), at(5)), "a1", "acme", T0)
    groups = {"partition:g0": [a.id for a in first], "partition:g1": [a.id for a in second]}
    with pytest.raises(Overlap), fleet.begin() as tx:  # a tenant holds one atom past the start
        tx.ledger.book_holds(groups, Window(at(4)), T0)
    with fleet.read() as tx:
        assert tx.ledger.allocation_bookings("partition:g0") == []
    with fleet.begin() as tx:
        assert tx.ledger.book_holds(groups, Window(at(5)), T0) == len(first) + len(second)
    with fleet.read() as tx:
        for allocation, ids in groups.items():
            held = tx.ledger.allocation_bookings(allocation)
            assert sorted(b.atom_id for b in held) == sorted(ids)
            assert all(b.tenant_id is None and b.span == Window(at(5)) for b in held)
    with fleet.engine.connect() as conn:  # one `ledger.booked` event per booking, by allocation
        subjects = Counter(
            r[0] for r in conn.execute(text("SELECT subject FROM events WHERE type = 'ledger.booked'"))
        )
    assert {g: subjects[g] for g in groups} == {g: len(ids) for g, ids in groups.items()}


def test_a_gpu_and_a_part_of_it_are_never_booked_at_once_by_the_store_itself(fleet: Store) -> None:
    """The atom rule as the ledger's own fence (PostgreSQL's `bookings_no_family_overlap`, SQLite's
    look-up under its one writer): a GPU is held whole or in parts, never both, whatever admission
    read; one allocation (a layout change's hold) may hold the whole family."""
    from better_compute.domain.ledger.events import LedgerExtended

    part = mig_atoms(fleet)[0]
    parent = next(a for a in inventory.list_atoms(fleet, cls="gpu").items if a.gpu_id == part.gpu_id)
    with fleet.begin() as tx:  # the whole GPU booked, as a ledger written before this fence could hold
        tx.ledger.book([parent.id], Window(at(2), at(4)), "whole", "acme", T0, require_bookable=False)
    with pytest.raises(Overlap), fleet.begin() as tx:
        tx.ledger.book([part.id], Window(at(3), at(5)), "part", "beta", T0)
    with pytest.raises(BookingConflict) as err:
        ledger.book(fleet, [part.id], Window(at(1), at(3)), "part", "beta", T0)
    assert (err.value.atom_id, err.value.free_from) == (part.id, at(4))
    ledger.book(fleet, [part.id], Window(at(0), at(2)), "part", "beta", T0)  # back to back is fine
    with pytest.raises(Overlap), fleet.begin() as tx:  # nor may a part grow into the whole's window
        tx.ledger.extend_allocation("part", at(3), LedgerExtended("part", at(3)), T0)
    other = mig_atoms(fleet, 1)[0]  # the other GPU's parts are not its family
    ledger.book(fleet, [other.id], Window(at(2), at(4)), "other", "beta", T0)
    with fleet.begin() as tx:  # one allocation holds a whole family at once
        family = tx.ledger.family_atom_ids(other.gpu_id)
        hold = partition_allocation_id(other.gpu_id, at(5))
        tx.ledger.book(family, Window(at(5)), hold, None, T0, require_bookable=False)
    with fleet.read() as tx:
        assert tx.ledger.family_overlaps(T0, 10) == []
