"""Alembic environment: runs on the connection the caller hands over (see storage/kernel/migrate.py)."""

from __future__ import annotations

from alembic import context

from better_compute.storage.kernel.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through better_compute.storage.kernel.migrate.upgrade(url)")

context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
