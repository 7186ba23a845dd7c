"""The Slurm follower's plan (domain.fleet.slurm_holds): every rule of ADR 0015's holds, pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from better_compute.domain.fleet.slurm import GresAllocation, SlurmJob
from better_compute.domain.fleet.slurm_gres import GresSlot
from better_compute.domain.fleet.slurm_holds import (
    BookExternal,
    Held,
    HoldPlan,
    Rebind,
    Submit,
    allocation_of_job,
    hold_job_name,
    plan_holds,
)

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
SLOTS = {"n1": (GresSlot(0, "3g.40gb", "a0"), GresSlot(1, "3g.40gb", "a1"), GresSlot(2, "1g.10gb", "a2"))}


def held(allocation: str, *atoms: str, start: datetime = NOW, hours: int | None = 1) -> Held:
    end = None if hours is None else start + timedelta(hours=hours)
    return Held(allocation, "n1", atoms, "acme", start, end)


def job(
    job_id: int,
    name: str,
    state: str = "RUNNING",
    indices: tuple[int, ...] = (),
    account: str = "bc",
    reason: str = "None",
    limit: int | None = 60,
) -> SlurmJob:
    gres = (GresAllocation("n1", "gpu", "3g.40gb", len(indices), indices),) if indices else ()
    return SlurmJob(
        job_id, state, reason, "n1" if state == "RUNNING" else "", gres, name, account, "ours", limit, "n1"
    )


def plan(held_: list[Held], jobs: list[SlurmJob]) -> HoldPlan:
    return plan_holds(
        cluster_id="s1",
        account="bc",
        tenant_of={"ml": "acme"},
        external_tenant="external",
        slots=SLOTS,
        held=held_,
        jobs=jobs,
        now=NOW,
    )


def test_a_job_name_carries_its_allocation() -> None:
    assert allocation_of_job(hold_job_name("dep-1.r0")) == "dep-1.r0"
    assert allocation_of_job("train") is None
    assert allocation_of_job("bc.") is None


def test_an_allocation_without_a_job_gets_one_for_its_window() -> None:
    later = NOW + timedelta(minutes=30)
    got = plan([held("rsv-1", "a0"), held("rsv-2", "a1", "a2", start=later, hours=2)], [])
    assert got.submit == (
        Submit("rsv-1", "n1", (("3g.40gb", 1),), 0, 3600),
        Submit("rsv-2", "n1", (("3g.40gb", 1), ("1g.10gb", 1)), 1800, 7200),
    )
    assert (got.cancel, got.end, got.rebind) == ((), (), ())


def test_a_pending_job_is_mirrored_with_its_reason_and_nothing_else_happens() -> None:
    got = plan([held("rsv-1", "a0")], [job(7, "bc.rsv-1", "PENDING", reason="Resources")])
    assert got.mirror[0].state == "PENDING" and got.mirror[0].reason == "Resources"
    assert (got.submit, got.cancel, got.end, got.rebind) == ((), (), (), ())


def test_a_running_job_binds_its_booking_to_the_atom_of_its_index() -> None:
    assert plan([held("rsv-1", "a0")], [job(7, "bc.rsv-1", indices=(0,))]).rebind == ()
    moved = plan([held("rsv-1", "a0")], [job(7, "bc.rsv-1", indices=(1,))])
    assert moved.rebind == (Rebind("rsv-1", "n1", (("a0", "a1"),)),)


def test_a_running_job_on_the_atom_of_a_pending_booking_swaps_them() -> None:
    got = plan(
        [held("rsv-1", "a0"), held("rsv-2", "a1")],
        [job(7, "bc.rsv-1", indices=(1,)), job(8, "bc.rsv-2", "PENDING", reason="Resources")],
    )
    assert sorted(got.rebind, key=lambda r: r.allocation_id) == [
        Rebind("rsv-1", "n1", (("a0", "a1"),)),
        Rebind("rsv-2", "n1", (("a1", "a0"),)),
    ]


def test_a_job_of_ours_whose_allocation_is_gone_is_cancelled_and_a_second_one_too() -> None:
    got = plan(
        [held("rsv-1", "a0")],
        [job(5, "bc.rsv-gone", "PENDING"), job(6, "bc.rsv-1", "PENDING"), job(7, "bc.rsv-1", indices=(0,))],
    )
    # The older of rsv-1's two is kept, running or not: every follower keeps the same one.
    assert [c[0] for c in got.cancel] == [5, 7]
    assert got.submit == ()


def test_a_job_of_ours_that_ended_ends_its_allocation_and_an_ended_allocation_cancels_its_job() -> None:
    got = plan([held("rsv-1", "a0")], [job(7, "bc.rsv-1", "CANCELLED")])
    assert got.end == (("rsv-1", "its Slurm job 7 ended CANCELLED"),)
    assert got.submit == ()
    over = plan([held("rsv-1", "a0", start=NOW - timedelta(hours=2))], [job(7, "bc.rsv-1", indices=(0,))])
    assert [c[0] for c in over.cancel] == [7]


def test_a_job_submitted_directly_is_booked_for_its_accounts_tenant_and_ended_with_it() -> None:
    direct = job(9, "train", indices=(1,), account="ml", limit=30)
    got = plan([], [direct])
    assert got.book_external == (
        BookExternal("slurm:s1:9", 9, "n1", "acme", ("a1",), NOW, NOW + timedelta(minutes=30)),
    )
    stranger = plan([], [job(10, "bc.rsv-1", indices=(0,), account="other", limit=None)])
    assert stranger.book_external[0].tenant_id == "external"  # our name, not our account
    assert stranger.book_external[0].end is None
    booked = held("slurm:s1:9", "a1", hours=None)
    assert plan([booked], [direct]).book_external == ()
    assert plan([booked], [job(9, "train", "COMPLETED", account="ml")]).end_external == ("slurm:s1:9",)
    assert plan([booked], []).end_external == ("slurm:s1:9",)


def test_a_pending_booking_on_the_atom_of_a_direct_job_moves_to_a_free_one() -> None:
    got = plan([held("rsv-1", "a1")], [job(9, "train", indices=(1,), account="ml")])
    assert got.rebind == (Rebind("rsv-1", "n1", (("a1", "a0"),)),)
    assert [b.atom_ids for b in got.book_external] == [("a1",)]


def test_with_no_free_atom_the_pending_booking_stays_and_the_direct_hold_waits() -> None:
    got = plan(
        [held("rsv-1", "a1"), held("rsv-2", "a0")],
        [job(9, "train", indices=(1,), account="ml"), job(7, "bc.rsv-2", indices=(0,))],
    )
    assert got.rebind == () and got.book_external == ()
    assert any("no free 3g.40gb" in why for why in got.unplaced)


def test_an_ended_job_of_a_replica_is_followed_by_a_new_one_not_by_its_end() -> None:
    shown = plan_holds(
        cluster_id="s1",
        account="bc",
        tenant_of={},
        external_tenant="external",
        slots=SLOTS,
        held=[held("dep-1.r0", "a0", hours=None)],
        jobs=[job(7, "bc.dep-1.r0", "FAILED", reason="NonZeroExitCode")],
        now=NOW,
        replicas=frozenset({"dep-1.r0"}),
    )
    assert (shown.end, shown.submit) == ((), ())  # shown ended for a while first
    replica = held("dep-1.r0", "a0", hours=None)
    got = plan_holds(
        cluster_id="s1",
        account="bc",
        tenant_of={},
        external_tenant="external",
        slots=SLOTS,
        held=[replica],
        jobs=[job(7, "bc.dep-1.r0", "FAILED", reason="NonZeroExitCode")],
        now=NOW,
        replicas=frozenset({"dep-1.r0"}),
        rerun=frozenset({"dep-1.r0"}),
    )
    assert got.end == ()
    assert got.submit == (Submit("dep-1.r0", "n1", (("3g.40gb", 1),), 0, None),)
    assert [(m.job_id, m.state) for m in got.mirror] == [(7, "FAILED")]


def test_two_jobs_of_ours_started_on_each_others_atoms_swap_their_bookings_in_one_pass() -> None:
    """Regression: two replicas whose jobs Slurm started at once, each on the atom the other's
    booking sat on, were reported unplaced pass after pass."""
    got = plan(
        [held("dep-1.r0", "a0"), held("dep-1.r1", "a1")],
        [job(7, "bc.dep-1.r0", indices=(1,)), job(8, "bc.dep-1.r1", indices=(0,))],
    )
    assert got.unplaced == ()
    assert {(r.allocation_id, r.moves) for r in got.rebind} == {
        ("dep-1.r0", (("a0", "a1"),)),
        ("dep-1.r1", (("a1", "a0"),)),
    }
