"""`bcd run`: the node daemon's loop. Read the node's spec (a signed long poll), converge the host
and the devices, report, and wait for the next generation.

Every report goes through the on-disk queue (`bcd.queue`) first and leaves it only once the server
accepted it, so what a pass decided reaches the server even across a crash or an outage. A pass
reports `ObservedGeneration` once every assignment of the spec got its devices or a final answer;
until then the next pass comes after `retry` seconds instead of a long poll. With a container
runtime (`bcd.runtime`), each pass also runs the containers of the bound assignments, and a settled
spec's long poll waits no longer than the next probe or restart is due, then passes over the
containers again with the spec it has.

SIGTERM (and SIGINT) stop the loop: a pass under way finishes, a long poll or a pause is cut short,
and `run` returns 0. A loop run in a thread (`serve`'s simulated nodes) takes no signals; `stop`
ends it instead: a pause is cut short at once, a long poll when the server answers it (a server
that is shutting down answers its long polls at once).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from better_compute.bcd import node_tree
from better_compute.bcd.agent import Agent
from better_compute.bcd.containers import RuntimeFailure
from better_compute.bcd.devices import DevicesConverger, device_index, slots_of
from better_compute.bcd.fake import FakeNode
from better_compute.bcd.gpu import Gpu, GpuBackend, GpuError
from better_compute.bcd.gpu_clients import RECORD_FILE, GpuClients, Systemd
from better_compute.bcd.host import HostConverger
from better_compute.bcd.identity import Identity
from better_compute.bcd.inventory import report_json, report_of
from better_compute.bcd.logs import Log
from better_compute.bcd.mps import MpsPaths, MpsUnit, Runner
from better_compute.bcd.queue import ReportQueue
from better_compute.bcd.runtime import ContainerRuntime, RuntimeConverger
from better_compute.bcd.scrub import Scrubber, ScrubState
from better_compute.bcd.slurm_gres_conf import SlurmGresConf
from better_compute.client import (
    Compute,
    ComputeError,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
)
from better_compute.domain.catalog import model_for_product
from better_compute.domain.fleet.pools import PoolSharing, SharingMode
from better_compute.domain.fleet.slurm_gres import report_gres
from better_compute.domain.fleet.slurm_reconfigure import Unchanged
from better_compute.wire.nodes import NodeSpecPublic

QUEUE_DIR = "queue"
NODE_ROOT = "node-root"
"""Where a simulated node (the fake backend) keeps its simulated driver tree, under its state directory."""
ENV_DIR = "env"
SCRUB_FILE = "scrub.json"
MIN_POLL = 0.1
"""The shortest long poll while containers have something due (a pass is under way for it anyway)."""

_SLOT_MODES: dict[str, SharingMode] = {"timeslice": "timeslice", "mps": "mps"}
"""The sharing modes whose GPUs give slots (Slurm shards)."""


def _model_id(product: str) -> str | None:
    """The catalog model id of a product NVML reports, as the server finds it."""
    model = model_for_product(product)
    return model.id if model is not None else None


class _Stopped(BaseException):
    """Raised out of a long poll or a pause when the daemon is told to stop (a BaseException, so no
    `except Exception` on the way swallows it)."""


class LoggingRunner:
    """The runner under `--nvml fake`: logs each command instead of running it (no systemd there). A
    unit is active once a `start` or `restart` of it was logged, until a `stop` or `--now` one."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.commands: list[list[str]] = []
        self._active: set[str] = set()

    def run(self, argv: Sequence[str]) -> None:
        self.commands.append(list(argv))
        self.log.info("mps.command", argv=list(argv), simulated=True)
        verb, units = (argv[1], [a for a in argv[2:] if not a.startswith("-")]) if len(argv) > 1 else ("", [])
        if verb in ("start", "restart"):
            self._active.update(units)
        elif verb == "stop" or (verb == "disable" and "--now" in argv):
            self._active.difference_update(units)

    def active(self, unit: str) -> bool:
        return unit in self._active


class Daemon:
    """One node's loop, over `backend`, signing as `identity` through `compute`."""

    def __init__(
        self,
        identity: Identity,
        backend: GpuBackend,
        compute: Compute,
        *,
        cdi_root: Path,
        log: Log,
        mps_runner: Runner | None = None,
        unit_dir: Path | None = None,
        systemd: Systemd | None = None,
        gpu_clients: Sequence[str] = (),
        cdi_refresh: str | None = None,
        wait: float = 30.0,
        retry: float = 1.0,
        node_root: Path | None = None,
        runtime: ContainerRuntime | None = None,
        advertise: str | None = None,
        stop_timeout: int = 10,
        agent: Agent | None = None,
        device_nodes: bool = False,
        slurm_gres: SlurmGresConf | None = None,
    ) -> None:
        self.identity = identity
        self.node = identity.node
        self.backend = backend
        self.compute = compute
        self.log = log
        self.agent = agent
        """The listener the server reads container logs through (`--listen`; bcd.agent), or None."""
        self.wait = wait
        self.retry = retry
        state = identity.state_dir
        self.queue = ReportQueue(state / QUEUE_DIR)
        scrubber = Scrubber(backend, ScrubState(state / SCRUB_FILE))
        # The node's driver tree (`--node-root`): `/` on a GPU node; a simulated node, with no driver
        # on the machine, gets a simulated one under its state directory unless told otherwise.
        if node_root is None and isinstance(backend, FakeNode):
            tree = node_tree.simulated(state / NODE_ROOT)
        else:
            tree = node_tree.NodeTree(node_root or Path("/"))
        if device_nodes and not (node_root is None and isinstance(backend, FakeNode)):
            # Device nodes are the simulated driver's to make, in its own tree: never on a real
            # node's (its driver makes them) nor in a tree someone else laid out.
            raise ValueError("device_nodes is for a simulated node (the fake backend, no node_root)")
        self.tree = tree
        self.device_nodes = device_nodes
        self.devices = DevicesConverger(
            cdi_root, state / ENV_DIR, MpsPaths.under(state / "mps"), scrubber, log, tree, identity.node
        )
        mps = (
            MpsUnit(unit_dir or state / "systemd", MpsPaths.under(state / "mps"), mps_runner)
            if mps_runner
            else None
        )
        # The GPU clients a layout change stops and starts again, and the CDI refresh after it
        # (bcd.gpu_clients); without systemd (serve's simulated nodes), none.
        clients = (
            GpuClients(gpu_clients, systemd, state / RECORD_FILE, log, cdi_refresh)
            if systemd is not None
            else None
        )
        self.host = HostConverger(backend, log, mps, clients)
        # The containers of the assignments that carry one (`--runtime`); None: CDI files only.
        self.runtime = (
            RuntimeConverger(runtime, self.node, advertise=advertise, log=log, stop_timeout=stop_timeout)
            if runtime is not None
            else None
        )
        self._spec: NodeSpecPublic | None = None
        self.generation: int | None = None
        self.observed: int | None = None
        self.stopping = False
        self._idle = False
        self._unlisted: set[tuple[str, str]] = set()
        self._inventoried: list[Any] | None = None
        """The GPUs as the last inventory queued reported them."""
        self._unreadable: set[str] = set()
        self._woken = threading.Event()
        self.slurm_gres = slurm_gres
        """The node's gres.conf kept to its atoms (`--slurm-gres-conf`; bcd.slurm_gres_conf), or None."""

    # -- stopping ------------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop(signal.Signals(signum).name)
        if self._idle:
            raise _Stopped

    def stop(self, why: str = "stop") -> None:
        """Ask the loop to end after the pass under way (any thread may call it)."""
        self.stopping = True
        self._woken.set()
        self.log.info("bcd.stopping", signal=why)

    def _pause(self, seconds: float) -> None:
        self._idle = True
        try:
            if not self.stopping:
                self._woken.wait(seconds)
        finally:
            self._idle = False

    # -- reports -------------------------------------------------------------------------------

    def enqueue(self, report: dict[str, Any]) -> None:
        entry = self.queue.put(report)
        self.log.info(
            "report.queued",
            kind=report["kind"],
            reportId=entry.report_id,
            allocation=report.get("allocationId"),
        )

    def flush(self) -> bool:
        """Send the queue, oldest first; False when the server could not be reached (the rest stays)."""
        for entry in self.queue.pending():
            try:
                answer = self.compute.nodes.report(self.node, entry.report, report_id=entry.report_id)
            except (TransportError, UnauthenticatedError, UnavailableError) as exc:
                # Unreachable (the server, or its database), or refused for the clock or the key:
                # kept, to be sent again.
                self.log.warning(
                    "report.unsent", kind=entry.report.get("kind"), reportId=entry.report_id, reason=str(exc)
                )
                return False
            except ComputeError as exc:
                # The server read it and will never take it (an allocation that is gone, say).
                self.log.error(
                    "report.dropped", kind=entry.report.get("kind"), reportId=entry.report_id, reason=str(exc)
                )
                # A refused ReplicaState stays cached as said: the server refuses it for the spec it
                # has (an allocation not on this node), and a new spec's generation sends every
                # state again; sending it each pass meanwhile would only be refused each pass.
                self.queue.done(entry)
                continue
            self.queue.done(entry)
            self.log.info(
                "report.sent",
                kind=answer.kind,
                reportId=entry.report_id,
                sequence=answer.sequence,
                duplicate=answer.duplicate,
            )
        return True

    def inventory(self, gpus: Sequence[Gpu] | None = None) -> dict[str, Any]:
        """The `Inventory` report of the GPUs as they are now (`gpus`, read already, or read now).
        Its `observedGeneration` is the spec generation this daemon converged since it started, 0
        before it has converged one: what a daemon converged before it stopped says nothing of the
        GPUs now (a reboot may have brought them back MIG-off or at another layout while the spec's
        generation stayed where it was), and the server applies a layout change, and releases its
        holds, on the generation a node says it observed."""
        observed = self.observed if self.observed is not None else 0
        gpus = self.backend.list_gpus() if gpus is None else gpus
        self._log_unlisted(gpus)
        report = report_json(report_of(self.node, gpus, observed_generation=observed))["report"]
        self._inventoried = report["gpus"]
        if self.host.reboot_required:
            self.log.error("host.reboot-required", gpus=sorted(self.host.reboot_required))
            report["rebootRequired"] = sorted(self.host.reboot_required)
        listed = {g["uuid"] for g in report["gpus"]}
        refused = [r.report(g) for g, r in sorted(self.host.refused.items()) if g in listed]
        if refused:
            # What the hardware refused, per GPU, until it converges (docs/bcd.md#layout-changes).
            report["layoutRefused"] = refused
        return dict(report)

    def _log_unlisted(self, gpus: Sequence[Gpu]) -> None:
        """Log what a reading of the GPUs left out, each once while it lasts: the compute instances
        tied to no MIG device (`gpu.unlisted`, by GPU) and the GPUs NVML counts but would not name
        (`gpu.unreadable`, the backend's). An inventory never names them, so the log is where an
        operator learns of them."""
        unlisted = {(g.uuid, reason) for g in gpus for reason in g.unlisted}
        unreadable: set[str] = set(getattr(self.backend, "unreadable", ()))
        for gpu, reason in sorted(unlisted - self._unlisted):
            self.log.warning("gpu.unlisted", gpu=gpu, reason=reason)
        for reason in sorted(unreadable - self._unreadable):
            self.log.warning("gpu.unreadable", reason=reason)
        self._unlisted, self._unreadable = unlisted, unreadable

    def starting(self) -> None:
        """Queue what a daemon sends as it starts: its inventory, which says it has observed no
        generation yet (`inventory`). The `Inventory` and `ObservedGeneration` reports the process
        before it left unsent are whole-state claims about GPUs that may have changed since (a
        reboot), which this inventory supersedes: they leave the queue unsent, so the server never
        applies a generation on the word of a daemon that is gone; so do its `Agent` reports, whose
        listener and token died with it. The rest stays, in order. With `--listen`, this process's own
        `Agent` report follows the inventory (bcd.agent).
        GPU clients a daemon killed mid-change left stopped are started first (bcd.gpu_clients)."""
        if self.host.clients is not None:
            self.host.clients.recover()
        for entry in self.queue.pending():
            kind = entry.report.get("kind")
            # An `Agent` report of the process before names a listener and a token that died with it.
            if kind in ("Inventory", "ObservedGeneration", "Agent"):
                self.queue.done(entry)
                self.log.info("report.superseded", kind=kind, reportId=entry.report_id)
        self.enqueue(self.inventory())
        if self.agent is not None:
            self.enqueue(self.agent.report())

    # -- converging ----------------------------------------------------------------------------

    def converge(self, spec: NodeSpecPublic) -> bool:
        """One pass over `spec`; True when it is converged (and its generation reported).

        Containers go first: those of allocations no longer assigned (and strays) are removed
        before anything else, since a device must not be released, scrubbed, re-cut or handed to
        another tenant while a process still holds it. One whose removal failed `lingers`: its
        allocation is held as if still assigned (not released, its atoms not scrubbed nor handed
        over, its GPU not re-cut) and the pass is not settled, so a later pass tries again."""
        if self.runtime is not None and spec.generation != self.generation:
            # A new generation: what the server knew of a replica may be gone (a copy scaled down and
            # added again, a component made again, a copy moved), so every state is sent once more.
            self.runtime.forget_reported()
        lingering = self._prune(spec)
        held, instances = self._held(spec, lingering)
        changed = self.host.converge(spec, held, instances)
        behind = self.host.unconverged(spec)
        if behind and self.observed == spec.generation:
            # It had converged this generation and is not at it now (the GPUs changed under it):
            # no longer observed, and the inventory says so.
            self.observed = None
            changed = True
        gpus = self.backend.list_gpus()
        self._log_unlisted(gpus)
        if self.device_nodes:
            self._make_device_nodes(gpus)
        if changed or report_json(report_of(self.node, gpus))["report"]["gpus"] != self._inventoried:
            # The GPUs read otherwise than the last inventory said, though nothing here changed them
            # (a GPU turned unhealthy, or its MIG state unreadable, or readable again): the server
            # derives what can be booked from the inventory, so it hears of it now.
            self.enqueue(self.inventory(gpus))
        done = self.devices.converge(spec, gpus, lingering=lingering)
        if self.slurm_gres is not None and not behind:
            # Lines made from a half-applied layout would tell Slurm of atoms that are not there.
            self._converge_slurm_gres(spec, gpus)
        for report in done.reports:
            self.enqueue(report)
        self._spec = spec
        self._run_containers(spec, pruned=True)
        if lingering:
            self.log.warning("container.lingering", allocations=sorted(lingering))
        if behind:
            # Not observed: the server releases a layout change's holds on that report, and a GPU
            # part-way (refused by the hardware, or held) must not take work meanwhile.
            self.log.warning("host.unconverged", gpus=behind, generation=spec.generation)
        elif done.settled and not lingering and self.observed != spec.generation:
            self.enqueue({"kind": "ObservedGeneration", "generation": spec.generation})
            self.observed = spec.generation
        self.generation = spec.generation
        # A GPU waiting for a reboot will not converge by trying again: long-poll meanwhile.
        return done.settled and not lingering and all(g in self.host.reboot_required for g in behind)

    def _converge_slurm_gres(self, spec: NodeSpecPublic, gpus: Sequence[Gpu]) -> None:
        """The node's gres.conf from the atoms it has now, and Slurm told once no job holds what changes;
        Slurm unreachable or refusing is logged and tried again on the next pass."""
        assert self.slurm_gres is not None
        if any(gpu.partial for gpu in gpus):
            return  # a GPU whose MIG state was not read whole: no word on what it holds
        mode = _SLOT_MODES.get(spec.sharing.mode)
        sharing = None
        if mode is not None:
            sharing = PoolSharing(pool_id="node", mode=mode, replicas=spec.sharing.replicas)
        try:
            wanted = report_gres(report_of(self.node, gpus), sharing, _model_id)
            steps = self.slurm_gres.converge(wanted)
        except Exception as exc:
            self.log.error("slurm.gres-failed", error=str(exc)[:500])
            return
        if steps != (Unchanged(steps[0].node),):
            self.log.info("slurm.gres", node=self.node, steps=[type(step).__name__ for step in steps])

    def _make_device_nodes(self, gpus: Sequence[Gpu]) -> None:
        """The simulated driver's part of a pass: the device nodes of the GPUs and instances there
        are now (`node_tree.make_device_nodes`), before the devices' pass writes specs naming them."""
        try:
            made = node_tree.make_device_nodes(self.tree, gpus)
        except (OSError, node_tree.Unresolvable) as exc:
            self.log.error("node.device-nodes", reason=str(exc))
            return
        if made:
            self.log.info("node.device-nodes", made=made)

    def _held(
        self, spec: NodeSpecPublic, lingering: Mapping[str, Sequence[str]] | None = None
    ) -> tuple[set[str], dict[str, set[int]]]:
        """What an allocation of the spec uses, handed over yet or not (one not bound yet is about
        to be), and what a lingering container holds (`lingering`: {allocation: atoms} of the
        containers a pass could not remove): the GPUs it holds whole or a slot of, which the
        mig-layout unit leaves alone, and the GPU instances (GI ids, by GPU) of the MIG atoms it
        holds, which it never destroys (it re-cuts the rest of their GPU only around them:
        `mig_plan.spares`)."""
        index = device_index(self.backend.list_gpus(), slots_of(spec))
        whole: set[str] = set()
        instances: dict[str, set[int]] = {}
        atoms = [atom for a in spec.assignments for atom in a.atoms]
        atoms += [atom for held in (lingering or {}).values() for atom in held]
        for device in (index[atom] for atom in atoms if atom in index):
            if device.gi_id is None:
                whole.add(device.gpu_uuid)
            else:
                instances.setdefault(device.gpu_uuid, set()).add(device.gi_id)
        return whole, instances

    def _prune(self, spec: NodeSpecPublic) -> dict[str, tuple[str, ...]]:
        """The first step of a pass: remove the containers that are no allocation's current one
        (`RuntimeConverger.prune`), their `removed` reports queued before anything the devices'
        pass says; what lingers ({allocation: atoms})."""
        if self.runtime is None:
            return {}
        try:
            pruned = self.runtime.prune(spec.assignments, self.devices.bound())
        except RuntimeFailure as exc:
            self.log.error("runtime.failed", reason=exc.detail)
            return {}
        for report in pruned.reports:
            self.enqueue(report)
        return pruned.lingering

    def _run_containers(self, spec: NodeSpecPublic, *, pruned: bool = False) -> None:
        """The runtime converger's pass over the spec's bound container assignments (after the
        devices', so a container is only made for a CDI device that exists)."""
        if self.runtime is None:
            return
        try:
            reports = self.runtime.converge(spec.assignments, self.devices.bound(), pruned=pruned)
        except RuntimeFailure as exc:
            # What the runtime said (a podman that answered nonsense, or not at all) costs this
            # pass over the containers, never the daemon.
            self.log.error("runtime.failed", reason=exc.detail)
            return
        for report in reports:
            self.enqueue(report)

    def _poll_wait(self) -> float:
        """How long a long poll may wait: `wait`, or less when the runtime converger has a probe, a
        restart or a create due sooner (a settled spec must not stop the containers' passes)."""
        due = self.runtime.due() if self.runtime is not None else None
        return self.wait if due is None else max(MIN_POLL, min(self.wait, due))

    def step(self, settled: bool) -> bool:
        """Send what is queued, read the spec (waiting for a new generation once settled), converge
        it and send again; returns whether the spec is converged."""
        reachable = self.flush()
        waiting = settled and reachable and self.generation is not None
        self._idle = True
        try:
            if self.stopping:
                raise _Stopped
            spec = self.compute.nodes.spec(
                self.node,
                after=self.generation if waiting else None,
                wait=self._poll_wait() if waiting else None,
            )
        finally:
            self._idle = False
        if waiting and spec.generation == self.generation and settled:
            # The spec is as it was: the containers still get their pass (probes, restarts).
            if self._spec is not None and self.runtime is not None:
                self._run_containers(self._spec)
                self.flush()
            return True
        settled = self.converge(spec)
        self.flush()
        return settled

    def run(self, *, signals: bool = True) -> int:
        """The loop, until SIGTERM or SIGINT (with `signals`, in the main thread only) or `stop`;
        returns the exit status (0)."""
        previous = (
            {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)} if signals else {}
        )
        self.log.info("bcd.start", queued=len(self.queue))
        settled = False
        try:
            self.starting()
            while not self.stopping:
                try:
                    settled = self.step(settled)
                    if not settled:
                        self._pause(self.retry)
                except ComputeError as exc:
                    self.log.warning("spec.unread", reason=str(exc))
                    settled = False
                    self._pause(self.retry)
                except GpuError as exc:
                    self.log.error("host.error", reason=str(exc))
                    settled = False
                    self._pause(self.retry)
        except _Stopped:
            pass
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        self.log.info("bcd.stopped", queued=len(self.queue))
        return 0
