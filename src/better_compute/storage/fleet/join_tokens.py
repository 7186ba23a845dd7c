"""The join tokens repository: hashes of tokens an admin issued, each spent by one join."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from better_compute.domain.fleet.join_tokens import JoinToken
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import join_tokens


def _token(r: Mapping[str, Any]) -> JoinToken:
    return JoinToken(
        token_hash=r["token_hash"],
        node_id=r["node_id"],
        created_at=r["created_at"],
        expires_at=r["expires_at"],
        used_at=r["used_at"],
    )


class SqlJoinTokens:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def add(self, token: JoinToken) -> None:
        self.conn.execute(
            insert(join_tokens).values(
                token_hash=token.token_hash,
                node_id=token.node_id,
                created_at=token.created_at,
                expires_at=token.expires_at,
                used_at=token.used_at,
            )
        )

    def spend(self, token_hash: str, node_id: str, now: datetime) -> bool:
        """Mark the token used if it is the node's, unused and unexpired at `now`: one statement, so
        of two joins racing with one token exactly one finds it unused."""
        result = self.conn.execute(
            update(join_tokens)
            .where(
                join_tokens.c.token_hash == token_hash,
                join_tokens.c.node_id == node_id,
                join_tokens.c.used_at.is_(None),
                join_tokens.c.expires_at > now,
            )
            .values(used_at=now)
        )
        return result.rowcount == 1

    def get(self, token_hash: str) -> JoinToken | None:
        found = rows.rows(self.conn, select(join_tokens).where(join_tokens.c.token_hash == token_hash))
        return _token(found[0]) if found else None
