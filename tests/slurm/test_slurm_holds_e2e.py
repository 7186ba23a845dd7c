"""End to end against the real Slurm (tests/slurm/cluster.py, tests/slurm/fleet.py): a reservation of a
`3g.40gb` on the Slurm node becomes a holding job, a step run in it sees its GRES, and a job submitted
directly with `sbatch --gres=gpu:3g.40gb:1` is booked as an external hold that our admission then
refuses."""

from __future__ import annotations

import re
import time
import uuid
from datetime import timedelta

import pytest

from better_compute.domain.kernel.errors import AllBusy
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.reservations import ReservationStatus
from better_compute.domain.metering.slurm_reconcile import reconcile
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.fleet import clusters
from better_compute.service.ledger import reservations
from better_compute.service.ledger.slurm_holds import PassReport, follow
from better_compute.service.metering import usage
from better_compute.service.placement import workloads
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.placement.slurm_replicas import ReplicaCommands
from better_compute.service.tenancy import quotas
from tests.slurm.fleet import ADMIN, DEADLINE, OWNER, Fleet, now_utc


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


ORDINARY = {
    "tenants": [{"id": "platform"}],
    "deviceClasses": [
        {
            "name": "mig-3g",
            "class": "gpu.mig",
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
        }
    ],
    "clusters": [
        {"name": "c2", "region": "r1", "nodes": [{"name": "ln", "gpus": {"model": "H100-80GB", "count": 1}}]}
    ],
    "pools": [
        {
            "name": "p2",
            "cluster": "c2",
            "mode": "mig",
            "owner": "platform",
            "policy": {"migLayout": "mixed:2x3g.40gb"},
            "nodes": ["ln"],
        }
    ],
}


def _show_job(fleet: Fleet, job_id: int) -> str:
    return fleet.run("scontrol", "show", "job", "-d", str(job_id))


def test_a_workload_of_4_replicas_across_both_clusters_runs_2_as_slurm_jobs_reconciled_with_sacct(
    fleet: Fleet,
) -> None:
    """Issue 40's end to end: a fleet of one ordinary cluster (c2) and one Slurm cluster (s1); a
    workload of 4 replicas, 2 devices in each cluster, runs the Slurm cluster's 2 as Slurm jobs with
    their GRES (`scontrol show job -d`), its Slurm deployment's phase read from them; sacct's
    GPU-seconds for those jobs over a period they run through equal our usage for the same
    allocations, to the second (`reconcile`)."""
    load_fleet(fleet.store, parse_fleet(ORDINARY), now_utc() - timedelta(minutes=1))
    quotas.set_quota(fleet.store, ADMIN, "platform", "p2", "gpu.mig", 8, now_utc())
    wiring = workloads.Wiring(fleet.store, fleet.index, Stock(), RandomIds())
    body = {
        "tenantId": "platform",
        "name": f"w-{uuid.uuid4().hex[:6]}",
        "shape": {"deviceClass": "mig-3g", "deviceCount": 1},
        "replicas": 4,
    }
    made = workloads.create(wiring, ADMIN, body, now_utc())
    assert made.workload.unplaced == 0
    assert sorted((d.deployment.cluster_id, d.booked) for d in made.deployments) == [("c2", 2), ("s1", 2)]
    [slurm_dep] = [d for d in made.deployments if d.deployment.cluster_id == "s1"]

    commands = ReplicaCommands(fleet.store)

    def pass_() -> PassReport:
        return follow(fleet.store, clusters.get(fleet.store, "s1"), fleet.slurm, now_utc(), commands)

    report = pass_()
    jobs = dict(report.submitted)
    assert len(jobs) == 2 and all(a.startswith(slurm_dep.deployment.id) for a in jobs)

    def running(_: PassReport) -> bool:
        return all(fleet.slurm.job(j).state == "RUNNING" for j in jobs.values())

    deadline = time.monotonic() + DEADLINE
    while not running(report):
        assert time.monotonic() < deadline, fleet.cluster.logs()
        time.sleep(0.2)
    index_of = {}
    for allocation, job_id in jobs.items():
        shown = _show_job(fleet, job_id)
        assert "JobState=RUNNING" in shown and f"JobName=bc.{allocation}" in shown
        [index] = re.findall(r"GRES=gpu:3g\.40gb:1\(IDX:(\d+)\)", shown)
        index_of[allocation] = int(index)
    assert sorted(index_of.values()) == [0, 1]

    def bound() -> bool:
        with fleet.store.read() as tx:
            return all(
                [b.atom_id for b in tx.ledger.allocation_bookings(a)] == [fleet.slots()[i]]
                for a, i in index_of.items()
            )

    report = pass_()
    while not bound():  # bound to the cards Slurm gave, within a pass or two
        assert time.monotonic() < deadline, report
        time.sleep(0.2)
        report = pass_()
    view = workloads.get(fleet.store, ADMIN, made.id, now_utc())
    [shown_dep] = [d for d in view.deployments if d.deployment.cluster_id == "s1"]
    assert (shown_dep.phase, shown_dep.deployment.message) == ("running", "")

    # A period both jobs run through, over once sacct can count it.
    begin = now_utc().replace(microsecond=0) + timedelta(seconds=1)
    end = begin + timedelta(seconds=3)
    period = Window(begin, end)
    while now_utc() < end + timedelta(seconds=1):
        time.sleep(0.2)
    records = [r for r in fleet.slurm.accounting(begin, end) if r.job_id in jobs.values()]
    assert sorted(r.job_id for r in records) == sorted(jobs.values())
    found = usage.list_usage(
        fleet.store, ADMIN, since=begin.isoformat(), until=end.isoformat(), limit=500, now=now_utc()
    )
    ours = [u.booking for u in found.items if u.booking.reservation_id in jobs]
    result = reconcile(records, ours, {j: a for a, j in jobs.items()}, period, now_utc())
    print(
        f"sacct {result.matched_by_account}, ours {result.ours_by_account}, differences {result.differences}"
    )
    assert not result.differences
    assert result.matched_by_account == result.ours_by_account == {"root": 2 * 3}

    # A user's scancel of one job: its replica waits for its next job, shown in Slurm's words.
    first_allocation, first_job = min(jobs.items())
    fleet.run("scancel", str(first_job))
    while not fleet.slurm.job(first_job).finished:
        assert time.monotonic() < deadline + DEADLINE, fleet.cluster.logs()
        time.sleep(0.2)
    pass_()
    view = workloads.get(fleet.store, ADMIN, made.id, now_utc())
    [shown_dep] = [d for d in view.deployments if d.deployment.cluster_id == "s1"]
    assert shown_dep.phase == "running"  # the other replica still runs
    assert shown_dep.deployment.message == f"Slurm job {first_job} CANCELLED"
    with fleet.store.read() as tx:
        assert tx.ledger.allocation_bookings(first_allocation)  # kept for its next job
    workloads.delete(wiring, ADMIN, made.id, now_utc())
    cancelled = follow(
        fleet.store, clusters.get(fleet.store, "s1"), fleet.slurm, now_utc(), commands
    ).cancelled
    assert cancelled == [jobs[a] for a in sorted(jobs) if a != first_allocation]
