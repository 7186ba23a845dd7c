"""What a node says of the container it runs for an allocation (a workload replica or an endpoint
copy): the runtime's side of a hand-over, reported by `bcd`'s runtime converger in signed
`ReplicaState` reports (docs/bcd.md#running-containers).

A deployment's phase, a workload's ready count, an endpoint's `InService` and where `invoke` sends a
request are all read from these (`is_ready`, `exists`); `doctor` lists the ones with a `problem`.

A node's word that a container is ready counts only while the node is live (`is_ready`, with the
nodes `live_nodes` finds): a node that has not reached the server for `READY_LEASE` no longer vouches
for its containers, as Kubernetes marks a pod not ready once its node stops renewing its lease. Nothing
is written when a node goes silent: every reader asks at its own `now`, and the node's next signed
request makes its states count again, with no new report.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from dataclasses import dataclass
from datetime import datetime, timedelta
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


READY_LEASE = timedelta(seconds=150)
"""How long a node's word that its containers are ready stands without a sign of life from it (a
signed report or spec read: `Node.last_contact_at`).

Kubernetes marks a node's pods not ready 40 s (its node-monitor grace period) after the node stops
renewing its lease; `bcd` renews nothing of its own, its contact is its spec long poll. An idle `bcd`
long-polls every `--wait` seconds (default 30, at most 60: `domain.gate.node_spec.MAX_WAIT`), and a
poll's contact is taken when it starts, so two contacts of a healthy node are up to one poll plus one
pass apart (a node running containers polls more often). The lease is two of the longest polls plus
30 s of slack: one lost poll, a slow pass or a restart of `bcd` does not take a live node's containers
out of service, and a dead host's copies stop getting traffic and counting as ready within 2.5 minutes
(doctor's `node.silent`, for people, waits 10). Checked against MAX_WAIT in the domain's tests
(`fleet` sits below `gate` and cannot import it)."""


def is_live(last_contact_at: datetime | None, now: datetime, lease: timedelta = READY_LEASE) -> bool:
    """Whether a node whose last contact was `last_contact_at` still vouches for its containers at
    `now`: it reached the server less than `lease` ago (a contact stamped after `now`, by another server
    process's clock, is live). Never reached: not live."""
    return last_contact_at is not None and now - last_contact_at < lease


def live_nodes(contacts: Mapping[str, datetime | None], now: datetime) -> frozenset[str]:
    """The nodes, of those whose last contact is given (`NodeRepo.contacts`), that are live at `now`."""
    return frozenset(node for node, at in contacts.items() if is_live(at, now))


def said_ready(state: ReplicaState | None) -> bool:
    """Whether the node's last word on the container was `ready`, whether or not the node still
    vouches for it (what a `ReplicaReadinessChanged` event records: the reports themselves)."""
    return state is not None and state.state == "ready"


def is_ready(state: ReplicaState | None, live: Set[str]) -> bool:
    """THE rule for a ready container: its node said `ready`, and the node is live (`live`, from
    `live_nodes`). Every reader of readiness (phases, ready replicas, `InService`, the relayout floor,
    `invoke`'s routing) comes through here."""
    return said_ready(state) and state is not None and state.node_id in live
