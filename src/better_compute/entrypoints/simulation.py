"""`serve --fleet`'s simulated nodes: one `bcd run` loop per node of the fleet file, over the fake
GPU backend, in a thread of the server process, talking HTTP to the server like a real node.

Each node joins as `bcd join` does (the join token is made in-process, the server being the fleet's
operator here; the join itself goes over HTTP), keeps its key, report queue, CDI files and log in a
directory of its own under `root`, and runs the daemon's loop (`bcd.daemon.Daemon`) with signed
reports and spec long polls. So `make run` takes the production path: a reservation's binding
state comes from a daemon's report, its CDI file appears in the node's CDI directory.

The containers of workload replicas and endpoint copies run under podman where the machine can
(`choose_runtime`: podman on PATH, root, no NVIDIA driver), else under the in-process fake runtime.
Under podman each node's simulated driver makes its device nodes in its tree (major 195 and the
simulated majors, which is why a machine with a real NVIDIA driver never gets podman here: the
numbers would be a real GPU's), and the nodes write their CDI specs to /var/run/cdi, the one
directory besides /etc/cdi that podman reads (docs/bcd.md).

Each node also runs bcd's agent (`bcd run --listen`; bcd.agent) on 127.0.0.1 with a port the system
picks, and tells the server about it in its signed `Agent` report, so `workloads logs` and
`endpoints logs` read the simulated containers' logs as they read a real node's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal, TextIO

import httpx

from better_compute.bcd.agent import Agent
from better_compute.bcd.containers import RuntimeFailure
from better_compute.bcd.daemon import Daemon, LoggingRunner
from better_compute.bcd.fake import FakeNode
from better_compute.bcd.fake_runtime import FakeRuntime
from better_compute.bcd.joining import join, node_client
from better_compute.bcd.logs import Log
from better_compute.bcd.podman import PodmanRuntime
from better_compute.bcd.runtime import ContainerRuntime
from better_compute.domain.ops.fleet import FleetSpec
from better_compute.service.fleet import joining
from better_compute.service.kernel.ports import StorePort
from better_compute.service.tx import Tx

READY_POLL = 0.05
"""Seconds between the probes of `/healthz` while the server starts (readiness only)."""
PODMAN_CDI_ROOT = Path("/var/run/cdi")
"""Where the nodes write their CDI specs under podman: Debian 12's podman (4.3) reads only this
directory and /etc/cdi."""
STOP_TIMEOUT = 1
"""Seconds a simulated node's container has to stop before SIGKILL."""
AGENT_HOST = "127.0.0.1"
"""Where each simulated node's agent listens (on a port the system picks): the server is on this
machine."""


class QuietNodeTraffic(logging.Filter):
    """Leaves out of uvicorn's access log the simulated nodes' routine requests (spec long polls
    and reports answered without error), which would otherwise fill the console of `make run`."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) < 5:
            return True
        path, status = args[2], args[4]
        routine = isinstance(path, str) and path.startswith("/v1/nodes/")
        return not (routine and isinstance(status, int) and status < 400)


def local_url(host: str, port: int) -> str:
    """Where a process on this machine reaches a server listening on `host`: a wildcard address
    is reached on loopback."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


@dataclass
class SimulatedNode:
    """One node's daemon, its thread and where it keeps its state."""

    name: str
    state_dir: Path
    daemon: Daemon
    thread: threading.Thread
    stream: TextIO = field(repr=False)
    containers: ContainerRuntime | None = field(default=None, repr=False)
    agent: Agent | None = field(default=None, repr=False)


def join_tokens(store: StorePort[Tx], spec: FleetSpec, now: datetime) -> dict[str, str]:
    """A join token for each node of `spec`, made by the server process (`joining.issue_in_process`)
    before it serves, so the daemons need no store of their own."""
    return {n.name: joining.issue_in_process(store, n.name, now).token for n in spec.nodes}


class SimulatedNodes:
    """The daemons of every node of `spec`, started once the server at `url` answers; each joins
    with its token of `tokens`. Each runs the containers of its assignments with the runtime
    `runtime` names: the in-process fake (the default), or podman (`podman`, the command; with
    `create_args` added to every create), under which it makes its device nodes and writes its CDI
    specs to `cdi_root` (default /var/run/cdi)."""

    def __init__(
        self,
        spec: FleetSpec,
        tokens: dict[str, str],
        url: str,
        root: Path,
        *,
        wait: float = 10.0,
        runtime: Literal["podman", "fake"] = "fake",
        podman: Sequence[str] = ("podman",),
        create_args: Sequence[str] = (),
        cdi_root: Path | None = None,
    ) -> None:
        self.spec = spec
        self.tokens = tokens
        self.url = url
        self.root = root
        self.wait = wait
        self.runtime = runtime
        self.podman = list(podman)
        self.create_args = list(create_args)
        self.cdi_root = cdi_root if cdi_root is not None else PODMAN_CDI_ROOT
        self.nodes: list[SimulatedNode] = []
        self.failed: str | None = None
        self.ready = threading.Event()
        self._stopping = threading.Event()
        self._starter = threading.Thread(target=self._bring_up, name="simulated-nodes", daemon=True)

    def start(self) -> None:
        """Bring the nodes up in the background; `ready` is set once all run (or `failed` says why)."""
        self._starter.start()

    def _server_up(self) -> bool:
        while not self._stopping.is_set():
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2.0).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            self._stopping.wait(READY_POLL)
        return False

    def _bring_up(self) -> None:
        try:
            if not self._server_up():
                return
            for node in self.spec.nodes:
                if self._stopping.is_set():
                    return
                self.nodes.append(self._run_node(node.name, FakeNode.for_node(self.spec, node)))
        except Exception as exc:  # reported on `failed`: the server goes on serving without them
            self.failed = f"{type(exc).__name__}: {exc}"
        finally:
            self.ready.set()

    def _run_node(self, name: str, fake: FakeNode) -> SimulatedNode:
        state_dir = self.root / name
        state_dir.mkdir(parents=True, exist_ok=True)
        identity = join(self.url, self.tokens[name], name, state_dir)
        stream = (state_dir / "bcd.log").open("a", encoding="utf-8")
        log = Log(stream, node=name)
        podman = self.runtime == "podman"
        containers: ContainerRuntime
        if podman:
            containers = PodmanRuntime(
                name,
                argv=self.podman,
                create_args=self.create_args,
                stop_timeout=STOP_TIMEOUT,
                env_dir=state_dir / "container-env",
            )
        else:
            containers = FakeRuntime(name)
        agent = Agent(containers, AGENT_HOST, 0, log).start()
        daemon = Daemon(
            identity,
            fake,
            node_client(identity, timeout=self.wait + 30.0),
            cdi_root=self.cdi_root if podman else state_dir / "cdi",
            log=log,
            mps_runner=LoggingRunner(log),
            wait=self.wait,
            runtime=containers,
            stop_timeout=STOP_TIMEOUT,
            device_nodes=podman,
            agent=agent,
        )
        thread = threading.Thread(
            target=daemon.run, kwargs={"signals": False}, name=f"bcd-{name}", daemon=True
        )
        thread.start()
        return SimulatedNode(name, state_dir, daemon, thread, stream, containers, agent)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every daemon (each ends after its pass or long poll) and close what they opened."""
        self._stopping.set()
        self.ready.wait(timeout)
        for node in self.nodes:
            node.daemon.stop("server stopping")
        for node in self.nodes:
            node.thread.join(timeout)
            if node.agent is not None:
                node.agent.stop()
            self._clear(node)
            node.daemon.compute.close()
            node.stream.close()

    def _clear(self, node: SimulatedNode) -> None:
        """Take down what a simulated node leaves outside this process, which goes with the server
        (its state directory, device nodes included, is a temporary one): its containers and the
        CDI specs of what it had bound. A real `bcd` leaves both for the next daemon to adopt."""
        containers = node.containers
        if isinstance(containers, FakeRuntime):
            containers.close()
            return
        if containers is not None:
            for found in containers.list():
                try:
                    containers.remove(found.id)
                except RuntimeFailure as exc:
                    node.daemon.log.warning("container.left", container=found.id, reason=str(exc))
        if self.runtime == "podman":
            for allocation_id in node.daemon.devices.bound():
                node.daemon.devices.remove_spec(allocation_id)  # its own: a moved copy's may not be


__all__ = [
    "QuietNodeTraffic",
    "SimulatedNode",
    "SimulatedNodes",
    "join_tokens",
    "local_url",
]
