"""bcd's agent: a small HTTP listener (`bcd run --listen HOST:PORT`, off by default) through which the
server reads what only the node has: a container's recent log, or what a command run in it answers
(docs/bcd.md#the-agent).

Everything else flows from the node to the server; this is the one way in, so it is narrow. It serves
two routes: `GET /v1/logs/{allocationId}?tail=N`, the newest `tail` lines (1 to 10,000, default 100)
of the allocation's container log, at most 1 MiB (cut from the start); and `POST
/v1/exec/{allocationId}` with `{"command": [argv...], "timeoutSeconds": N}`, the command run in the
allocation's container (`podman exec`, no TTY, no stdin; 1 to 64 arguments of at most 4096
characters, 1 to 60 s, default 10), answered `{"exitCode", "stdout", "stderr", "truncated",
"timedOut"}` with at most 1 MiB of each output (its start kept). It answers only a request
bearing the random token this process made as it started (32 bytes, URL-safe), compared in constant
time; the daemon tells the server the listener's URL and token in a signed `Agent` report, so a token
lives as long as the process. It should be reachable from the server alone (bind it to the address
the server reaches the node on, and firewall the port).
"""

from __future__ import annotations

import hmac
import json
import secrets
import socket
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

from better_compute.bcd.logs import Log
from better_compute.domain.fleet.node_agents import (
    EXEC_BODY_MAX,
    EXEC_PATH,
    LOGS_PATH,
    TAIL_MAX,
    ExecResult,
    check_agent_url,
    check_exec_command,
    check_exec_timeout,
    check_tail,
    cut_log,
)
from better_compute.domain.kernel.errors import InvalidInput

TOKEN_BYTES = 32
MAX_TARGET = 2048
"""The longest request target the agent reads (an allocation id is at most 160 characters)."""


class ContainerRuntime(Protocol):
    """What the agent asks of the node's container runtime (bcd.runtime): the newest `tail` lines of
    the log of the container it runs for `allocation_id`, raising `LookupError` (KeyError, say) when
    it runs none for it."""

    def logs(self, allocation_id: str, tail: int) -> str: ...

    def run_in(self, allocation_id: str, argv: Sequence[str], timeout: float) -> ExecResult:
        """Run `argv` in the allocation's container for at most `timeout` seconds (LookupError when
        it runs none for it)."""
        ...


class NoContainers:
    """The runtime of a node that runs no containers (`--runtime none`): it has no log to show and
    no container to run a command in."""

    def logs(self, allocation_id: str, tail: int) -> str:
        raise LookupError(allocation_id)

    def run_in(self, allocation_id: str, argv: Sequence[str], timeout: float) -> ExecResult:
        raise LookupError(allocation_id)


def parse_listen(raw: str) -> tuple[str, int]:
    """`HOST:PORT` (`[v6]:PORT` for IPv6) as `--listen` takes it; ValueError otherwise."""
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {raw!r} is not HOST:PORT")
    return host.removeprefix("[").removesuffix("]"), int(port)


MAX_CONNECTIONS = 16
"""Connections the agent serves at once; one more is answered 503 and closed at once."""
HANDLER_TIMEOUT = 10.0
"""Seconds a connection may sit idle (or trickle a request) before it is closed."""
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _Server(ThreadingHTTPServer):
    """A threading server with at most `MAX_CONNECTIONS` connections (threads) at once: idle or
    trickling connections, authenticated or not, cannot exhaust the daemon's threads."""

    daemon_threads = True
    request_queue_size = 64
    """The listen backlog: connections beyond the bound are accepted and refused, not left unanswered."""

    def server_bind(self) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Server6(_Server):
    address_family = socket.AF_INET6


class Agent:
    """The listener, over `runtime`, on `host:port` (port 0: one the system picks), in a thread.
    `url` is what the server is told to call (`advertise`, or `http://host:port` as bound)."""

    def __init__(
        self, runtime: ContainerRuntime, host: str, port: int, log: Log, *, advertise: str | None = None
    ) -> None:
        self.runtime = runtime
        self.log = log
        self.token = secrets.token_urlsafe(TOKEN_BYTES)
        if advertise is None and host in ("", "0.0.0.0", "::"):
            raise ValueError(
                f"--listen {host}:{port} listens on every address; say which one the server calls"
                " with --listen-url http://ADDRESS:PORT"
            )
        server_class = _Server6 if ":" in host else _Server
        self._server = server_class((host, port), _handler(self))
        self._server.daemon_threads = True
        bound = self._server.server_address
        bound_host, bound_port = str(bound[0]), int(bound[1])
        if advertise is None:
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            advertise = f"http://{shown}:{bound_port}"
        try:
            self.url = check_agent_url(advertise)
        except InvalidInput as exc:
            self._server.server_close()
            raise ValueError(exc.message) from None
        self.port = bound_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="bcd-agent", daemon=True)

    def report(self) -> dict[str, Any]:
        """The signed `Agent` report that tells the server where this listener is and its token."""
        return {"kind": "Agent", "url": self.url, "token": self.token}

    def start(self) -> Agent:
        self._thread.start()
        self.log.info("agent.listening", url=self.url)
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Agent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def authorised(self, header: str | None) -> bool:
        """Whether an `Authorization` header bears this process's token (compared in constant time)."""
        scheme, _, given = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token.encode())


def _handler(agent: Agent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "bcd-agent"
        sys_version = ""
        timeout = HANDLER_TIMEOUT
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # each read is logged as JSON below, never with its token

        def _send(
            self, status: HTTPStatus, body: bytes, content_type: str = "text/plain; charset=utf-8"
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if status == HTTPStatus.UNAUTHORIZED:
                self.send_header("WWW-Authenticate", 'Bearer realm="bcd"')
            self.end_headers()
            self.wfile.write(body)

        def _refuse(self, status: HTTPStatus, message: str) -> None:
            self._send(status, (message + "\n").encode())

        def _target(self) -> SplitResult | None:
            """The request's target once its token is the agent's and its length bounded; None when
            it was refused (answered here)."""
            if not agent.authorised(self.headers.get("Authorization")):
                agent.log.warning("agent.unauthorised", peer=self.client_address[0])
                self._refuse(HTTPStatus.UNAUTHORIZED, "a bearer token is required")
                return None
            if len(self.path) > MAX_TARGET:
                self._refuse(HTTPStatus.BAD_REQUEST, "request target too long")
                return None
            return urlsplit(self.path)

        def do_GET(self) -> None:
            target = self._target()
            if target is None:
                return
            if not target.path.startswith(LOGS_PATH) or target.path == LOGS_PATH:
                self._refuse(HTTPStatus.NOT_FOUND, "no such route (GET /v1/logs/{allocationId}?tail=N)")
                return
            allocation_id = unquote(target.path[len(LOGS_PATH) :])
            query = parse_qs(target.query, keep_blank_values=True)
            try:
                if set(query) - {"tail"} or len(query.get("tail", ())) > 1:
                    raise InvalidInput("the one query parameter is tail", {"field": "tail"})
                raw = query.get("tail", [None])[0]
                if raw is not None and not raw.isdigit():
                    raise InvalidInput(f"tail must be a whole number from 1 to {TAIL_MAX}", {"field": "tail"})
                tail = check_tail(None if raw is None else int(raw))
            except InvalidInput as exc:
                self._refuse(HTTPStatus.BAD_REQUEST, exc.message)
                return
            try:
                text = agent.runtime.logs(allocation_id, tail)
            except LookupError:
                self._refuse(HTTPStatus.NOT_FOUND, f"no container for allocation {allocation_id}")
                return
            except Exception as exc:  # the runtime's failure, told to the server, not a dead thread
                agent.log.error("agent.logs-failed", allocation=allocation_id, reason=str(exc))
                self._refuse(HTTPStatus.SERVICE_UNAVAILABLE, f"the runtime could not read the log: {exc}")
                return
            body = cut_log(text.encode("utf-8", errors="replace"))
            agent.log.info("agent.logs", allocation=allocation_id, tail=tail, bytes=len(body))
            self._send(HTTPStatus.OK, body)

        def do_POST(self) -> None:
            target = self._target()
            if target is None:
                return
            if not target.path.startswith(EXEC_PATH) or target.path == EXEC_PATH or target.query:
                self._refuse(HTTPStatus.NOT_FOUND, "no such route (POST /v1/exec/{allocationId})")
                return
            allocation_id = unquote(target.path[len(EXEC_PATH) :])
            raw_length = self.headers.get("Content-Length")
            if raw_length is None or not raw_length.isdigit():
                self._refuse(HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required")
                return
            if int(raw_length) > EXEC_BODY_MAX:
                self.close_connection = True  # the body is not read: the connection cannot go on
                self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body is over {EXEC_BODY_MAX} bytes")
                return
            try:
                body = json.loads(self.rfile.read(int(raw_length)))
                if not isinstance(body, dict) or set(body) - {"command", "timeoutSeconds"}:
                    raise InvalidInput("the body is {command: [argv...], timeoutSeconds: N}", {})
                argv = check_exec_command(body.get("command"))
                timeout = check_exec_timeout(body.get("timeoutSeconds"))
            except (ValueError, RecursionError, InvalidInput) as exc:
                said = exc.message if isinstance(exc, InvalidInput) else "the body is not JSON"
                self._refuse(HTTPStatus.BAD_REQUEST, said)
                return
            try:
                result = agent.runtime.run_in(allocation_id, argv, float(timeout))
            except LookupError:
                self._refuse(HTTPStatus.NOT_FOUND, f"no container for allocation {allocation_id}")
                return
            except Exception as exc:  # the runtime's failure, told to the server, not a dead thread
                agent.log.error("agent.exec-failed", allocation=allocation_id, reason=str(exc))
                self._refuse(HTTPStatus.SERVICE_UNAVAILABLE, f"the runtime could not run the command: {exc}")
                return
            # Logged as the server's audit event is: the command's first argument, never the others.
            agent.log.info(
                "agent.exec",
                allocation=allocation_id,
                command=argv[0],
                exit_code=result.exit_code,
                timed_out=result.timed_out,
            )
            answer = json.dumps(result.document(), ensure_ascii=False).encode()
            self._send(HTTPStatus.OK, answer, "application/json")

    return Handler
