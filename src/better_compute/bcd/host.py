"""The host converger: the node's GPUs cut to their pool's MIG layout, and the MPS daemon for mps pools.

The mig-layout unit runs `domain.fleet.mig_plan.plan_node` over what the backend shows and carries the
plan out: destroy, then create at the plan's explicit placements. A GPU a bound allocation uses whole
(or a slot of) is left alone (the plan says `held`); one whose MIG instances it uses is re-cut around
them where its layout keeps them where they are, and left alone otherwise: a held instance is never
destroyed, nor its GPU reset (`mig_plan.spares`). A MIG mode change is asked for, then applied by a GPU
reset; a reset that fails leaves the change pending and the GPU `reboot-required`: it is logged and not
tried again until the daemon restarts (a reboot is an operator's decision). A refusal of the hardware on
one GPU is logged and that GPU tried again after a pause that doubles with each refusal (1 s to 5
minutes; at once when the spec's generation moves); the other GPUs go on.

A pass that changes a GPU stops the node's GPU clients (`bcd.gpu_clients`: DCGM, NVSM… the systemd
units that hold GPUs) before its first change and starts them again when it ends, whatever happened,
then regenerates the node's NVIDIA CDI spec; a pass with nothing to change touches none of them.
What the hardware (or a client that would not stop) refused is kept per GPU (`refused`: the action,
the reason, since when) for the inventory to report, until the GPU converges.

The gpu-sharing unit runs the MPS daemon for an mps pool's GPUs, each put in exclusive-process compute
mode first (NVIDIA's MPS docs); a node leaving its mps pool has the daemon stopped, and its GPUs' mode
set back to what it was, before any layout change or reset, since a GPU an MPS server holds cannot be
reset.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from better_compute.bcd.gpu import UNKNOWN_COMPUTE_MODE, Gpu, GpuBackend, GpuError, ResetFailed
from better_compute.bcd.gpu_clients import GpuClients, GpuClientsError
from better_compute.bcd.inventory import gpu_report
from better_compute.bcd.logs import Log
from better_compute.bcd.mps import CommandFailed, MpsGpu, MpsUnit
from better_compute.domain.catalog import model_for_product
from better_compute.domain.fleet.mig_plan import GpuPlan, converged, plan_node
from better_compute.wire.nodes import LAYOUT_REFUSAL_REASON_MAX, NodeSpecPublic

RETRY_FIRST = 1.0
RETRY_MAX = 300.0
"""A GPU whose change was refused is tried again after a pause that doubles with each refusal in a
row, from `RETRY_FIRST` to `RETRY_MAX` seconds, and at once when the spec's generation moves: each
try stops and starts the node's GPU clients, which must not be bounced every second for a GPU that
stays refused (the daemon's passes come a second apart while a GPU is behind)."""


@dataclass(frozen=True, slots=True)
class LayoutRefusal:
    """Why a GPU is not at its layout: the `action` refused (`repartition`, `enable-mig`,
    `disable-mig`, or `reset`: the reset that applies a pending MIG mode change), the refusal in
    the hardware's (or systemd's) words, and since when this action has been refused."""

    action: str
    reason: str
    since: datetime

    def report(self, gpu: str) -> dict[str, str]:
        """The inventory's `layoutRefused` entry for `gpu`."""
        return {"gpu": gpu, "action": self.action, "reason": self.reason, "since": self.since.isoformat()}


def bounded(reason: str) -> str:
    """A refusal's words, cut to what the server keeps (an NVML or systemctl message can be long)."""
    text = " ".join(reason.split())
    return text if len(text) <= LAYOUT_REFUSAL_REASON_MAX else text[: LAYOUT_REFUSAL_REASON_MAX - 1] + "…"


class HostConverger:
    """Brings `backend`'s GPUs to the spec's layouts; `mps` (None: no gpu-sharing unit) runs the MPS
    daemon for the GPUs of an mps pool."""

    def __init__(
        self,
        backend: GpuBackend,
        log: Log,
        mps: MpsUnit | None = None,
        clients: GpuClients | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.log = log
        self.mps = mps
        self.clients = clients
        self.clock = clock
        self.reboot_required: set[str] = set()
        self._mps_refused: dict[tuple[str, str], str] = {}
        """Why a GPU's compute mode could not be set (by GPU and mode): logged once per reason."""
        self.refused: dict[str, LayoutRefusal] = {}
        self.monotonic = monotonic
        self._retry: dict[str, tuple[float, float]] = {}
        """By GPU: when a refused GPU may be tried again, and the pause that led there."""
        self._generation: int | None = None
        self._mutated = False

    def converge(
        self,
        spec: NodeSpecPublic,
        held_gpus: Iterable[str],
        held_instances: Mapping[str, Collection[int]] | None = None,
    ) -> bool:
        """One pass; True when anything on the host changed, or a refusal appeared or cleared (the
        inventory is then sent again). `held_gpus` are held whole (or a slot of them);
        `held_instances` the GPU instances (GI ids, by GPU uuid) held, which no pass destroys or
        resets. The GPU clients stopped for the pass's changes are started again before it returns,
        whatever happened."""
        held = set(held_gpus)
        instances = {g: ids for g, ids in (held_instances or {}).items() if ids}
        reported = {(g, r.action) for g, r in self.refused.items()}
        if spec.generation != self._generation:
            self._generation, self._retry = spec.generation, {}  # new intent: try at once
        # Out of an mps pool, the MPS daemon lets go of its GPUs before any reset or layout change.
        changed = self.mps is not None and spec.sharing.mode != "mps" and self._converge_mps(spec)
        self._mutated = False
        try:
            changed = self._change_layouts(spec, held, instances) or self._mutated or changed
        finally:
            if self.clients is not None:
                self.clients.resume(self._mutated)
        self._forget_converged(spec)
        if {(g, r.action) for g, r in self.refused.items()} != reported:
            changed = True
        if self.mps is not None and spec.sharing.mode == "mps":
            changed = self._converge_mps(spec) or changed
        return changed

    def _converge_mps(self, spec: NodeSpecPublic) -> bool:
        """The MPS daemon serves the spec's GPUs while the node is in an mps pool, none otherwise.
        Each GPU is in exclusive-process before the daemon (re)starts on it, and one found back at
        `default` (a reboot, a driver reload) is set again and the daemon restarted; one that cannot
        be (MIG mode on, refused by NVML, its mode unreadable) is left out and logged
        (`mps.compute-mode-refused`). A daemon found stopped (`quit` through its pipe) is started
        again, after the modes are checked, and logged (`mps.daemon-inactive`). Those `bcd` put in
        exclusive-process go back to the mode they had once the daemon no longer serves them. True
        when anything changed."""
        unit = self.mps
        assert unit is not None
        if spec.sharing.mode != "mps" and not unit.path.exists() and not unit.exclusive.gpus():
            return False  # nothing to stop or give back: no NVML query on every pass
        gpus = {g.uuid: g for g in self.backend.list_gpus()}
        wanted = sorted(g.uuid for g in spec.gpus if g.uuid in gpus) if spec.sharing.mode == "mps" else []
        served: list[MpsGpu] = []
        reset = False
        for uuid in wanted:
            exclusive = self._exclusive_process(unit, gpus[uuid])
            if exclusive is not None:
                reset = reset or exclusive
                served.append(MpsGpu(uuid, gpus[uuid].memory_mib))
        for gpu, mode in [k for k in self._mps_refused if k[0] not in wanted and k[1] == "exclusive-process"]:
            del self._mps_refused[gpu, mode]
        try:
            changed = unit.converge(served, spec.sharing.replicas, restart=reset)
        except (CommandFailed, OSError, ValueError) as exc:
            # Tried again on the next pass; the GPUs keep their mode while the daemon may serve them.
            if unit.found_inactive:
                self.log.warning("mps.daemon-inactive", gpus=[g.uuid for g in served])
            self.log.error("mps.failed", gpus=[g.uuid for g in served], reason=str(exc))
            return reset
        if unit.found_inactive:
            self.log.warning("mps.daemon-inactive", gpus=[g.uuid for g in served])
        elif changed:
            self.log.info("mps.unit", gpus=[g.uuid for g in served], replicas=spec.sharing.replicas)
        restored = self._restore_compute_modes(unit, gpus, {g.uuid for g in served})
        return changed or reset or restored

    def _exclusive_process(self, unit: MpsUnit, gpu: Gpu) -> bool | None:
        """Put an MPS GPU in exclusive-process: True when its mode was set now, False when it already
        was, None when it cannot be (logged, and tried again on the next pass)."""
        if gpu.mig_current:
            # NVML refuses exclusive-process in MIG mode, and MPS here serves whole GPUs only (as
            # NVIDIA's device plugin, which refuses MPS on MIG devices).
            self._mps_refuse(gpu.uuid, "exclusive-process", "MIG mode is on: MPS serves whole GPUs only")
            return None
        if gpu.compute_mode == UNKNOWN_COMPUTE_MODE:
            # Not shown exclusive-process, so not served: the daemon's clients would share the GPU
            # with any process that opens it outside MPS. Not set either: NVML that will not read the
            # mode cannot show a change took, and setting it would restart the daemon on every pass.
            self._mps_refuse(
                gpu.uuid,
                "exclusive-process",
                "NVML would not give its compute mode, so it cannot be shown exclusive-process",
            )
            return None
        if gpu.compute_mode == "exclusive-process":
            self._mps_refused.pop((gpu.uuid, "exclusive-process"), None)
            return False
        earlier = unit.exclusive.modes().get(gpu.uuid)
        # First: a crash after the change still gives it back, in the mode it has now.
        unit.exclusive.add(gpu.uuid, gpu.compute_mode)
        try:
            self.backend.set_compute_mode(gpu.uuid, "exclusive-process")
        except GpuError as exc:
            if earlier is None:
                unit.exclusive.discard(gpu.uuid)
            else:
                unit.exclusive.add(gpu.uuid, earlier)
            self._mps_refuse(gpu.uuid, "exclusive-process", str(exc))
            return None
        self._mps_refused.pop((gpu.uuid, "exclusive-process"), None)
        self.log.info("mps.compute-mode", gpu=gpu.uuid, mode="exclusive-process")
        return True

    def _restore_compute_modes(self, unit: MpsUnit, gpus: Mapping[str, Gpu], served: set[str]) -> bool:
        """Give the GPUs `bcd` put in exclusive-process and the daemon no longer serves the mode they
        had before (`default` for a GPU an earlier `bcd` recorded without it); a GPU not on the node
        now, or whose mode cannot be read, keeps its record until it can be given back. One found in
        another mode than exclusive-process was changed since by someone else, and is left so."""
        changed = False
        for uuid, before in sorted(unit.exclusive.modes().items()):
            gpu = gpus.get(uuid)
            if uuid in served or gpu is None or gpu.compute_mode == UNKNOWN_COMPUTE_MODE:
                continue
            if gpu.compute_mode == "exclusive-process":
                try:
                    self.backend.set_compute_mode(uuid, before)
                except GpuError as exc:
                    self._mps_refuse(uuid, before, str(exc))
                    continue
                self.log.info("mps.compute-mode", gpu=uuid, mode=before)
                changed = True
            self._mps_refused.pop((uuid, before), None)
            unit.exclusive.discard(uuid)
        return changed

    def _mps_refuse(self, gpu: str, mode: str, reason: str) -> None:
        if self._mps_refused.get((gpu, mode)) != reason:
            self._mps_refused[gpu, mode] = reason
            self.log.warning("mps.compute-mode-refused", gpu=gpu, mode=mode, reason=reason)

    def unconverged(self, spec: NodeSpecPublic) -> list[str]:
        """The GPUs not at the spec's layout yet (held ones included: a hold only delays them; and
        a MIG mode change still waiting for its reset), so the daemon reports the spec's generation
        observed only once this is empty. The rule is the control plane's own
        (`domain.fleet.mig_plan.converged`): what this calls converged is what it schedules again."""
        layout_of = {g.uuid: g.mig_layout for g in spec.gpus}
        behind = [
            g.uuid
            for g in self.backend.list_gpus()
            if not converged(gpu_report(g), model_for_product(g.name), layout_of.get(g.uuid))
        ]
        return sorted(behind)

    def _change_layouts(
        self, spec: NodeSpecPublic, held: set[str], instances: Mapping[str, Collection[int]]
    ) -> bool:
        """Reset what waits for a reset, then carry out each GPU's plan; True when a GPU changed."""
        changed = self._apply_pending(self.backend.list_gpus(), held | set(instances))
        layout_of = {g.uuid: g.mig_layout for g in spec.gpus if g.mig_layout is not None}
        for _ in range(2):  # a mode change applied by a reset is followed by the repartition
            gpus = self.backend.list_gpus()
            pairs = [(gpu_report(g), m) for g in gpus if (m := model_for_product(g.name)) is not None]
            # A GPU NVML did not read whole is left as it is: no change rests on half a reading.
            unread = {g.uuid for g in gpus if g.partial}
            plans = [
                p
                for p in plan_node(pairs, layout_of, held, instances)
                if p.gpu_uuid not in self.reboot_required | unread and not self._pausing(p.gpu_uuid)
            ]
            done = [
                self._carry_out(p, gpus) for p in plans if p.action not in ("keep", "held", "not-mig-capable")
            ]
            if not any(done):
                break
            changed = True
        return changed

    def _forget_converged(self, spec: NodeSpecPublic) -> None:
        """A refusal holds until its GPU is at the spec's layout (or gone from the node)."""
        if self.refused:
            behind = set(self.unconverged(spec))
            for gpu in [g for g in self.refused if g not in behind]:
                del self.refused[gpu]
                self.log.info("host.refusal-cleared", gpu=gpu)

    def _refuse(self, gpu: str, action: str, reason: str) -> None:
        earlier = self.refused.get(gpu)
        since = earlier.since if earlier is not None and earlier.action == action else self.clock()
        self.refused[gpu] = LayoutRefusal(action, bounded(reason), since)
        _, pause = self._retry.get(gpu, (0.0, RETRY_FIRST / 2))
        pause = min(pause * 2, RETRY_MAX)
        self._retry[gpu] = (self.monotonic() + pause, pause)

    def _pausing(self, gpu: str) -> bool:
        """Whether a refused GPU waits before it is tried again (`RETRY_FIRST`)."""
        until = self._retry.get(gpu)
        return until is not None and self.monotonic() < until[0]

    def _stop_clients(self) -> None:
        """Before a GPU is changed: the GPU clients stopped (once a pass); `GpuClientsError` when
        one would not stop, and the change must not be tried."""
        if self.clients is not None:
            self.clients.stop()

    def _apply_pending(self, gpus: Sequence[Gpu], held: set[str]) -> bool:
        """Reset idle GPUs whose MIG mode change is still pending (asked for by an earlier pass)."""
        changed = False
        for g in gpus:
            waits = g.uuid in held or g.uuid in self.reboot_required or self._pausing(g.uuid)
            if g.mig_current != g.mig_pending and not waits:
                changed = self._reset(g.uuid) or changed
        return changed

    def _reset(self, gpu: str) -> bool:
        try:
            self._stop_clients()
            self.backend.reset_gpu(gpu)
        except ResetFailed as exc:
            self.reboot_required.add(gpu)
            self.log.error("host.reboot-required", gpu=gpu, reason=str(exc))
            return False
        except (GpuError, GpuClientsError) as exc:
            self._refuse(gpu, "reset", str(exc))
            self.log.warning("host.reset-refused", gpu=gpu, reason=str(exc))
            return False
        self._mutated = True
        self._retry.pop(gpu, None)
        self.log.info("host.reset", gpu=gpu)
        return True

    def _carry_out(self, plan: GpuPlan, gpus: Sequence[Gpu]) -> bool:
        """Carry out one GPU's plan; True when it changed the GPU."""
        gpu = next(g for g in gpus if g.uuid == plan.gpu_uuid)
        try:
            self._stop_clients()
            if plan.action == "repartition":
                for gi_id in plan.destroy:
                    self.backend.destroy_instance(gpu.uuid, gi_id)
                    self._mutated = True
                for inst in plan.create:
                    self.backend.create_instance(gpu.uuid, inst.profile, inst.start)
                    self._mutated = True
                self.log.info(
                    "host.repartition",
                    gpu=gpu.uuid,
                    destroyed=list(plan.destroy),
                    created=[f"{i.profile}@{i.start}" for i in plan.create],
                )
                self._retry.pop(gpu.uuid, None)
                return True
            enable = plan.action == "enable-mig"
            if not enable:
                for gi in gpu.instances:
                    self.backend.destroy_instance(gpu.uuid, gi.gi_id)
                    self._mutated = True
            waits = self.backend.set_mig_mode(gpu.uuid, enable)
            self._mutated = True
            self.log.info("host.mig-mode", gpu=gpu.uuid, enabled=enable, waitsForReset=waits)
            if waits:
                self._reset(gpu.uuid)
            else:
                self._retry.pop(gpu.uuid, None)
            return True
        except (GpuError, GpuClientsError) as exc:
            self._refuse(gpu.uuid, plan.action, str(exc))
            self.log.warning("host.refused", gpu=gpu.uuid, action=plan.action, reason=str(exc))
            return False
