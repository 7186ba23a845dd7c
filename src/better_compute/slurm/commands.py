"""`SlurmControl` over Slurm's own commands: `sbatch --parsable`, `scontrol`, `scancel`.

Each call runs one command with a timeout and an environment of the caller's choosing (`SLURM_CONF`
names the cluster). A command that cannot be run or does not finish in time raises `SlurmUnreachable`;
one that exits non-zero raises `SlurmRefused` with Slurm's own message; what it prints is read by the
pure parsers of `domain/fleet/slurm.py`.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from datetime import datetime

from better_compute.domain.fleet.slurm import (
    SACCT_TIME_FORMAT,
    SlurmAccountingRecord,
    SlurmJob,
    SlurmNode,
    SlurmReservation,
    check_name,
    check_reason,
    gres_request,
    in_hostlist,
    parse_job,
    parse_jobs,
    parse_node,
    parse_reservation,
    parse_sacct,
    parse_submitted,
    reservation_arguments,
    sacct_arguments,
)
from better_compute.service.fleet.slurm import (
    HoldRequest,
    JobRequest,
    SlurmJobUnknown,
    SlurmRefused,
    SlurmUnreachable,
)

_log = logging.getLogger("better_compute.slurm")

DEFAULT_TIMEOUT = 15.0
"""Seconds one Slurm command may take; slurmctld answers an RPC in well under a second when healthy."""

_UNKNOWN_JOB = "Invalid job id specified"
"""slurmctld's message (ESLURM_INVALID_JOB_ID) for a job it does not know."""


class SlurmCommands:
    """Talks to one Slurm cluster through its commands."""

    def __init__(self, env: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._env = dict(env) if env is not None else None
        self._timeout = timeout

    def _run(self, arguments: Sequence[str], extra_env: Mapping[str, str] | None = None) -> str:
        env = self._env
        if extra_env:
            env = {**(env if env is not None else os.environ), **extra_env}
        try:
            result = subprocess.run(
                list(arguments),
                env=env,
                capture_output=True,
                text=True,
                timeout=self._timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError as exc:
            raise SlurmUnreachable(f"{arguments[0]} is not installed") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnreachable(
                f"{arguments[0]} {arguments[1]} did not answer in {self._timeout}s"
            ) from exc
        if result.returncode != 0:
            message = (result.stderr or result.stdout).strip() or f"exit status {result.returncode}"
            raise SlurmRefused(f"{' '.join(arguments[:3])}: {message}")
        return result.stdout

    def submit(self, request: JobRequest) -> int:
        arguments = [
            "sbatch",
            "--parsable",
            f"--job-name={check_name('job', request.name)}",
            f"--gres={gres_request(request.gres_name, request.gres_type, request.gres_count)}",
            f"--output={request.output}",
        ]
        if request.partition:
            arguments.append(f"--partition={check_name('partition', request.partition)}")
        if request.reservation:
            arguments.append(f"--reservation={check_name('reservation', request.reservation)}")
        if request.nodelist:
            arguments.append(f"--nodelist={check_name('node', request.nodelist)}")
        if request.time_limit_minutes is not None:
            if request.time_limit_minutes < 1:
                raise ValueError(f"time limit {request.time_limit_minutes} minutes: at least 1")
            arguments.append(f"--time={request.time_limit_minutes}")
        arguments += ["--wrap", request.command]
        return parse_submitted(self._run(arguments))

    def job(self, job_id: int) -> SlurmJob:
        try:
            output = self._run(["scontrol", "-o", "show", "job", "-d", str(job_id)])
        except SlurmRefused as exc:
            if _UNKNOWN_JOB in str(exc):
                raise SlurmJobUnknown(str(exc)) from exc
            raise
        lines = [line for line in output.splitlines() if line]
        if len(lines) != 1:
            raise SlurmRefused(f"scontrol show job {job_id}: {len(lines)} records, not one")
        return parse_job(lines[0])

    def cancel(self, job_id: int) -> None:
        """scancel exits 0, silently, for a job that ended or that it does not know: so does this."""
        self._run(["scancel", str(job_id)])

    def create_reservation(
        self, name: str, *, nodes: str, users: str, duration_minutes: int, tres: Mapping[str, int] | None
    ) -> SlurmReservation:
        arguments = reservation_arguments(
            name, nodes=nodes, users=users, duration_minutes=duration_minutes, tres=tres
        )
        self._run(["scontrol", "create", "reservation", *arguments])
        return self.reservation(name)

    def reservation(self, name: str) -> SlurmReservation:
        output = self._run(["scontrol", "-o", "show", "reservation", check_name("reservation", name)])
        return parse_reservation(output.strip())

    def delete_reservation(self, name: str) -> None:
        self._run(["scontrol", "delete", f"ReservationName={check_name('reservation', name)}"])

    def reconfigure(self) -> None:
        self._run(["scontrol", "reconfigure"])

    def accounting(
        self, start: datetime, end: datetime, *, accounts: Sequence[str] = ()
    ) -> tuple[SlurmAccountingRecord, ...]:
        """`sacct` in UTC (`TZ=UTC`, for the window it is given) printing times as epoch seconds
        (`SLURM_TIME_FORMAT=%s`, for the times it prints), so no local time zone enters."""
        output = self._run(
            sacct_arguments(start, end, accounts=tuple(accounts)),
            {"TZ": "UTC", "SLURM_TIME_FORMAT": SACCT_TIME_FORMAT},
        )
        return parse_sacct(output)

    def node(self, name: str) -> SlurmNode:
        output = self._run(["scontrol", "-o", "show", "node", check_name("node", name)])
        lines = [line for line in output.splitlines() if line.strip()]
        if len(lines) != 1:
            raise SlurmRefused(f"scontrol show node {name}: {len(lines)} records, not one")
        return parse_node(lines[0])

    def drain(self, node: str, reason: str) -> None:
        self._run(
            [
                "scontrol",
                "update",
                f"NodeName={check_name('node', node)}",
                "State=DRAIN",
                f"Reason={check_reason(reason)}",
            ]
        )

    def resume(self, node: str) -> None:
        self._run(["scontrol", "update", f"NodeName={check_name('node', node)}", "State=RESUME"])

    def jobs_on(self, node: str) -> tuple[SlurmJob, ...]:
        """Every job slurmctld knows, in one `scontrol -o show job -d`, kept when it holds something
        on `node` and has not finished (a pending job holds nothing yet)."""
        check_name("node", node)
        jobs = parse_jobs(self._run(["scontrol", "-o", "show", "job", "-d"]))
        return tuple(
            job for job in jobs if not job.finished and any(in_hostlist(node, held.node) for held in job.gres)
        )

    def submit_hold(self, request: HoldRequest) -> int:
        """Times are relative (`--begin=now+<seconds>`, `--time=<minutes>:<seconds>`), so slurmctld's
        time zone and clock offset do not move the window."""
        arguments = [
            "sbatch",
            "--parsable",
            f"--job-name={check_name('job', request.name)}",
            f"--account={check_name('account', request.account)}",
            f"--partition={check_name('partition', request.partition)}",
            f"--nodelist={check_name('node', request.node)}",
            f"--gres={','.join(gres_request('gpu', kind, count) for kind, count in request.gres)}",
            f"--begin=now+{max(0, request.begin_seconds)}",
            f"--output={request.output}",
        ]
        if request.time_limit_seconds is not None:
            seconds = max(1, request.time_limit_seconds)
            arguments.append(f"--time={seconds // 60}:{seconds % 60:02d}")
        arguments += ["--wrap", request.command]
        return parse_submitted(self._run(arguments))

    def jobs(self, partitions: Sequence[str] | None = None) -> list[SlurmJob]:
        """Every job record that can be read; one that cannot (a user's job whose free text reads as
        keys) is left out and logged, so it neither stops the follower nor is believed."""
        unreadable: list[str] = []
        found = parse_jobs(self._run(["scontrol", "-o", "show", "job", "-d"]), unreadable)
        for why in unreadable:
            _log.warning("Slurm job record left out: %s", why)
        if partitions is None:
            return found
        wanted = {check_name("partition", p) for p in partitions}
        return [job for job in found if job.partition in wanted]
