"""Capacity history: `gpu_states`, one row per period of a GPU's state (its pool, health, its node's
cordon, its atoms' shares), so that accounting a past range reads the fleet as it was then
(docs/adr/0009-gpu-state-history.md).

What happened before this revision was not recorded. Each present GPU gets one open period, with
its state as it is now, from the time its row was last written: the best the database can tell.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.shares import share

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "gpu_states",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("gpu_id", sa.String(length=96), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("pool_id", sa.String(length=64), nullable=True),
        sa.Column("healthy", sa.Boolean(), nullable=False),
        sa.Column("cordoned", sa.Boolean(), nullable=False),
        sa.Column("shares", sa.JSON(), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_gpu_states_gpu_id_gpus")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_states")),
    )
    op.create_index("ix_gpu_states_pool_from", "gpu_states", ["pool_id", "valid_from"], unique=False)
    op.create_index(
        "uq_gpu_states_open",
        "gpu_states",
        ["gpu_id"],
        unique=True,
        sqlite_where=sa.text("valid_to IS NULL"),
        postgresql_where=sa.text("valid_to IS NULL"),
    )
    op.bulk_insert(table, _open_periods(op.get_bind()))


def _open_periods(conn: sa.Connection) -> list[dict[str, Any]]:
    """One open period per present GPU, from its state now."""
    pool_of: dict[str, str] = {  # noqa: C416 (a migration is kept as it ran)
        n: p for n, p in conn.execute(sa.text("SELECT node_id, pool_id FROM pool_nodes"))
    }
    cordoned = {n: bool(c) for n, c in conn.execute(sa.text("SELECT id, cordoned FROM nodes"))}
    shares: dict[str, dict[str, str]] = defaultdict(dict)
    for atom_id, gpu_id, cls, key, attributes in conn.execute(
        sa.text("SELECT id, gpu_id, class, key, attributes FROM atoms WHERE present = :yes"), {"yes": True}
    ):
        attrs = json.loads(attributes) if isinstance(attributes, str) else dict(attributes or {})
        atom = Atom(atom_id, gpu_id, "", cls, key, False, False, None, None, None, attrs)
        shares[gpu_id][atom_id] = str(share(atom))
    gpus = conn.execute(
        sa.text("SELECT id, node_id, healthy, updated_at FROM gpus WHERE present = :yes"), {"yes": True}
    )
    return [
        {
            "gpu_id": gpu_id,
            "node_id": node_id,
            "pool_id": pool_of.get(node_id),
            "healthy": bool(healthy),
            "cordoned": cordoned.get(node_id, False),
            "shares": dict(sorted(shares[gpu_id].items())),
            # SQLite hands back the naive UTC text it keeps; the column takes a datetime.
            "valid_from": datetime.fromisoformat(updated_at) if isinstance(updated_at, str) else updated_at,
            "valid_to": None,
        }
        for gpu_id, node_id, healthy, updated_at in gpus
    ]


def downgrade() -> None:
    op.drop_index("uq_gpu_states_open", table_name="gpu_states")
    op.drop_index("ix_gpu_states_pool_from", table_name="gpu_states")
    op.drop_table("gpu_states")
