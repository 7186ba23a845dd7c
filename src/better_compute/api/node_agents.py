"""The server's side of a node's agent (docs/bcd.md#the-agent): one bounded HTTP read of a container's
log, or one bounded exec of a command in it, with the token the node gave in its `Agent` report. The
node's answer is not trusted further than its size: at most `LOG_BYTES_MAX` bytes of a log are read
(the rest cut from the start, as the agent does), at most `EXEC_ANSWER_MAX` of an exec's answer."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import httpx

from better_compute.domain.fleet.node_agents import (
    EXEC_ANSWER_MAX,
    LOG_BYTES_MAX,
    ExecResult,
    LogSource,
    agent_unreachable,
    cut_log,
    no_container,
)
from better_compute.domain.kernel.errors import InvalidInput

TIMEOUT = 5.0
"""Seconds to connect to the agent, and between two reads of its answer."""
DEADLINE = 15.0
"""The longest a whole log read may take, however the node trickles it (TIMEOUT bounds each read)."""


def _headers(source: LogSource, accept: str) -> dict[str, str]:
    """The agent's token, and identity: the bytes are counted as they come, never inflated from a
    small compressed answer."""
    return {"Authorization": f"Bearer {source.agent.token}", "Accept": accept, "Accept-Encoding": "identity"}


def _check_head(source: LogSource, answer: httpx.Response) -> None:
    """NOT_FOUND when the node runs no container for the allocation; UNAVAILABLE for any answer but
    the agent's own 200 in identity encoding."""
    node = source.node_id
    if answer.status_code == 404:
        raise no_container(source.allocation_id, node)
    if answer.status_code == 401:
        raise agent_unreachable(node, "it refused the server's token (bcd restarted since it reported?)")
    if answer.status_code != 200:
        raise agent_unreachable(node, f"it answered {answer.status_code}")
    if answer.headers.get("Content-Encoding", "identity") != "identity":
        raise agent_unreachable(node, "it answered in an encoding it was not asked for")


def read_logs(source: LogSource, tail: int, transport: httpx.BaseTransport | None = None) -> str:
    """The last `tail` lines of the allocation's container log on its node (service.fleet.node_agents.
    AgentLogs): NOT_FOUND when the node has no container for it, UNAVAILABLE when the agent does not
    answer, refuses the token, or answers otherwise than the agent does."""
    node = source.node_id
    headers = _headers(source, "text/plain")
    deadline = time.monotonic() + DEADLINE
    try:
        with (
            httpx.Client(timeout=TIMEOUT, transport=transport, follow_redirects=False) as client,
            client.stream("GET", source.logs_url(tail), headers=headers) as answer,
        ):
            _check_head(source, answer)
            data = bytearray()
            for chunk in answer.iter_raw():
                data += chunk
                if len(data) > 2 * LOG_BYTES_MAX:
                    del data[: len(data) - LOG_BYTES_MAX]
                if time.monotonic() > deadline:
                    # A node trickling its answer holds no server thread past the deadline.
                    raise agent_unreachable(node, f"it took longer than {DEADLINE:g} s to answer")
    except httpx.HTTPError as exc:
        raise agent_unreachable(node, type(exc).__name__) from None
    return cut_log(bytes(data)).decode("utf-8", errors="replace")


EXEC_SLACK = 10.0
"""Seconds an exec's answer may take beyond its command's timeout (podman's own start and stop)."""


def run_exec(
    source: LogSource, argv: Sequence[str], timeout: int, transport: httpx.BaseTransport | None = None
) -> ExecResult:
    """Run `argv` (checked: `check_exec_command`) in the allocation's container on its node, for at
    most `timeout` seconds (`check_exec_timeout`): what it answered. NOT_FOUND when the node has no
    container for it, UNAVAILABLE when the agent does not answer (in time), refuses the token, or
    answers otherwise than the agent does."""
    node = source.node_id
    headers = _headers(source, "application/json")
    deadline = time.monotonic() + timeout + EXEC_SLACK
    limits = httpx.Timeout(TIMEOUT, read=timeout + EXEC_SLACK)
    body = {"command": list(argv), "timeoutSeconds": timeout}
    try:
        with (
            httpx.Client(timeout=limits, transport=transport, follow_redirects=False) as client,
            client.stream("POST", source.exec_url(), json=body, headers=headers) as answer,
        ):
            _check_head(source, answer)
            data = bytearray()
            for chunk in answer.iter_raw():
                data += chunk
                if len(data) > EXEC_ANSWER_MAX:
                    raise agent_unreachable(node, f"its answer is over {EXEC_ANSWER_MAX} bytes")
                if time.monotonic() > deadline:
                    raise agent_unreachable(node, f"it took longer than {timeout + EXEC_SLACK:g} s to answer")
    except httpx.HTTPError as exc:
        raise agent_unreachable(node, type(exc).__name__) from None
    try:
        return ExecResult.from_document(json.loads(bytes(data)))
    except (ValueError, RecursionError, InvalidInput):
        raise agent_unreachable(node, "it answered what is not an exec answer") from None
