"""End to end against the real Slurm (tests/slurm/cluster.py, tests/slurm/fleet.py): a reservation of a
`3g.40gb` on the Slurm node becomes a holding job, a step run in it sees its GRES, and a job submitted
directly with `sbatch --gres=gpu:3g.40gb:1` is booked as an external hold that our admission then
refuses."""

from __future__ import annotations

import time

import pytest

from better_compute.domain.kernel.errors import AllBusy
from better_compute.domain.ledger.reservations import ReservationStatus
from better_compute.service.ledger import reservations
from tests.slurm.fleet import DEADLINE, OWNER, Fleet, now_utc


def test_a_reservation_on_the_slurm_node_is_a_holding_job_whose_step_sees_its_gres(fleet: Fleet) -> None:
    made = fleet.reserve()
    [(allocation, job_id)] = fleet.follow().submitted
    assert allocation == made.id
    fleet.until("running holding job", lambda _: fleet.slurm.job(job_id).state == "RUNNING")
    fleet.follow()
    shown = reservations.get(fleet.store, OWNER, made.id, now_utc())
    assert shown.status == ReservationStatus.ACTIVE
    [index] = fleet.slurm.job(job_id).gres[0].indices
    assert [a.id for a in shown.atoms] == [fleet.slots()[index]]  # bound to the card Slurm gave
    step = fleet.run("srun", f"--jobid={job_id}", "--overlap", "env")
    seen = dict(line.split("=", 1) for line in step.splitlines() if "=" in line)
    gres_env = {k: v for k, v in seen.items() if "GPU" in k or "CUDA" in k}
    print(f"holding job {job_id} on GRES index {index}; its step sees {gres_env}")
    # Slurm's index of the card (with AutoDetect=off, not a MIG uuid: docs/slurm.md), and the one
    # device the step may use.
    assert (seen.get("SLURM_STEP_GPUS"), seen.get("CUDA_VISIBLE_DEVICES")) == (str(index), "0")
    reservations.release(fleet.store, OWNER, made.id, now_utc())
    assert fleet.follow().cancelled == [job_id]
    fleet.until("cancelled holding job", lambda _: fleet.slurm.job(job_id).finished)


def test_a_job_submitted_directly_is_booked_and_admission_refuses_its_card(fleet: Fleet) -> None:
    direct = int(
        fleet.run("sbatch", "--parsable", "--gres=gpu:3g.40gb:1", "--output=/dev/null", "--wrap", "sleep 120")
        .strip()
        .split(";")[0]
    )
    report = fleet.until("external hold", lambda r: bool(r.booked_external))
    assert report.booked_external == [f"slurm:s1:{direct}"]
    [index] = fleet.slurm.job(direct).gres[0].indices
    with fleet.store.read() as tx:
        [booking] = tx.ledger.allocation_bookings(f"slurm:s1:{direct}")
    assert (booking.atom_id, booking.tenant_id) == (fleet.slots()[index], "external")
    ours = fleet.reserve()  # the other card
    assert [a.id for a in ours.atoms] == [fleet.slots()[1 - index]]
    with pytest.raises(AllBusy):
        fleet.reserve()  # both cards held: ours and the direct job's
    fleet.run("scancel", str(direct))
    fleet.until("external hold ended", lambda r: r.ended_external == [f"slurm:s1:{direct}"])


def test_a_direct_job_running_before_it_is_read_back_keeps_its_card_and_ours_takes_the_other(
    fleet: Fleet,
) -> None:
    """ADR 0015's second race window on the real Slurm: admission counts the direct job's card as
    free for a moment; the follower then books the direct job's card and moves our pending booking
    off it, and our holding job runs on the other card."""
    direct = int(
        fleet.run("sbatch", "--parsable", "--gres=gpu:3g.40gb:1", "--output=/dev/null", "--wrap", "sleep 120")
        .strip()
        .split(";")[0]
    )
    deadline = time.monotonic() + DEADLINE
    while fleet.slurm.job(direct).state != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.1)
    [direct_index] = fleet.slurm.job(direct).gres[0].indices
    made = fleet.reserve()  # the ledger does not know the direct job yet
    fleet.until(
        "both mirrored",
        lambda r: (
            any(
                j.state == "RUNNING"
                for j in fleet.slurm.jobs([fleet.cluster.partition])
                if j.job_id != direct
            )
            and not r.rebound
            and not r.submitted
        ),
    )
    slots = fleet.slots()
    with fleet.store.read() as tx:
        held = {b.atom_id: b.allocation_id for b in tx.ledger.live_on(slots, now_utc())}
    assert held == {slots[direct_index]: f"slurm:s1:{direct}", slots[1 - direct_index]: made.id}
    ours = next(j for j in fleet.slurm.jobs([fleet.cluster.partition]) if j.name == f"bc.{made.id}")
    assert ours.state == "RUNNING" and ours.gres[0].indices == (1 - direct_index,)
