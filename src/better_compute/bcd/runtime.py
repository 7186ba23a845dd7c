"""The runtime converger: one container per assignment of the node's spec that carries a `container`
(a workload replica, an endpoint copy) and is handed over (bound: its CDI device exists), made true
through a `ContainerRuntime` (podman, or the in-process fake) on every pass
(docs/bcd.md#running-containers).

Each pass lists the node's containers by its label and, against the spec:
- creates and starts a missing one; one whose `better-compute.spec` label differs from the spec's
  digest is removed and created again;
- adopts one it did not make in this process (a restarted daemon, even after SIGKILL): its labels
  say whose it is, so nothing is lost and nothing doubled;
- first (`prune`, which the daemon runs before any device is released, scrubbed, re-cut or handed
  over), stops and removes every container of an allocation no longer assigned here (a stray), or
  made for other atoms, another tenant or another spec, reporting `removed`; one it cannot remove
  lingers, and its allocation is held until a later pass removes it;
- starts an exited one again after a back-off of 1 s doubling to 5 min; the back-off resets once a
  container has run `RESET_AFTER` without exiting. After `CRASH_LOOP` restarts without such a run
  its exits are reported with `problem: crash-looping`;
- runs the readiness probe (`httpGet` of the published host port, or `exec` in the container) at
  its period, after its initial delay, each bounded by its timeout, in a pool of threads (a pass
  waits at most `PROBE_WAIT` for them; one still under way is read by a later pass): one pass makes
  it `ready`, `failureThreshold` failures in a row `not-ready`. Without a probe a running container
  is ready.

A container a Slurm job runs for a replica (the assignment's `jobContainer`;
docs/slurm.md#replicas-as-jobs) is only watched (`_watch`): found by its
`better-compute.slurm-allocation` label, never started, restarted, stopped or removed (Slurm starts and
ends it), its readiness probed as above (an httpGet on the loopback port the job published) and reported
the same way: `created` until its probe passes, `ready`, `not-ready`, `exited`; `removed` while none
runs (the job has not started it yet, or it ended and `--rm` removed it), so no word of `ready` outlives
it.

A `ReplicaState` report is queued only when what it would say changes (state, problem, restarts,
address, exit code), or when the server may have forgotten it (`forget_reported`: a new spec
generation, a dropped report). The clock is injected and the converger never sleeps: what is due (a probe, a
restart) is done by the first pass at or after its time, and `due` says when that is, so the
daemon's loop, and tests, decide when passes come.
"""

from __future__ import annotations

import builtins
import socket
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from better_compute.bcd.containers import MAX_DETAIL, Found, RuntimeFailure, container_name, spec_digest
from better_compute.bcd.logs import Log
from better_compute.domain.fleet.node_agents import ExecResult
from better_compute.domain.kernel.containers import ContainerSpec, parse_container
from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.placement.slurm_replicas import PROBE_ADDRESS
from better_compute.wire.nodes import AssignmentPublic

BACKOFF_BASE = 1.0
BACKOFF_MAX = 300.0
RESET_AFTER = 600.0
"""Seconds a container runs without exiting after which its back-off starts again from 1 s."""
CRASH_LOOP = 3
PROBE_WORKERS = 8
"""Probes run at once (in threads): one slow container's probe never waits for another's."""
PROBE_WAIT = 2.0
"""The most seconds one pass waits for its probes: a probe still under way (its own timeout, up to
60 s, bounds it) is read by a later pass, so no tenant's container can stall the daemon's loop."""
MAX_STATUS_LINE = 1024
"""The most bytes of an httpGet probe's answer read (its status line)."""
"""Restarts (without a run of `RESET_AFTER`) after which an exit is reported `crash-looping`."""


class ContainerRuntime(Protocol):
    """What the converger needs of a container runtime; `bcd.podman.PodmanRuntime` and
    `bcd.fake_runtime.FakeRuntime` keep podman's contract. Failures raise
    `bcd.containers.RuntimeFailure`."""

    publish_address: str
    """Where published ports listen (what an httpGet probe calls)."""

    def create(
        self,
        allocation_id: str,
        spec: ContainerSpec,
        *,
        digest: str | None = None,
        atoms: Sequence[str] = (),
    ) -> str:
        """Create (not start) the allocation's container, with its labels (`digest` its
        `better-compute.spec`, `atoms` its `better-compute.atoms`) and CDI device; its id."""
        ...

    def start(self, container_id: str) -> None: ...

    def stop(self, container_id: str, timeout: int) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds."""
        ...

    def remove(self, container_id: str) -> None:
        """Remove it, killing it first if it runs (gone already is fine)."""
        ...

    def list(self) -> list[Found]:
        """This node's containers (by its label), whatever their state."""
        ...

    def jobs(self) -> builtins.list[Found]:
        """The containers Slurm jobs run for replicas (by `bcd.containers.JOB_LABEL`, whose value is
        the `allocation_id`), whatever their state: watched, never started, stopped or removed."""
        ...

    def exec(self, container_id: str, argv: Sequence[str], timeout: float) -> int:
        """Run `argv` in the running container; its exit status (-1 past `timeout`)."""
        ...

    def logs(self, allocation_id: str, tail: int) -> str:
        """The last `tail` lines the allocation's container wrote (stdout and stderr), bounded by
        `bcd.containers.MAX_LOG_TAIL` lines and `MAX_LOG_BYTES`; raises `bcd.containers.NoContainer`
        when this node has no container for it."""
        ...

    def run_in(self, allocation_id: str, argv: Sequence[str], timeout: float) -> ExecResult:
        """An operator's exec in the allocation's container (the agent's `POST /v1/exec`): `podman
        exec` of `argv`, no TTY, no stdin, for at most `timeout` seconds, its output bounded
        (`domain.fleet.node_agents.ExecResult`); raises `bcd.containers.NoContainer` when this node
        has no container for it."""
        ...


HttpGet = Callable[[str, int, str, float], bool]


def http_get(host: str, port: int, path: str, timeout: float) -> bool:
    """An httpGet probe: a 2xx or 3xx status line passes; no status line within `timeout`, or any
    other, fails. `timeout` bounds the whole probe, connect to status line (`http.client`'s bounds
    each socket read, so a server dripping a byte at a time could hold it indefinitely), and at most
    `MAX_STATUS_LINE` bytes are read: the status is all a probe needs of the answer."""
    deadline = time.monotonic() + timeout
    request = (
        f"GET {path} HTTP/1.0\r\nHost: {_host(host)}:{port}\r\nUser-Agent: bcd-probe\r\n"
        "Connection: close\r\n\r\n"
    )
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(request.encode("ascii"))
            line = b""
            while b"\n" not in line and len(line) < MAX_STATUS_LINE:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                sock.settimeout(left)
                chunk = sock.recv(MAX_STATUS_LINE - len(line))
                if not chunk:
                    break
                line += chunk
    except (OSError, UnicodeError):
        return False
    parts = line.split(b"\n", 1)[0].split()
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return False
    return 200 <= int(parts[1]) < 400


def backoff(restarts: int) -> float:
    """The wait before restart number `restarts + 1` of a streak: 1 s doubling to 5 min."""
    return float(min(BACKOFF_BASE * 2.0 ** min(restarts, 20), BACKOFF_MAX))


@dataclass
class _Replica:
    """What the converger knows of one allocation's container between passes (memory only: a
    restarted daemon adopts the container and starts counting again)."""

    container_id: str | None = None
    restarts: int = 0
    streak: int = 0
    """Restarts since the container last ran `RESET_AFTER` without exiting."""
    next_restart: float | None = None
    running_since: float | None = None
    next_probe: float = 0.0
    failures: int = 0
    ready: bool = False
    was_ready: bool = False
    exit_code: int | None = None
    problem: str | None = None
    detail: str | None = None
    retry_at: float | None = None
    attempts: int = 0
    """Failed creates (or starts) in a row: their back-off."""
    reported: tuple[Any, ...] | None = None
    probing: Future[bool] | None = None
    """The readiness probe under way (in `RuntimeConverger`'s pool), read by the pass it ends in."""

    def started(self, now: float, spec: ContainerSpec, *, adopted: bool = False) -> None:
        self.running_since = now
        self.probing = None  # a probe of the run before says nothing of this one
        delay = 0 if adopted or spec.readiness is None else spec.readiness.initial_delay_seconds
        self.next_probe = now + delay
        self.failures = 0
        self.ready = False
        self.was_ready = False
        self.exit_code = None


@dataclass
class Pruned:
    """What `RuntimeConverger.prune` did: the `removed` reports (to be queued before anything the
    devices' pass says of the same allocations), and the allocations whose container could not be
    removed, with the atoms it holds (`lingering`): still held, neither released, scrubbed, handed
    to another allocation nor re-cut."""

    reports: list[dict[str, Any]] = field(default_factory=list)
    lingering: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Want:
    """What one assignment asks to run: its container, on its atoms, for its tenant, and the digest
    of the three (`spec_digest`: the container's `better-compute.spec` label)."""

    spec: ContainerSpec
    atoms: tuple[str, ...]
    digest: str


WATCH_EVERY = 5.0
"""Seconds between passes while a watched container has nothing scheduled (none seen yet, or one
without a probe): how soon a container a Slurm job starts or ends is seen."""


def _want_of(a: AssignmentPublic) -> _Want:
    assert a.container is not None
    spec = parse_container(a.container.model_dump(mode="json", by_alias=True))
    atoms = tuple(sorted(a.atoms))
    return _Want(spec, atoms, spec_digest(spec, atoms, a.tenant_id))


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


class RuntimeConverger:
    """Keeps `runtime`'s containers equal to the spec's bound container assignments; `advertise` is
    the host the reports' `address` names (where the server reaches the published ports)."""

    def __init__(
        self,
        runtime: ContainerRuntime,
        node: str,
        *,
        advertise: str | None = None,
        log: Log | None = None,
        clock: Callable[[], float] = time.monotonic,
        probe_http: HttpGet = http_get,
        stop_timeout: int = 10,
    ) -> None:
        self.runtime = runtime
        self.node = node
        self.advertise = advertise or runtime.publish_address
        self.log = log
        self.clock = clock
        self.probe_http = probe_http
        self.stop_timeout = stop_timeout
        self._replicas: dict[str, _Replica] = {}
        self._specs: dict[str, ContainerSpec] = {}
        self._holding: dict[str, tuple[str, ...]] = {}
        """{allocation: its containers' atoms} as the last listing found them: what is held while
        the runtime cannot be listed."""
        self._pool: ThreadPoolExecutor | None = None
        self._watched: dict[str, _Replica] = {}
        """What is known of each container a Slurm job runs here (`_watch`), by allocation."""
        self._watched_specs: dict[str, ContainerSpec] = {}
        self._probed: list[tuple[str, ContainerSpec, _Replica, str | None]] = []
        """This pass's running containers with a probe under way: their state is queued once the
        pass has waited (at most `PROBE_WAIT`) for the probes."""

    def _log(self, level: str, event: str, **fields: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(event, **fields)

    # -- the pass ------------------------------------------------------------------------------

    def _wanted(
        self, assignments: Iterable[AssignmentPublic], bound: Collection[str]
    ) -> tuple[dict[str, _Want], dict[str, str]]:
        """The bound container assignments' wants, and those whose container cannot be run (why)."""
        wanted: dict[str, _Want] = {}
        refused: dict[str, str] = {}
        for a in assignments:
            if a.container is None or a.allocation_id not in bound:
                continue
            try:
                wanted[a.allocation_id] = _want_of(a)
            except DomainError as exc:
                refused[a.allocation_id] = f"the container cannot be run: {exc}"
        return wanted, refused

    def prune(self, assignments: Iterable[AssignmentPublic], bound: Collection[str]) -> Pruned:
        """The first step of a pass, before any device is released, scrubbed, handed to another
        allocation or re-cut: stop and remove every container that is not its allocation's current
        one (an allocation no longer assigned here, a stray, one made for other atoms, another
        tenant or another spec). What could not be removed (podman refused, or cannot be listed)
        `lingers`: its allocation still holds its atoms until a later pass removes it."""
        wanted, _ = self._wanted(assignments, bound)
        pruned = Pruned()
        try:
            found = self.runtime.list()
        except RuntimeFailure as exc:
            # Not knowing what runs: what ran at the last listing is held still.
            self._log("error", "runtime.unlisted", reason=exc.detail)
            pruned.lingering.update(self._holding)
            return pruned
        kept: set[str] = set()
        remaining: list[Found] = []
        gone: set[str] = set()
        for c in sorted(found, key=lambda f: (f.allocation_id, f.state != "running", f.id)):
            want = wanted.get(c.allocation_id)
            if (
                want is not None
                and c.spec_digest == want.digest
                and c.name == container_name(self.node, c.allocation_id)
                and c.allocation_id not in kept
            ):
                kept.add(c.allocation_id)
                remaining.append(c)
                continue
            if not self._remove([c], "stray" if want is None else "changed"):
                remaining.append(c)
                atoms = pruned.lingering.get(c.allocation_id, ())
                pruned.lingering[c.allocation_id] = tuple(sorted({*atoms, *c.atoms}))
                continue
            if want is None:
                gone.add(c.allocation_id)
            elif c.allocation_id not in kept:
                # Its replacement is made by this pass's `converge`, counting from nothing.
                r = self._replicas.get(c.allocation_id)
                self._replicas[c.allocation_id] = _Replica(reported=r.reported if r else None)
        for allocation_id in sorted(gone - set(pruned.lingering)):
            self._replicas.pop(allocation_id, None)
            pruned.reports.append(
                {"kind": "ReplicaState", "allocationId": allocation_id, "state": "removed", "restarts": 0}
            )
        holding: dict[str, set[str]] = {}
        for c in remaining:
            holding.setdefault(c.allocation_id, set()).update(c.atoms)
        self._holding = {allocation_id: tuple(sorted(atoms)) for allocation_id, atoms in holding.items()}
        return pruned

    def converge(
        self,
        assignments: Iterable[AssignmentPublic],
        bound: Collection[str],
        *,
        pruned: bool = False,
    ) -> list[dict[str, Any]]:
        """One pass; the `ReplicaState` reports whose content changed. It prunes first (`prune`)
        unless the caller did already in this pass (`pruned`: the daemon prunes before the devices'
        pass, so a container is gone before its devices are released)."""
        now = self.clock()
        assignments = list(assignments)
        reports: list[dict[str, Any]] = [] if pruned else self.prune(assignments, bound).reports
        wanted, refused = self._wanted(assignments, bound)
        try:
            found = self.runtime.list()
        except RuntimeFailure as exc:
            self._log("error", "runtime.unlisted", reason=exc.detail)
            return reports
        by_allocation: dict[str, list[Found]] = {}
        for f in found:
            by_allocation.setdefault(f.allocation_id, []).append(f)
        for allocation_id in set(self._replicas) - set(wanted) - set(by_allocation):
            del self._replicas[allocation_id]
        for allocation_id, why in sorted(refused.items()):
            r = self._replicas.setdefault(allocation_id, _Replica())
            r.problem, r.detail = "create-failed", why
            self._queue(allocation_id, r, "created", None, reports)
        self._specs = {allocation_id: want.spec for allocation_id, want in wanted.items()}
        self._probed = []
        for allocation_id, want in sorted(wanted.items()):
            try:
                self._one(allocation_id, want, by_allocation.get(allocation_id, []), now, reports)
            except RuntimeFailure as exc:
                self._log("error", "container.failed", allocation=allocation_id, reason=exc.detail)
        self._watch(assignments, bound, now, reports)
        self._read_probes(reports)
        return reports

    def _watch(
        self,
        assignments: Sequence[AssignmentPublic],
        bound: Collection[str],
        now: float,
        out: list[dict[str, Any]],
    ) -> None:
        """The containers Slurm jobs run for the spec's bound replicas (`jobContainer`): each
        reported as the node's own are, its probe run the same way, and nothing done to it."""
        specs: dict[str, ContainerSpec] = {}
        for a in assignments:
            if a.job_container is None or a.allocation_id not in bound:
                continue
            try:
                specs[a.allocation_id] = parse_container(
                    a.job_container.model_dump(mode="json", by_alias=True)
                )
            except DomainError as exc:
                self._log("error", "job-container.unreadable", allocation=a.allocation_id, reason=str(exc))
        for allocation_id in set(self._watched) - set(specs):
            del self._watched[allocation_id]
        self._watched_specs = specs
        if not specs:
            return
        try:
            found = self.runtime.jobs()
        except RuntimeFailure as exc:
            self._log("error", "runtime.unlisted", reason=exc.detail)
            return
        by_allocation: dict[str, list[Found]] = {}
        for f in sorted(found, key=lambda c: (c.state != "running", c.id)):
            by_allocation.setdefault(f.allocation_id, []).append(f)
        for allocation_id, spec in sorted(specs.items()):
            r = self._watched.setdefault(allocation_id, _Replica())
            mine = by_allocation.get(allocation_id)
            container = mine[0] if mine else None
            if container is None or container.id != r.container_id:
                r.container_id = container.id if container is not None else None
                r.running_since, r.probing, r.ready, r.failures = None, None, False, 0
            if container is None:
                self._queue(allocation_id, r, "removed", None, out)
            elif container.state == "running":
                if r.running_since is None:
                    r.started(now, spec)
                self._probe(spec, container, r, now, host=PROBE_ADDRESS)
                if r.probing is not None:
                    self._probed.append((allocation_id, spec, r, None))
                else:
                    self._queue_running(allocation_id, spec, r, None, out)
            elif container.state == "exited":
                r.running_since, r.probing, r.ready = None, None, False
                r.exit_code = container.exit_code
                self._queue(allocation_id, r, "exited", None, out)
            else:
                self._queue(allocation_id, r, "created", None, out)

    def _remove(self, containers: Sequence[Found], why: str) -> bool:
        """Stop (gracefully) and remove `containers`; False when one could not be removed (the next
        pass tries again)."""
        for c in containers:
            try:
                if c.state == "running":
                    self.runtime.stop(c.id, self.stop_timeout)
                self.runtime.remove(c.id)
            except RuntimeFailure as exc:
                self._log("error", "container.unremoved", allocation=c.allocation_id, reason=exc.detail)
                return False
            self._log("info", "container.removed", allocation=c.allocation_id, container=c.id, why=why)
        return True

    def _one(
        self,
        allocation_id: str,
        want: _Want,
        containers: Sequence[Found],
        now: float,
        out: list[dict[str, Any]],
    ) -> None:
        r = self._replicas.setdefault(allocation_id, _Replica())
        spec = want.spec
        name = container_name(self.node, allocation_id)
        current = [c for c in containers if c.spec_digest == want.digest and c.name == name]
        outdated = [c for c in containers if c not in current[:1]]
        if outdated:
            if not self._remove(outdated, "changed"):
                return
            if not current:
                self._replicas[allocation_id] = r = _Replica(reported=r.reported)
        container = current[0] if current else None
        if container is None:
            self._create(allocation_id, want, r, now, out)
            return
        if r.container_id != container.id:
            self._log("info", "container.adopted", allocation=allocation_id, container=container.id)
            r.container_id = container.id
            if container.state == "running":
                r.started(now, spec, adopted=True)
        address = self._address(spec, container.ports)
        if container.state == "created":
            # Made and never started (a daemon stopped between the two, or a start that failed).
            if r.retry_at is not None and now < r.retry_at:
                self._queue(allocation_id, r, "created", address, out)
                return
            if self._start(allocation_id, container.id, r, now):
                r.started(now, spec)
            self._queue(allocation_id, r, "created", address, out)
            return
        if container.state == "exited":
            self._exited(allocation_id, spec, container, r, now, address, out)
            return
        if container.state != "running":
            return
        if r.running_since is None:
            r.started(now, spec)
        r.next_restart = None
        if now - (r.running_since or now) >= RESET_AFTER and r.streak:
            r.streak = 0
            if r.problem == "crash-looping":
                r.problem = r.detail = None
        self._probe(spec, container, r, now)
        if r.probing is not None:
            self._probed.append((allocation_id, spec, r, address))
            return
        self._queue_running(allocation_id, spec, r, address, out)

    def _queue_running(
        self,
        allocation_id: str,
        spec: ContainerSpec,
        r: _Replica,
        address: str | None,
        out: list[dict[str, Any]],
    ) -> None:
        if r.ready:
            state = "ready"
            if r.problem == "crash-looping":
                # Ready again after its restarts: the problem is over (the restart count stays, and
                # so does the back-off streak until it has run `RESET_AFTER`).
                r.problem = None
            if r.problem is None:
                r.detail = None  # what an exit said (an OOM kill) is history now
        elif r.failures >= self._threshold(spec):
            state = "not-ready"
        else:
            state = "created"
        self._queue(allocation_id, r, state, address, out)

    def _create(
        self, allocation_id: str, want: _Want, r: _Replica, now: float, out: list[dict[str, Any]]
    ) -> None:
        spec = want.spec
        if r.retry_at is not None and now < r.retry_at:
            return
        try:
            container_id = self.runtime.create(allocation_id, spec, digest=want.digest, atoms=want.atoms)
        except RuntimeFailure as exc:
            r.attempts += 1
            r.retry_at = now + backoff(r.attempts - 1)
            r.problem, r.detail = exc.problem, exc.detail
            self._log(
                "error",
                "container.create-failed",
                allocation=allocation_id,
                problem=exc.problem,
                reason=exc.detail,
            )
            self._queue(allocation_id, r, "created", None, out)
            return
        self._log("info", "container.created", allocation=allocation_id, container=container_id)
        r.container_id = container_id
        r.problem = r.detail = None
        r.attempts, r.retry_at = 0, None
        if self._start(allocation_id, container_id, r, now):
            r.started(now, spec)
        address = self._address(spec, self._ports_of(container_id))
        self._queue(allocation_id, r, "created", address, out)

    def _ports_of(self, container_id: str) -> dict[int, int]:
        try:
            return next((dict(f.ports) for f in self.runtime.list() if f.id == container_id), {})
        except RuntimeFailure:
            return {}

    def _start(self, allocation_id: str, container_id: str, r: _Replica, now: float) -> bool:
        try:
            self.runtime.start(container_id)
        except RuntimeFailure as exc:
            r.attempts += 1
            r.retry_at = now + backoff(r.attempts - 1)
            r.problem, r.detail = "create-failed", exc.detail
            self._log("error", "container.start-failed", allocation=allocation_id, reason=exc.detail)
            return False
        r.attempts, r.retry_at = 0, None
        if r.problem == "create-failed":
            r.problem = r.detail = None
        return True

    def _exited(
        self,
        allocation_id: str,
        spec: ContainerSpec,
        container: Found,
        r: _Replica,
        now: float,
        address: str | None,
        out: list[dict[str, Any]],
    ) -> None:
        r.ready = False
        if r.next_restart is None:
            # Seen exited for the first time: when to start it again.
            if r.running_since is not None and now - r.running_since >= RESET_AFTER:
                r.streak = 0
            r.running_since = None
            r.exit_code = container.exit_code
            r.next_restart = now + backoff(r.streak)
            oom = " (killed for want of memory)" if container.oom_killed else ""
            if r.streak >= CRASH_LOOP:
                r.problem = "crash-looping"
                r.detail = (
                    f"exited with code {container.exit_code}{oom} after {r.streak} restarts;"
                    f" next start in {r.next_restart - now:g} s"
                )
            elif oom:
                r.detail = f"exited with code {container.exit_code}{oom}"
            self._log(
                "warning",
                "container.exited",
                allocation=allocation_id,
                exitCode=container.exit_code,
                oom=bool(oom),
            )
        if now >= r.next_restart:
            if self._start(allocation_id, container.id, r, now):
                r.restarts += 1
                r.streak += 1
                r.next_restart = None
                r.started(now, spec)
                self._log("info", "container.restarted", allocation=allocation_id, restarts=r.restarts)
                # Starting again, not ready yet; the problem (crash-looping) stays until it runs.
                self._queue(allocation_id, r, "created", address, out)
                return
            r.next_restart = r.retry_at
        self._queue(allocation_id, r, "exited", address, out)

    # -- readiness -----------------------------------------------------------------------------

    @staticmethod
    def _threshold(spec: ContainerSpec) -> int:
        return spec.readiness.failure_threshold if spec.readiness is not None else 1

    def _probe(
        self, spec: ContainerSpec, container: Found, r: _Replica, now: float, *, host: str | None = None
    ) -> None:
        """Start the readiness probe in the pool when it is due (none while one is under way); an
        httpGet calls `host` (None: where the runtime publishes ports)."""
        probe = spec.readiness
        if probe is None:
            r.ready = True
            return
        if r.probing is not None or now < r.next_probe:
            return
        r.next_probe = now + probe.period_seconds
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=PROBE_WORKERS, thread_name_prefix="bcd-probe")
        r.probing = self._pool.submit(self._check, spec, container, host or self.runtime.publish_address)

    def _check(self, spec: ContainerSpec, container: Found, host: str) -> bool:
        """One probe (in a pool thread), bounded by its timeout: an httpGet of the published host
        port (`http_get`: an overall deadline), or an exec in the container (podman exec under a
        subprocess timeout)."""
        probe = spec.readiness
        assert probe is not None
        try:
            if probe.http_path is not None and probe.http_port is not None:
                host_port = container.ports.get(probe.http_port)
                return host_port is not None and self.probe_http(
                    host, host_port, probe.http_path, float(probe.timeout_seconds)
                )
            return self.runtime.exec(container.id, probe.exec, float(probe.timeout_seconds)) == 0
        except RuntimeFailure as exc:
            self._log("warning", "probe.error", allocation=container.allocation_id, reason=exc.detail)
        except Exception as exc:  # a probe's failure, whatever it is, is a failed probe
            self._log("warning", "probe.error", allocation=container.allocation_id, reason=repr(exc))
        return False

    def _read_probes(self, out: list[dict[str, Any]]) -> None:
        """Wait (at most `PROBE_WAIT` in all) for this pass's probes, apply those that ended, and
        queue the states; one still under way is read by a later pass."""
        probed, self._probed = self._probed, []
        running = [r.probing for _, _, r, _ in probed if r.probing is not None]
        if running:
            wait(running, timeout=PROBE_WAIT)
        for allocation_id, spec, r, address in probed:
            future = r.probing
            if future is not None and future.done():
                r.probing = None
                probe = spec.readiness
                assert probe is not None
                if future.result():
                    r.failures = 0
                    r.ready = r.was_ready = True
                else:
                    r.failures += 1
                    if r.failures >= probe.failure_threshold:
                        r.ready = False
            self._queue_running(allocation_id, spec, r, address, out)

    # -- reports -------------------------------------------------------------------------------

    def _address(self, spec: ContainerSpec, ports: dict[int, int] | Any) -> str | None:
        if not spec.ports:
            return None
        host_port = ports.get(spec.ports[0])
        return None if host_port is None else f"{_host(self.advertise)}:{host_port}"

    def _queue(
        self, allocation_id: str, r: _Replica, state: str, address: str | None, out: list[dict[str, Any]]
    ) -> None:
        exit_code = r.exit_code if state == "exited" else None
        key = (state, r.problem, r.restarts, address, exit_code)
        if key == r.reported:
            return
        r.reported = key
        report: dict[str, Any] = {
            "kind": "ReplicaState",
            "allocationId": allocation_id,
            "state": state,
            "restarts": r.restarts,
        }
        if exit_code is not None:
            report["exitCode"] = max(-1, min(exit_code, 255))
        if r.problem is not None:
            report["problem"] = r.problem
        if r.detail is not None:
            report["detail"] = r.detail[:MAX_DETAIL]
        if address is not None:
            report["address"] = address
        self._log("info", "replica.state", allocation=allocation_id, state=state, problem=r.problem)
        out.append(report)

    def forget_reported(self, allocation_id: str | None = None) -> None:
        """Forget what was last reported of `allocation_id` (of every allocation when None), so the
        next pass sends its state again even though it did not change: the server may have
        forgotten it (a copy scaled down and added again, a component made again, a copy moved: a
        new spec generation) or never taken it (a dropped report)."""
        for key, r in [*self._replicas.items(), *self._watched.items()]:
            if allocation_id is None or key == allocation_id:
                r.reported = None

    # -- timing --------------------------------------------------------------------------------

    def due(self) -> float | None:
        """Seconds until the next thing a pass has to do (a probe, a restart, a create tried again),
        0 when one is due now; None when nothing is scheduled (no container to watch)."""
        times: list[float] = []
        for allocation_id, r in self._replicas.items():
            spec = self._specs.get(allocation_id)
            if spec is None:
                continue
            if r.next_restart is not None:
                times.append(r.next_restart)
            if r.retry_at is not None:
                times.append(r.retry_at)
            if r.probing is not None:
                times.append(self.clock() + 0.2)  # a probe under way: read it soon
            elif r.running_since is not None and spec.readiness is not None:
                times.append(r.next_probe)
            elif r.running_since is not None:
                # Nothing scheduled, but a crash is only seen by a pass.
                times.append(self.clock() + 5.0)
        for allocation_id, r in self._watched.items():
            spec = self._watched_specs.get(allocation_id)
            if spec is None:
                continue
            if r.probing is not None:
                times.append(self.clock() + 0.2)
            elif r.running_since is not None and spec.readiness is not None:
                times.append(r.next_probe)
            else:
                # Started and ended by Slurm: only a pass sees it come or go.
                times.append(self.clock() + WATCH_EVERY)
        if not times:
            return None
        return max(0.0, min(times) - self.clock())
