"""Quota rows no longer require their tenant to exist: a pool owner may grant rows to a tenant id
without learning whether it exists (the rows apply once the admin creates that tenant).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("quotas", schema=None) as batch_op:
        batch_op.drop_constraint("fk_quotas_tenant_id_tenants", type_="foreignkey")


def downgrade() -> None:
    op.execute("DELETE FROM quotas WHERE tenant_id NOT IN (SELECT id FROM tenants)")
    with op.batch_alter_table("quotas", schema=None) as batch_op:
        batch_op.create_foreign_key("fk_quotas_tenant_id_tenants", "tenants", ["tenant_id"], ["id"])
