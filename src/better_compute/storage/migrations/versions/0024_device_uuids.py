"""A GPU belongs to one node (domain.fleet.gpu_owners): `device_uuids` holds each uuid a present GPU is known
by, its own and its MIG instances', with the node holding it, one node per uuid by its primary key;
`nodes.owned_elsewhere` keeps the uuids a node's last refused inventory named, for `doctor`.

The GPUs present at the upgrade hold their uuids from then on. A MIG uuid two GPUs list (one could
take another's before this) stays with the first GPU in uuid order; the other's node is refused at
its next inventory and shown by `doctor`, so an admin sees it.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

from better_compute.storage.kernel.db import UtcDateTime

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_BATCH = 1000


def upgrade() -> None:
    op.create_table(
        "device_uuids",
        sa.Column("uuid", sa.String(length=96), nullable=False),
        sa.Column("gpu_id", sa.String(length=96), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("uuid", name=op.f("pk_device_uuids")),
    )
    op.create_index("ix_device_uuids_gpu_id", "device_uuids", ["gpu_id"])
    op.add_column("nodes", sa.Column("owned_elsewhere", sa.JSON(), nullable=True))
    op.add_column("nodes", sa.Column("owned_elsewhere_at", UtcDateTime(), nullable=True))
    _hold_present_gpus()


def _hold_present_gpus() -> None:
    conn = op.get_bind()
    present = conn.execute(
        sa.text("SELECT id, node_id, mig_instances FROM gpus WHERE present ORDER BY id")
    ).all()
    held: dict[str, dict[str, Any]] = {}
    for gpu_id, node_id, _ in present:
        held.setdefault(gpu_id, {"uuid": gpu_id, "gpu_id": gpu_id, "node_id": node_id})
    for gpu_id, node_id, instances in present:
        listed = json.loads(instances) if isinstance(instances, str) else instances or []
        for instance in listed:
            uuid = str(instance["uuid"])
            held.setdefault(uuid, {"uuid": uuid, "gpu_id": gpu_id, "node_id": node_id})
    insert = sa.text("INSERT INTO device_uuids (uuid, gpu_id, node_id) VALUES (:uuid, :gpu_id, :node_id)")
    values = list(held.values())
    for i in range(0, len(values), _BATCH):
        conn.execute(insert, values[i : i + _BATCH])


def downgrade() -> None:
    op.drop_column("nodes", "owned_elsewhere_at")
    op.drop_column("nodes", "owned_elsewhere")
    op.drop_index("ix_device_uuids_gpu_id", table_name="device_uuids")
    op.drop_table("device_uuids")
