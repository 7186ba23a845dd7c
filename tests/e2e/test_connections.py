"""Connections to a real `better-compute serve`, over raw sockets: what a slow, idle, greedy or
vanishing client gets.

The server runs with small limits (`--max-body-bytes 4096 --timeout-keep-alive 1 --timeout-request
1`), so each timeout is met within a second or two; every wait here is bounded by `WAIT`, and only a
server that never answers reaches it (which fails the test).
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.e2e.conftest import Server, start_server

WAIT = 10.0
"""Seconds a socket waits for the server: far past every timeout the server is given."""

LIMITS = ["--max-body-bytes", "4096", "--timeout-keep-alive", "1", "--timeout-request", "1"]


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with start_server(tmp_path_factory.mktemp("limited"), fleet=None, options=LIMITS) as running:
        yield running


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.body)["error"]
        return found


def connect(server: Server) -> socket.socket:
    where = urlsplit(server.url)
    return socket.create_connection((where.hostname, where.port), timeout=WAIT)


def head(method: str, path: str, *, token: str | None = None, length: int | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if length is None:
        lines.append("Transfer-Encoding: chunked")
    else:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_answer(sock: socket.socket) -> Answer:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection without an answer (got {data!r})"
        data += chunk
    top, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection in the middle of its answer"
        body += chunk
    return Answer(int(status_line.split()[1]), headers, body)


def is_closed(sock: socket.socket) -> bool:
    """True once the server has closed the connection (False would be data, never a wait past WAIT)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_idle_connections_one_that_never_sends_a_byte_is_closed(limited: Server) -> None:
    with connect(limited) as sock:
        assert is_closed(sock)


def test_idle_connections_one_kept_alive_after_an_answer_is_closed(limited: Server) -> None:
    with connect(limited) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_answer(sock).status == 200
        assert is_closed(sock)


def test_slow_clients_a_trickled_request_head_is_408_and_closed(limited: Server) -> None:
    # A header line every 0.2 s: the connection is never idle, the head is simply never done.
    with connect(limited) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        deadline = time.monotonic() + WAIT
        while not select.select([sock], [], [], 0.2)[0]:
            assert time.monotonic() < deadline, "the server kept waiting for the request head"
            sock.sendall(b"X-Slow: 1\r\n")
        answer = read_answer(sock)
        assert answer.status == 408
        assert answer.headers["bc-api-version"] == "1"
        assert answer.error() == {
            "code": "INVALID_INPUT",
            "message": "the request head did not arrive within 1 second",
            "details": {"timeout": 1},
        }
        assert is_closed(sock)
    assert "its request head did not arrive within 1 second" in limited.output()


@pytest.mark.parametrize("path", ["/v1/reservations", "/v1/tenants"])
def test_slow_clients_a_stalled_body_is_408_and_closed(limited: Server, path: str) -> None:
    with connect(limited) as sock:
        sock.sendall(head("POST", path, token=limited.admin_token, length=100) + b'{"id": ')
        answer = read_answer(sock)
        assert answer.status == 408
        assert answer.error() == {
            "code": "INVALID_INPUT",
            "message": "the request body stalled: no part of it arrived within 1 second",
            "details": {"timeout": 1},
        }
        assert is_closed(sock)


@pytest.mark.parametrize("path", ["/v1/reservations", "/v1/tenants"])
def test_client_disconnect_mid_body_is_one_warning_line_not_a_traceback(limited: Server, path: str) -> None:
    line = f"client disconnected before its request body was read: POST {path}"
    before = limited.output().count(line)
    with connect(limited) as sock:
        sock.sendall(head("POST", path, token=limited.admin_token, length=1000) + b'{"poolId": ')
    deadline = time.monotonic() + WAIT
    while limited.output().count(line) == before:
        assert time.monotonic() < deadline, f"no warning logged:\n{limited.output()}"
        time.sleep(0.05)
    with connect(limited) as sock:  # one more request: whatever the disconnect logs is logged by now
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert read_answer(sock).status == 200
    output = limited.output()
    assert output.count(line) == before + 1
    assert "Traceback" not in output and "Exception in ASGI application" not in output
    assert "unhandled error" not in output and '" 500' not in output


def test_unbounded_bodies_a_declared_length_over_the_cap_is_413_before_the_body_is_sent(
    limited: Server,
) -> None:
    with connect(limited) as sock:
        sock.sendall(head("POST", "/v1/reservations", length=100_000_000))  # and not one byte of it
        answer = read_answer(sock)
        assert answer.status == 413
        assert answer.headers["bc-api-version"] == "1"
        assert answer.error() == {
            "code": "INVALID_INPUT",
            "message": "the request body is larger than the limit of 4096 bytes",
            "details": {"limit": 4096},
        }
        assert is_closed(sock)


def test_unbounded_bodies_a_chunked_body_is_413_once_past_the_cap(limited: Server) -> None:
    chunk = b"400\r\n" + b" " * 1024 + b"\r\n"
    with connect(limited) as sock:
        sock.sendall(head("POST", "/v1/tenants", token=limited.admin_token))
        sent = 0
        while not select.select([sock], [], [], 0.2)[0]:
            assert sent < 8, "the server read past its cap of 4 chunks"
            sock.sendall(chunk)
            sent += 1
        answer = read_answer(sock)
        assert answer.status == 413
        assert answer.error()["details"] == {"limit": 4096}
        assert sent == 5  # 5,120 bytes: refused at the chunk that passed 4,096
        assert is_closed(sock)


def test_unbounded_bodies_an_anonymous_reservation_is_401_before_the_body_is_sent(limited: Server) -> None:
    with connect(limited) as sock:
        sock.sendall(head("POST", "/v1/reservations", length=2000))  # under the cap; never sent
        answer = read_answer(sock)
        assert answer.status == 401
        assert answer.error()["code"] == "UNAUTHENTICATED"
        assert is_closed(sock)  # the body is not read afterwards either


def test_limits_reach_the_worker_processes_of_serve_workers(tmp_path_factory: pytest.TempPathFactory) -> None:
    options = ["--workers", "2", "--max-body-bytes", "1000", "--timeout-request", "1"]
    options += ["--timeout-keep-alive", "1"]
    with start_server(tmp_path_factory.mktemp("workers"), fleet=None, options=options) as server:
        for _ in range(2):
            with connect(server) as sock:
                sock.sendall(head("POST", "/v1/tenants", token=server.admin_token, length=5000))
                assert read_answer(sock).error()["details"] == {"limit": 1000}
            with connect(server) as sock:
                sock.sendall(head("POST", "/v1/tenants", token=server.admin_token, length=100) + b"{")
                assert read_answer(sock).error()["details"] == {"timeout": 1}
            with connect(server) as sock:
                assert is_closed(sock)
