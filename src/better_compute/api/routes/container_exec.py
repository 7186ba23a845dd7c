"""A command run in a container through its node: `workloads.exec` (in a replica's) and
`endpoints.exec` (in a component copy's). The server finds the node that holds the allocation now,
asks that node's agent (`bcd run --listen`; docs/bcd.md#the-agent) to run it, bounded. For audit, a
`replica.exec` event (who, where, the command's first argument) is committed before the node is
asked, and a `replica.exec_finished` (its exit code) once it answered."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import APIRouter

from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.deps import NowDep, ServicesDep
from better_compute.api.node_agents import run_exec
from better_compute.api.path_ids import path_id
from better_compute.domain.fleet.node_agents import (
    EXEC_AT_ONCE,
    EXEC_PER_TENANT,
    LogSource,
    check_exec_command,
    check_exec_timeout,
    exec_busy,
    exec_busy_for_tenant,
)
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.endpoints import copy_logs
from better_compute.service.fleet.node_agents import record_exec, record_exec_finished
from better_compute.service.placement import replica_logs
from better_compute.wire.container_exec import EndpointExecRequest, ExecBody, ExecPublic, WorkloadExecRequest

router = APIRouter(prefix="/v1", tags=["logs"], dependencies=AUTHENTICATED)
log = logging.getLogger("better_compute.api")
_slots = threading.BoundedSemaphore(EXEC_AT_ONCE)
"""Execs under way in this process (`EXEC_AT_ONCE`)."""


class _Shares:
    """Execs under way in this process per tenant (`EXEC_PER_TENANT`; the admin, None, is one of its
    own), so that one tenant's long commands never hold every one of `_slots`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.held: Counter[str | None] = Counter()

    def take(self, tenant: str | None) -> bool:
        with self._lock:
            if self.held[tenant] >= EXEC_PER_TENANT:
                return False
            self.held[tenant] += 1
            return True

    def give(self, tenant: str | None) -> None:
        with self._lock:
            self.held[tenant] -= 1
            if self.held[tenant] <= 0:
                del self.held[tenant]


_shares = _Shares()


@contextmanager
def _slot(principal: Principal) -> Iterator[None]:
    """One exec's place: the caller's share, then one of the process's; refused at once
    (UNAVAILABLE `exec-busy`) rather than queued, each request holding a thread while it runs."""
    tenant = None if principal.is_admin else principal.tenant_id
    if not _shares.take(tenant):
        raise exec_busy_for_tenant(tenant)
    try:
        if not _slots.acquire(blocking=False):
            raise exec_busy()
        try:
            yield
        finally:
            _slots.release()
    finally:
        _shares.give(tenant)


def _answer(
    source: LogSource, body: ExecBody, principal: PrincipalDep, services: ServicesDep, now: NowDep
) -> ExecPublic:
    argv = check_exec_command(body.command)
    timeout = check_exec_timeout(body.timeout_seconds)
    with _slot(principal):
        # Logged before the node is asked: a command sent is on the log even if this server stops
        # before the answer (or the node never gives one).
        record_exec(services.store, principal, source, argv, now)
        result = run_exec(source, argv, timeout)
    try:
        record_exec_finished(services.store, principal, source, argv, result, now)
    except Exception:
        # The command ran: its answer is the caller's, whom a refusal would lead to run it again.
        log.exception(
            "exec in %s: its replica.exec_finished event could not be written", source.allocation_id
        )
    return ExecPublic(
        allocation_id=source.allocation_id,
        node=source.node_id,
        exit_code=result.exit_code,
        stdout=result.stdout,
        stderr=result.stderr,
        truncated=result.truncated,
        timed_out=result.timed_out,
    )


@router.post("/workloads/{id}/exec", response_model=ExecPublic)
def workload_exec(
    id: str, body: WorkloadExecRequest, principal: PrincipalDep, services: ServicesDep, now: NowDep
) -> ExecPublic:
    """Run `command` in a replica's container (no TTY, no stdin; 1 to 60 s, default 10): its exit
    code, stdout and stderr (1 MiB each). Another tenant's workload is NOT_FOUND; a node that serves
    no agent or does not answer is UNAVAILABLE; a replica with no container on its node is NOT_FOUND."""
    id = path_id(id, body.id)
    source = replica_logs.locate(services.store, principal, id, now, body.replica, body.cluster, "exec")
    return _answer(source, body, principal, services, now)


@router.post("/endpoints/{name}/exec", response_model=ExecPublic)
def endpoint_exec(
    name: str, body: EndpointExecRequest, principal: PrincipalDep, services: ServicesDep, now: NowDep
) -> ExecPublic:
    """Run `command` in a component copy's container (no TTY, no stdin; 1 to 60 s, default 10): its
    exit code, stdout and stderr (1 MiB each). Another tenant's endpoint is NOT_FOUND; a node that
    serves no agent or does not answer is UNAVAILABLE; a copy with no container on its node is
    NOT_FOUND."""
    name = path_id(name, body.name, "name")
    source = copy_logs.locate(services.store, principal, name, body.component, body.copy_, "exec")
    return _answer(source, body, principal, services, now)
