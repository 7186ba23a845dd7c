"""The wire of node identities: join tokens, joining, signed reports and the node spec.

A node's reports and spec reads are signed (docs/node-auth.md): the headers named here travel with
every such request, over the canonical bytes `domain.fleet.node_reports` defines.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from better_compute.wire.common import WireAnswer, WireRequest
from better_compute.wire.containers import ContainerPublic

NodeId = Annotated[str, Field(min_length=1, max_length=128)]

LAYOUT_REFUSAL_REASON_MAX = 500
"""The longest refusal reason a node reports (`bcd` cuts a longer one to fit)."""


class JoinTokenCreate(WireRequest):
    """`nodes.joinToken`: a one-time token for `node` to join with, valid `ttlSeconds` (default 3600,
    60 to 86400)."""

    node: NodeId
    ttl_seconds: int | None = None


class JoinTokenIssued(WireAnswer):
    """A join token, shown this once; it admits one `bcd join` of its node before `expiresAt`."""

    node: str
    token: str
    expires_at: datetime


class NodeJoin(WireRequest):
    """`nodes.join`: spend a join token and register the node's Ed25519 public key, as the base64 of
    its 32 raw bytes or a PEM `PUBLIC KEY` block. No bearer token: the join token is the credential."""

    node: NodeId
    token: str = Field(min_length=1, max_length=300)
    public_key: str = Field(min_length=1, max_length=4096)


class NodeJoined(WireAnswer):
    """The node's identity as registered: its key (base64 of the raw bytes) and when it joined."""

    node: str
    public_key: str
    joined_at: datetime
    next_sequence: int = 1
    """The sequence number its first signed report carries."""


class MigModeReported(WireRequest):
    current: bool = False
    pending: bool = False


class MigInstanceReported(WireRequest):
    profile: str = Field(min_length=1, max_length=32)
    gi_id: int = Field(ge=0)
    ci_id: int = Field(ge=0)
    placement_start: int = Field(ge=0)
    placement_size: int = Field(ge=1)
    uuid: str = Field(min_length=1, max_length=96)


class GpuReported(WireRequest):
    """One GPU as the node sees it (NVML's view)."""

    uuid: str = Field(min_length=1, max_length=96)
    product: str = Field(min_length=1, max_length=128)
    memory_mib: int = Field(ge=0, alias="memoryMiB")
    index: int = Field(default=0, ge=0)
    numa_node: int | None = None
    nvlink_peers: list[str] = Field(default_factory=list, max_length=64)
    healthy: bool = True
    mig_mode: MigModeReported = Field(default_factory=MigModeReported)
    mig_instances: list[MigInstanceReported] = Field(default_factory=list, max_length=64)
    mig_state_unknown: bool = Field(
        default=False,
        description="True when the node could not read the GPU's MIG state whole (NVML refused its MIG mode,"
        " its instances or their MIG devices, or the GPU is lost): its `migMode` and `migInstances` say"
        " nothing then, and the server keeps the GPU's last known atoms, unbookable, until it reads whole."
        " Left out when false.",
    )

    @model_serializer(mode="wrap")
    def _unknown_only_when_true(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`migStateUnknown` is left out when false, so a report of a GPU read whole is one a server
        that does not know the field still takes (requests refuse unknown fields)."""
        data: dict[str, Any] = handler(self)
        if not self.mig_state_unknown:
            data.pop("migStateUnknown", None)
            data.pop("mig_state_unknown", None)
        return data


class LayoutRefusalReported(WireRequest):
    """A GPU the node could not bring to its layout: what it tried, what refused it, since when."""

    gpu: str = Field(min_length=1, max_length=96, description="The GPU's uuid.")
    action: str = Field(
        min_length=1,
        max_length=32,
        pattern=r"^[a-z][a-z-]*$",
        description="What was refused: `repartition`, `enable-mig`, `disable-mig`, or `reset` (the GPU reset"
        " that applies a pending MIG mode change).",
    )
    reason: str = Field(
        min_length=1, max_length=LAYOUT_REFUSAL_REASON_MAX, description="The refusal, in the driver's words."
    )
    since: datetime = Field(
        description="When the node was first refused this action on this GPU (with its offset)."
    )


class InventoryReport(WireRequest):
    """The node's whole inventory; atoms are derived from it. `observedGeneration`, when sent, is
    recorded as with an `ObservedGeneration` report, a lower one than the node's last included:
    `bcd` sends the spec generation it converged since it started, 0 before it has converged one
    (after a restart or a reboot, whose GPUs may be at another layout), so the server stops
    counting what the node observed before. Left out, the node's last observed generation stands."""

    kind: Literal["Inventory"]
    gpus: list[GpuReported] = Field(max_length=64)
    observed_generation: int | None = Field(default=None, ge=0)
    reboot_required: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="GPU uuids whose MIG mode change needed a GPU reset that failed: they wait for a reboot.",
    )
    layout_refused: list[LayoutRefusalReported] = Field(
        default_factory=list,
        max_length=64,
        description="GPUs whose layout change the hardware (or a GPU client that would not stop) refused, one"
        " entry a GPU; a GPU leaves the list once it is at its layout.",
    )


class AllocationBoundReport(WireRequest):
    """Where the node got handing an allocation's atoms over: `bound`, `device-missing` (an
    instance does not exist yet) or `refused` (`detail` says why)."""

    kind: Literal["AllocationBound"]
    allocation_id: str = Field(min_length=1, max_length=160)
    binding: Literal["bound", "device-missing", "refused"]
    detail: str | None = Field(default=None, max_length=1000)


class AllocationReleasedReport(WireRequest):
    """The node took an allocation's devices back."""

    kind: Literal["AllocationReleased"]
    allocation_id: str = Field(min_length=1, max_length=160)


class ReplicaStateReport(WireRequest):
    """What the node's runtime made of the container of an allocation whose assignment has a
    `container` (a workload replica, an endpoint copy): `created`, `ready` (its readiness probe
    passes), `not-ready`, `exited` (with `exitCode`) or `removed`; `problem` says why one does not run
    (`crash-looping`, `image-not-found`, `create-failed`), `restarts` how often the node restarted it,
    and `address` (`host:port`) where the server reaches its first port."""

    kind: Literal["ReplicaState"]
    allocation_id: str = Field(min_length=1, max_length=160)
    state: Literal["created", "ready", "not-ready", "exited", "removed"]
    exit_code: int | None = Field(default=None, ge=-1, le=255)
    problem: Literal["crash-looping", "image-not-found", "create-failed"] | None = None
    detail: str | None = Field(default=None, max_length=1000)
    restarts: int = Field(default=0, ge=0, le=1_000_000)
    address: str | None = Field(default=None, max_length=300)


class AgentReport(WireRequest):
    """Where the node's agent listens (`bcd run --listen`: `http(s)://host[:port]`) and the bearer
    token it answers to; the server keeps the last one per node and asks the agent for a container's
    log (docs/bcd.md#the-agent). The token is never shown by any answer."""

    kind: Literal["Agent"]
    url: str = Field(min_length=1, max_length=300)
    token: str = Field(min_length=1, max_length=128)


class ObservedGenerationReport(WireRequest):
    """The node converged the spec of `generation`."""

    kind: Literal["ObservedGeneration"]
    generation: int = Field(ge=0)


class ScrubDoneReport(WireRequest):
    """The node cleaned these atoms of a previous tenant's data."""

    kind: Literal["ScrubDone"]
    atoms: list[str] = Field(min_length=1, max_length=1024)


NodeReportBody = Annotated[
    InventoryReport
    | AllocationBoundReport
    | AllocationReleasedReport
    | ObservedGenerationReport
    | ScrubDoneReport
    | ReplicaStateReport
    | AgentReport,
    Field(discriminator="kind"),
]
"""A signed report's body, told apart by `kind`."""


class NodeReportSend(WireRequest):
    """`nodes.report`: one report about `node`, the node that signs it (BC-* headers over these
    exact bytes; docs/node-auth.md)."""

    node: NodeId
    report: NodeReportBody
    report_id: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    """The node's own id for this report (a uuid made when it was queued): a copy of a report
    already accepted is answered as accepted and not applied again."""


class ReportAccepted(WireAnswer):
    node: str
    kind: str
    sequence: int
    duplicate: bool = False
    """True when the report's `reportId` had been accepted before: this copy changed nothing."""


class NodeSpecQuery(WireRequest):
    """`nodes.spec` (query parameters): `after`, a generation the node has; `wait`, how many seconds
    (at most 60) to wait for a generation other than `after`."""

    node: NodeId
    after: int | None = Field(default=None, ge=0)
    wait: float | None = Field(default=None, ge=0, le=60)


class GpuSpecPublic(WireAnswer):
    uuid: str
    mig_layout: str | None = None


class SharingPublic(WireAnswer):
    mode: str
    replicas: int
    scrub: str = "none"
    """What the node does to an atom released by one tenant before another gets it: `none`,
    `reset` (a GPU reset) or `zero` (a zeroing pass over its memory). Absent from an older server:
    `none`."""


class AssignmentPublic(WireAnswer):
    allocation_id: str
    atoms: list[str]
    env: dict[str, str]
    tenant_id: str | None = None
    """The tenant holding the allocation (absent from an older server)."""
    container: ContainerPublic | None = Field(default=None, exclude_if=lambda v: v is None)
    """What the node runs on the allocation's atoms (a workload replica, an endpoint copy): absent
    for a reservation, whose holder starts its own container."""
    job_container: ContainerPublic | None = Field(default=None, exclude_if=lambda v: v is None)
    """The container a Slurm job runs on the allocation's atoms (a workload replica on a Slurm node,
    docs/slurm.md#replicas-as-jobs): the node finds it by its `better-compute.slurm-allocation`
    label and reports its readiness, and never starts, stops or removes it. Absent otherwise."""


class NodeSpecPublic(WireAnswer):
    """What the node must make true: the MIG layout per GPU, the sharing, and the assignments held
    now. `generation` changes whenever anything else here does."""

    node: str
    generation: int
    gpus: list[GpuSpecPublic]
    sharing: SharingPublic
    assignments: list[AssignmentPublic]
