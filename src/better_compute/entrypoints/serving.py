"""The uvicorn server `serve` runs, told when shutdown begins.

uvicorn waits, on shutdown, for every request under way to end; a node's spec long poll may wait up
to a minute. `Serving` sets the process's `Services.stopping` as soon as a signal asks it to exit,
so those waits answer at once and Ctrl-C stops the server without waiting them out.

Once it has shut down, uvicorn raises the signal it caught again, with the handler that was there
before it ran. For SIGTERM the default one would end the process on the spot, before `serve` closed
its store or removed its simulated nodes' directory; `run` puts a handler there that ends the
process as an exception does (`SystemExit(0)`: a stop asked for is a clean one), unwinding first.
"""

from __future__ import annotations

import signal
import socket
import threading
from types import FrameType

import uvicorn


class Serving(uvicorn.Server):
    """`uvicorn.Server`, setting `stopping` when a signal asks it to exit."""

    def __init__(self, config: uvicorn.Config, stopping: threading.Event) -> None:
        super().__init__(config)
        self.stopping = stopping

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.stopping.set()
        super().handle_exit(sig, frame)

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        previous = signal.signal(signal.SIGTERM, _terminated)
        try:
            super().run(sockets)
        finally:
            signal.signal(signal.SIGTERM, previous)


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


__all__ = ["Serving"]
