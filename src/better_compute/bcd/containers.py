"""What a container runtime tells `bcd` of the containers it runs for allocations, and the errors it
raises: the vocabulary `bcd.runtime.ContainerRuntime` speaks, shared by the podman adapter
(`bcd.podman`) and the in-process fake (`bcd.fake_runtime`).

A container is `bcd`'s when it carries its labels: `better-compute.node` (the node that made it),
`better-compute.allocation` (the allocation it runs), `better-compute.spec` (`spec_digest`: the sha256
of the container document it was made from AND the atoms and tenant it was made for, so a copy moved
to other atoms of the same node, or a component deleted and made again by another tenant with the
same name and container, is a different container) and `better-compute.atoms` (the atoms whose CDI
device it was made with: what it holds until it is gone). The labels are the record: a daemon
restarted (even by SIGKILL) reads them back and adopts what is there instead of starting it twice.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from better_compute.domain.fleet import node_agents, replica_states
from better_compute.domain.kernel.containers import ContainerSpec

NODE_LABEL = "better-compute.node"
ALLOCATION_LABEL = "better-compute.allocation"
SPEC_LABEL = "better-compute.spec"
ATOMS_LABEL = "better-compute.atoms"
JOB_LABEL = "better-compute.slurm-allocation"
"""The label of a container a Slurm job runs for a replica, its value the allocation id
(`domain.placement.slurm_replicas.podman_run`): `bcd` watches such a container and reports its
readiness, never starting, stopping or removing it (it carries no `better-compute.node` label, so it
is never one of `bcd`'s own, nor a stray of them)."""

MAX_DETAIL = replica_states.MAX_DETAIL
"""The most characters of a runtime's error kept (the report's `detail` limit)."""
MAX_LOG_TAIL = node_agents.TAIL_MAX
"""The most lines `logs` returns (the server's limit on a log read)."""
MAX_LOG_BYTES = node_agents.LOG_BYTES_MAX
"""The most bytes of log `logs` returns (the last ones)."""

State = Literal["created", "running", "exited", "other"]
"""A container's state as `bcd` acts on it: podman's `created`, `running`, `exited` (also `stopped`);
`other` is a state it leaves alone for now (`paused`, `stopping`, `removing`)."""


class RuntimeFailure(Exception):
    """The runtime refused or failed a command; `problem` is what a report says of it
    (`image-not-found`, `create-failed`), `detail` what the runtime said (bounded)."""

    def __init__(
        self, detail: str, problem: Literal["image-not-found", "create-failed"] = "create-failed"
    ) -> None:
        super().__init__(detail[:MAX_DETAIL])
        self.detail = detail[:MAX_DETAIL]
        self.problem = problem


class NoContainer(LookupError):
    """No container of this node runs the allocation (asked for its logs, say)."""

    def __init__(self, allocation_id: str) -> None:
        super().__init__(f"no container runs allocation {allocation_id!r} on this node")
        self.allocation_id = allocation_id


@dataclass(frozen=True, slots=True)
class Found:
    """One of this node's containers, as the runtime lists it."""

    id: str
    name: str
    allocation_id: str
    spec_digest: str
    state: State
    exit_code: int | None = None
    oom_killed: bool = False
    ports: Mapping[int, int] = field(default_factory=dict)
    """{container port: host port} of the published ports."""
    atoms: tuple[str, ...] = ()
    """The atoms it was made for (its `better-compute.atoms` label; empty on a container made
    before the label was)."""


def spec_digest(spec: ContainerSpec, atoms: Sequence[str] = (), tenant: str | None = None) -> str:
    """The sha256 of the container document (`ContainerSpec.document`, keys sorted), the atoms it
    runs on (sorted) and its tenant: what the `better-compute.spec` label holds, so a change of any
    of them is told from the label alone and the container is made again. A container's identity is
    not its spec alone: the CDI device is resolved when it is created (a copy that moved to another
    atom of the same node would keep the old one) and its filesystem is its tenant's (a component
    made again under the same name by another tenant must not inherit it)."""
    document = {"container": spec.document(), "atoms": sorted(atoms), "tenant": tenant}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def atoms_label(atoms: Sequence[str]) -> str:
    """The `better-compute.atoms` label's value: the atom ids, sorted, comma-joined."""
    return ",".join(sorted(atoms))


def atoms_of_label(value: str | None) -> tuple[str, ...]:
    return tuple(a for a in (value or "").split(",") if a)


_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


def container_name(node: str, allocation_id: str) -> str:
    """The container's name: `bc-<node>-<allocation>-<hash>`, the ids with every character podman
    refuses in a name (`:` of an endpoint copy's `copy:<component>:<index>`, say) made `-`, and a
    short hash of the exact pair, so two ids that read alike once cleaned never share a name, and
    two simulated nodes on one machine never take each other's. Deterministic: a second create for
    the same allocation is refused by the runtime (the name is taken), never a second container."""
    digest = hashlib.sha256(f"{node}\x00{allocation_id}".encode()).hexdigest()[:10]
    clean = _UNSAFE.sub("-", f"{node}-{allocation_id}").strip("-.")[:100]
    return f"bc-{clean}-{digest}"


def published(spec: ContainerSpec) -> list[int]:
    """The container ports a create publishes: the spec's, and an httpGet probe's port (the node
    probes the published host port, since a container's own address is not reachable everywhere)."""
    ports = list(spec.ports)
    probe = spec.readiness
    if probe is not None and probe.http_port is not None and probe.http_port not in ports:
        ports.append(probe.http_port)
    return ports
