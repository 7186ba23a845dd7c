"""The fleet's aggregates as frozen records: what storage returns, what use cases decide on, what the
API shows. Each context keeps its own records beside its rules (`domain.tenancy.records`,
`domain.ledger.records`, `domain.gate.records`, `domain.placement.records`, `domain.endpoints.records`).

A record names its fields after the domain, not after a table or a wire shape: storage maps columns
to records and the API maps records to wire models, each explicitly, so a column rename or a new wire
field changes one adapter and nothing else (docs/adr/0005-records-and-repositories.md). Records that
the domain already had keep their home: an atom is `domain.fleet.atoms.Atom`, an IAM policy
`domain.tenancy.iam.Policy`, a booking `domain.ledger.ledger.Booking`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from better_compute.domain.fleet.cluster_kinds import LOCAL, SlurmSettings
from better_compute.domain.fleet.inventory import GpuReport, MigInstance
from better_compute.domain.fleet.pools import PoolSettings, PoolSharing, SharingMode


@dataclass(frozen=True, slots=True)
class Cluster:
    id: str
    region: str
    residency: tuple[str, ...]
    phase: str
    created_at: datetime
    kind: str = LOCAL
    """`local` (our admission picks the cards) or `slurm` (domain.fleet.cluster_kinds)."""
    slurm: SlurmSettings | None = None
    """A `slurm` cluster's controller, partitions, account and account mapping; None otherwise."""


@dataclass(frozen=True, slots=True)
class LayoutRefusal:
    """A GPU its node could not bring to its layout: the `action` refused (`repartition`,
    `enable-mig`, `disable-mig`, `reset`), the refusal in the driver's words (`reason`), and since
    when the node has been refused it (docs/bcd.md#layout-changes)."""

    gpu: str
    action: str
    reason: str
    since: datetime


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    cluster_id: str
    created_at: datetime
    cordoned: bool = False
    public_key: str | None = None
    spec_generation: int = 0
    observed_generation: int = 0
    last_report_at: datetime | None = None
    report_sequence: int = 0
    """The sequence number of the last signed request accepted from the node, a report or a spec
    read (domain.fleet.node_reports)."""
    spec_digest: str | None = None
    """The digest of the spec `spec_generation` was given for (domain.gate.node_spec.next_generation)."""
    joined_at: datetime | None = None
    """When the node last joined (registered `public_key`); None: never."""
    carries_pool_layout: bool = True
    """Whether the node takes its MIG layout from its pool's policy (docs/concepts.md, the gate). False: its
    spec leaves its layout as it is, and no layout change of the pool repartitions it."""
    reboot_required: bool = False
    """The node's last inventory said a GPU waits for a reboot: a MIG mode change needed a GPU reset
    that failed (docs/bcd.md#running-the-daemon-bcd-run)."""
    layout_refused: tuple[LayoutRefusal, ...] = ()
    """The GPUs the node's last inventory said it could not bring to their layout, and why; empty
    once each converged."""
    mig_layout: str | None = None
    """The MIG layout the node is told instead of its pool's (an endpoint's instance is cut to the
    endpoint's layout); None: its pool's."""
    host_cpu_cores: int | None = None
    host_memory_mib: int | None = None
    """The host's CPU cores and memory as the fleet file declares them (None: not declared)."""
    owned_elsewhere: tuple[tuple[str, str], ...] = ()
    """The uuids its last refused inventory named that other nodes hold, each with the node holding
    it (domain.fleet.gpu_owners); empty once an inventory of it is taken."""
    owned_elsewhere_at: datetime | None = None
    """When that inventory was refused."""
    last_spec_read_at: datetime | None = None
    """When the node last read its spec, signed: an idle `bcd` sends no report, but long-polls its
    spec every `--wait` seconds (30 by default)."""

    @property
    def last_contact_at(self) -> datetime | None:
        """When the node's `bcd` last reached the server, signed: its latest report or spec read
        (None: never since it was registered)."""
        seen = [t for t in (self.last_report_at, self.last_spec_read_at) if t is not None]
        return max(seen) if seen else None


@dataclass(frozen=True, slots=True)
class Gpu:
    """A GPU as its node last reported it, with the catalog model it was recognised as."""

    id: str
    node_id: str
    index: int
    product: str
    model: str | None
    memory_mib: int
    numa_node: int | None
    nvlink_peers: tuple[str, ...]
    healthy: bool
    present: bool
    mig_mode_current: bool
    mig_mode_pending: bool
    mig_instances: tuple[MigInstance, ...]
    updated_at: datetime

    @classmethod
    def reported(cls, gpu: GpuReport, node: str, model: str | None, at: datetime) -> Gpu:
        """The record of a GPU `node` reported (present), recognised as `model`, written `at`: the
        one way a report becomes a record, for ingest and for what `bcd` derives on its node."""
        return cls(
            id=gpu.uuid,
            node_id=node,
            index=gpu.index,
            product=gpu.product,
            model=model,
            memory_mib=gpu.memory_mib,
            numa_node=gpu.numa_node,
            nvlink_peers=tuple(gpu.nvlink_peers),
            healthy=gpu.healthy,
            present=True,
            mig_mode_current=gpu.mig_mode_current,
            mig_mode_pending=gpu.mig_mode_pending,
            mig_instances=tuple(gpu.mig_instances),
            updated_at=at,
        )

    def report(self) -> GpuReport:
        """The report this record was made from: what re-deriving atoms replays."""
        return GpuReport(
            uuid=self.id,
            product=self.product,
            memory_mib=self.memory_mib,
            index=self.index,
            numa_node=self.numa_node,
            nvlink_peers=self.nvlink_peers,
            healthy=self.healthy,
            mig_mode_current=self.mig_mode_current,
            mig_mode_pending=self.mig_mode_pending,
            mig_instances=self.mig_instances,
        )

    def same_as(self, other: Gpu | None) -> bool:
        """Whether `other` says the same about the GPU (when it was written aside)."""
        return other is not None and replace(other, updated_at=self.updated_at) == self


@dataclass(frozen=True, slots=True)
class Pool:
    """A pool: one owner, a sharing mode fixed at creation, its settings and its nodes."""

    id: str
    name: str
    cluster_id: str
    owner_tenant_id: str
    mode: SharingMode
    settings: PoolSettings
    meter: str
    generation: int
    created_at: datetime
    nodes: tuple[str, ...] = ()

    @property
    def sharing(self) -> PoolSharing:
        """What decides how the pool's GPUs become atoms."""
        return PoolSharing(pool_id=self.id, mode=self.mode, replicas=self.settings.replicas or 1)
