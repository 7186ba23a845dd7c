"""The booking index is a cache of the ledger fed by the event log; late-committing events still count."""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.records import LiveBooking
from better_compute.service.kernel.event_tail import Cursor, EventTail, LogSnapshot
from better_compute.service.ledger.booking_index import KEEP_ENDED, BookingIndex
from better_compute.storage.kernel.events import logged
from tests.builders import T0, at


class _Log:
    """The event log (and an empty ledger) as a fake store shows it: pages of events, each with the
    read's snapshot."""

    def __init__(self, last: int, snapshot: LogSnapshot | None = None) -> None:
        self.last = last
        self.snapshot = snapshot or LogSnapshot()
        self.pages: list[tuple[list[dict[str, Any]], int, LogSnapshot]] = []

    def tail_start(self) -> tuple[int, LogSnapshot]:
        return self.last, self.snapshot

    def live_bookings(self, since: object) -> list[dict[str, Any]]:
        return []

    def after(self, read: Cursor) -> tuple[list[dict[str, Any]], int, LogSnapshot]:
        return self.pages.pop(0) if self.pages else ([], read.last, self.snapshot)


def _apply(
    index: BookingIndex, tx: Any, read: Cursor, events: list[dict[str, Any]], newest: int, snap: LogSnapshot
) -> None:
    """Apply events given as the log stores them (parsed as the store parses them)."""
    index.apply(tx, read, logged(events), newest, snap)


def _tx(log: _Log) -> Any:
    return SimpleNamespace(events=log, ledger=log)


def booked(
    event_id: int, allocation: str, atom: str, start_h: float, end_h: float, tx: int | None = None
) -> dict[str, Any]:
    return {
        "id": event_id,
        "type": "ledger.booked",
        "subject": allocation,
        "payload": {"atoms": [atom], "start": at(start_h).isoformat(), "end": at(end_h).isoformat()},
        "tx": tx,
    }


def test_an_event_that_commits_after_a_later_one_is_not_lost() -> None:
    index = BookingIndex()
    tx: Any = _tx(_Log(last=10, snapshot=LogSnapshot(100)))
    read = index.prepare(tx)
    assert read == Cursor(10, (), 100)
    # Event 12 (transaction 106) is visible while event 11 (transaction 105) has yet to commit.
    _apply(index, tx, read, [booked(12, "b", "atom-b", 0, 1, tx=106)], 12, LogSnapshot(107, frozenset({105})))
    read = index.prepare(tx)
    assert read == Cursor(12, (105,), 107)
    _apply(index, tx, read, [booked(11, "a", "atom-a", 0, 1, tx=105)], 12, LogSnapshot(108))
    assert index.prepare(tx) == Cursor(12, (), 108)
    assert {i.atom_id for i in index.busy(Window(T0, T0 + timedelta(minutes=30)))} == {"atom-a", "atom-b"}


def test_a_slow_transactions_every_event_counts_not_only_its_first() -> None:
    """Defect: a transaction that commits after a later event was seen, and that wrote more than one
    event below that one (a workload's creation, then its replica's booking), lost every event but
    its first: the first marked the transaction done and the others were skipped as seen. The index
    never knew the booking (quota undercounted, the atom offered again) until a full reload."""
    index = BookingIndex()
    tx: Any = _tx(_Log(last=10, snapshot=LogSnapshot(100)))
    read = index.prepare(tx)
    # Transaction 106's event 14 is seen while 105 (events 11, 12 and 13) has yet to commit.
    _apply(index, tx, read, [booked(14, "b", "atom-b", 0, 1, tx=106)], 14, LogSnapshot(107, frozenset({105})))
    read = index.prepare(tx)
    created = {
        "id": 11,
        "type": "workload.created",
        "subject": "w",
        "payload": {"tenantId": "t", "name": "w", "deviceClass": "c", "deviceCount": 1, "replicas": 2},
        "tx": 105,
    }
    events = [created, booked(12, "a", "atom-a", 0, 1, tx=105), booked(13, "c", "atom-c", 0, 1, tx=105)]
    _apply(index, tx, read, events, 14, LogSnapshot(108))
    busy = {i.atom_id for i in index.busy(Window(T0, T0 + timedelta(minutes=30)))}
    assert busy == {"atom-a", "atom-b", "atom-c"}
    assert index.knows_booking_of("atom-a") and index.knows_booking_of("atom-c")


def test_an_event_two_parts_of_a_read_find_is_taken_once() -> None:
    """A read asks for the events of the transactions it saw open and of those from `xmax` on; after
    a read that did not reach the log's end one transaction can be in both, and its events come back
    twice. Each must reach the consumer once (a counting consumer, metering, would count it twice)."""
    tail = EventTail()
    tail.start(10, LogSnapshot(100))
    read = tail.cursor()
    events = logged([booked(8, "a", "atom-a", 0, 1, tx=101), booked(8, "a", "atom-a", 0, 1, tx=101)])
    fresh = tail.take(events, read, 12, LogSnapshot(102))
    assert [e.id for e in fresh] == [8]


def test_invisible_commit_stall_keeps_asking_however_long_it_lasts() -> None:
    """No timer decides (issue: after 30 s an unseen event id was taken as rolled back, and a commit
    that took longer was never counted): the stalled transaction is asked about until a snapshot
    shows it ended, after any number of reads."""
    index = BookingIndex()
    tx: Any = _tx(_Log(last=10, snapshot=LogSnapshot(100)))
    read = index.prepare(tx)
    _apply(index, tx, read, [booked(12, "b", "atom-b", 0, 1, tx=106)], 12, LogSnapshot(107, frozenset({105})))
    for n in range(50):  # other transactions commit; 105 is still in progress in every snapshot
        read = index.prepare(tx)
        assert 105 in read.open
        event = booked(13 + n, f"x{n}", f"atom-x{n}", 0, 1, tx=107 + n)
        _apply(index, tx, read, [event], 13 + n, LogSnapshot(108 + n, frozenset({105})))
    read = index.prepare(tx)
    _apply(index, tx, read, [booked(11, "a", "atom-a", 0, 1, tx=105)], 62, LogSnapshot(200))
    assert "atom-a" in {i.atom_id for i in index.busy(Window(T0, T0 + timedelta(minutes=30)))}
    assert index.prepare(tx).open == ()


def test_a_read_of_an_older_snapshot_changes_nothing() -> None:
    """Admission threads apply their reads in any order: one from an older snapshot, applied after
    a newer one, must not bring back a booking the newer one saw cancelled."""
    index = BookingIndex()
    tx: Any = _tx(_Log(last=10, snapshot=LogSnapshot(100)))
    older = index.prepare(tx)
    newer = index.prepare(tx)
    cancel = {
        "id": 12,
        "type": "ledger.cancelled",
        "subject": "a",
        "payload": {"at": at(0).isoformat()},
        "tx": 102,
    }
    _apply(index, tx, newer, [booked(11, "a", "atom-a", 0, 1, tx=101), cancel], 12, LogSnapshot(103))
    _apply(index, tx, older, [booked(11, "a", "atom-a", 0, 1, tx=101)], 11, LogSnapshot(102))
    assert index.busy(Window(T0, T0 + timedelta(minutes=30))) == []


def test_release_and_cancel_follow_the_ledger() -> None:
    index = BookingIndex()
    tx: Any = _tx(_Log(last=0))
    read = index.prepare(tx)
    _apply(
        index,
        tx,
        read,
        [
            booked(1, "a", "atom-a", 0, 4),
            booked(2, "b", "atom-b", 5, 6),
            {"id": 3, "type": "ledger.released", "subject": "a", "payload": {"at": at(1).isoformat()}},
            {"id": 4, "type": "ledger.cancelled", "subject": "b", "payload": {"at": at(1).isoformat()}},
        ],
        4,
        LogSnapshot(),
    )
    assert [i.atom_id for i in index.busy(Window(at(0), at(10)))] == ["atom-a"]
    assert index.busy(Window(at(1), at(10))) == []


# Lengths that land in each way a booking is filed: by the hour, by the day, in the long set, open-ended.
_MINUTES = st.one_of(
    st.integers(1, 48 * 60),
    st.integers(48 * 60 + 1, 31 * 24 * 60),
    st.integers(31 * 24 * 60 + 1, 120 * 24 * 60),
    st.none(),
)
_BOOKING = st.tuples(st.integers(0, 60 * 24 * 60), _MINUTES)
_CHANGE = st.tuples(st.sampled_from(["released", "cancelled"]), st.integers(0, 60 * 24 * 60))


@settings(max_examples=200, deadline=None)
@given(
    bookings=st.lists(_BOOKING, min_size=1, max_size=25),
    changes=st.dictionaries(st.integers(0, 24), _CHANGE, max_size=8),
    windows=st.lists(st.tuples(st.integers(-24 * 60, 150 * 24 * 60), _MINUTES), min_size=1, max_size=8),
)
def test_busy_is_exactly_the_live_bookings_that_overlap_the_window(
    bookings: list[tuple[int, int | None]],
    changes: dict[int, tuple[str, int]],
    windows: list[tuple[int, int | None]],
) -> None:
    """Whatever their length, and after releases and cancellations, the index finds every booking
    that overlaps a window and no other (checked against a plain scan of the same bookings)."""
    minute = timedelta(minutes=1)
    live: dict[str, tuple[datetime, datetime | None]] = {}
    events: list[dict[str, Any]] = []
    for n, (start_m, length) in enumerate(bookings):
        start, end = T0 + start_m * minute, None if length is None else T0 + (start_m + length) * minute
        live[f"r{n}"] = (start, end)
        payload = {"atoms": [f"atom-{n}"], "start": start.isoformat(), "end": end and end.isoformat()}
        events.append(
            {"id": len(events) + 1, "type": "ledger.booked", "subject": f"r{n}", "payload": payload}
        )
    for n, (kind, at_m) in changes.items():
        if f"r{n}" not in live:
            continue
        moment = T0 + at_m * minute
        events.append(
            {
                "id": len(events) + 1,
                "type": f"ledger.{kind}",
                "subject": f"r{n}",
                "payload": {"at": moment.isoformat()},
            }
        )
        start, end = live.pop(f"r{n}")
        if kind == "released" and start < moment:  # started: ends then; not started: freed whole
            live[f"r{n}"] = (start, moment if end is None or end > moment else end)
    index = BookingIndex()
    tx: Any = _tx(_Log(last=0))
    read = index.prepare(tx)
    _apply(index, tx, read, events, len(events), LogSnapshot())
    for start_m, length in windows:
        window = Window(T0 + start_m * minute, None if length is None else T0 + (start_m + length) * minute)
        expected = {
            f"atom-{name[1:]}"
            for name, (start, end) in live.items()
            if (end is None or end > window.start) and (window.end is None or start < window.end)
        }
        found = [i.atom_id for i in index.busy(window)]
        assert sorted(found) == sorted(expected)
    # Looked up by atom, each live booking is found with its window, and nothing else.
    atoms = [f"atom-{n}" for n in range(len(bookings))]
    held = index.windows_of(atoms)
    assert {a: [(i.start, i.end) for i in held[a]] for a in atoms} == {
        f"atom-{n}": [live[f"r{n}"]] if f"r{n}" in live else [] for n in range(len(bookings))
    }


def test_unbounded_selector_cache_keeps_at_most_matching_cache_shapes() -> None:
    """Distinct selectors, refused requests included, no longer grow a process's memory for ever
    (issue: 20 distinct 1M-value selectors took a process from 113 to 718 MB): a pool keeps the
    matching atoms of the most recently used shapes only."""
    from better_compute.domain.kernel.selectors import parse_selector
    from better_compute.domain.ledger.admission import DeviceRequest
    from better_compute.service.ledger.booking_index import MATCHING_CACHE, PoolAtoms

    pool = PoolAtoms({})
    for n in range(MATCHING_CACHE + 50):
        selector = parse_selector({"matchExpressions": [{"key": "giId", "op": "In", "values": [str(n)]}]})
        pool.matching_by_gpu(DeviceRequest(cls="gpu.mig", count=1, selector=selector))
    assert len(pool._matching) == MATCHING_CACHE


def test_the_tail_says_how_long_a_gap_has_been_open_and_never_gives_up_on_it() -> None:
    clock = {"now": 100.0}
    index = BookingIndex(clock=lambda: clock["now"])
    tx = _tx(_Log(last=10, snapshot=LogSnapshot(100)))
    read = index.prepare(tx)
    tail = index._follower.tail
    assert tail.oldest_open_s() is None
    # Transaction 105 has yet to commit event 11: it is asked about from now on.
    _apply(index, tx, read, [booked(12, "b", "atom-b", 0, 1, tx=106)], 12, LogSnapshot(107, frozenset({105})))
    clock["now"] = 100.0 + 86_400  # a day later it is still asked about, and says so
    assert tail.oldest_open_s() == 86_400
    assert index.prepare(tx) == Cursor(12, (105,), 107)
    _apply(index, tx, index.prepare(tx), [booked(11, "a", "atom-a", 0, 1, tx=105)], 12, LogSnapshot(108))
    assert tail.oldest_open_s() is None
    assert {i.atom_id for i in index.busy(Window(T0, T0 + timedelta(minutes=30)))} == {"atom-a", "atom-b"}


def test_a_pools_atoms_on_cordoned_nodes_are_kept_but_never_offered() -> None:
    from better_compute.service.ledger.booking_index import PoolAtoms
    from tests.builders import atom, device_request

    atoms = [atom("g1", node="n1"), atom("g2", node="n2"), atom("g3", node="n2")]
    pool = PoolAtoms({a.id: a for a in atoms}, frozenset({"n2"}))
    request = device_request("gpu", 1)
    assert list(pool.matching_by_gpu(request)) == ["g1"]
    assert pool.cordoned_matching(request) == 2
    assert pool.kinds().classes == ("gpu",)  # what the pool has, cordoned or not
    assert PoolAtoms({a.id: a for a in atoms}).cordoned_matching(request) == 0


def test_a_cordon_makes_the_index_read_pool_atoms_again_and_a_phase_does_not() -> None:
    from better_compute.domain.fleet.events import ClusterUpdated, NodeCordoned, NodeUncordoned
    from better_compute.domain.kernel.events import LoggedEvent
    from better_compute.service.ledger.booking_index import PoolAtoms

    index = BookingIndex()
    for event, kept in (
        (ClusterUpdated("c1", "draining", "active"), True),
        (NodeCordoned("n1"), False),
        (NodeUncordoned("n1"), False),
    ):
        index._pools["p"] = PoolAtoms({})
        index.apply_event(LoggedEvent(1, None, event))
        assert ("p" in index._pools) is kept, event


def test_workload_events_keep_every_pools_atoms() -> None:
    """A workload's own events change no pool's atoms (its replicas' bookings arrive as ledger
    events): the index keeps its pools' atoms through them, or every placement would read them all
    again (a create over 20 pools took 15 times as long)."""
    from better_compute.domain.fleet.events import NodeInventoryChanged
    from better_compute.domain.kernel.events import LoggedEvent
    from better_compute.domain.placement.events import (
        DeploymentUpdated,
        WorkloadCreated,
        WorkloadDecided,
        WorkloadDeleted,
        WorkloadPreempted,
        WorkloadScaled,
    )

    index = BookingIndex()
    before = index.pool_version("p1")
    for n, event in enumerate(
        [
            WorkloadCreated("wl-1", "acme", "w", "h100", 1, 1),
            WorkloadScaled("wl-1", "acme", 2, 1),
            DeploymentUpdated("dep-1", "acme", "wl-1", "c1", "placed", 2, 2),
            WorkloadDecided("wl-1", "acme", "scale", 2, {"c1": 2}, 0),
            WorkloadPreempted("wl-1", "acme", "c1", "dep-1", ("dep-1.r0",), "wl-2", "priority"),
            WorkloadDeleted("wl-1", "acme", "w"),
        ]
    ):
        index.apply_event(LoggedEvent(n, None, event))
    assert index.pool_version("p1") == before
    index.apply_event(LoggedEvent(9, None, NodeInventoryChanged("n1", 8, 8)))
    assert index.pool_version("p1") != before


def test_a_rolled_back_writes_claims_end_at_once_and_a_committed_ones_after_a_later_catch_up() -> None:
    index = BookingIndex()
    tx: Any = _tx(_Log(last=0))
    index.sync(tx)
    before = index.prepare(tx)  # a request that caught up before the commit below
    index.claim(["atom-a", "atom-b"])
    index.claim(["atom-c"])
    index.release(["atom-c"], committed=False)
    index.release(["atom-a", "atom-b"], committed=True)
    assert index.claimed() == {"atom-a", "atom-b"}
    _apply(index, tx, before, [], 0, LogSnapshot())
    assert index.claimed() == {"atom-a", "atom-b"}  # that catch-up cannot have seen the commit
    after = index.prepare(tx)
    _apply(
        index, tx, after, [booked(1, "r", "atom-a", 0, 4), booked(2, "r", "atom-b", 0, 4)], 2, LogSnapshot()
    )
    assert index.claimed() == set()


def test_an_index_forgets_bookings_ended_before_now_and_answers_from_now_the_same() -> None:
    """A long-running process's index forgets bookings that ended before its requests' present
    (it kept every booking ever made, and each look-up of an hour scanned all of that hour's past
    bookings); one extended past that instant, or open-ended, is kept; look-ups from then on
    answer as before."""
    index = BookingIndex()
    tx: Any = _tx(_Log(last=0))
    read = index.prepare(tx)
    events = [booked(n + 1, f"r{n}", f"atom-{n}", n * 0.1, n * 0.1 + 0.05) for n in range(20)]
    events.append(booked(21, "long", "atom-long", 0, 1))
    events.append(
        {"id": 22, "type": "ledger.extended", "subject": "long", "payload": {"end": at(5).isoformat()}}
    )
    events.append(
        {
            "id": 23,
            "type": "ledger.booked",
            "subject": "open",
            "payload": {"atoms": ["atom-open"], "start": at(0).isoformat(), "end": None},
        }
    )
    _apply(index, tx, read, events, 23, LogSnapshot())
    now = at(1.5)
    windows = [Window(now, now + timedelta(minutes=m)) for m in (1, 30, 600)] + [Window(now)]
    before = {w: sorted(i.atom_id for i in index.busy(w)) for w in windows}
    assert index.forget_ended(now) == 15  # ended by 1.5 h less KEEP_ENDED: r0..r14
    assert {w: sorted(i.atom_id for i in index.busy(w)) for w in windows} == before
    assert sorted(i.atom_id for i in index.busy(Window(at(0), at(10)))) == [
        "atom-15",
        "atom-16",
        "atom-17",
        "atom-18",
        "atom-19",
        "atom-long",
        "atom-open",
    ]
    assert index.windows_of(["atom-3"]) == {"atom-3": []}
    assert index.forget_ended(now) == 0
    assert index.forget_ended(at(10)) == 6  # the rest that end, the extended one at its new end
    assert [i.atom_id for i in index.busy(Window(at(0)))] == ["atom-open"]


class _Ledger(_Log):
    """A ledger whose live bookings are `held`, read as the store reads them: those that end after
    `since` (or never); it records each `since` asked for."""

    def __init__(self, held: list[LiveBooking]) -> None:
        super().__init__(last=0)
        self.held = held
        self.asked: list[datetime] = []

    def live_bookings(self, since: object) -> list[LiveBooking]:  # type: ignore[override]
        assert isinstance(since, datetime)
        self.asked.append(since)
        return [b for b in self.held if b.ends_at is None or b.ends_at > since]


def test_reload_after_forget_ended_reads_only_bookings_reaching_past_what_was_forgotten() -> None:
    """A rebuild after a refused write read every live booking the ledger ever had (since 2000):
    with a hundred thousand past bookings a reload took seconds and grew with history. Once the
    index forgot what ended before an instant, a reload asks only for what reaches past it, and
    answers the same."""
    held = [
        LiveBooking(f"r{n}", f"atom-{n}", at(n * 0.1), at(n * 0.1 + 0.05), "t", "p1", "gpu")
        for n in range(20)
    ]
    held.append(LiveBooking("open", "atom-open", at(0), None, "t", "p1", "gpu"))
    ledger = _Ledger(held)
    tx: Any = _tx(ledger)
    index = BookingIndex()
    index.sync(tx)
    assert ledger.asked == [datetime(2000, 1, 1, tzinfo=T0.tzinfo)]  # never forgot: everything
    now = at(1.5)
    assert index.forget_ended(now) == 15
    index.reload(tx)
    assert ledger.asked[-1] == now - KEEP_ENDED
    assert sorted(i.atom_id for i in index.busy(Window(at(0), at(10)))) == [
        "atom-15",
        "atom-16",
        "atom-17",
        "atom-18",
        "atom-19",
        "atom-open",
    ]
    assert index.forget_ended(at(0.5)) == 0  # an older reading moves nothing back
    index.reload(tx)
    assert ledger.asked[-1] == now - KEEP_ENDED


def _fleet_atoms(layout: list[tuple[str, str, str]]) -> list[Any]:
    """(node, gpu, profile) triples as MIG atoms, keyed by position on their GPU."""
    from tests.builders import atom

    per_gpu: dict[str, int] = {}
    on: dict[str, str] = {}  # a GPU is on one node in a layout (on another, maybe, in the next)
    out = []
    for node, gpu, profile in layout:
        n = per_gpu[gpu] = per_gpu.get(gpu, 0) + 1
        out.append(atom(gpu, f"mig:{n}.0", node=on.setdefault(gpu, node), attributes={"migProfile": profile}))
    return out


_LAYOUTS = st.lists(
    st.tuples(
        st.sampled_from(["n1", "n2", "n3"]),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["1g.10gb", "3g.40gb"]),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(
    before=_LAYOUTS,
    after=_LAYOUTS,
    changed=st.frozensets(st.sampled_from(["n1", "n2", "n3"])),
    cordoned=st.frozensets(st.sampled_from(["n1", "n2", "n3"])),
    newly_cordoned=st.frozensets(st.sampled_from(["n1", "n2", "n3"])),
)
def test_a_pool_refreshed_for_changed_nodes_answers_as_one_read_anew(
    before: list[tuple[str, str, str]],
    after: list[tuple[str, str, str]],
    changed: frozenset[str],
    cordoned: frozenset[str],
    newly_cordoned: frozenset[str],
) -> None:
    """Nodes' atoms replaced, GPUs moved between nodes, a changed node cordoned that had no atom
    before: the refreshed pool is the pool read anew."""
    from better_compute.service.ledger.booking_index import PoolAtoms
    from tests.builders import device_request

    old = _fleet_atoms(before)
    fresh = [a for a in _fleet_atoms(after) if a.node in changed]
    now = [a for a in old if a.node not in changed] + fresh
    shapes = [
        device_request("gpu.mig"),
        device_request("gpu.mig", migProfile=["3g.40gb"]),
        device_request("gpu"),
    ]
    cached = PoolAtoms({a.id: a for a in old}, cordoned)
    for request in shapes[:2]:  # two shapes cached before the change, one not
        cached.matching_by_gpu(request)
    cordoned_now = cordoned | (newly_cordoned & changed)
    refreshed = cached.refreshed(changed, fresh, cordoned_now)
    anew = PoolAtoms({a.id: a for a in now}, cordoned_now)
    assert refreshed.atoms == anew.atoms
    for request in shapes:
        got = {gpu: sorted(a.id for a in held) for gpu, held in refreshed.matching_by_gpu(request).items()}
        want = {gpu: sorted(a.id for a in held) for gpu, held in anew.matching_by_gpu(request).items()}
        assert got == want and list(got) == sorted(got)
        assert refreshed.cordoned_matching(request) == anew.cordoned_matching(request)
    assert refreshed.kinds() == anew.kinds()


def test_a_nodes_new_inventory_reads_that_nodes_atoms_again_not_the_pools() -> None:
    from better_compute.domain.fleet.events import NodeInventoryChanged
    from better_compute.domain.kernel.events import LoggedEvent
    from tests.builders import atom

    rows = {"n1": [atom("g1", "mig:1.0", node="n1")], "n2": [atom("g2", "mig:1.0", node="n2")]}
    reads: list[str] = []

    def of_pool(pool_id: str) -> list[Any]:
        reads.append(f"pool {pool_id}")
        return [a for held in rows.values() for a in held]

    def of_nodes(nodes: list[str]) -> list[Any]:
        reads.append(f"nodes {','.join(nodes)}")
        return [a for n in nodes for a in rows[n]]

    tx: Any = SimpleNamespace(
        atoms=SimpleNamespace(of_pool=of_pool, of_nodes=of_nodes),
        nodes=SimpleNamespace(cordoned_ids=set),
    )
    index = BookingIndex()
    assert set(index.pool_atoms(tx, "p").atoms) == {"g1/mig:1.0", "g2/mig:1.0"}
    before = index.pool_version("p")
    rows["n2"] = [atom("g2", "mig:1.0", node="n2"), atom("g2", "mig:2.0", node="n2")]
    index.apply_event(LoggedEvent(1, None, NodeInventoryChanged("n2", 1, 2)))
    assert index.pool_version("p") != before
    assert set(index.pool_atoms(tx, "p").atoms) == {"g1/mig:1.0", "g2/mig:1.0", "g2/mig:2.0"}
    assert index.pool_atoms(tx, "p") is index.pool_atoms(tx, "p")  # kept, with nothing left stale
    assert reads == ["pool p", "nodes n2"]
    rows["n1"] = []  # n1's GPU gone: its atoms leave the pool
    index.apply_event(LoggedEvent(2, None, NodeInventoryChanged("n1", 1, 1)))
    assert set(index.pool_atoms(tx, "p").atoms) == {"g2/mig:1.0", "g2/mig:2.0"}
    assert reads == ["pool p", "nodes n2", "nodes n1"]


def test_a_booking_of_a_gpus_whole_atom_takes_its_parts_and_a_parts_booking_takes_the_whole() -> None:
    """Admission's answer to "is it free" counts every live booking of a GPU's family, from the
    ledger and from events alike, whether or not the booked atom is bookable now: the index knows
    each booking's GPU (`gpuId`)."""
    from better_compute.service.ledger.booking_index import FamilyMember

    held = [LiveBooking("whole", "g1-parent", at(1), at(3), "t", "p1", "gpu", "GPU-1")]
    ledger = _Ledger(held)
    tx: Any = _tx(ledger)
    index = BookingIndex()
    index.sync(tx)
    families = {
        "g1-parent": FamilyMember("GPU-1", "gpu"),
        "g1-mig-1": FamilyMember("GPU-1", "gpu.mig"),
        "g1-mig-2": FamilyMember("GPU-1", "gpu.mig"),
        "g2-mig-1": FamilyMember("GPU-2", "gpu.mig"),
    }
    parts = ["g1-mig-1", "g1-mig-2", "g2-mig-1"]
    assert index.busy_from(parts, at(0))[0] == set()  # asked without their GPUs: their own only
    assert index.busy_from(parts, at(0), families) == ({"g1-mig-1", "g1-mig-2"}, at(3))
    assert index.busy_from(parts, at(3), families) == (set(), None)
    holders, busy, _ = index.holders_at(parts, at(2), families)
    assert (holders, busy) == ({}, {"g1-mig-1", "g1-mig-2"})  # taken, though no one runs on them
    part = booked(1, "part", "g2-mig-1", 5, 6)
    part["payload"].update({"class": "gpu.mig", "gpuId": "GPU-2"})
    _apply(index, tx, index.prepare(tx), [part], 1, LogSnapshot())
    whole_2 = {"g2-parent": FamilyMember("GPU-2", "gpu")}
    assert index.busy_from(["g2-parent"], at(0), whole_2)[0] == {"g2-parent"}
    assert [i.allocation_id for i in index.windows_of(["g2-parent"], whole_2)["g2-parent"]] == ["part"]
