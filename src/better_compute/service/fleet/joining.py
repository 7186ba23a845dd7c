"""Joining: an admin issues a one-time token for a node, and the node spends it to register its key.

The token is shown once and kept only as its hash (`domain.fleet.join_tokens`). Spending it and registering
the key happen in one transaction, with the token marked used by a single conditional statement, so a
token presented twice, even at the same moment, admits one node key. A node that joins again with a
new token replaces its key: reports signed with the old one stop verifying at once.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from datetime import datetime

from better_compute.domain.fleet.events import NodeJoined
from better_compute.domain.fleet.join_tokens import (
    JOIN_TOKEN_PREFIX,
    JoinToken,
    check_join_token,
    join_refused,
    token_ttl,
)
from better_compute.domain.fleet.records import Node
from better_compute.domain.kernel.errors import NotFound
from better_compute.domain.tenancy.credentials import Principal, hash_token, require_admin
from better_compute.domain.tenancy.tenancy import check_ref
from better_compute.service.fleet.node_keys import stored_key
from better_compute.service.fleet.ports import FleetTx
from better_compute.service.kernel.ports import StorePort


@dataclass(frozen=True, slots=True)
class IssuedJoinToken:
    """A join token just made: the only time it is shown."""

    node_id: str
    token: str
    expires_at: datetime


def new_join_token() -> str:
    return JOIN_TOKEN_PREFIX + secrets.token_urlsafe(32)


def issue(
    store: StorePort[FleetTx],
    principal: Principal,
    node_id: str,
    now: datetime,
    ttl_seconds: int | None = None,
) -> IssuedJoinToken:
    """A fresh join token for a registered node (admin only), valid for `ttl_seconds` (an hour)."""
    require_admin(principal, "nodes.joinToken")
    return issue_in_process(store, node_id, now, ttl_seconds)


def issue_in_process(
    store: StorePort[FleetTx], node_id: str, now: datetime, ttl_seconds: int | None = None
) -> IssuedJoinToken:
    """A join token made by the server process itself, with no caller: for the nodes `serve`
    simulates, which join over HTTP like any node but whose operator is that process."""
    check_ref(node_id, "node")
    ttl = token_ttl(ttl_seconds)
    token = new_join_token()
    with store.begin() as tx:
        if node_id not in tx.nodes.by_ids([node_id]):
            raise NotFound(f"node {node_id} not found", {"node": node_id})
        tx.join_tokens.add(JoinToken(hash_token(token), node_id, now, now + ttl))
    return IssuedJoinToken(node_id, token, now + ttl)


def join(store: StorePort[FleetTx], node_id: str, token: str, public_key: str, now: datetime) -> Node:
    """Spend `token` and make `public_key` the node's signing key; UNAUTHENTICATED, the same for
    each, when the token is unknown, used, expired or another node's (`join_refused`)."""
    check_join_token(token)
    key = stored_key(public_key)
    with store.begin() as tx:
        tx.nodes.lock([node_id])
        node = tx.nodes.by_ids([node_id]).get(node_id)
        if node is None or not tx.join_tokens.spend(hash_token(token), node_id, now):
            raise join_refused("join_token")
        tx.nodes.register_key(node_id, key, now)
        tx.events.append(NodeJoined(node_id, replaced=node.public_key is not None), now)
    return replace(node, public_key=key, report_sequence=0, joined_at=now)
