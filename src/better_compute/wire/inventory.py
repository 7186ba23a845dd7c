"""Read models of the fleet: clusters, nodes, GPUs and atoms, as the API lists them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest


class ClusterListQuery(WireRequest):
    """`clusters.list` paging (query parameters)."""

    limit: PageLimit = None
    cursor: PageCursor = None


class NodeListQuery(WireRequest):
    """`nodes.list` filters (query parameters): `cluster` is a cluster's id."""

    cluster: str | None = None
    limit: PageLimit = None
    cursor: PageCursor = None


class GpuListQuery(WireRequest):
    """`gpus.list` filters (query parameters): `node` is a node's id."""

    node: str | None = None
    limit: PageLimit = None
    cursor: PageCursor = None


class AtomListQuery(WireRequest):
    """`atoms.list` filters (query parameters): a pool's id, an atom class, attribute values
    (`attr=migProfile=3g.40gb`, repeated: every one must match) and bookability."""

    pool: str | None = None
    cls: str | None = Field(default=None, alias="class")
    attr: list[str] | None = Field(default=None, description="Attribute filter `key=value`, repeatable.")
    bookable: bool | None = None
    limit: PageLimit = None
    cursor: PageCursor = None


class ClusterUpdate(WireRequest):
    """`clusters.update` (admin): the cluster's `phase`, one of `active` (takes new work),
    `cordoned` (takes no new placements; what runs there stays) or `draining` (takes no new
    placements; its work is being moved away)."""

    id: str | None = Field(default=None, description="The path's cluster id; may be left out.")
    phase: str = Field(description="One of `active`, `cordoned`, `draining`.")


class NodeUpdate(WireRequest):
    """`nodes.update` (admin): `cordoned` true keeps new bookings off the node's atoms (those it
    holds stay); false lifts the cordon."""

    node: str | None = Field(default=None, description="The path's node id; may be left out.")
    cordoned: bool = Field(strict=True)


class GpuRelease(WireRequest):
    """`nodes.releaseGpu` (admin): let the GPU go from the node that has it (it moved to another
    chassis, or its node is gone for good), so that the next node to report it takes it. Refused
    (INVALID_STATE) while a tenant's live booking, now or later, holds it."""

    gpu: str | None = Field(default=None, description="The path's GPU uuid; may be left out.")


class SlurmSettingsPublic(WireAnswer):
    """How a `slurm` cluster is reached and what of it is ours (docs/slurm.md)."""

    controller: str = Field(description="The host (and optional :port) of its slurmctld.")
    partitions: list[str] = Field(description="The partitions that are ours to submit holding jobs to.")
    account: str = Field(description="The Slurm account our holding jobs run under.")
    access: str = Field(
        default="commands", description="`commands` (scontrol, sbatch, squeue); `rest` is not supported yet."
    )
    accounts: dict[str, str] = Field(
        default_factory=dict,
        description="Slurm account -> tenant: whose a job submitted to Slurm directly is (else `external`).",
    )


class SlurmSettings(SlurmSettingsPublic, WireRequest):
    """A `slurm` cluster's settings as `clusters.create` takes them."""


class ClusterCreate(WireRequest):
    """`clusters.create` (admin): an empty cluster its nodes join afterwards. `kind` `local` (our
    admission picks the cards) or `slurm` (a Slurm controller does; `slurm` says how to reach it)."""

    id: str = Field(description="1-63 lowercase letters, digits or '-'.")
    region: str
    residency: list[str] = Field(default_factory=list, max_length=32)
    kind: str = Field(default="local", description="`local` or `slurm`.")
    slurm: SlurmSettings | None = None


class ClusterPublic(WireAnswer):
    id: str
    name: str
    region: str
    residency: list[str]
    phase: str
    created_at: datetime
    kind: str = "local"
    slurm: SlurmSettingsPublic | None = None
    """A Slurm cluster's settings: shown to admins only (a tenant sees `kind`)."""


class LayoutRefusalPublic(WireAnswer):
    """A GPU its node could not bring to its layout: the action refused (`repartition`,
    `enable-mig`, `disable-mig`, `reset`), the refusal in the driver's words, and since when."""

    gpu: str
    action: str
    reason: str
    since: datetime


class NodePublic(WireAnswer):
    id: str
    name: str
    cluster_id: str
    pool_id: str | None = None
    cordoned: bool
    spec_generation: int
    observed_generation: int
    last_report_at: datetime | None = None
    last_contact_at: datetime | None = None
    """When the node's `bcd` last reached the server, signed: its latest report or spec read. An idle
    `bcd` long-polls its spec, so a live node's is at most `bcd run --wait` seconds old (30 by
    default); `doctor` calls a joined node whose is older than its window `node.silent`."""
    carries_pool_layout: bool = True
    """False: the node keeps its own MIG layout; its pool's layout changes do not repartition it."""
    reboot_required: bool = False
    """The node's last inventory said a GPU waits for a reboot (a GPU reset failed)."""
    layout_refused: list[LayoutRefusalPublic] = Field(default_factory=list)
    """The GPUs the node's last inventory said it could not bring to their layout, and why: the
    hardware, or a GPU client that would not stop, refused the change. Empty once each converged."""


class MigModePublic(WireAnswer):
    current: bool
    pending: bool


class MigInstancePublic(WireAnswer):
    profile: str
    gi_id: int
    ci_id: int
    placement_start: int
    placement_size: int
    uuid: str


class GpuPublic(WireAnswer):
    id: str
    uuid: str
    node: str
    index: int
    product: str
    model: str | None = None
    memory_mib: int = Field(alias="memoryMiB")
    numa_node: int | None = None
    nvlink_peers: list[str]
    healthy: bool
    present: bool
    mig_mode: MigModePublic
    mig_instances: list[MigInstancePublic]
    layout_refused: LayoutRefusalPublic | None = None
    """Why its node could not bring it to its layout, as the node's last inventory said (null: nothing
    refused)."""


class AtomPublic(WireAnswer):
    id: str
    cls: str = Field(alias="class")
    gpu_id: str
    node: str
    pool_id: str | None = None
    bookable: bool
    partition_pending: bool
    present: bool
    attributes: dict[str, Any]
    booked_now: bool = False
    """Whether a live booking holds the atom at the moment the list was read."""
    next_free_at: datetime | None = None
    """When the atom is next free: the moment of the read when it is free then, the end of the
    back-to-back bookings holding it otherwise, null when one of them never ends."""
    scrub_pending: bool = False
    """Whether the atom waits for its node to scrub it after another tenant held it (a pool with
    `policy.scrub`): until then the caller cannot book it."""


class Health(WireAnswer):
    status: str
    database: str
    version: str
