"""The bounds of a log read through a node's agent, and what a node may say of its agent."""

from __future__ import annotations

import pytest

from better_compute.domain.fleet.node_agents import check_agent_token, check_agent_url, check_tail, cut_log
from better_compute.domain.kernel.errors import InvalidInput


def test_tail_defaults_to_100_and_is_1_to_10000() -> None:
    assert check_tail(None) == 100
    assert (check_tail(1), check_tail(10_000)) == (1, 10_000)
    for bad in (0, -1, 10_001, True):
        with pytest.raises(InvalidInput, match="1 to 10000"):
            check_tail(bad)


def test_a_long_log_is_cut_from_the_start_at_a_whole_line() -> None:
    assert cut_log(b"a\nb\n", 10) == b"a\nb\n"
    assert cut_log(b"first line\nsecond\n", 10) == b"second\n"
    assert cut_log("é".encode() * 8, 5) == "éé".encode()  # never half a character
    assert cut_log(b"x" * 20 + b"\n", 10) == b"x" * 9 + b"\n"


def test_an_agent_url_is_scheme_host_and_port_only() -> None:
    assert check_agent_url("http://10.0.0.5:7070/") == "http://10.0.0.5:7070"
    assert check_agent_url("https://[fd00::1]:7070") == "https://[fd00::1]:7070"
    for bad in (
        "ftp://n:1",
        "http://",
        "http://u:p@n:1",
        "http://n:1/path",
        "http://n:1?x=1",
        "http://n:1#f",
        "http://n:99999",
        "http://n:0",
        "n:7070",
        "http://" + "a" * 300,
    ):
        with pytest.raises(InvalidInput):
            check_agent_url(bad)
    assert check_agent_token("a" * 43) == "a" * 43
    for bad in ("short", "a" * 129, "a" * 40 + "!!!"):
        with pytest.raises(InvalidInput):
            check_agent_token(bad)
