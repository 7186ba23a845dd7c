"""A command run in a container through its node (`workloads.exec`, `endpoints.exec`): one bounded,
non-interactive exec in a replica's or a copy's container, as the node's agent ran it
(docs/bcd.md#the-agent). No TTY and no stdin: the agent answers a request, it holds no session."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from better_compute.wire.common import WireAnswer, WireRequest

EXEC_ARGV_MAX = 64
EXEC_ARG_MAX = 4096
"""The command: 1 to 64 arguments, each 1 to 4096 characters (domain.fleet.node_agents)."""
EXEC_TIMEOUT_MAX = 60
"""Seconds the command may run, 1 to 60 (default 10)."""

Argument = Annotated[str, StringConstraints(min_length=1, max_length=EXEC_ARG_MAX)]


class ExecBody(WireRequest):
    """What to run: `command`, the argv (never a shell line: each item is one argument, no NUL; the
    body at most the server's request cap, 1 MiB by default), and `timeoutSeconds`, how long it may
    run (1 to 60, default 10). Past it the node stops its `podman exec` client and answers exit code
    124, `timedOut`; the command itself may keep running in the container (as when a `kubectl exec`
    client goes away)."""

    command: list[Argument] = Field(min_length=1, max_length=EXEC_ARGV_MAX)
    timeout_seconds: int | None = Field(default=None, ge=1, le=EXEC_TIMEOUT_MAX)


class WorkloadExecRequest(ExecBody):
    """`workloads.exec`: the workload (`id`, or its name), the replica (`replica`, its number in its
    deployment; default: the first replica on a node), `cluster` where several deployments have one
    of that number, and the command. `id` is the path's (the method table sends it in the body too);
    the server goes by the path."""

    id: str | None = Field(default=None, min_length=1)
    replica: int | None = Field(default=None, ge=0, le=1_000_000)
    cluster: str | None = Field(default=None, min_length=1, max_length=128)


class EndpointExecRequest(ExecBody):
    """`endpoints.exec`: the endpoint's `name`, the `component`, its copy (`copy`; default: the
    first copy on a node), and the command. `name` is the path's, as `id` of `workloads.exec`."""

    name: str | None = Field(default=None, min_length=1)
    component: str = Field(min_length=1, max_length=128)
    copy_: int | None = Field(default=None, ge=0, le=1_000_000, alias="copy")


class ExecPublic(WireAnswer):
    """What the command answered in the container of the allocation (`<deploymentId>.r<n>`,
    `copy:<component>:<n>`) on `node`: its exit code (podman's 125 when it could not be run, as in
    a container that is not running; 126 not executable; 127 not found; 124 with `timedOut`), the
    first 1 MiB of its stdout and of its stderr (`truncated` when either was cut)."""

    allocation_id: str
    node: str
    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool
