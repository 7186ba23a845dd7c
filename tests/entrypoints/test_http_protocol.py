"""The server's HTTP protocol keeps a connection whose next request has arrived when its idle timer
comes due late (a busy loop), and closes one that is really idle."""

from __future__ import annotations

import asyncio
import socket

import uvicorn
from uvicorn.server import ServerState

from better_compute.entrypoints.http_protocol import TimedHttpProtocol


async def _app(scope: object, receive: object, send: object) -> None:  # never reached here
    raise AssertionError("no request is served in these tests")


async def _connected() -> tuple[asyncio.Transport, TimedHttpProtocol, socket.socket]:
    config = uvicorn.Config(_app, timeout_keep_alive=5, lifespan="off")
    config.load()
    ours, client = socket.socketpair()
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_accepted_socket(
        lambda: TimedHttpProtocol(config, ServerState(), {}, timeout_request=30), ours
    )
    return transport, protocol, client


def test_a_request_waiting_in_the_socket_keeps_the_connection_past_a_late_idle_timer() -> None:
    async def main() -> None:
        transport, protocol, client = await _connected()
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        # The loop has not read it yet when the idle timer runs: as on a loop busy past the timeout.
        protocol.timeout_keep_alive_handler()
        assert not transport.is_closing()
        transport.close()
        client.close()

    asyncio.run(main())


def test_an_idle_connection_is_closed_when_its_timer_comes_due() -> None:
    async def main() -> None:
        transport, protocol, client = await _connected()
        protocol.timeout_keep_alive_handler()
        assert transport.is_closing()
        client.close()

    asyncio.run(main())
