"""Container logs read through the node (`workloads.logs`, `endpoints.logs`): the last `tail` lines of
a replica's or a copy's container log, as the node's agent read them (docs/bcd.md#the-agent)."""

from __future__ import annotations

from pydantic import Field

from better_compute.wire.common import WireAnswer, WireRequest

TAIL_MAX = 10_000
"""The most lines one read asks for (domain.fleet.node_agents.TAIL_MAX); 100 when none is asked."""
LOG_BYTES_MAX = 1 << 20
"""The most bytes one read answers: a longer log is cut from the start."""


class WorkloadLogsQuery(WireRequest):
    """`workloads.logs` (query parameters): `replica`, the replica's number in its deployment (default:
    the first replica on a node); `cluster`, where several deployments have one of that number;
    `tail`, how many of the newest lines (1 to 10,000, default 100)."""

    replica: int | None = Field(default=None, ge=0, le=1_000_000)
    cluster: str | None = Field(default=None, min_length=1, max_length=128)
    tail: int | None = Field(default=None, ge=1, le=TAIL_MAX)


class EndpointLogsQuery(WireRequest):
    """`endpoints.logs` (query parameters): `component`, one of the endpoint's; `copy`, its copy's
    number (default: the first copy on a node); `tail`, how many of the newest lines (1 to 10,000,
    default 100)."""

    component: str = Field(min_length=1, max_length=128)
    copy_: int | None = Field(default=None, ge=0, le=1_000_000, alias="copy")
    tail: int | None = Field(default=None, ge=1, le=TAIL_MAX)


class LogsPublic(WireAnswer):
    """The newest lines of a container's log (at most 1 MiB, cut from the start), the allocation it
    runs for (`<deploymentId>.r<n>`, `copy:<component>:<n>`) and the node that holds it."""

    allocation_id: str
    node: str
    lines: str


class WorkloadLogsRequest(WorkloadLogsQuery):
    """`workloads.logs` as the method table takes it: the workload (`id`, or its name) and the query."""

    id: str = Field(min_length=1)


class EndpointLogsRequest(EndpointLogsQuery):
    """`endpoints.logs` as the method table takes it: the endpoint's `name` and the query."""

    name: str = Field(min_length=1)
