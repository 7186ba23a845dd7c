"""What a node says of the container it runs for an allocation (a workload replica or an endpoint
copy): the runtime's side of a hand-over, reported by `bcd`'s runtime converger in signed
`ReplicaState` reports (docs/bcd.md#running-containers).

A deployment's phase, a workload's ready count, an endpoint's `InService` and where `invoke` sends a
request are all read from these (`is_ready`, `exists`); `doctor` lists the ones with a `problem`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from better_compute.domain.kernel.errors import InvalidInput

RuntimeState = Literal["created", "ready", "not-ready", "exited", "removed"]
RUNTIME_STATES: tuple[RuntimeState, ...] = get_args(RuntimeState)
"""`created`: the container exists and has not passed its readiness probe yet; `ready`: it runs and its
probe passes (one without a probe: it runs); `not-ready`: it runs and its probe fails; `exited`: it
stopped, with `exit_code`; `removed`: the node removed it (the allocation left its spec)."""

Problem = Literal["crash-looping", "image-not-found", "create-failed"]
PROBLEMS: tuple[Problem, ...] = get_args(Problem)
"""Why a replica's container does not run: it keeps exiting (`crash-looping`, restarted with
back-off), its image is not on the node and cannot be pulled (`image-not-found`), or the runtime
refused to create it (`create-failed`; `detail` says what it said)."""

MAX_DETAIL = 1000
MAX_ADDRESS = 300


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One node's last word on the container of one allocation."""

    allocation_id: str
    node_id: str
    state: RuntimeState
    updated_at: datetime
    exit_code: int | None = None
    problem: Problem | None = None
    detail: str | None = None
    restarts: int = 0
    address: str | None = None
    """`host:port` where the server reaches the container's first port (a ready copy's model server)."""


_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):([0-9]{1,5})$")


def check_address(raw: str | None) -> str | None:
    """A reported `host:port` (a name, an IPv4 address or a bracketed IPv6 one; port 1 to 65535), or
    INVALID_INPUT."""
    if raw is None:
        return None
    m = _ADDRESS.match(raw)
    if m is None or not 1 <= int(m[2]) <= 65535 or len(raw) > MAX_ADDRESS:
        raise InvalidInput(f"address {raw[:80]!r} is not host:port", {"field": "address"})
    return raw


NOT_MADE: tuple[Problem, ...] = ("image-not-found", "create-failed")
"""Problems that mean the node could not make the container at all (it reports the replica
`created`, waiting, as Kubernetes keeps a pod waiting for its image)."""


def exists(state: ReplicaState | None) -> bool:
    """Whether the node made the replica's container (and has not removed it)."""
    return (
        state is not None
        and state.state in ("created", "ready", "not-ready", "exited")
        and state.problem not in NOT_MADE
    )


def is_ready(state: ReplicaState | None) -> bool:
    return state is not None and state.state == "ready"
