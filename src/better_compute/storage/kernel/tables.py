"""Every table, as SQLAlchemy Core metadata. Migrations create them; tests of migrations compare."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from better_compute.storage.kernel.db import UtcDateTime

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

tenants = Table(
    "tenants",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("deleted_at", UtcDateTime, nullable=True),
)

credentials = Table(
    "credentials",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(64), ForeignKey("tenants.id"), nullable=True),
    Column("name", Text, nullable=False, server_default=""),
    Column("token_hash", String(128), nullable=False, unique=True),
    Column("is_admin", Boolean, nullable=False, server_default="0"),
    Column("created_at", UtcDateTime, nullable=False),
    Column("revoked_at", UtcDateTime, nullable=True),
)

clusters = Table(
    "clusters",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("region", String(64), nullable=False),
    Column("residency", JSON, nullable=False),
    Column("phase", String(16), nullable=False, server_default="active"),
    Column("created_at", UtcDateTime, nullable=False),
    # `local` or `slurm` (domain.fleet.cluster_kinds); a slurm cluster's settings as JSON (migration 0031).
    Column("kind", String(16), nullable=False, server_default="local"),
    Column("slurm", JSON, nullable=True),
)

nodes = Table(
    "nodes",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("cluster_id", String(64), ForeignKey("clusters.id"), nullable=False, index=True),
    Column("cordoned", Boolean, nullable=False, server_default="0"),
    Column("public_key", Text, nullable=True),
    Column("spec_generation", Integer, nullable=False, server_default="0"),
    Column("observed_generation", Integer, nullable=False, server_default="0"),
    Column("last_report_at", UtcDateTime, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    # The last signed request's sequence number (domain.fleet.node_reports): a report's, written with its
    # effect, or a spec read's.
    Column("report_sequence", BigInteger, nullable=False, server_default="0"),
    # When the node last read its spec, signed (its bcd's long poll: what shows an idle node alive).
    Column("last_spec_read_at", UtcDateTime, nullable=True),
    # The digest of the spec `spec_generation` was handed out for (domain.gate.node_spec).
    Column("spec_digest", String(64), nullable=True),
    Column("joined_at", UtcDateTime, nullable=True),
    Column("carries_pool_layout", Boolean, nullable=False, server_default="1"),
    Column("reboot_required", Boolean, nullable=False, server_default="0"),
    # What the node's last inventory said it could not change, per GPU (domain.fleet.records.LayoutRefusal):
    # [{gpu, action, reason, since}]; NULL: nothing refused.
    Column("layout_refused", JSON, nullable=True),
    # The layout the node is told instead of its pool's: an endpoint's instance's (docs/endpoints.md).
    Column("mig_layout", String(512), nullable=True),
    # The host's CPU cores and memory as the fleet file declares them (NULL: not declared).
    Column("host_cpu_cores", Integer, nullable=True),
    Column("host_memory_mib", BigInteger, nullable=True),
    # The uuids (with the node holding each) its last refused inventory named that another node
    # holds (domain.fleet.gpu_owners), and when: `doctor` shows them until an inventory of it is taken.
    Column("owned_elsewhere", JSON, nullable=True),
    Column("owned_elsewhere_at", UtcDateTime, nullable=True),
)

join_tokens = Table(
    "join_tokens",
    metadata,
    # Only the token's SHA-256 is kept (domain.fleet.join_tokens); `used_at` is set by the one join that spends it.
    Column("token_hash", String(128), primary_key=True),
    Column("node_id", String(128), ForeignKey("nodes.id"), nullable=False, index=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("used_at", UtcDateTime, nullable=True),
)

node_report_ids = Table(
    "node_report_ids",
    metadata,
    # The `reportId`s of reports a node had accepted (domain.fleet.node_reports): a report resent after a
    # lost answer or a restart is answered as accepted and not applied again.
    Column("node_id", String(128), ForeignKey("nodes.id"), primary_key=True),
    Column("report_id", String(64), primary_key=True),
    Column("accepted_at", UtcDateTime, nullable=False),
)

bindings = Table(
    "bindings",
    metadata,
    # Each node's part of an allocation's binding (domain.fleet.bindings), as the node last reported it.
    Column("allocation_id", String(160), primary_key=True),
    Column("node_id", String(128), ForeignKey("nodes.id"), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("detail", Text, nullable=True),
    Column("updated_at", UtcDateTime, nullable=False),
)

replica_states = Table(
    "replica_states",
    metadata,
    # Each node's last word on the container it runs for an allocation (domain.fleet.replica_states).
    Column("allocation_id", String(160), primary_key=True),
    Column("node_id", String(128), ForeignKey("nodes.id"), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("exit_code", Integer, nullable=True),
    Column("problem", String(32), nullable=True),
    Column("detail", Text, nullable=True),
    Column("restarts", Integer, nullable=False, server_default="0"),
    Column("address", String(300), nullable=True),
    Column("updated_at", UtcDateTime, nullable=False),
)

node_agents = Table(
    "node_agents",
    metadata,
    # Where each node's agent listens and the token it answers to (domain.fleet.node_agents); never shown.
    Column("node_id", String(128), ForeignKey("nodes.id"), primary_key=True),
    Column("url", String(300), nullable=False),
    Column("token", String(128), nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

slurm_jobs = Table(
    "slurm_jobs",
    metadata,
    # What the Slurm follower last read of each job it mirrors (domain.fleet.slurm_holds): a holding
    # job of ours by its allocation, or a job submitted directly by the allocation booked for it;
    # `updated_at`: when it was first read in this state with this reason.
    Column("allocation_id", String(160), primary_key=True),
    Column("cluster_id", String(64), ForeignKey("clusters.id"), nullable=False, index=True),
    Column("job_id", BigInteger, nullable=False),
    Column("node_id", String(128), primary_key=True),
    Column("state", String(24), nullable=False),
    Column("reason", String(200), nullable=False, server_default=""),
    Column("external", Boolean, nullable=False, server_default="0"),
    Column("updated_at", UtcDateTime, nullable=False),
)

slurm_followers = Table(
    "slurm_followers",
    metadata,
    # Which reconciler follows each Slurm cluster now (service.ledger.slurm_holds): one at a time, so
    # two never cancel different copies of one holding job. A lease that runs out is taken over.
    Column("cluster_id", String(64), ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True),
    Column("lease_owner", String(64), nullable=False),
    Column("lease_until", UtcDateTime, nullable=False),
)

slurm_job_ids = Table(
    "slurm_job_ids",
    metadata,
    # The Slurm job that held each allocation, kept after Slurm forgets the job and `slurm_jobs` drops
    # it: what `usage export --slurm-job-ids` adds to a finished booking's row.
    Column("allocation_id", String(160), primary_key=True),
    Column("cluster_id", String(64), ForeignKey("clusters.id"), nullable=False, index=True),
    Column("job_id", BigInteger, nullable=False),
    Column("recorded_at", UtcDateTime, nullable=False),
)

gpus = Table(
    "gpus",
    metadata,
    Column("id", String(96), primary_key=True),
    Column("node_id", String(128), ForeignKey("nodes.id"), nullable=False, index=True),
    Column("gpu_index", Integer, nullable=False),
    Column("product", Text, nullable=False),
    Column("model", String(32), nullable=True),
    Column("memory_mib", Integer, nullable=False),
    Column("numa_node", Integer, nullable=True),
    Column("nvlink_peers", JSON, nullable=False),
    Column("healthy", Boolean, nullable=False),
    Column("present", Boolean, nullable=False),
    Column("mig_mode_current", Boolean, nullable=False),
    Column("mig_mode_pending", Boolean, nullable=False),
    Column("mig_instances", JSON, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

device_uuids = Table(
    "device_uuids",
    metadata,
    # Each uuid a present GPU is known by (its own, its MIG instances'), with the node holding it
    # (domain.fleet.gpu_owners): one node per uuid, by the primary key. Written with the GPU's row
    # (storage.fleet.gpus), which never lets a node's claim replace another node's.
    Column("uuid", String(96), primary_key=True),
    Column("gpu_id", String(96), nullable=False),
    Column("node_id", String(128), nullable=False),
    Index("ix_device_uuids_gpu_id", "gpu_id"),
)

gpu_states = Table(
    "gpu_states",
    metadata,
    # One row per period of a GPU's state (domain.fleet.gpu_states): written in the transaction of the change
    # it records, never updated but to close it (`valid_to`). At most one open row per GPU.
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("gpu_id", String(96), ForeignKey("gpus.id"), nullable=False),
    Column("node_id", String(128), nullable=False),
    # No foreign key: a pool may be deleted, and what its GPUs were in it stays history.
    Column("pool_id", String(64), nullable=True),
    Column("healthy", Boolean, nullable=False),
    Column("cordoned", Boolean, nullable=False),
    # {atom id: its share of the GPU as "n/d"} while the period holds.
    Column("shares", JSON, nullable=False),
    Column("valid_from", UtcDateTime, nullable=False),
    Column("valid_to", UtcDateTime, nullable=True),
    Index("ix_gpu_states_pool_from", "pool_id", "valid_from"),
    Index(
        "uq_gpu_states_open",
        "gpu_id",
        unique=True,
        sqlite_where=text("valid_to IS NULL"),
        postgresql_where=text("valid_to IS NULL"),
    ),
)

pools = Table(
    "pools",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("cluster_id", String(64), ForeignKey("clusters.id"), nullable=False),
    Column("owner_tenant_id", String(64), ForeignKey("tenants.id"), nullable=False),
    Column("mode", String(16), nullable=False),
    Column("policy", JSON, nullable=False),
    Column("meter", String(64), nullable=False),
    Column("generation", Integer, nullable=False, server_default="1"),
    Column("created_at", UtcDateTime, nullable=False),
)

capacity_mig_layouts = Table(
    # The MIG layout gate (docs/concepts.md#changing-a-pools-layout-the-gate, docs/adr/0012): a node of a mig
    # pool whose layout change is under way, frozen at `frozen_layout` until the change is granted. One row
    # per node; the row goes once the node has converged the new layout (`node.mig.applied`).
    "capacity_mig_layouts",
    metadata,
    Column("node_id", String(128), ForeignKey("nodes.id"), primary_key=True),
    Column("pool_id", String(64), ForeignKey("pools.id"), nullable=False, index=True),
    Column("frozen_layout", String(512), nullable=True),
    Column("pending_layout", String(512), nullable=False),
    # pending (requested) -> scheduled (families booked from `scheduled_from`) -> granted.
    Column("state", String(16), nullable=False),
    Column("requested_at", UtcDateTime, nullable=False),
    Column("scheduled_from", UtcDateTime, nullable=True),
    Column("granted_at", UtcDateTime, nullable=True),
    # The node's spec generation when the grant was made: a higher observed one has the new layout.
    Column("granted_generation", Integer, nullable=True),
    Column("version", Integer, nullable=False, server_default="1"),
    # Which reconciler works on the node, until when (a replica that dies loses it then).
    Column("lease_owner", String(64), nullable=True),
    Column("lease_until", UtcDateTime, nullable=True),
)

pool_nodes = Table(
    "pool_nodes",
    metadata,
    Column("pool_id", String(64), ForeignKey("pools.id"), nullable=False, index=True),
    Column("node_id", String(128), ForeignKey("nodes.id"), primary_key=True),
)

atoms = Table(
    "atoms",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("gpu_id", String(96), ForeignKey("gpus.id"), nullable=False),
    Column("node_id", String(128), nullable=False),
    Column("pool_id", String(64), nullable=True),
    Column("class", String(16), nullable=False),
    # Its physical identity within the GPU (`domain.fleet.atoms.Atom.key`; migration 0027 keys MIG
    # atoms by their slice, `mig:<profile>@<placement start>`, 25 characters at most in the catalog).
    Column("key", String(32), nullable=False),
    Column("bookable", Boolean, nullable=False),
    Column("partition_pending", Boolean, nullable=False),
    Column("numa_node", Integer, nullable=True),
    Column("nvlink_domain", String(128), nullable=True),
    Column("attributes", JSON, nullable=False),
    Column("present", Boolean, nullable=False, server_default="1"),
    # Its share of a GPU (`domain.fleet.shares.share`, as `str(Fraction)`: `1`, `3/7`), written with the
    # atom and copied onto each booking of it as it is made.
    Column("gpu_share", String(32), nullable=True),
    # Scrubbing between tenants (domain.ledger.scrub): when the node last reported the atom scrubbed (the
    # server's clock), and the tenant that last released it early, and when. Never written by
    # inventory, so a node's report keeps them.
    Column("scrubbed_at", UtcDateTime, nullable=True),
    Column("released_by", String(64), nullable=True),
    Column("released_at", UtcDateTime, nullable=True),
    UniqueConstraint("gpu_id", "key"),
    Index("ix_atoms_pool_class", "pool_id", "class"),
    # A node's atoms: ingestion, the node spec and the layout gate read them by node.
    Index("ix_atoms_node_id", "node_id"),
    sqlite_with_rowid=False,
)

allocations = Table(
    "allocations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("tenant_id", String(64), nullable=True),
    Column("pool_id", String(64), nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
)

bookings = Table(
    "bookings",
    metadata,
    # A plain integer key: on SQLite it is the rowid itself, so a booking writes no separate key index.
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("atom_id", String(32), ForeignKey("atoms.id"), nullable=False),
    Column("gpu_id", String(96), nullable=False),
    Column("pool_id", String(64), nullable=True),
    Column("class", String(16), nullable=False),
    # The atom's share of a GPU when it was booked: what the booking bills per hour, whatever the
    # atom becomes later (a pool's new replicas, a new MIG layout). NULL only for rows written
    # without it (by hand); metering then reads the atom's share.
    Column("gpu_share", String(32), nullable=True),
    Column("tenant_id", String(64), nullable=True),
    Column("allocation_id", String(160), nullable=False, index=True),
    Column("starts_at", UtcDateTime, nullable=False),
    Column("ends_at", UtcDateTime, nullable=True),
    Column("state", String(16), nullable=False, server_default="live"),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_bookings_atom_start", "atom_id", "starts_at"),
    # Live bookings by end: the whole ledger's "reaching past now" and "ended since" (migration 0023).
    Index(
        "ix_bookings_live_ends",
        "ends_at",
        sqlite_where=text("state = 'live'"),
        postgresql_where=text("state = 'live'"),
    ),
    # Live bookings by GPU: a GPU's family, whole and parts, is booked by one holder at a time
    # (migration 0025; PostgreSQL's `bookings_no_family_overlap` constraint, SQLite's look-up).
    Index(
        "ix_bookings_live_gpu_start",
        "gpu_id",
        "starts_at",
        sqlite_where=text("state = 'live'"),
        postgresql_where=text("state = 'live'"),
    ),
)

events = Table(
    "events",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("type", String(64), nullable=False),
    Column("subject", String(256), nullable=False),
    Column("payload", JSON, nullable=False),
    Column("at", UtcDateTime, nullable=False),
    # PostgreSQL: the id of the transaction that wrote the event (its default); NULL on SQLite, whose
    # single writer commits events in id order.
    Column("tx", BigInteger, nullable=True, index=True),
)

prices = Table(
    "prices",
    metadata,
    Column("meter", String(64), primary_key=True),
    # A decimal string, kept exactly as set (`2.50`): money is never a float here.
    Column("per_hour", String(32), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

device_classes = Table(
    "device_classes",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("class", String(16), nullable=False),
    # `selectors.document` of the class's selector: what `parse_selector` reads back.
    Column("selector", JSON, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)

priority_classes = Table(
    "priority_classes",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("priority", Integer, nullable=False),
    Column("preemptible", Boolean, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)

quotas = Table(
    "quotas",
    metadata,
    # No foreign key to tenants: a pool owner's rows for a tenant id are kept whether or not the
    # tenant exists yet, so that granting them cannot be used to learn which tenants exist.
    Column("tenant_id", String(64), primary_key=True),
    Column("pool_id", String(64), ForeignKey("pools.id"), primary_key=True),
    Column("class", String(16), primary_key=True),
    Column("limit", Integer, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

class_quotas = Table(
    "class_quotas",
    metadata,
    # Device-class rows (domain.placement.class_quotas). A fleet row's cluster_id is '' rather than NULL, so
    # that the primary key holds it: PostgreSQL takes NULLs in a unique key as all distinct.
    Column("tenant_id", String(64), primary_key=True),
    Column("device_class", String(63), ForeignKey("device_classes.name"), primary_key=True),
    Column("scope", String(16), primary_key=True),
    Column("cluster_id", String(64), primary_key=True),
    Column("guaranteed_devices", Integer, nullable=False),
    Column("floor_devices", Integer, nullable=False),
    Column("over_quota_weight", Float, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

policies = Table(
    "policies",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(128), nullable=False),
    # The tenant the policy belongs to; NULL for a cluster's policy (it applies to every tenant).
    Column("tenant_id", String(64), ForeignKey("tenants.id"), nullable=True, index=True),
    Column("pool_id", String(64), ForeignKey("pools.id"), nullable=True),
    Column("limits", JSON, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    # What the policy is attached to (domain.tenancy.iam.SUBJECT_TYPES) and its placement constraints.
    Column("subject_type", String(16), nullable=False, server_default="tenant"),
    Column("subject_id", String(64), nullable=False),
    Column("constraints", JSON, nullable=False, server_default="{}"),
    Column("generation", Integer, nullable=False, server_default="1"),
    UniqueConstraint("tenant_id", "name"),
    # Also the index placement reads a subject's policies by (subject_type, subject_id).
    UniqueConstraint("subject_type", "subject_id", "name"),
)

reservations = Table(
    "reservations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(64), ForeignKey("tenants.id"), nullable=False),
    Column("pool_id", String(64), ForeignKey("pools.id"), nullable=False),
    Column("status", String(16), nullable=False),
    Column("starts_at", UtcDateTime, nullable=False),
    Column("ends_at", UtcDateTime, nullable=True),
    Column("devices", JSON, nullable=False),
    Column("gpu_count", Integer, nullable=False),
    Column("gpu_slices", Integer, nullable=False),
    Column("counts", JSON, nullable=False),
    Column("idempotency_key", String(200), nullable=True),
    Column("fingerprint", String(64), nullable=False),
    Column("generation", Integer, nullable=False, server_default="1"),
    Column("created_at", UtcDateTime, nullable=False),
    # Made with `preemptible: true`: a workload placement cannot fit may end it early.
    Column("preemptible", Boolean, nullable=False, server_default="0"),
    UniqueConstraint("tenant_id", "idempotency_key"),
)

workloads = Table(
    "workloads",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(64), ForeignKey("tenants.id"), nullable=False),
    Column("name", String(63), nullable=False),
    # The checked request (domain.placement.workloads.WorkloadSpec): shape, replicas, strategy, floors, ...
    Column("spec", JSON, nullable=False),
    # Replicas no cluster could take at the last placement: the retry loop looks for these.
    Column("unplaced", Integer, nullable=False, server_default="0", index=True),
    Column("reason", String(32), nullable=True),
    Column("policy_id", String(64), nullable=True),
    Column("generation", Integer, nullable=False, server_default="1"),
    Column("created_at", UtcDateTime, nullable=False),
    UniqueConstraint("tenant_id", "name"),
)

deployments = Table(
    "deployments",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workload_id", String(64), ForeignKey("workloads.id"), nullable=False),
    Column("tenant_id", String(64), nullable=False),
    Column("cluster_id", String(64), ForeignKey("clusters.id"), nullable=False),
    Column("desired_replicas", Integer, nullable=False),
    Column("phase", String(16), nullable=False, index=True),
    Column("reason", String(32), nullable=True),
    Column("message", Text, nullable=False, server_default=""),
    Column("shortfall", Integer, nullable=False, server_default="0"),
    Column("generation", Integer, nullable=False, server_default="1"),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # The index its next replica takes: indexes (so allocation ids) are never used twice.
    Column("next_replica", Integer, nullable=False, server_default="0"),
    # The workload whose placement evicted its replicas (reason `preempted`), until it is placed again.
    Column("preempted_by", String(64), nullable=True),
    UniqueConstraint("workload_id", "cluster_id"),
)

replicas = Table(
    "replicas",
    metadata,
    # One per booked replica: its ledger allocation (`<deploymentId>.r<idx>`) holds its devices.
    Column("deployment_id", String(64), ForeignKey("deployments.id"), primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("allocation_id", String(160), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)

terminating_replicas = Table(
    "terminating_replicas",
    metadata,
    # A replica taken away while its node had it handed over: its allocation keeps its devices
    # booked until the node reports it released. No foreign keys: it outlives its deployment and
    # workload (a delete), as the devices it holds do.
    Column("allocation_id", String(160), primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("workload_id", String(64), nullable=False, index=True),
    Column("deployment_id", String(64), nullable=False),
    Column("cluster_id", String(64), nullable=False),
    Column("since", UtcDateTime, nullable=False),
    # The workload whose placement evicted it, which waits for its devices (`awaiting`).
    Column("preempted_by", String(64), nullable=True, index=True),
)

operations = Table(
    "operations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("type", String(32), nullable=False),
    Column("tenant_id", String(64), nullable=True),
    Column("workload_id", String(64), nullable=True),
    Column("payload", JSON, nullable=False),
    Column("status", String(16), nullable=False),
    Column("result", JSON, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime, nullable=True),
)

endpoints = Table(
    # Inference endpoints (docs/endpoints.md): the checked request as `domain.endpoints.endpoints.endpoint_json`
    # writes it; `status` is Creating, Failed or Deleting as stored (InService is derived: no instance changing).
    "endpoints",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("tenant_id", String(64), ForeignKey("tenants.id"), nullable=False, index=True),
    Column("spec", JSON, nullable=False),
    Column("status", String(16), nullable=False),
    Column("reason", Text, nullable=True),
    Column("generation", Integer, nullable=False, server_default="1"),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

endpoint_instances = Table(
    # The nodes an endpoint's variants took: one endpoint per node at most (the primary key).
    "endpoint_instances",
    metadata,
    Column("node_id", String(128), ForeignKey("nodes.id"), primary_key=True),
    Column("endpoint", String(63), ForeignKey("endpoints.name"), nullable=False, index=True),
    Column("variant", String(63), nullable=False),
    Column("layout", String(512), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)

components = Table(
    # An endpoint's components (docs/endpoints.md#components): one model on one partition type, `copies` of
    # it; the checked request as `domain.endpoints.endpoints.component_json` writes it.
    "components",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("endpoint", String(63), ForeignKey("endpoints.name"), nullable=False, index=True),
    Column("spec", JSON, nullable=False),
    Column("generation", Integer, nullable=False, server_default="1"),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

component_copies = Table(
    # Each copy of a component and the partition (a `gpu.mig` atom) it takes; NULL: it waits
    # (`pending`). One copy per partition (the unique key), whichever component asks.
    "component_copies",
    metadata,
    Column("component", String(63), ForeignKey("components.name"), primary_key=True),
    Column("copy", Integer, primary_key=True),
    Column("atom_id", String(32), ForeignKey("atoms.id"), nullable=True, unique=True),
    Column("node_id", String(128), nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
)

copy_spans = Table(
    # Showback (docs/endpoints.md): each span a copy held a partition, with the partition's share of
    # its GPU and the endpoint's price per GPU-hour (NULL: unpriced) when it was placed. Open while
    # it holds it (`ended_at` NULL), at most one open span a copy; kept after the endpoint is gone.
    "copy_spans",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tenant_id", String(64), nullable=False),
    Column("endpoint", String(63), nullable=False),
    Column("component", String(63), nullable=False),
    Column("copy", Integer, nullable=False),
    Column("node_id", String(128), nullable=False),
    Column("atom_id", String(32), nullable=False),
    Column("gpu_share", String(32), nullable=False),
    Column("gpu_hour_price", String(40), nullable=True),
    Column("started_at", UtcDateTime, nullable=False),
    Column("ended_at", UtcDateTime, nullable=True),
    Index("ix_copy_spans_tenant_started", "tenant_id", "started_at"),
    Index(
        "ux_copy_spans_open",
        "component",
        "copy",
        unique=True,
        sqlite_where=text("ended_at IS NULL"),
        postgresql_where=text("ended_at IS NULL"),
    ),
)
