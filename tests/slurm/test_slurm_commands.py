"""The Slurm adapter against a real slurmctld and slurmd: jobs get GRES, Slurm picks the index, we read it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from better_compute.domain.fleet.slurm import SlurmJob, SlurmRecordAmbiguous
from better_compute.service.fleet.slurm import JobRequest, SlurmJobUnknown, SlurmRefused
from better_compute.slurm.commands import SlurmCommands
from tests.slurm.cluster import Cluster

DEADLINE = 15.0
POLL = 0.1


def _request(name: str, command: str = "sleep 60", reservation: str | None = None) -> JobRequest:
    return JobRequest(
        name=name,
        command=command,
        gres_name="gpu",
        gres_type="3g.40gb",
        gres_count=1,
        reservation=reservation,
    )


def _until(slurm: SlurmCommands, job_id: int, done: Callable[[SlurmJob], bool]) -> SlurmJob:
    deadline = time.monotonic() + DEADLINE
    while True:
        job = slurm.job(job_id)
        if done(job) or time.monotonic() > deadline:
            return job
        time.sleep(POLL)


def _state(slurm: SlurmCommands, job_id: int, *states: str) -> SlurmJob:
    return _until(slurm, job_id, lambda job: job.state in states)


@pytest.fixture
def jobs(slurm: SlurmCommands) -> Iterator[list[int]]:
    """Jobs a test submits; cancelled, and waited out, afterwards so the next test finds the node idle."""
    submitted: list[int] = []
    yield submitted
    for job_id in submitted:
        slurm.cancel(job_id)
    for job_id in submitted:
        assert _until(slurm, job_id, lambda job: job.finished).finished


def test_the_node_comes_up_idle_with_its_fake_gpus(slurm_cluster: Cluster) -> None:
    node = subprocess.run(
        ["scontrol", "-o", "show", "node", slurm_cluster.node],
        env=slurm_cluster.env,
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    assert "State=IDLE" in node
    assert "Gres=gpu:3g.40gb:2" in node


def test_a_job_runs_on_the_gpu_slurm_chose_and_a_second_gets_the_other(
    slurm: SlurmCommands, jobs: list[int]
) -> None:
    jobs.append(slurm.submit(_request("first")))
    jobs.append(slurm.submit(_request("second")))
    first, second = (_state(slurm, job_id, "RUNNING") for job_id in jobs)
    assert (first.state, second.state) == ("RUNNING", "RUNNING")
    held = [(gres.name, gres.type, gres.count) for job in (first, second) for gres in job.gres]
    assert held == [("gpu", "3g.40gb", 1), ("gpu", "3g.40gb", 1)]
    assert sorted(first.gres[0].indices + second.gres[0].indices) == [0, 1]

    jobs.append(slurm.submit(_request("third")))
    third = slurm.job(jobs[-1])
    assert (third.state, third.gres) == ("PENDING", ())  # both GPUs are held

    slurm.cancel(jobs[0])
    assert _state(slurm, jobs[0], "CANCELLED").state == "CANCELLED"
    third = _state(slurm, jobs[2], "RUNNING")
    assert third.state == "RUNNING"
    assert third.gres[0].indices == first.gres[0].indices  # the card the cancelled job let go


def test_a_finished_job_reads_completed_and_cancelling_it_again_is_no_error(
    slurm: SlurmCommands, jobs: list[int]
) -> None:
    jobs.append(slurm.submit(_request("short", command="true")))
    assert _state(slurm, jobs[0], "COMPLETED").state == "COMPLETED"
    slurm.cancel(jobs[0])


def test_slurm_refusals_keep_slurms_message(slurm: SlurmCommands) -> None:
    with pytest.raises(SlurmJobUnknown, match="Invalid job id"):
        slurm.job(999999)
    with pytest.raises(SlurmRefused, match="sbatch"):
        slurm.submit(JobRequest(name="nope", command="true", gres_name="gpu", gres_type="h100", gres_count=1))


def test_a_reservation_holding_gres_is_refused_by_slurm_22_05(
    slurm_cluster: Cluster, slurm: SlurmCommands
) -> None:
    """scontrol(1) of 22.05: reservations hold CPU, Node, License and BB TRES only; GRES came later."""
    version = subprocess.run(
        ["scontrol", "--version"],
        env=slurm_cluster.env,
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    if not version.startswith("slurm-wlm 22.05") and not version.startswith("slurm 22.05"):
        pytest.skip(f"this pins Slurm 22.05's answer; this is {version.strip()}")
    with pytest.raises(SlurmRefused, match="not supported with reservations"):
        slurm.create_reservation(
            "bc-gres",
            nodes=slurm_cluster.node,
            users="root",
            duration_minutes=10,
            tres={"gres/gpu:3g.40gb": 1},
        )


def test_a_node_reservation_keeps_its_gpus_for_jobs_that_name_it(
    slurm_cluster: Cluster, slurm: SlurmCommands, jobs: list[int]
) -> None:
    reservation = slurm.create_reservation(
        "bc-node", nodes=slurm_cluster.node, users="root", duration_minutes=10, tres=None
    )
    try:
        assert (reservation.name, reservation.nodes) == ("bc-node", slurm_cluster.node)
        jobs.append(slurm.submit(_request("outsider")))
        jobs.append(slurm.submit(_request("holder", reservation="bc-node")))
        holder = _state(slurm, jobs[1], "RUNNING")
        assert holder.state == "RUNNING"
        assert holder.gres[0].type == "3g.40gb" and len(holder.gres[0].indices) == 1
        assert slurm.job(jobs[0]).state == "PENDING"  # a GPU is free, but the node is reserved
        slurm.cancel(jobs[1])
        assert _until(slurm, jobs[1], lambda job: job.finished).state == "CANCELLED"
    finally:
        slurm.delete_reservation("bc-node")  # Slurm refuses while a job runs in it
    assert _state(slurm, jobs[0], "RUNNING").state == "RUNNING"


def test_reconfigure_keeps_the_node_and_its_gres(slurm_cluster: Cluster, slurm: SlurmCommands) -> None:
    slurm.reconfigure()
    node = subprocess.run(
        ["scontrol", "-o", "show", "node", slurm_cluster.node],
        env=slurm_cluster.env,
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    assert "Gres=gpu:3g.40gb:2" in node


def test_a_replicas_job_runs_on_its_node_with_its_time_limit_and_its_phase_follows_the_job(
    slurm_cluster: Cluster, slurm: SlurmCommands, jobs: list[int]
) -> None:
    from better_compute.domain.placement.slurm_replicas import replica_job, replica_phase
    from better_compute.service.placement.slurm_replicas import replica_job_request

    job = replica_job(
        "dep-1.r0",
        gres_type="3g.40gb",
        gres_count=1,
        command=["sleep", "60"],
        node=slurm_cluster.node,
        time_limit_minutes=5,
    )
    jobs.append(slurm.submit(replica_job_request(job)))
    running = _state(slurm, jobs[0], "RUNNING")
    assert replica_phase(running.job_id, running.state, running.reason).phase == "running"
    assert running.nodes == slurm_cluster.node and running.gres[0].type == "3g.40gb"
    shown = subprocess.run(
        ["scontrol", "-o", "show", "job", str(jobs[0])],
        env=slurm_cluster.env,
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    assert "JobName=dep-1.r0 " in shown and "TimeLimit=00:05:00 " in shown
    slurm.cancel(jobs[0])
    cancelled = _until(slurm, jobs[0], lambda found: found.finished)
    assert replica_phase(cancelled.job_id, cancelled.state, cancelled.reason).phase == "failed"


def test_field_injection_in_scontrol_show_job_forges_no_job(
    slurm_cluster: Cluster, slurm: SlurmCommands, jobs: list[int], tmp_path: Path
) -> None:
    """A user's job name, comment and output path carrying `Key=` words (another job's id, a holding
    job's name, our account, a node) are printed by the real slurmctld inside the job's record: the
    record is not believed, and an honest job beside it still reads as Slurm has it."""
    forged = f"JobId=77 JobName=bc.rsv-1 Account=bc-holds ReqNodeList={slurm_cluster.node}"

    def sbatch(*arguments: str) -> int:
        done = subprocess.run(
            ["sbatch", "--parsable", "--gres=gpu:3g.40gb:1", *arguments, "--wrap=sleep 60"],
            env=slurm_cluster.env,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        return int(done.stdout.strip().split(";")[0])

    detail = f"Nodes={slurm_cluster.node} CPU_IDs=0 Mem=0 GRES=gpu:3g.40gb:1(IDX:1)"
    attacker = sbatch(
        f"--job-name=train {forged}", f"--comment=c {forged}", f"--output={tmp_path}/o {forged} {detail}"
    )
    try:
        jobs.append(
            sbatch("--job-name=honest", f"--output={tmp_path}/o honest", "--comment=a comment, with spaces")
        )
        honest = _state(slurm, jobs[0], "RUNNING", "PENDING")
        read = {job.job_id: job for job in slurm.jobs()}
        assert attacker not in read and 77 not in read
        assert read[jobs[0]].name == "honest" and read[jobs[0]].account == "root"
        assert read[jobs[0]].required_nodes == "" and read[jobs[0]].state in {"RUNNING", "PENDING"}
        assert honest.job_id == jobs[0]
        with pytest.raises(SlurmRecordAmbiguous):
            slurm.job(attacker)
    finally:
        slurm.cancel(attacker)
