"""Container logs read through the node: `workloads.logs` (a replica's) and `endpoints.logs` (a
component copy's). The server finds the node that holds the allocation now and asks that node's agent
(`bcd run --listen`; docs/bcd.md#the-agent) for the newest lines, bounded."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.deps import NowDep, ServicesDep
from better_compute.api.node_agents import read_logs
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.fleet.node_agents import LogSource, check_tail
from better_compute.service.endpoints import copy_logs
from better_compute.service.placement import replica_logs
from better_compute.wire.logs import EndpointLogsQuery, LogsPublic, WorkloadLogsQuery

router = APIRouter(prefix="/v1", tags=["logs"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute)


def _answer(source: LogSource, tail: int | None) -> LogsPublic:
    lines = read_logs(source, check_tail(tail))
    return LogsPublic(allocation_id=source.allocation_id, node=source.node_id, lines=lines)


@router.get("/workloads/{id}/logs", response_model=LogsPublic)
def workload_logs(
    id: str,
    q: Annotated[WorkloadLogsQuery, Query()],
    principal: PrincipalDep,
    services: ServicesDep,
    now: NowDep,
) -> LogsPublic:
    """The newest `tail` lines (default 100, at most 10,000 and 1 MiB) of a replica's container log.
    Another tenant's workload is NOT_FOUND; a node that serves no logs or does not answer is
    UNAVAILABLE; a replica with no container on its node is NOT_FOUND."""
    source = replica_logs.locate(services.store, principal, id, now, q.replica, q.cluster)
    return _answer(source, q.tail)


@router.get("/endpoints/{name}/logs", response_model=LogsPublic)
def endpoint_logs(
    name: str, q: Annotated[EndpointLogsQuery, Query()], principal: PrincipalDep, services: ServicesDep
) -> LogsPublic:
    """The newest `tail` lines (default 100, at most 10,000 and 1 MiB) of a component copy's
    container log. Another tenant's endpoint is NOT_FOUND; a node that serves no logs or does not
    answer is UNAVAILABLE; a copy with no container on its node is NOT_FOUND."""
    source = copy_logs.locate(services.store, principal, name, q.component, q.copy_)
    return _answer(source, q.tail)
