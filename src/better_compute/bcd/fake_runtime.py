"""An in-process container runtime for simulated nodes (`serve --fleet` without podman) and fast
tests, keeping podman's contract (`bcd.runtime.ContainerRuntime`) as podman documents it:

- `create` makes a container in state `created` with its name, labels and published ports (a random
  host port each, assigned at create, as podman does); a name already taken, or an image not on the
  node with `pull=never`, is refused as podman refuses it (`image not known`);
- `start` runs it (a running one is left running); `stop` ends it, exit code 143 (SIGTERM), as an
  `exited` container; `remove` of a running one needs force (ours always forces, as `rm -f`);
- `run_job` is what a Slurm job's `podman run --rm` of a replica does on the host (created and
  started, labelled `better-compute.slurm-allocation`, the httpGet probe's port published on the
  loopback), `end_job` its end (the container exits and `--rm` removes it); `jobs` lists those;
- `list` shows the node's containers by label, `exec` fails on one that is not running (podman's
  125), `logs` of an allocation without a container raises `NoContainer`;
- `run_in` (an operator's exec through the agent) answers as `podman exec` does, over a model of
  the container's commands (`FAKE_COMMANDS`): nothing is run on the host.

A running container serves real HTTP on a local port for each published port (a small threaded
`http.server`), so a readiness probe and an invoke reach something: `GET /ping` (and the probe's
path) answers 200; any POST answers 200 with a JSON body naming the model (the container's `MODEL`
variable, as the demo image's model server does: `entrypoints.demo_image`) and the allocation, and
echoing the path and the request body. `exit` makes a running container exit with a code (what a
crash is here), and `exec_status` is what an exec probe's command exits with.
"""

from __future__ import annotations

import builtins
import json
import threading
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from better_compute.bcd.containers import (
    MAX_LOG_TAIL,
    Found,
    NoContainer,
    RuntimeFailure,
    State,
    container_name,
    published,
    spec_digest,
)
from better_compute.domain.fleet.node_agents import EXEC_OUTPUT_MAX, EXEC_TIMED_OUT, ExecResult, cut_output
from better_compute.domain.kernel.containers import ContainerSpec

MAX_BODY = 1024 * 1024
FAKE_COMMANDS = ("echo", "true", "false", "env", "sleep", "yes", "sh -c 'exit N'")
"""What an exec (`run_in`) finds in a fake container: `echo ARGS` prints them, `true`/`false`,
`env` prints the container's environment, `sleep N` times out when N is at least the timeout,
`yes` prints past the output bound and times out, `sh -c 'exit N'` exits N."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        self.server.owner.logs.append(f"{self.command} {self.path}")

    def _answer(self, status: int, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path in ("/ping", *self.server.owner.probe_paths):
            self._answer(200, b"ok\n")
        else:
            self._answer(404, b"not found\n")

    def do_POST(self) -> None:
        length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
        body = self.rfile.read(length).decode(errors="replace")
        owner = self.server.owner
        answer = {
            "model": owner.spec.env.get("MODEL"),
            "allocation": owner.allocation_id,
            "container": owner.id,
            "path": self.path,
            "body": body,
        }
        self._answer(200, json.dumps(answer).encode(), "application/json")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: _Container


@dataclass
class _Container:
    id: str
    name: str
    allocation_id: str
    digest: str
    spec: ContainerSpec
    ports: dict[int, int]
    state: State = "created"
    exit_code: int | None = None
    probe_paths: tuple[str, ...] = ()
    atoms: tuple[str, ...] = ()
    logs: list[str] = field(default_factory=list)
    servers: list[_Server] = field(default_factory=list)


def _found(c: _Container) -> Found:
    """What `podman ps` tells of a container: a job's as it is (no spec of ours, no atoms label);
    `list` adds its own container's digest and atoms."""
    return Found(
        id=c.id,
        name=c.name,
        allocation_id=c.allocation_id,
        spec_digest="",
        state=c.state,
        exit_code=c.exit_code if c.state == "exited" else None,
        ports=dict(c.ports),
    )


class FakeRuntime:
    """Node `node`'s containers, in this process; `images` are those on the node (None: any)."""

    def __init__(
        self,
        node: str,
        *,
        images: Collection[str] | None = None,
        publish_address: str = "127.0.0.1",
        pull: str = "never",
    ) -> None:
        self.node = node
        self.images = None if images is None else set(images)
        self.publish_address = publish_address
        self.pull = pull
        self.refuse_remove: set[str] = set()
        """Allocations whose containers `stop` and `remove` fail on, as podman's can (a runtime
        that cannot kill the process, storage that is busy)."""
        self.exec_status: dict[str, int] = {}
        """{allocation id: what an exec in its container exits with} (0 when not set)."""
        self._containers: dict[str, _Container] = {}
        self._jobs: dict[str, _Container] = {}
        """The containers Slurm jobs run, by allocation id (never this node's own)."""
        self._lock = threading.Lock()

    # -- test hooks ----------------------------------------------------------------------------

    def exit(self, allocation_id: str, code: int) -> None:
        """The allocation's running container exits with `code` (its process ended, or crashed)."""
        with self._lock:
            for c in self._containers.values():
                if c.allocation_id == allocation_id and c.state == "running":
                    self._halt(c, code)

    def run_job(self, allocation_id: str, spec: ContainerSpec) -> str:
        """A replica's Slurm job runs its container (`podman run --rm --name bc-slurm-<id> --label
        better-compute.slurm-allocation=<id>`, its probe's port published on the loopback): running
        at once, and none of this node's own; its id."""
        with self._lock:
            if allocation_id in self._jobs:
                raise RuntimeFailure(f'the container name "bc-slurm-{allocation_id}" is already in use')
            probe = spec.readiness
            c = _Container(
                id=uuid.uuid4().hex * 2,
                name=f"bc-slurm-{allocation_id}",
                allocation_id=allocation_id,
                digest="",
                spec=spec,
                ports={},
                probe_paths=(probe.http_path,) if probe is not None and probe.http_path else (),
            )
            if probe is not None and probe.http_port is not None:
                server = _Server(("127.0.0.1", 0), _Handler)
                server.owner = c
                c.servers.append(server)
                c.ports[probe.http_port] = server.server_address[1]
            self._jobs[allocation_id] = c
        self.start(c.id)
        return c.id

    def end_job(self, allocation_id: str, code: int = 0) -> None:
        """The job's container exits with `code` and `--rm` removes it (the job ends with it)."""
        with self._lock:
            c = self._jobs.pop(allocation_id, None)
            if c is not None:
                if c.state == "running":
                    self._halt(c, code)
                for server in c.servers:
                    server.server_close()

    def container_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._containers)

    def close(self) -> None:
        """Stop every container and free its ports (the process is going)."""
        with self._lock:
            for c in [*self._containers.values(), *self._jobs.values()]:
                if c.state == "running":
                    self._halt(c, 137)
                for server in c.servers:
                    server.server_close()

    # -- ContainerRuntime ---------------------------------------------------------------------

    def create(
        self,
        allocation_id: str,
        spec: ContainerSpec,
        *,
        digest: str | None = None,
        atoms: Sequence[str] = (),
    ) -> str:
        name = container_name(self.node, allocation_id)
        if self.images is not None and spec.image not in self.images:
            raise RuntimeFailure(
                f"{spec.image}: image not known"
                if self.pull == "never"
                else f"initializing source docker://{spec.image}: no registry is reachable",
                "image-not-found",
            )
        with self._lock:
            if any(c.name == name for c in self._containers.values()):
                raise RuntimeFailure(
                    f'creating container storage: the container name "{name}" is already in use'
                )
            probe = spec.readiness
            paths = (probe.http_path,) if probe is not None and probe.http_path else ()
            c = _Container(
                id=uuid.uuid4().hex * 2,
                name=name,
                allocation_id=allocation_id,
                digest=digest or spec_digest(spec, atoms),
                spec=spec,
                atoms=tuple(sorted(atoms)),
                ports={},
                probe_paths=paths,
            )
            # A host port per published port, bound now and kept for the container's life (podman
            # assigns random host ports at create).
            for port in published(spec):
                server = _Server((self.publish_address, 0), _Handler)
                server.owner = c
                c.servers.append(server)
                c.ports[port] = server.server_address[1]
            self._containers[c.id] = c
            return c.id

    def _get(self, container_id: str) -> _Container:
        c = self._containers.get(container_id) or next(
            (j for j in self._jobs.values() if j.id == container_id), None
        )
        if c is None:
            raise RuntimeFailure(f'no container with name or ID "{container_id}" found: no such container')
        return c

    def start(self, container_id: str) -> None:
        with self._lock:
            c = self._get(container_id)
            if c.state == "running":
                return
            c.state, c.exit_code = "running", None
            c.logs.append(f"started {c.spec.image}")
            for server in c.servers:
                threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()

    def _halt(self, c: _Container, code: int) -> None:
        for server in c.servers:
            server.shutdown()
        c.state, c.exit_code = "exited", code
        c.logs.append(f"exited {code}")

    def _refused(self, c: _Container, verb: str) -> None:
        if c.allocation_id in self.refuse_remove:
            raise RuntimeFailure(f"podman {verb}: cannot {verb} container {c.id}: device or resource busy")

    def stop(self, container_id: str, timeout: int) -> None:
        with self._lock:
            c = self._get(container_id)
            self._refused(c, "stop")
            if c.state == "running":
                self._halt(c, 143)

    def remove(self, container_id: str) -> None:
        with self._lock:
            c = self._containers.get(container_id)
            if c is None:
                return
            self._refused(c, "rm")
            del self._containers[container_id]
            if c.state == "running":
                self._halt(c, 137)
            for server in c.servers:
                server.server_close()

    def list(self) -> list[Found]:
        with self._lock:
            return [
                replace(_found(c), spec_digest=c.digest, atoms=c.atoms) for c in self._containers.values()
            ]

    def jobs(self) -> builtins.list[Found]:
        with self._lock:
            return [_found(c) for c in self._jobs.values()]

    def exec(self, container_id: str, argv: Sequence[str], timeout: float) -> int:
        with self._lock:
            c = self._get(container_id)
            if c.state != "running":
                return 125  # podman: the container is not running
            return self.exec_status.get(c.allocation_id, 0)

    def run_in(self, allocation_id: str, argv: Sequence[str], timeout: float) -> ExecResult:
        """`podman exec` in the allocation's container, as podman answers it, over this fake's
        model of a container (it has no filesystem and runs no process of the host: a tenant's
        command never runs on the machine serving the simulation). The image offers the commands
        of `FAKE_COMMANDS`, also as `busybox NAME ...`; any other is podman's 127 (not found), a
        container that is not running podman's 125."""
        with self._lock:
            mine = sorted(
                (c for c in self._containers.values() if c.allocation_id == allocation_id),
                key=lambda c: (c.name != container_name(self.node, allocation_id), c.state != "running"),
            )
            if not mine:
                raise NoContainer(allocation_id)
            c = mine[0]
            if c.state != "running":
                return ExecResult(
                    125,
                    "",
                    "Error: can only create exec sessions on running containers: container state improper\n",
                )
            env = dict(c.spec.env)
        args = list(argv[1:]) if argv[0] == "busybox" and len(argv) > 1 else list(argv)
        name, rest = args[0], args[1:]
        if name == "echo":
            out, _ = cut_output((" ".join(rest) + "\n").encode())
            return ExecResult(0, out, "")
        if name in ("true", "false"):
            return ExecResult(0 if name == "true" else 1, "", "")
        if name == "env":
            text = "".join(f"{k}={v}\n" for k, v in sorted(env.items()))
            out, cut = cut_output(text.encode())
            return ExecResult(0, out, "", cut)
        if name == "sleep":
            # The model's clock: a sleep longer than the timeout is what a timed-out exec answers.
            try:
                seconds = float(rest[0]) if rest else 0.0
            except ValueError:
                return ExecResult(1, "", f"sleep: invalid number '{rest[0]}'\n")
            return (
                ExecResult(EXEC_TIMED_OUT, "", "", False, True)
                if seconds >= timeout
                else ExecResult(0, "", "")
            )
        if name == "yes":
            # A command that prints without end: its output is cut at the bound, and it times out.
            out, cut = cut_output(b"y\n" * (EXEC_OUTPUT_MAX // 2 + 1))
            return ExecResult(EXEC_TIMED_OUT, out, "", cut, True)
        if name == "sh" and rest[:1] == ["-c"] and len(rest) >= 2 and rest[1].startswith("exit "):
            code = rest[1].removeprefix("exit ").strip()
            if code.isdigit():
                return ExecResult(int(code) % 256, "", "")
        return ExecResult(
            127,
            "",
            f"Error: crun: executable file `{name}` not found in $PATH: No such file or directory: OCI"
            " runtime attempted to invoke a command that was not found\n",
        )

    def logs(self, allocation_id: str, tail: int) -> str:
        with self._lock:
            mine = sorted(
                (c for c in self._containers.values() if c.allocation_id == allocation_id),
                key=lambda c: (c.name != container_name(self.node, allocation_id), c.state != "running"),
            )
            if not mine:
                raise NoContainer(allocation_id)
            tail = max(0, min(tail, MAX_LOG_TAIL))
            lines = mine[0].logs[-tail:] if tail else []
            return "".join(f"{line}\n" for line in lines)
