"""Holds on a Slurm cluster as holding jobs, through the follower over the in-memory Slurm
(tests/slurm_fake.py), on SQLite and PostgreSQL: two-phase booking, binding to the index Slurm
gave, ends both ways, adoption after a restart, jobs submitted directly as external holds, and the
ledger fencing a move onto an atom taken meanwhile (ADR 0015, "Race windows")."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from unittest import mock

import pytest

from better_compute.domain.fleet.records import Cluster
from better_compute.domain.fleet.slurm_gres import gres_slots
from better_compute.domain.fleet.slurm_holds import hold_job_name
from better_compute.domain.kernel.errors import AllBusy, InvalidState
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.events import LedgerRebound
from better_compute.domain.ledger.reservations import ReservationStatus
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.server import build_services
from better_compute.service.fleet import clusters
from better_compute.service.fleet.slurm import HoldRequest, JobRequest
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ledger.ports import Overlap
from better_compute.service.ledger.reservations import ReservationView
from better_compute.service.ledger.slurm_holds import PassReport, SlurmFollower, follow
from better_compute.service.tenancy import quotas
from better_compute.storage.store import Store
from tests.builders import T0, stored_events
from tests.slurm_fake import FakeSlurm

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="admin")
OWNER = Principal(tenant_id="platform", is_admin=False, credential_id="owner")
ACCOUNT = "bc-holds"
FLEET = {
    "tenants": [{"id": "platform"}, {"id": "ml"}],
    "clusters": [
        {"name": "s1", "region": "r1", "nodes": [{"name": "sn", "gpus": {"model": "H100-80GB", "count": 1}}]}
    ],
    "pools": [
        {
            "name": "p1",
            "cluster": "s1",
            "mode": "mig",
            "owner": "platform",
            "policy": {"migLayout": "mixed:2x3g.40gb"},
            "nodes": ["sn"],
        }
    ],
}
MIG = [
    {
        "class": "gpu.mig",
        "count": 1,
        "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
    }
]


@dataclass
class World:
    store: Store
    slurm: FakeSlurm
    index: BookingIndex
    now: datetime
    ids: Iterator[str]

    def reserve(self, duration: str = "1h", **extra: str) -> ReservationView:
        body = {"poolId": "p1", "devices": MIG, "duration": duration, **extra}
        return reservations.create(self.store, self.index, OWNER, body, self.now, lambda: next(self.ids))

    def follow(self) -> PassReport:
        cluster = clusters.get(self.store, "s1")
        return follow(self.store, cluster, self.slurm, self.now)

    def tick(self, seconds: int = 1) -> None:
        """Time passes for both: Slurm runs a scheduling pass."""
        self.now += timedelta(seconds=seconds)
        self.slurm.advance(seconds)

    def view(self, reservation_id: str) -> ReservationView:
        return reservations.get(self.store, OWNER, reservation_id, self.now)

    def atoms_of(self, reservation_id: str) -> list[str]:
        return [a.id for a in self.view(reservation_id).atoms]

    def slots(self) -> list[str]:
        """The node's 3g.40gb atoms in GRES index order (index k is the k-th)."""
        with self.store.read() as tx:
            found = gres_slots("sn", tx.gpus.of_nodes(["sn"]), tx.atoms.of_nodes(["sn"]))
        return [s.atom_id or "" for s in found]

    def direct(self, name: str = "train") -> int:
        """A job submitted to Slurm directly (not through us)."""
        return self.slurm.submit(
            JobRequest(name=name, command="sleep 600", gres_name="gpu", gres_type="3g.40gb", gres_count=1)
        )


@pytest.fixture
def world(store: Store) -> World:
    slurm_settings = {
        "controller": "ctl",
        "partitions": ["ours"],
        "account": ACCOUNT,
        "accounts": {"mlacct": "ml"},
    }
    load_fleet(store, parse_fleet({"tenants": FLEET["tenants"]}), T0)  # the tenants accounts map to
    clusters.create(store, ADMIN, "s1", "r1", [], "slurm", slurm_settings, T0)
    load_fleet(store, parse_fleet(FLEET), T0)
    quotas.set_quota(store, ADMIN, "platform", "p1", "gpu.mig", 8, T0)
    slurm = FakeSlurm(nodes={"sn": ["3g.40gb", "3g.40gb"]}, default_account="mlacct")
    return World(store, slurm, BookingIndex(), T0, (f"rsv-{n}" for n in itertools.count(1)))


def test_a_reservation_is_scheduled_until_its_holding_job_runs_then_active_on_the_index_slurm_gave(
    world: World,
) -> None:
    made = world.reserve()
    report = world.follow()
    [(allocation, job_id)] = report.submitted
    assert allocation == made.id
    job = world.slurm.job(job_id)
    assert (job.name, job.account, job.required_nodes) == (hold_job_name(made.id), ACCOUNT, "sn")
    assert job.time_limit_minutes == 60
    shown = world.view(made.id)
    assert shown.status == ReservationStatus.SCHEDULED
    assert [(j.job_id, j.state) for j in shown.slurm_jobs] == [(job_id, "PENDING")]
    world.tick()
    world.follow()
    shown = world.view(made.id)
    assert shown.status == ReservationStatus.ACTIVE
    assert shown.atoms[0].id == world.slots()[world.slurm.job(job_id).gres[0].indices[0]]
    assert world.follow().submitted == []  # adopted, not submitted again


def test_a_future_reservation_waits_for_its_begin_time(world: World) -> None:
    made = world.reserve(start=(world.now + timedelta(minutes=10)).isoformat())
    [(_, job_id)] = world.follow().submitted
    world.tick()
    assert (world.slurm.job(job_id).state, world.slurm.job(job_id).reason) == ("PENDING", "BeginTime")
    world.tick(600)
    world.follow()
    assert world.view(made.id).status == ReservationStatus.ACTIVE


def test_a_job_run_on_another_card_than_admission_booked_moves_the_booking_there(world: World) -> None:
    made = world.reserve()
    booked = world.atoms_of(made.id)
    slots = world.slots()
    # A job submitted directly before ours, still pending: Slurm starts it first, on the card our
    # admission chose, and gives our holding job the other one.
    other = world.direct()
    world.follow()
    world.tick()
    ours = next(j for j in world.slurm.jobs(["ours"]) if j.name == hold_job_name(made.id))
    assert slots[ours.gres[0].indices[0]] != booked[0]
    report = world.follow()
    assert report.rebound == [made.id] and report.booked_external == [f"slurm:s1:{other}"]
    assert world.atoms_of(made.id) == [slots[ours.gres[0].indices[0]]]
    logged = stored_events(world.store, LedgerRebound.TYPE)
    assert [e["subject"] for e in logged] == [made.id]
    with world.store.read() as tx:
        held = {b.atom_id: b.allocation_id for b in tx.ledger.live_on(slots, world.now)}
    assert held == {slots[0]: f"slurm:s1:{other}", slots[1]: made.id} or held == {
        slots[1]: f"slurm:s1:{other}",
        slots[0]: made.id,
    }
    # The booking index followed the move: the pool is full for admission.
    with pytest.raises(AllBusy):
        world.reserve()


def test_a_job_submitted_directly_is_booked_for_its_tenant_and_admission_refuses_its_card(
    world: World,
) -> None:
    first = world.direct()
    world.tick()
    report = world.follow()
    assert report.booked_external == [f"slurm:s1:{first}"]
    with world.store.read() as tx:
        [booking] = tx.ledger.allocation_bookings(f"slurm:s1:{first}")
    assert booking.tenant_id == "ml"  # its Slurm account maps to tenant ml
    assert booking.span.end is None  # no --time: the partition's limit, INFINITE here
    assert booking.atom_id == world.slots()[world.slurm.job(first).gres[0].indices[0]]
    world.direct("train2")
    world.tick()
    world.follow()
    with pytest.raises(AllBusy):
        world.reserve()
    freed = booking.atom_id
    world.slurm.complete(first)
    world.tick()
    assert world.follow().ended_external == [f"slurm:s1:{first}"]
    assert world.atoms_of(world.reserve().id) == [freed]


def test_a_direct_job_with_a_time_limit_is_booked_until_it(world: World) -> None:
    job_id = world.slurm.submit_hold(HoldRequest("train", "mlacct", "ours", "sn", (("3g.40gb", 1),), 0, 1800))
    world.tick()
    world.follow()
    with world.store.read() as tx:
        [booking] = tx.ledger.allocation_bookings(f"slurm:s1:{job_id}")
    assert (booking.tenant_id, booking.span.end) == ("ml", world.now + timedelta(minutes=30))


def test_a_holding_job_slurm_ends_or_a_user_cancels_ends_the_reservation(world: World) -> None:
    made = world.reserve()
    [(_, job_id)] = world.follow().submitted
    world.tick()
    world.follow()
    world.slurm.cancel(job_id)  # a user's scancel
    world.tick()
    assert world.follow().ended == [made.id]
    assert world.view(made.id).status == ReservationStatus.RELEASED
    assert world.follow().submitted == []  # an ended reservation gets no new job
    pending = world.reserve(start=(world.now + timedelta(hours=2)).isoformat())
    [(_, later)] = world.follow().submitted
    world.slurm.cancel(later)
    world.tick()
    world.follow()
    assert world.view(pending.id).status == ReservationStatus.CANCELLED


def test_releasing_a_reservation_cancels_its_holding_job(world: World) -> None:
    made = world.reserve()
    [(_, job_id)] = world.follow().submitted
    world.tick()
    world.follow()
    world.tick()
    reservations.release(world.store, OWNER, made.id, world.now)
    assert world.follow().cancelled == [job_id]
    assert world.slurm.job(job_id).state == "CANCELLED"


def test_after_a_restart_a_job_of_ours_is_adopted_and_one_without_allocation_cancelled(world: World) -> None:
    made = world.reserve()
    # Submitted by a server that died before anything else happened: named after its allocation.
    request = HoldRequest(hold_job_name(made.id), ACCOUNT, "ours", "sn", (("3g.40gb", 1),), 0, 3600)
    adopted = world.slurm.submit_hold(request)
    ghost = world.slurm.submit_hold(
        HoldRequest(hold_job_name("rsv-never"), ACCOUNT, "ours", "sn", (("3g.40gb", 1),), 0, 3600)
    )
    report = world.follow()
    assert report.submitted == [] and report.cancelled == [ghost]
    assert [j.job_id for j in world.view(made.id).slurm_jobs] == [adopted]


def test_a_move_onto_a_card_booked_meanwhile_is_refused_and_a_swap_passes(world: World) -> None:
    """The ledger is the fence for a move as for a booking: on PostgreSQL the exclusion constraint
    refuses the row, on SQLite the look-up under the write lock does."""
    first, second = world.reserve(), world.reserve()
    a, b = world.atoms_of(first.id)[0], world.atoms_of(second.id)[0]
    moved = LedgerRebound(first.id, ((a, b, ""),), world.now)
    with pytest.raises(Overlap), world.store.begin() as tx:
        tx.ledger.rebind([(first.id, a, b)], world.now, [moved])
    assert (world.atoms_of(first.id), world.atoms_of(second.id)) == ([a], [b])
    assert stored_events(world.store, LedgerRebound.TYPE) == []
    # Two bookings swapping cards in one step pass: the rows are set aside, then moved.
    with world.store.begin() as tx:
        assert tx.ledger.rebind([(first.id, a, b), (second.id, b, a)], world.now, [moved]) == 2
    assert (world.atoms_of(first.id), world.atoms_of(second.id)) == ([b], [a])


def test_the_follower_passes_over_every_slurm_cluster_and_no_other(world: World) -> None:
    clusters.create(world.store, ADMIN, "l1", "r1", [], "local", None, T0)
    asked: list[str] = []

    def control_for(cluster: Cluster) -> FakeSlurm:
        asked.append(cluster.id)
        return world.slurm

    made = world.reserve()
    [report] = SlurmFollower(world.store, lambda: world.now, control_for).tick()
    assert (asked, report.cluster_id, [a for a, _ in report.submitted]) == (["s1"], "s1", [made.id])
    world.slurm.unreachable = True
    assert SlurmFollower(world.store, lambda: world.now, control_for).tick() == []  # tried again later


def test_a_reservation_with_a_holding_job_cannot_be_extended_yet(world: World) -> None:
    made = world.reserve()
    world.follow()
    with pytest.raises(InvalidState) as refused:
        reservations.extend(world.store, world.index, OWNER, made.id, "1h", world.now)
    assert refused.value.details == {"id": made.id, "reason": "slurm_hold"}
    assert world.view(made.id).reservation.ends_at == T0 + timedelta(hours=1)


def test_a_direct_job_of_another_partition_on_our_node_is_booked_too(world: World) -> None:
    world.slurm.partition = "theirs"  # the next job goes to another partition sharing the node
    job_id = world.direct()
    world.slurm.partition = "ours"
    world.tick()
    assert world.follow().booked_external == [f"slurm:s1:{job_id}"]


@pytest.mark.postgres_only  # a race: SQLite serialises its writers
def test_a_move_racing_a_booking_of_its_target_waits_for_it_and_is_refused(world: World) -> None:
    """On PostgreSQL: a booking of the target atom not yet committed holds the move back (the
    exclusion constraint waits on the other transaction), and once it commits the move is refused
    and writes nothing."""
    first = world.reserve()
    a = world.atoms_of(first.id)[0]
    [b] = [s for s in world.slots() if s != a]
    booked = threading.Event()
    commit = threading.Event()
    outcome: list[object] = []

    def other_booking() -> None:
        with world.store.begin() as tx:
            tx.ledger.book(
                [b], Window(world.now, world.now + timedelta(hours=1)), "other", "platform", world.now
            )
            booked.set()
            commit.wait(10)

    def move() -> None:
        try:
            with world.store.begin() as tx:
                event = LedgerRebound(first.id, ((a, b, ""),), world.now)
                outcome.append(tx.ledger.rebind([(first.id, a, b)], world.now, [event]))
        except Overlap as refused:
            outcome.append(refused)

    booker = threading.Thread(target=other_booking)
    booker.start()
    assert booked.wait(10)
    mover = threading.Thread(target=move)
    mover.start()
    mover.join(0.5)
    assert mover.is_alive()  # waiting on the uncommitted booking of its target
    commit.set()
    booker.join(10)
    mover.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], Overlap)
    assert world.atoms_of(first.id) == [a]


def test_a_reservation_its_tenant_released_first_is_not_ended_again(world: World) -> None:
    made = world.reserve()
    world.tick()
    reservations.release(world.store, OWNER, made.id, world.now)
    with world.store.begin() as tx:
        assert reservations.end_in(tx, made.id, world.now) is False
    assert len(stored_events(world.store, "reservation.released")) == 1


def test_one_unreadable_job_record_stops_the_follower_no_more(world: World) -> None:
    """A record Slurm printed that cannot be read is left out, logged, and the pass goes on; a cluster
    whose whole pass fails does not keep the follower from the next cluster."""
    from better_compute.domain.fleet.slurm import parse_jobs

    bad = (
        "JobId=902 JobName=x Account=mlacct JobState=PENDING Reason=None Partition=ours "
        "StdIn=/dev/null StdOut=/tmp/o JobState=OWNED"
    )
    made = world.reserve()
    clusters.create(
        world.store,
        ADMIN,
        "s0",
        "r1",
        [],
        "slurm",
        {"controller": "c0", "partitions": ["p"], "account": ACCOUNT, "accounts": {}},
        T0,
    )
    broken = FakeSlurm(nodes={}, default_account="mlacct")

    def unreadable(partitions: object = None) -> list[object]:
        return list(parse_jobs(bad))

    broken.jobs = unreadable  # type: ignore[method-assign,assignment]
    reports = SlurmFollower(
        world.store, lambda: world.now, lambda c: broken if c.id == "s0" else world.slurm
    ).tick()
    assert [r.cluster_id for r in reports] == ["s1"]
    assert [a for a, _ in reports[0].submitted] == [made.id]


def test_a_node_whose_gres_cannot_be_read_for_a_pass_keeps_its_holding_jobs(world: World) -> None:
    """A pass that cannot compute a node's GRES lines (a GPU's MIG change waiting for a reset) leaves
    that node's jobs alone: the holding job runs on and the reservation stays active."""
    from unittest import mock

    from better_compute.service.ledger import slurm_holds as follower

    made = world.reserve()
    [(_, job_id)] = world.follow().submitted
    world.tick()
    world.follow()
    assert world.view(made.id).status == ReservationStatus.ACTIVE
    refused = InvalidState("GPU 0 of node sn cannot be given to Slurm: its MIG mode change waits for a reset")
    with mock.patch.object(follower, "gres_slots", side_effect=refused):
        report = world.follow()
    assert report.cancelled == [] and report.problems
    world.tick()
    report = world.follow()
    assert (report.cancelled, report.ended) == ([], [])
    assert world.slurm.job(job_id).state == "RUNNING"
    assert world.view(made.id).status == ReservationStatus.ACTIVE


@pytest.mark.postgres_only  # a race: SQLite serialises its writers
def test_two_followers_at_once_follow_a_slurm_cluster_one_at_a_time(world: World) -> None:
    """Reconcilers racing for a cluster's lease, first as an insert then, each time the lease has run
    out, as an update: every time exactly one takes it, and the other follows nothing that pass."""
    followers = [
        SlurmFollower(world.store, lambda: world.now, lambda c: world.slurm, owner=name)
        for name in ("a", "b")
    ]
    for _ in range(10):
        start = threading.Barrier(2)
        took: list[bool] = []
        lock = threading.Lock()

        def race(
            follower: SlurmFollower, start: threading.Barrier, lock: threading.Lock, took: list[bool]
        ) -> None:
            start.wait()
            leased = follower._leased("s1")
            with lock:
                took.append(leased)

        threads = [threading.Thread(target=race, args=(f, start, lock, took)) for f in followers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(took) == [False, True]
        world.now += followers[0].lease + timedelta(seconds=1)
    made = world.reserve()
    reports = [report for follower in followers for report in follower.tick()]
    assert [[a for a, _ in r.submitted] for r in reports] == [[made.id]]  # one follower, one job


def test_two_followers_at_once_each_cancel_the_same_copy_of_a_holding_job(world: World) -> None:
    """Two followers (no lease between them) each submit a holding job for one reservation; whatever
    state each reads the two jobs in, both keep the older and cancel the newer, and the reservation
    the copy's cancel might have ended stays active on the job kept."""
    made = world.reserve()
    [(_, first)] = world.follow().submitted
    cluster = clusters.get(world.store, "s1")
    with world.store.begin() as tx:  # the second follower read no job before the first's sbatch
        tx.slurm_jobs.put("s1", [], world.now)
    second = world.slurm.submit_hold(
        HoldRequest(
            name=hold_job_name(made.id),
            account=ACCOUNT,
            partition="ours",
            node="sn",
            gres=(("3g.40gb", 1),),
            begin_seconds=0,
            time_limit_seconds=3600,
        )
    )
    pending = world.slurm.jobs()  # what the first follower reads: both pending
    world.tick()
    running = {job.job_id: job for job in world.slurm.jobs()}
    assert running[second].state == "RUNNING"
    # What the second reads a moment later, had Slurm started the newer copy first.
    newer_first = [dataclasses.replace(running[first], state="PENDING", nodes="", gres=()), running[second]]
    with mock.patch.object(world.slurm, "jobs", return_value=pending):
        one = follow(world.store, cluster, world.slurm, world.now)
    with mock.patch.object(world.slurm, "jobs", return_value=newer_first):
        other = follow(world.store, cluster, world.slurm, world.now)
    assert set(one.cancelled) | set(other.cancelled) == {second}
    world.tick()
    report = world.follow()
    assert report.ended == [] and world.slurm.job(first).state == "RUNNING"
    assert world.view(made.id).status == ReservationStatus.ACTIVE


def test_a_followers_lease_is_renewed_by_its_holder_and_taken_over_once_it_runs_out(world: World) -> None:
    a = SlurmFollower(world.store, lambda: world.now, lambda c: world.slurm, owner="a")
    b = SlurmFollower(world.store, lambda: world.now, lambda c: world.slurm, owner="b")
    assert a._leased("s1") and not b._leased("s1")
    world.now += a.lease - timedelta(seconds=1)
    assert a._leased("s1") and not b._leased("s1")  # renewed from now
    world.now += a.lease
    assert b._leased("s1") and not a._leased("s1")  # a died (or stalled): b follows
    assert [r.cluster_id for r in b.tick()] == ["s1"] and a.tick() == []


def test_a_finished_holding_jobs_id_is_kept_for_usage_export_after_the_mirror_drops_it(world: World) -> None:
    """Regression: `slurm_jobs` mirrors only the jobs Slurm still runs, so a released reservation's
    usage row lost its job id; `usage export --slurm-job-ids` reads the id kept apart."""
    made = world.reserve()
    [(_, job_id)] = world.follow().submitted
    world.tick()
    world.follow()
    direct = world.direct()
    world.tick()
    world.follow()
    world.tick()
    reservations.release(world.store, OWNER, made.id, world.now)
    world.slurm.complete(direct)
    world.tick()
    report = world.follow()
    assert report.cancelled == [job_id] and report.ended_external == [f"slurm:s1:{direct}"]
    world.tick(3600)  # Slurm forgets both jobs
    world.follow()
    gone = [made.id, f"slurm:s1:{direct}"]
    with world.store.read() as tx:
        assert tx.slurm_jobs.of_allocations(gone) == {a: [] for a in gone}
    ids = build_services(world.store).slurm_job_ids
    assert ids.job_ids([*gone, "rsv-never"]) == {made.id: job_id, f"slurm:s1:{direct}": direct}
