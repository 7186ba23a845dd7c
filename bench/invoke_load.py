"""The two processes `bench/endpoints.py` times `invoke` with, each apart from the server: a model
server that answers at once, and a load generator of concurrent clients over raw asyncio streams.

The load generator is kept cheap (a prepared request, a response read by its `Content-Length`, on
uvloop when it is installed) so that on a small machine it measures the paths rather than itself: an
httpx client spends about as much CPU per request as the server does. Each client keeps one
connection to each target, opened and warmed before anything is measured, and the targets take turns
in short rounds (direct, ours, ours, direct, ...: ABBA, so that neither always goes first), all
clients on one target at a time: a slow moment of the machine falls on both alike.

    python -m bench.invoke_load serve PORT
    python -m bench.invoke_load load SPEC_JSON    # prints {"direct": [ms...], "ours": [ms...], ...}
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

ANSWER = b'{"generated_text": "ok"}'
BODY = b'{"inputs": "hi"}'


def _fast_loop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - the plain loop is only slower
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def model_server(port: int) -> None:
    """Answer every request at once with `ANSWER` (HTTP/1.1, kept alive), until killed."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(ANSWER)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
                length = next(
                    (int(x.split(b":")[1]) for x in lines if x.lower().startswith(b"content-length:")), 0
                )
                await reader.readexactly(length)
                writer.write(head + ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    _fast_loop()
    asyncio.run(main())


class Broken(Exception):
    """A request that got no complete 200 answer with `ANSWER`."""


class Connection:
    """One kept-alive connection to a target, sending one prepared request at a time."""

    def __init__(self, host: str, port: int, request: bytes) -> None:
        self.host, self.port, self.request = host, port, request
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.last = time.perf_counter()
        self.calls = 0

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.last = time.perf_counter()

    async def call(self) -> float:
        """One request's latency in ms (from writing it to its answer's last byte)."""
        assert self.reader is not None and self.writer is not None
        started = time.perf_counter()
        self.writer.write(self.request)
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            idle = started - self.last
            raise Broken(
                f"{self.port}: the server closed the connection without an answer"
                f" (its request {self.calls + 1}, after {idle:.3f} s idle)"
            ) from exc
        status = head[9:12]
        length = -1
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        if length < 0:
            raise Broken(f"{self.port}: an answer without Content-Length: {head[:200]!r}")
        body = await self.reader.readexactly(length)
        self.last = time.perf_counter()
        self.calls += 1
        elapsed = (self.last - started) * 1000
        if status != b"200" or body != ANSWER:
            raise Broken(f"{self.port}: {status.decode()} {body[:200]!r}")
        return elapsed

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _request(host: str, port: int, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += [f"Content-Length: {len(BODY)}", "", ""]
    return "\r\n".join(lines).encode("latin-1") + BODY


async def _load(spec: dict[str, Any]) -> dict[str, Any]:
    clients: int = spec["clients"]
    targets: dict[str, dict[str, Any]] = spec["targets"]  # name -> {host, port, path, headers}
    per_client: int = spec["per_client_per_round"]
    conns = {
        name: [
            Connection(t["host"], t["port"], _request(t["host"], t["port"], t["path"], t["headers"]))
            for _ in range(clients)
        ]
        for name, t in targets.items()
    }
    for pool in conns.values():
        await asyncio.gather(*(c.open() for c in pool))
    times: dict[str, list[float]] = {name: [] for name in targets}

    async def round_of(name: str, n: int, keep: bool) -> None:
        async def one(c: Connection) -> None:
            for _ in range(n):
                took = await c.call()
                if keep:
                    times[name].append(took)

        await asyncio.gather(*(one(c) for c in conns[name]))

    names = list(targets)
    for name in names:  # warm-up: connections, the server's caches, the pools behind it
        await round_of(name, spec["warmup_per_client"], keep=False)
    started = time.perf_counter()
    for r in range(spec["rounds"]):
        for name in names if r % 2 == 0 else reversed(names):
            await round_of(name, per_client, keep=True)
    measured_s = time.perf_counter() - started
    # One client alone, alternating request by request: what a request costs without queueing.
    alone = {name: [] for name in targets}
    for _ in range(spec["alone"]):
        for name in names:
            alone[name].append(await conns[name][0].call())
    for pool in conns.values():
        for c in pool:
            c.close()
    return {"loaded": times, "alone": alone, "measured_s": measured_s}


def load(spec: dict[str, Any]) -> dict[str, Any]:
    _fast_loop()
    return asyncio.run(_load(spec))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        model_server(int(sys.argv[2]))
    else:
        try:
            print(json.dumps(load(json.loads(sys.argv[2]))))
        except Broken as exc:
            print(json.dumps({"error": str(exc)}))
            sys.exit(1)
