"""A command run in a container through its node: `workloads.exec` (in a replica's) and
`endpoints.exec` (in a component copy's). The server finds the node that holds the allocation now,
asks that node's agent (`bcd run --listen`; docs/bcd.md#the-agent) to run it, bounded, and logs a
`replica.exec` event for audit (who, where, the command's first argument, its exit code)."""

from __future__ import annotations

import threading

from fastapi import APIRouter

from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.deps import NowDep, ServicesDep
from better_compute.api.node_agents import run_exec
from better_compute.domain.fleet.node_agents import (
    EXEC_AT_ONCE,
    AgentUnavailable,
    LogSource,
    check_exec_command,
    check_exec_timeout,
    exec_busy,
)
from better_compute.domain.kernel.errors import NotFound
from better_compute.service.endpoints import copy_logs
from better_compute.service.fleet.node_agents import record_exec
from better_compute.service.placement import replica_logs
from better_compute.wire.container_exec import EndpointExecRequest, ExecBody, ExecPublic, WorkloadExecRequest

router = APIRouter(prefix="/v1", tags=["logs"], dependencies=AUTHENTICATED)
_slots = threading.BoundedSemaphore(EXEC_AT_ONCE)
"""Execs under way in this process (`EXEC_AT_ONCE`)."""


def _answer(
    source: LogSource, body: ExecBody, principal: PrincipalDep, services: ServicesDep, now: NowDep
) -> ExecPublic:
    argv = check_exec_command(body.command)
    timeout = check_exec_timeout(body.timeout_seconds)
    if not _slots.acquire(blocking=False):
        raise exec_busy()
    try:
        result = run_exec(source, argv, timeout)
    except NotFound:
        raise  # the node runs no container for it: nothing ran, nothing to log
    except AgentUnavailable:
        # The request may have reached the node: logged with no exit code, then refused.
        record_exec(services.store, principal, source, argv, None, now)
        raise
    finally:
        _slots.release()
    record_exec(services.store, principal, source, argv, result.exit_code, now)
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
    source = copy_logs.locate(services.store, principal, name, body.component, body.copy_, "exec")
    return _answer(source, body, principal, services, now)
