"""Signing a node's requests: `ReportSigner` adds the BC-* headers to each request the client sends.

It is an `httpx.Auth`, so it sees the request exactly as it goes out (method, encoded path and query,
body bytes) and signs those bytes over `domain.fleet.node_reports.signed_bytes`. Every request, a spec read
as much as a report, takes the identity's next sequence number: the server takes each number once,
so a captured request cannot be sent again.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Generator

import httpx

from better_compute.bcd.identity import Identity
from better_compute.domain.fleet.node_reports import (
    HEADER_NODE,
    HEADER_SEQUENCE,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    signed_bytes,
)


class ReportSigner(httpx.Auth):
    """Signs every request with the node's key (the `auth` of a `Compute` made for a node)."""

    requires_request_body = True

    def __init__(self, identity: Identity, clock: Callable[[], float] = time.time) -> None:
        self.identity = identity
        self.clock = clock

    def sign(self, request: httpx.Request) -> None:
        sequence = self.identity.take_sequence()
        timestamp = int(self.clock())
        target = request.url.raw_path.decode("ascii")
        message = signed_bytes(
            request.method, target, self.identity.node, timestamp, sequence, request.content
        )
        request.headers[HEADER_NODE] = self.identity.node
        request.headers[HEADER_TIMESTAMP] = str(timestamp)
        request.headers[HEADER_SEQUENCE] = str(sequence)
        request.headers[HEADER_SIGNATURE] = base64.b64encode(self.identity.key.sign(message)).decode("ascii")

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        self.sign(request)
        yield request
