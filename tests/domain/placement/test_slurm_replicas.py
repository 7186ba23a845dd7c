"""Replica phases from Slurm job states (squeue(1), JOB STATE CODES) and the job of a replica."""

from __future__ import annotations

import shlex

import pytest

from better_compute.domain.fleet.slurm import FINISHED_STATES, JOB_STATES
from better_compute.domain.kernel.containers import ContainerSpec
from better_compute.domain.placement.slurm_replicas import (
    CDI_KIND,
    REPLICA_PHASES,
    SHOWN_AS,
    cdi_spec_file,
    deployment_phase,
    podman_run,
    replica_job,
    replica_phase,
)
from better_compute.domain.placement.workloads import PHASES
from better_compute.wire import cdi

# Every state squeue(1) lists under JOB STATE CODES, and the phase its replica is in.
EXPECTED = {
    "BOOT_FAIL": "failed",
    "CANCELLED": "failed",
    "COMPLETED": "succeeded",
    "CONFIGURING": "admitted",
    "COMPLETING": "stopping",
    "DEADLINE": "failed",
    "FAILED": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "PENDING": "admitted",
    "PREEMPTED": "failed",
    "RUNNING": "running",
    "RESV_DEL_HOLD": "pending",
    "REQUEUE_FED": "admitted",
    "REQUEUE_HOLD": "pending",
    "REQUEUED": "admitted",
    "RESIZING": "running",
    "REVOKED": "failed",
    "SIGNALING": "running",
    "SPECIAL_EXIT": "failed",
    "STAGE_OUT": "stopping",
    "STOPPED": "placed",
    "SUSPENDED": "placed",
    "TIMEOUT": "failed",
}


def test_every_documented_state_has_a_phase_and_ends_are_finished() -> None:
    assert set(EXPECTED) == JOB_STATES
    for state, phase in EXPECTED.items():
        read = replica_phase(7, state, "None")
        assert read.phase == phase, state
        assert read.finished == (state in FINISHED_STATES), state
        assert read.message == f"Slurm job 7 {state}"


def test_pending_is_admitted_while_slurm_queues_it_and_pending_when_it_waits_for_a_person() -> None:
    assert replica_phase(1, "PENDING", "Resources").phase == "admitted"
    assert replica_phase(1, "PENDING", "Priority").phase == "admitted"
    held = replica_phase(1, "PENDING", "JobHeldAdmin")
    assert (held.phase, held.message, held.holds) == ("pending", "Slurm job 1 PENDING (JobHeldAdmin)", False)
    assert replica_phase(1, "PENDING", "AssocGrpGRES").phase == "pending"
    assert replica_phase(1, "PENDING", "QOSMaxGRESPerUser").phase == "pending"
    assert replica_phase(1, "PENDING", "ReqNodeNotAvail, UnavailableNodes:n1").phase == "pending"


def test_running_is_placed_until_ready_and_failures_keep_slurms_reason() -> None:
    assert replica_phase(2, "RUNNING", "None", ready=False).phase == "placed"
    assert replica_phase(2, "RUNNING", "None", ready=True).phase == "running"
    assert replica_phase(2, "RUNNING", "None").holds
    failed = replica_phase(2, "NODE_FAIL", "NodeDown")
    assert (failed.phase, failed.message, failed.holds) == (
        "failed",
        "Slurm job 2 NODE_FAIL (NodeDown)",
        False,
    )
    with pytest.raises(ValueError):
        replica_phase(2, "DONE", "None")


def test_a_replica_job_runs_its_container_on_its_cdi_device_once_bcd_wrote_it() -> None:
    container = ContainerSpec(
        image="registry.example/llm:1", command=("python",), args=("-m", "serve"), env={"A": "x y"}, cpu=2.0
    )
    job = replica_job(
        "dep-1.r0", gres_type="3g.40gb", gres_count=1, container=container, node="n1", time_limit_minutes=60
    )
    assert (job.name, job.gres_name, job.gres_type, job.gres_count, job.node, job.time_limit_minutes) == (
        "dep-1.r0",
        "gpu",
        "3g.40gb",
        1,
        "n1",
        60,
    )
    wait, _, run = job.command.partition("; exec ")
    assert "/var/run/cdi/better-compute.io-gpu_dep-1.r0.json" in wait
    assert shlex.split(run) == podman_run("dep-1.r0", container)
    assert podman_run("dep-1.r0", container) == [
        "podman", "run", "--rm", "--name", "bc-slurm-dep-1.r0",
        "--label", "better-compute.slurm-allocation=dep-1.r0", "--device", "better-compute.io/gpu=dep-1.r0",
        "--cpus", "2", "--env", "A=x y", "--entrypoint", '["python"]', "registry.example/llm:1", "-m", "serve",
    ]  # fmt: skip


def test_a_replica_job_without_a_container_runs_its_command_and_names_match_bcds() -> None:
    job = replica_job("dep-1.r1", gres_type=None, gres_count=2, command=["sh", "-c", "echo hi; sleep 1"])
    assert job.command == "sh -c 'echo hi; sleep 1'"
    with pytest.raises(ValueError):
        replica_job("dep-1.r1", gres_type=None, gres_count=1)
    with pytest.raises(ValueError):
        replica_job("dep-1.r1", gres_type=None, gres_count=1, command=["x"], time_limit_minutes=0)
    assert CDI_KIND == cdi.KIND
    assert cdi_spec_file("dep-1.r0") == cdi.spec_file_name("dep-1.r0")


def test_every_replica_phase_counts_as_a_deployment_phase_and_the_deployment_reads_them() -> None:
    assert set(SHOWN_AS) == set(REPLICA_PHASES) and set(SHOWN_AS.values()) <= set(PHASES)
    waiting = replica_phase(41, "PENDING", "Resources")
    running = replica_phase(42, "RUNNING", "None", ready=True)
    starting = replica_phase(43, "RUNNING", "None", ready=False)
    failed = replica_phase(44, "FAILED", "NonZeroExitCode")
    held = replica_phase(45, "PENDING", "JobHeldAdmin")
    assert deployment_phase(2, [waiting, running]) == ("running", "Slurm job 41 PENDING (Resources)")
    assert deployment_phase(2, [starting, starting]) == ("placed", "Slurm job 43 RUNNING")
    assert deployment_phase(3, [starting, starting]) == ("admitted", "Slurm job 43 RUNNING")
    assert deployment_phase(1, [failed]) == ("admitted", "Slurm job 44 FAILED (NonZeroExitCode)")
    assert deployment_phase(2, [held, None]) == ("pending", "Slurm job 45 PENDING (JobHeldAdmin)")
    assert deployment_phase(1, [None]) == ("admitted", "")
