"""The credentials repository: credential records, and the token look-up every request makes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from better_compute.domain.tenancy.records import Credential
from better_compute.service.tenancy.ports import TokenOwner
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import credentials


def _credential(r: Mapping[str, Any]) -> Credential:
    return Credential(
        id=r["id"],
        tenant_id=r["tenant_id"],
        name=r["name"],
        token_hash=r["token_hash"],
        is_admin=bool(r["is_admin"]),
        created_at=r["created_at"],
        revoked_at=r["revoked_at"],
    )


class SqlCredentials:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, credential_id: str) -> Credential | None:
        found = rows.rows(self.conn, select(credentials).where(credentials.c.id == credential_id))
        return _credential(found[0]) if found else None

    def owner_of(self, token_hash: str) -> TokenOwner | None:
        """Looked up on every request, so straight to the driver with a fixed statement."""
        db = self.conn.connection.driver_connection
        assert db is not None
        mark = "%s" if self.conn.dialect.name == "postgresql" else "?"
        found = db.execute(
            f"SELECT id, tenant_id, is_admin, revoked_at IS NULL FROM credentials WHERE token_hash = {mark}",
            (token_hash,),
        ).fetchone()
        if found is None:
            return None
        return TokenOwner(
            credential_id=found[0], tenant_id=found[1], is_admin=bool(found[2]), live=bool(found[3])
        )

    def live_admins(self) -> list[Credential]:
        stmt = select(credentials).where(credentials.c.is_admin.is_(True), credentials.c.revoked_at.is_(None))
        return [_credential(r) for r in rows.rows(self.conn, stmt.order_by(credentials.c.id))]

    def of_tenant(self, tenant_id: str | None) -> list[Credential]:
        where = [] if tenant_id is None else [credentials.c.tenant_id == tenant_id]
        return [_credential(r) for r in rows.page(self.conn, credentials, where=where)]

    def add(self, credential: Credential) -> bool:
        row = {
            "id": credential.id,
            "tenant_id": credential.tenant_id,
            "name": credential.name,
            "token_hash": credential.token_hash,
            "is_admin": credential.is_admin,
            "created_at": credential.created_at,
            "revoked_at": credential.revoked_at,
        }
        return rows.insert_new(self.conn, credentials, [row]) == 1

    def revoke(self, credential_id: str, at: datetime) -> bool:
        return rows.compare_and_set(
            self.conn, credentials, credential_id, {"revoked_at": None}, {"revoked_at": at}
        )
