"""Inference endpoints (docs/endpoints.md): endpoints, the nodes each one's variants took, their components
and each copy's partition, the layout a node is told instead of its pool's while it serves one
(`nodes.mig_layout`), and the host resources a fleet file declares (`nodes.host_*`).

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("mig_layout", sa.String(length=512), nullable=True))
    op.add_column("nodes", sa.Column("host_cpu_cores", sa.Integer(), nullable=True))
    op.add_column("nodes", sa.Column("host_memory_mib", sa.BigInteger(), nullable=True))
    op.create_table(
        "endpoints",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("generation", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name=op.f("fk_endpoints_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_endpoints")),
    )
    op.create_index(op.f("ix_endpoints_tenant_id"), "endpoints", ["tenant_id"])
    op.create_table(
        "endpoint_instances",
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("endpoint", sa.String(length=63), nullable=False),
        sa.Column("variant", sa.String(length=63), nullable=False),
        sa.Column("layout", sa.String(length=512), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name=op.f("fk_endpoint_instances_node_id_nodes")),
        sa.ForeignKeyConstraint(
            ["endpoint"], ["endpoints.name"], name=op.f("fk_endpoint_instances_endpoint_endpoints")
        ),
        sa.PrimaryKeyConstraint("node_id", name=op.f("pk_endpoint_instances")),
    )
    op.create_index(op.f("ix_endpoint_instances_endpoint"), "endpoint_instances", ["endpoint"])
    op.create_table(
        "components",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("endpoint", sa.String(length=63), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("generation", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["endpoint"], ["endpoints.name"], name=op.f("fk_components_endpoint_endpoints")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_components")),
    )
    op.create_index(op.f("ix_components_endpoint"), "components", ["endpoint"])
    op.create_table(
        "component_copies",
        sa.Column("component", sa.String(length=63), nullable=False),
        sa.Column("copy", sa.Integer(), nullable=False),
        sa.Column("atom_id", sa.String(length=32), nullable=True),
        sa.Column("node_id", sa.String(length=128), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["component"], ["components.name"], name=op.f("fk_component_copies_component_components")
        ),
        sa.ForeignKeyConstraint(["atom_id"], ["atoms.id"], name=op.f("fk_component_copies_atom_id_atoms")),
        sa.PrimaryKeyConstraint("component", "copy", name=op.f("pk_component_copies")),
        sa.UniqueConstraint("atom_id", name=op.f("uq_component_copies_atom_id")),
    )


def downgrade() -> None:
    op.drop_table("component_copies")
    op.drop_index(op.f("ix_components_endpoint"), table_name="components")
    op.drop_table("components")
    op.drop_index(op.f("ix_endpoint_instances_endpoint"), table_name="endpoint_instances")
    op.drop_table("endpoint_instances")
    op.drop_index(op.f("ix_endpoints_tenant_id"), table_name="endpoints")
    op.drop_table("endpoints")
    op.drop_column("nodes", "host_memory_mib")
    op.drop_column("nodes", "host_cpu_cores")
    op.drop_column("nodes", "mig_layout")
