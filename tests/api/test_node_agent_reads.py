"""The server's read of a node agent's log (api.node_agents.read_logs) trusts nothing the node sends:
an answer in an encoding it did not ask for (a small gzip that would inflate past every bound) is
refused, and a long answer is cut to the newest LOG_BYTES_MAX bytes."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime

import httpx
import pytest

from better_compute.api.node_agents import read_logs
from better_compute.domain.fleet.node_agents import LOG_BYTES_MAX, AgentUnavailable, LogSource, NodeAgent

SOURCE = LogSource("dep-1.r0", "n-1", NodeAgent("n-1", "http://10.0.0.9:7001", "t" * 43, datetime.now(UTC)))


def test_a_gzip_bomb_from_a_lying_agent_is_refused_not_inflated() -> None:
    bomb = gzip.compress(b"A" * (64 * LOG_BYTES_MAX))

    def agent(request: httpx.Request) -> httpx.Response:
        assert request.headers["Accept-Encoding"] == "identity"
        return httpx.Response(200, stream=httpx.ByteStream(bomb), headers={"Content-Encoding": "gzip"})

    with pytest.raises(AgentUnavailable, match="encoding"):
        read_logs(SOURCE, 100, transport=httpx.MockTransport(agent))


def test_a_long_log_is_cut_to_its_newest_bytes() -> None:
    lines = b"".join(b"line %d\n" % i for i in range(400_000))

    def agent(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=httpx.ByteStream(lines))

    got = read_logs(SOURCE, 100, transport=httpx.MockTransport(agent))
    assert len(got.encode()) <= LOG_BYTES_MAX and got.endswith("line 399999\n")
