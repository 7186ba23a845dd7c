"""Initial schema: fleet inventory, pools, atoms, the booking ledger and the event log.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "allocations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("pool_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_allocations")),
    )
    op.create_table(
        "clusters",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("residency", sa.JSON(), nullable=False),
        sa.Column("phase", sa.String(length=16), server_default="active", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_clusters")),
    )
    op.create_table(
        "events",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=256), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )

    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
    )
    op.create_table(
        "credentials",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("name", sa.Text(), server_default="", nullable=False),
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column("is_admin", sa.Boolean(), server_default="0", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name=op.f("fk_credentials_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_credentials")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_credentials_token_hash")),
    )
    op.create_table(
        "nodes",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("cluster_id", sa.String(length=64), nullable=False),
        sa.Column("cordoned", sa.Boolean(), server_default="0", nullable=False),
        sa.Column("public_key", sa.Text(), nullable=True),
        sa.Column("spec_generation", sa.Integer(), server_default="0", nullable=False),
        sa.Column("observed_generation", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_report_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["cluster_id"], ["clusters.id"], name=op.f("fk_nodes_cluster_id_clusters")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_nodes")),
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_nodes_cluster_id"), ["cluster_id"], unique=False)

    op.create_table(
        "pools",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("cluster_id", sa.String(length=64), nullable=False),
        sa.Column("owner_tenant_id", sa.String(length=64), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("policy", sa.JSON(), nullable=False),
        sa.Column("meter", sa.String(length=64), nullable=False),
        sa.Column("generation", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["cluster_id"], ["clusters.id"], name=op.f("fk_pools_cluster_id_clusters")),
        sa.ForeignKeyConstraint(
            ["owner_tenant_id"], ["tenants.id"], name=op.f("fk_pools_owner_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pools")),
        sa.UniqueConstraint("name", name=op.f("uq_pools_name")),
    )
    op.create_table(
        "gpus",
        sa.Column("id", sa.String(length=96), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("product", sa.Text(), nullable=False),
        sa.Column("model", sa.String(length=32), nullable=True),
        sa.Column("memory_mib", sa.Integer(), nullable=False),
        sa.Column("numa_node", sa.Integer(), nullable=True),
        sa.Column("nvlink_peers", sa.JSON(), nullable=False),
        sa.Column("healthy", sa.Boolean(), nullable=False),
        sa.Column("present", sa.Boolean(), nullable=False),
        sa.Column("mig_mode_current", sa.Boolean(), nullable=False),
        sa.Column("mig_mode_pending", sa.Boolean(), nullable=False),
        sa.Column("mig_instances", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name=op.f("fk_gpus_node_id_nodes")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpus")),
    )
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpus_node_id"), ["node_id"], unique=False)

    op.create_table(
        "pool_nodes",
        sa.Column("pool_id", sa.String(length=64), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name=op.f("fk_pool_nodes_node_id_nodes")),
        sa.ForeignKeyConstraint(["pool_id"], ["pools.id"], name=op.f("fk_pool_nodes_pool_id_pools")),
        sa.PrimaryKeyConstraint("node_id", name=op.f("pk_pool_nodes")),
    )
    with op.batch_alter_table("pool_nodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pool_nodes_pool_id"), ["pool_id"], unique=False)

    op.create_table(
        "atoms",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("gpu_id", sa.String(length=96), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("pool_id", sa.String(length=64), nullable=True),
        sa.Column("class", sa.String(length=16), nullable=False),
        sa.Column("key", sa.String(length=32), nullable=False),
        sa.Column("bookable", sa.Boolean(), nullable=False),
        sa.Column("partition_pending", sa.Boolean(), nullable=False),
        sa.Column("numa_node", sa.Integer(), nullable=True),
        sa.Column("nvlink_domain", sa.String(length=128), nullable=True),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.Column("present", sa.Boolean(), server_default="1", nullable=False),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_atoms_gpu_id_gpus")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_atoms")),
        sa.UniqueConstraint("gpu_id", "key", name=op.f("uq_atoms_gpu_id_key")),
        # Clustered by id on SQLite: a booking looks its atoms up by id, one B-tree instead of two.
        sqlite_with_rowid=False,
    )
    with op.batch_alter_table("atoms", schema=None) as batch_op:
        batch_op.create_index("ix_atoms_pool_class", ["pool_id", "class"], unique=False)

    op.create_table(
        "bookings",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("atom_id", sa.String(length=32), nullable=False),
        sa.Column("gpu_id", sa.String(length=96), nullable=False),
        sa.Column("pool_id", sa.String(length=64), nullable=True),
        sa.Column("class", sa.String(length=16), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("allocation_id", sa.String(length=160), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("state", sa.String(length=16), server_default="live", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["atom_id"], ["atoms.id"], name=op.f("fk_bookings_atom_id_atoms")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bookings")),
    )
    with op.batch_alter_table("bookings", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_bookings_allocation_id"), ["allocation_id"], unique=False)
        batch_op.create_index("ix_bookings_atom_start", ["atom_id", "starts_at"], unique=False)

    if op.get_bind().dialect.name == "sqlite":
        # Every booking appends its `ledger.booked` event in the statement that writes it (PostgreSQL
        # does the same with a CTE in storage/ledger/ledger.py), so a booking is one atomic statement.
        op.execute(
            "CREATE TRIGGER bookings_booked_event AFTER INSERT ON bookings BEGIN"
            " INSERT INTO events (type, subject, payload, at) VALUES ('ledger.booked', NEW.allocation_id,"
            " json_object('atoms', json_array(NEW.atom_id), 'tenantId', NEW.tenant_id, 'poolId', NEW.pool_id,"
            " 'class', NEW.class,"
            " 'start', NEW.starts_at, 'end', NEW.ends_at), NEW.created_at); END"
        )
    if op.get_bind().dialect.name == "postgresql":
        # The ledger's last fence: two live bookings of one atom can never overlap in time.
        op.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")
        op.execute(
            "ALTER TABLE bookings ADD CONSTRAINT bookings_no_overlap EXCLUDE USING gist "
            "(atom_id WITH =, tstzrange(starts_at, ends_at, '[)') WITH &&) WHERE (state = 'live')"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS bookings_booked_event")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE bookings DROP CONSTRAINT IF EXISTS bookings_no_overlap")
    with op.batch_alter_table("bookings", schema=None) as batch_op:
        batch_op.drop_index("ix_bookings_atom_start")
        batch_op.drop_index(batch_op.f("ix_bookings_allocation_id"))

    op.drop_table("bookings")
    with op.batch_alter_table("atoms", schema=None) as batch_op:
        batch_op.drop_index("ix_atoms_pool_class")

    op.drop_table("atoms")
    with op.batch_alter_table("pool_nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pool_nodes_pool_id"))

    op.drop_table("pool_nodes")
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpus_node_id"))

    op.drop_table("gpus")
    op.drop_table("pools")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_nodes_cluster_id"))

    op.drop_table("nodes")
    op.drop_table("credentials")
    op.drop_table("tenants")
    op.drop_table("events")
    op.drop_table("clusters")
    op.drop_table("allocations")
