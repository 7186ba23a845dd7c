"""A node's agent: the small authenticated HTTP listener `bcd run --listen` opens so that the server can
ask the node for what only the node has (a container's recent log, a command run in a container),
where otherwise the node only ever calls the server (docs/bcd.md#the-agent).

The node tells the server where its agent listens and the bearer token it answers to in a signed
`Agent` report; the server keeps the last one per node (`NodeAgent`) and never shows the token. The
bounds on a log read (`check_tail`, `cut_log`) and on an exec (`check_exec_command`,
`check_exec_timeout`, `cut_output`) are the agent's and the server's alike.
"""

from __future__ import annotations

import codecs
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
EXEC_PATH = "/v1/exec/"
"""The agent's other route: `POST /v1/exec/{allocationId}` (the id percent-encoded), a JSON body
`{"command": [argv...], "timeoutSeconds": N}`."""
EXEC_ARGV_MAX = 64
EXEC_ARG_MAX = 4096
"""An exec's command is 1 to `EXEC_ARGV_MAX` arguments, each 1 to `EXEC_ARG_MAX` characters, no NUL
(an argv item cannot hold one)."""
EXEC_TIMEOUT_DEFAULT = 10
EXEC_TIMEOUT_MAX = 60
"""Seconds an exec's command may run, 1 to `EXEC_TIMEOUT_MAX` (default 10). Past it the node stops
its `podman exec` client and the answer says `timedOut`, with exit code `EXEC_TIMED_OUT`; the
command itself may keep running in the container (podman does not end an exec's process when its
client goes, as a `kubectl exec` whose client goes away)."""
EXEC_TIMED_OUT = 124
"""The exit code of a command that ran past its timeout (as coreutils' `timeout` answers)."""
EXEC_OUTPUT_MAX = 1 << 20
"""The most bytes of an exec's stdout, and of its stderr, kept: the first ones (the answer says
`truncated` when either was cut)."""
EXEC_BODY_MAX = 2 << 20
"""The most bytes of an exec request the agent reads: more than the server forwards, which is at most
its own request-body cap (1 MiB by default) re-encoded as compact UTF-8 JSON, never longer."""
EXEC_ANSWER_MAX = 2 * 6 * EXEC_OUTPUT_MAX + 4096
"""The most bytes of an agent's exec answer the server reads: two outputs at their bound, each
character as a JSON escape at worst."""
EXEC_AT_ONCE = 8
"""Execs one server process forwards at once: each holds a request thread for up to its timeout, so
more are refused (UNAVAILABLE, `reason` `exec-busy`) rather than left to take every thread."""
EXEC_PER_TENANT = 2
"""Execs one tenant has forwarded through one server process at once (the admin counted as one
tenant of its own), under `EXEC_AT_ONCE`: one tenant's long commands never take every slot."""
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
    tenant_id: str | None = None
    """The tenant whose replica or copy it is (what an exec's audit event names)."""

    def logs_url(self, tail: int) -> str:
        return f"{self.agent.url}{LOGS_PATH}{quote(self.allocation_id, safe='')}?tail={tail}"

    def exec_url(self) -> str:
        return f"{self.agent.url}{EXEC_PATH}{quote(self.allocation_id, safe='')}"


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What a command run in a container answered: its exit code (podman's own 125 when it could
    not run it, 126 not executable, 127 not found; `EXEC_TIMED_OUT` past the timeout), the first
    `EXEC_OUTPUT_MAX` bytes of its stdout and of its stderr, and whether either was cut."""

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool = False
    timed_out: bool = False

    def document(self) -> dict[str, object]:
        """As the agent answers it (JSON)."""
        return {
            "exitCode": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "truncated": self.truncated,
            "timedOut": self.timed_out,
        }

    @classmethod
    def from_document(cls, raw: object) -> ExecResult:
        """An agent's answer read back; INVALID_INPUT when it is not one (extra keys are ignored)."""
        refused = InvalidInput("not an exec answer", {"field": "answer"})
        if not isinstance(raw, dict):
            raise refused
        code, out, err = raw.get("exitCode"), raw.get("stdout"), raw.get("stderr")
        truncated, timed_out = raw.get("truncated", False), raw.get("timedOut", False)
        if (
            isinstance(code, bool)
            or not isinstance(code, int)
            or not -(1 << 31) <= code < 1 << 31
            or not isinstance(out, str)
            or not isinstance(err, str)
            or not isinstance(truncated, bool)
            or not isinstance(timed_out, bool)
            or not _is_utf8(out)
            or not _is_utf8(err)
        ):
            raise refused
        return cls(code, out, err, truncated, timed_out)


def _is_utf8(text: str) -> bool:
    """Whether `text` encodes as UTF-8: JSON may carry a lone surrogate (`"\\ud800"`) that no answer
    can be written with, so an agent's answer holding one is not an exec answer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_exec_command(raw: object, field: str = "command") -> tuple[str, ...]:
    """An exec's argv: a list of 1 to `EXEC_ARGV_MAX` strings, each 1 to `EXEC_ARG_MAX` characters
    with no NUL (INVALID_INPUT otherwise). It is never a shell line: each item is one argument."""
    if not isinstance(raw, list | tuple) or not 1 <= len(raw) <= EXEC_ARGV_MAX:
        raise InvalidInput(f"{field} must be a list of 1 to {EXEC_ARGV_MAX} arguments", {"field": field})
    for n, item in enumerate(raw):
        if not isinstance(item, str) or not 1 <= len(item) <= EXEC_ARG_MAX or "\x00" in item:
            raise InvalidInput(
                f"{field}[{n}] must be a string of 1 to {EXEC_ARG_MAX} characters without NUL",
                {"field": f"{field}[{n}]"},
            )
    return tuple(raw)


def check_exec_timeout(raw: int | None, field: str = "timeoutSeconds") -> int:
    """Seconds an exec may run: `EXEC_TIMEOUT_DEFAULT` when none, else 1 to `EXEC_TIMEOUT_MAX`."""
    if raw is None:
        return EXEC_TIMEOUT_DEFAULT
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= EXEC_TIMEOUT_MAX:
        raise InvalidInput(f"{field} must be a whole number from 1 to {EXEC_TIMEOUT_MAX}", {"field": field})
    return raw


def cut_output(data: bytes, limit: int = EXEC_OUTPUT_MAX) -> tuple[str, bool]:
    """An exec's output as text: its first `limit` bytes (never ending in the middle of a
    character), and whether it was cut."""
    if len(data) <= limit:
        return data.decode("utf-8", errors="replace"), False
    # Not final: a character whose bytes the cut split is held back, not shown as U+FFFD.
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data[:limit], final=False), True


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


def no_agent(node_id: str, what: str = "logs") -> AgentUnavailable:
    """The node never said it runs an agent: it serves neither logs nor exec (`what` is the one asked)."""
    return AgentUnavailable(
        f"node {node_id} does not serve {what} (bcd run --listen)", {"node": node_id, "reason": "no-agent"}
    )


def agent_unreachable(node_id: str, why: str) -> AgentUnavailable:
    return AgentUnavailable(
        f"node {node_id}'s agent did not answer: {why}", {"node": node_id, "reason": "agent-unreachable"}
    )


def exec_busy() -> AgentUnavailable:
    return AgentUnavailable(
        f"{EXEC_AT_ONCE} commands are already running through this server; try again shortly",
        {"reason": "exec-busy"},
    )


def exec_busy_for_tenant(tenant: str | None) -> AgentUnavailable:
    """The caller's own share (`EXEC_PER_TENANT`) is taken; `tenant` None is the admin."""
    who = "the admin" if tenant is None else f"tenant {tenant}"
    return AgentUnavailable(
        f"{EXEC_PER_TENANT} commands of {who} are already running through this server; try again"
        " when one ends",
        {"reason": "exec-busy"},
    )


def no_container(allocation_id: str, node_id: str) -> NotFound:
    return NotFound(
        f"node {node_id} has no container for allocation {allocation_id}",
        {"allocationId": allocation_id, "node": node_id},
    )
