"""Replay keeps two things of its own up to date from the scratch store's event log rather than
reading them whole at each instant: its record of request sizes (admission's tie-break input) and
its fragmentation gauge's view of which atoms are held. Both must answer what a whole read answers,
through bookings made, ended by time alone, released, cancelled, and starting later."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.replay import scratch
from better_compute.service.ledger import reservations
from better_compute.service.ops.replay import Sandbox
from better_compute.service.ops.replay_demand import ReplayedDemand
from better_compute.service.ops.replay_held import HeldAtoms
from better_compute.service.placement.recorded_demand import RecordedDemand
from tests.service.ops.test_replay import ADMIN, T0, at, fleet_file


@contextmanager
def sandbox() -> Iterator[Sandbox]:
    with scratch(parse_fleet(fleet_file()), T0) as made:
        yield made


def reserve(box: Sandbox, count: int, now: datetime, start: datetime, minutes: int) -> str:
    body = {
        "tenantId": "acme",
        "poolId": "p1",
        "devices": [{"class": "gpu", "count": count}],
        "start": start.isoformat(),
        "duration": f"{minutes * 60}s",
    }
    return reservations.create(box.store, box.index, ADMIN, body, now, box.ids.reservation).reservation.id


def test_the_replays_record_of_request_sizes_is_the_servers_at_every_read() -> None:
    with sandbox() as box:
        kept = ReplayedDemand(box.store)

        def both(now: datetime) -> None:
            assert kept._read("p1", now) == RecordedDemand(box.store)._read("p1", now)

        both(at(0))  # nothing booked yet
        reserve(box, 1, at(1), at(1), 60)
        both(at(2))
        reserve(box, 2, at(3), at(3), 30)
        later = reserve(box, 3, at(4), at(120), 60)  # starts after the next reads: not held yet
        both(at(5))
        reserve(box, 1, at(6), at(6), 600)
        both(at(7))
        whole = kept.whole_reads
        both(at(121))  # the later one has started: in the record now
        assert kept.whole_reads == whole + 1
        reservations.release(box.store, ADMIN, later, at(150))
        both(at(151))
        cancelled = reserve(box, 1, at(152), at(300), 60)
        reservations.cancel(box.store, ADMIN, cancelled, at(153))
        both(at(154))
        reserve(box, 2, at(155), at(155), 60)
        both(at(156))
        # Reads after new bookings alone added them; those after a start, a release or a
        # cancellation counted everything again.
        assert kept.whole_reads < kept.reads


def held_now(box: Sandbox, gpu_of: dict[str, str], now: datetime) -> dict[str, int]:
    """What a whole read of the ledger says each GPU has held at `now`."""
    with box.store.read() as tx:
        live = tx.ledger.live_bookings(now)
    out = dict.fromkeys(set(gpu_of.values()), 0)
    for b in live:
        if b.atom_id in gpu_of and b.starts_at <= now and (b.ends_at is None or now < b.ends_at):
            out[gpu_of[b.atom_id]] += 1
    return out


def test_the_gauges_held_atoms_follow_bookings_made_ended_by_time_released_and_cancelled() -> None:
    with sandbox() as box:
        with box.store.read() as tx:
            nodes = [n.id for n in tx.nodes.page(None, None, None)]
            gpu_of = {a.id: a.gpu_id for a in tx.atoms.of_nodes(nodes) if a.present and a.bookable}
        held = HeldAtoms(gpu_of)
        counted: dict[str, int] = {}

        def same(now: datetime) -> set[str]:
            with box.store.read() as tx:
                held.sync(tx)
            changed = held.changed(now)
            for gpu in changed:
                counted[gpu] = held.booked(gpu, now)[0]
            assert {g: counted.get(g, 0) for g in set(gpu_of.values())} == held_now(box, gpu_of, now)
            return changed

        same(at(0))
        reserve(box, 2, at(1), at(1), 30)
        long = reserve(box, 3, at(2), at(2), 600)
        assert len(same(at(3))) == 5  # the five GPUs booked
        assert len(same(at(20))) == 0  # nothing happened
        assert len(same(at(31))) == 2  # the short one ended by time alone: its two GPUs are free
        reservations.release(box.store, ADMIN, long, at(40))
        assert len(same(at(41))) == 3
        later = reserve(box, 4, at(50), at(100), 60)
        same(at(60))  # booked, not yet started: nothing held
        reservations.cancel(box.store, ADMIN, later, at(70))
        same(at(101))  # cancelled before its start: never held
