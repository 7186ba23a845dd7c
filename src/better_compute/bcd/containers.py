"""What a container runtime tells `bcd` of the containers it runs for allocations, and the errors it
raises: the vocabulary `bcd.runtime.ContainerRuntime` speaks, shared by the podman adapter
(`bcd.podman`) and the in-process fake (`bcd.fake_runtime`).

A container is `bcd`'s when it carries its labels: `better-compute.node` (the node that made it),
`better-compute.allocation` (the allocation it runs) and `better-compute.spec` (the sha256 of the
container document it was made from, `spec_digest`). The labels are the record: a daemon restarted
(even by SIGKILL) reads them back and adopts what is there instead of starting it twice.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from better_compute.domain.kernel.containers import ContainerSpec

NODE_LABEL = "better-compute.node"
ALLOCATION_LABEL = "better-compute.allocation"
SPEC_LABEL = "better-compute.spec"

MAX_DETAIL = 1000
"""The most characters of a runtime's error kept (the report's `detail` limit)."""
MAX_LOG_TAIL = 10_000
"""The most lines `logs` returns."""
MAX_LOG_BYTES = 1024 * 1024
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


def spec_digest(spec: ContainerSpec) -> str:
    """The sha256 of the container document (`ContainerSpec.document`, keys sorted): what the
    `better-compute.spec` label holds, so a changed spec is told from the label alone."""
    text = json.dumps(spec.document(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


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
