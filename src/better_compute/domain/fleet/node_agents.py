"""A node's agent: the small authenticated HTTP listener `bcd run --listen` opens so that the server can
ask the node for what only the node has (a container's recent log), where otherwise the node only
ever calls the server (docs/bcd.md#the-agent).

The node tells the server where its agent listens and the bearer token it answers to in a signed
`Agent` report; the server keeps the last one per node (`NodeAgent`) and never shows the token. The
bounds on a log read (`check_tail`, `cut_log`) are the agent's and the server's alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote, urlsplit

from better_compute.domain.kernel.errors import InvalidInput, NotFound, Unavailable

TAIL_DEFAULT = 100
TAIL_MAX = 10_000
"""A log read returns the last `tail` lines of the container's log, 1 to `TAIL_MAX` (default 100)."""
LOG_BYTES_MAX = 1 << 20
"""…and at most 1 MiB of them: a longer log is cut from the start (its newest bytes stay)."""
MAX_URL = 300
TOKEN_MIN, TOKEN_MAX = 32, 128
_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")
LOGS_PATH = "/v1/logs/"
"""The agent's one route: `GET /v1/logs/{allocationId}?tail=N` (the id percent-encoded)."""
RETRY_AFTER = 5


@dataclass(frozen=True, slots=True)
class NodeAgent:
    """Where a node's agent listens and the token it answers to (as the node last reported it)."""

    node_id: str
    url: str
    token: str
    updated_at: datetime

    def __repr__(self) -> str:  # the token stays out of logs and tracebacks
        return f"NodeAgent(node_id={self.node_id!r}, url={self.url!r}, updated_at={self.updated_at!r})"


@dataclass(frozen=True, slots=True)
class LogSource:
    """Whose log a read asks for, and of which node's agent: what the server's use cases resolve (the
    caller's own allocation, on the node that holds it now) before anything is asked of the node."""

    allocation_id: str
    node_id: str
    agent: NodeAgent

    def logs_url(self, tail: int) -> str:
        return f"{self.agent.url}{LOGS_PATH}{quote(self.allocation_id, safe='')}?tail={tail}"


def check_tail(raw: int | None, field: str = "tail") -> int:
    """The number of lines asked for: `TAIL_DEFAULT` when none, else 1 to `TAIL_MAX` (INVALID_INPUT)."""
    if raw is None:
        return TAIL_DEFAULT
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= TAIL_MAX:
        raise InvalidInput(f"{field} must be a whole number from 1 to {TAIL_MAX}", {"field": field})
    return raw


def cut_log(data: bytes, limit: int = LOG_BYTES_MAX) -> bytes:
    """At most `limit` bytes of a log, its newest: a longer one loses its start, then the rest of the
    line it was cut in, so that it begins at a whole line (and never in the middle of a character)."""
    if len(data) <= limit:
        return data
    kept = data[len(data) - limit :]
    newline = kept.find(b"\n")
    if 0 <= newline < len(kept) - 1:
        return kept[newline + 1 :]
    start = 0
    while start < len(kept) and kept[start] & 0xC0 == 0x80:  # a UTF-8 continuation byte
        start += 1
    return kept[start:]


def check_agent_url(raw: str) -> str:
    """Where a node says its agent listens: `http(s)://host[:port]`, with no path, query, fragment or
    user, at most `MAX_URL` characters; returned without a trailing slash (INVALID_INPUT otherwise)."""
    refused = InvalidInput(f"agent url {raw[:80]!r} is not http(s)://host[:port]", {"field": "url"})
    if len(raw) > MAX_URL:
        raise refused
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise refused from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or port == 0
    ):
        raise refused
    return raw.rstrip("/")


def check_agent_token(raw: str) -> str:
    """The bearer token a node's agent answers to: `TOKEN_MIN` to `TOKEN_MAX` URL-safe characters
    (a 32-byte random token is 43), INVALID_INPUT otherwise."""
    if not TOKEN_MIN <= len(raw) <= TOKEN_MAX or _TOKEN.match(raw) is None:
        raise InvalidInput(
            f"agent token must be {TOKEN_MIN} to {TOKEN_MAX} URL-safe characters", {"field": "token"}
        )
    return raw


class AgentUnavailable(Unavailable):
    """The node holding the allocation cannot be asked for its log now: it serves none (no
    `bcd run --listen`), or its agent did not answer (UNAVAILABLE; the same request may succeed later)."""

    def __init__(self, message: str, details: dict[str, str]) -> None:
        super().__init__(message, retry_after=RETRY_AFTER)
        self.details = details


def no_agent(node_id: str) -> AgentUnavailable:
    return AgentUnavailable(
        f"node {node_id} does not serve logs (bcd run --listen)", {"node": node_id, "reason": "no-agent"}
    )


def agent_unreachable(node_id: str, why: str) -> AgentUnavailable:
    return AgentUnavailable(
        f"node {node_id}'s agent did not answer: {why}", {"node": node_id, "reason": "agent-unreachable"}
    )


def no_container(allocation_id: str, node_id: str) -> NotFound:
    return NotFound(
        f"node {node_id} has no container for allocation {allocation_id}",
        {"allocationId": allocation_id, "node": node_id},
    )
