"""A TCP proxy a test can cut and restore: a database outage without stopping the shared database.

`Proxy(upstream)` listens on a loopback port of its own and relays every connection to `upstream`.
`cut()` does what a database server that stops does to its clients: the port stops listening (a
new connection is refused) and every live connection is closed under them. `restore()` listens on
the same port again, so a client that kept the proxy's address reconnects as it would to the
database come back.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

CHUNK = 65536


class Proxy:
    """Relays `127.0.0.1:port` to `upstream`, until `cut`; `restore` opens it again."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = self._listen(0)

    def _listen(self, port: int) -> int:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="proxy-accept", daemon=True).start()
        bound: int = listener.getsockname()[1]
        return bound

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed: cut
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut while this one was being connected
                    client.close()
                    server.close()
                    return
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), name="proxy-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(CHUNK):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            self._close(source, sink)

    def _close(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            with self._lock:
                self._open.discard(sock)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def cut(self) -> None:
        """Stop listening and close every live connection (both ends)."""
        with self._lock:
            listener, self._listener = self._listener, None
            live = list(self._open)
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            listener.close()
        self._close(*live)

    def restore(self) -> None:
        """Listen on the same port again."""
        self._listen(self.port)

    def close(self) -> None:
        self.cut()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
