"""`bcd join`: make the node's key, register it with a join token, and keep the identity on disk.

The key is made here and its private half never leaves the state directory; the server learns the
public half only. Joining again (a new token) makes a new key, which replaces the old one at the
server and starts the sequence again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from better_compute.bcd.identity import Identity, public_key_text
from better_compute.bcd.signing import ReportSigner
from better_compute.client import Compute


def join(
    server: str,
    token: str,
    node: str,
    state_dir: Path,
    *,
    transport: httpx.BaseTransport | None = None,
) -> Identity:
    """Join `node` to `server` with the join token; the identity is written once the server took the
    key (a refused join leaves any earlier identity as it was)."""
    key = Ed25519PrivateKey.generate()
    with Compute(server, transport=transport, retries=0) as compute:
        joined = compute.nodes.join(node, token=token, public_key=public_key_text(key))
    return Identity.create(state_dir, joined.node, server, key, joined.joined_at.isoformat())


def node_client(
    identity: Identity,
    *,
    transport: httpx.BaseTransport | None = None,
    clock: Callable[[], float] | None = None,
    timeout: float = 90.0,
) -> Compute:
    """A client that signs as the node (its timeout outlasts the longest spec wait, 60 s)."""
    signer = ReportSigner(identity) if clock is None else ReportSigner(identity, clock)
    return Compute(identity.server, transport=transport, auth=signer, timeout=timeout, retries=0)
