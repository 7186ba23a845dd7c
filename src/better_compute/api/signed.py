"""Signed node requests as HTTP carries them: the BC-* headers and the exact target and body bytes.

The route hands `domain.fleet.node_reports.parse_signed` what was signed: the method, the request target as
sent (the raw path, and `?` with the raw query string when there is one) and the body's bytes, so the
server checks the bytes the node signed, never a re-encoding of them.
"""

from __future__ import annotations

from fastapi import Request

from better_compute.domain.fleet.node_reports import HEADER_SIGNATURE, HEADERS, SignedRequest, parse_signed


def target_of(request: Request) -> str:
    raw = request.scope.get("raw_path") or request.url.path.encode("utf-8")
    query = request.scope.get("query_string") or b""
    target = raw.decode("latin-1")
    return f"{target}?{query.decode('latin-1')}" if query else target


def is_signed(request: Request) -> bool:
    """Whether the request says it is a node's (it carries a signature header)."""
    return HEADER_SIGNATURE in request.headers


async def signed_request(request: Request) -> SignedRequest:
    """The request as its node signed it; UNAUTHENTICATED when a header is missing or malformed."""
    body = await request.body()
    headers = {name: request.headers.get(name) for name in HEADERS}
    return parse_signed(headers, request.method, target_of(request), body)
