"""Request bodies are capped and timed, and a client that leaves mid-body is one log line.

The app is driven in-process at the ASGI level: each test hands it the body in the parts a client
would send (or a pause, or a disconnect) and looks at what it answers and what it logs. The same
behaviour over real sockets is in tests/e2e/test_connections.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from better_compute.settings import DEFAULT_MAX_BODY_BYTES
from better_compute.storage.store import Store
from tests.builders import admin_token, real_app

BOUND = 10.0
"""Seconds any one drive may take: only reached when the app hangs, which fails the test."""

PAUSE = "pause"
"""A part of the body that never comes: the client stops sending."""

LEAVE = "leave"
"""The client disconnects."""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'bc.db'}")
    try:
        yield s
    finally:
        s.close()


@dataclass
class Answer:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    parts_read: int = 0

    def error(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.body)["error"]
        return found


def drive(
    app: Any,
    method: str,
    path: str,
    *,
    headers: Sequence[tuple[str, str]] = (),
    parts: Sequence[bytes | str] = (),
) -> Answer:
    """Send one request to `app` as uvicorn would: its body in `parts` (the last one ends it, unless
    it is PAUSE or LEAVE). Returns the answer and how many parts the app asked for."""
    answer = Answer()
    raw_path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    queue = list(parts)

    async def receive() -> dict[str, Any]:
        if not queue:
            await asyncio.Event().wait()  # the body is over; only a disconnect could come
        part = queue.pop(0)
        answer.parts_read += 1
        if part == PAUSE:
            await asyncio.Event().wait()
        if part == LEAVE:
            return {"type": "http.disconnect"}
        assert isinstance(part, bytes)
        return {"type": "http.request", "body": part, "more_body": bool(queue)}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = {k.decode(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            answer.body += message.get("body", b"")

    asyncio.run(asyncio.wait_for(app(scope, receive, send), BOUND))
    return answer


def json_headers(token: str | None, length: int | None) -> list[tuple[str, str]]:
    headers = [("content-type", "application/json")]
    if token is not None:
        headers.append(("authorization", f"Bearer {token}"))
    if length is None:
        headers.append(("transfer-encoding", "chunked"))
    else:
        headers.append(("content-length", str(length)))
    return headers


def test_unbounded_request_bodies_a_declared_length_over_the_cap_is_413_before_any_byte_is_read(
    store: Store,
) -> None:
    app = real_app(store)
    size = 12 * 1024 * 1024
    for path in ("/v1/reservations", "/v1/tenants"):
        answer = drive(app, "POST", path, headers=json_headers(None, size), parts=[b"{" * size])
        assert answer.status == 413
        assert answer.error() == {
            "code": "INVALID_INPUT",
            "message": "the request body is larger than the limit of 1048576 bytes",
            "details": {"limit": DEFAULT_MAX_BODY_BYTES},
        }
        assert answer.headers["connection"] == "close"
        assert answer.parts_read == 0


def test_unbounded_request_bodies_a_chunked_body_is_counted_and_refused_once_over_the_cap(
    store: Store,
) -> None:
    app = real_app(store, max_body_bytes=1000)
    token = admin_token(store)
    chunks: list[bytes | str] = [b" " * 400] * 10
    for path in ("/v1/reservations", "/v1/tenants"):
        answer = drive(app, "POST", path, headers=json_headers(token, None), parts=chunks)
        assert answer.status == 413, answer.body
        assert answer.error()["message"] == "the request body is larger than the limit of 1000 bytes"
        assert answer.error()["details"] == {"limit": 1000}
        assert answer.parts_read == 3  # 1,200 bytes: refused at the part that passed the cap


def test_unbounded_request_bodies_a_body_longer_than_its_content_length_is_counted(store: Store) -> None:
    app = real_app(store, max_body_bytes=1000)
    answer = drive(
        app, "POST", "/v1/tenants", headers=json_headers(admin_token(store), 10), parts=[b" " * 600] * 2
    )
    assert answer.status == 413
    assert answer.error()["details"] == {"limit": 1000}


def test_unbounded_request_bodies_a_body_at_the_cap_is_taken(store: Store) -> None:
    app = real_app(store, max_body_bytes=1000)
    body = json.dumps({"id": "globex", "name": "Globex"}).encode()
    body += b" " * (1000 - len(body))
    answer = drive(app, "POST", "/v1/tenants", headers=json_headers(admin_token(store), 1000), parts=[body])
    assert answer.status == 201, answer.body
    assert "connection" not in answer.headers  # the connection stays open for the next request


def test_unbounded_request_bodies_an_anonymous_reservation_is_401_before_its_body_is_read(
    store: Store,
) -> None:
    # The body never comes: the answer can only be the refusal of the missing or unknown token.
    app = real_app(store)
    for token in (None, "bc_" + "A" * 43):
        answer = drive(app, "POST", "/v1/reservations", headers=json_headers(token, 1000), parts=[PAUSE])
        assert answer.status == 401
        assert answer.error()["code"] == "UNAUTHENTICATED"
        assert answer.parts_read == 0
        assert answer.headers["connection"] == "close"  # the unread body is not drained either


def test_slow_clients_a_stalled_body_is_408_naming_the_timeout(store: Store) -> None:
    app = real_app(store, timeout_request=0.2)
    token = admin_token(store)
    for path in ("/v1/reservations", "/v1/tenants"):
        answer = drive(app, "POST", path, headers=json_headers(token, 1000), parts=[b"{", PAUSE])
        assert answer.status == 408
        assert answer.error() == {
            "code": "INVALID_INPUT",
            "message": "the request body stalled: no part of it arrived within 0.2 seconds",
            "details": {"timeout": 0.2},
        }
        assert answer.headers["connection"] == "close"


def test_client_disconnect_mid_body_is_one_warning_line_not_a_traceback(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    app = real_app(store)
    token = admin_token(store)
    for path in ("/v1/reservations", "/v1/tenants"):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            answer = drive(app, "POST", path, headers=json_headers(token, 1000), parts=[b'{"pool', LEAVE])
        assert answer.status is None  # nobody is left to answer, and no 500 is made up
        logged = [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records]
        assert logged == [
            ("WARNING", f"client disconnected before its request body was read: POST {path}", None)
        ]
