"""The host converger: the node's GPUs cut to their pool's MIG layout, and the MPS daemon for mps pools.

The mig-layout unit runs `domain.fleet.mig_plan.plan_node` over what the backend shows and carries the
plan out: destroy, then create at the plan's explicit placements. A GPU a bound allocation uses whole
(or a slot of) is left alone (the plan says `held`); one whose MIG instances it uses is re-cut around
them where its layout keeps them where they are, and left alone otherwise: a held instance is never
destroyed, nor its GPU reset (`mig_plan.spares`). A MIG mode change is asked for, then applied by a GPU
reset; a reset that fails leaves the change pending and the GPU `reboot-required`: it is logged and not
tried again until the daemon restarts (a reboot is an operator's decision). A refusal of the hardware on
one GPU is logged and that GPU tried again on the next pass; the other GPUs go on.

The gpu-sharing unit runs the MPS daemon for an mps pool's GPUs, each put in exclusive-process compute
mode first (NVIDIA's MPS docs); a node leaving its mps pool has the daemon stopped, and its GPUs' mode
set back, before any layout change or reset, since a GPU an MPS server holds cannot be reset.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from better_compute.bcd.gpu import Gpu, GpuBackend, GpuError, ResetFailed
from better_compute.bcd.inventory import gpu_report
from better_compute.bcd.logs import Log
from better_compute.bcd.mps import CommandFailed, MpsGpu, MpsUnit
from better_compute.domain.catalog import model_for_product
from better_compute.domain.fleet.mig_plan import GpuPlan, converged, plan_node
from better_compute.wire.nodes import NodeSpecPublic


class HostConverger:
    """Brings `backend`'s GPUs to the spec's layouts; `mps` (None: no gpu-sharing unit) runs the MPS
    daemon for the GPUs of an mps pool."""

    def __init__(self, backend: GpuBackend, log: Log, mps: MpsUnit | None = None) -> None:
        self.backend = backend
        self.log = log
        self.mps = mps
        self.reboot_required: set[str] = set()
        self._mps_refused: dict[tuple[str, str], str] = {}
        """Why a GPU's compute mode could not be set (by GPU and mode): logged once per reason."""

    def converge(
        self,
        spec: NodeSpecPublic,
        held_gpus: Iterable[str],
        held_instances: Mapping[str, Collection[int]] | None = None,
    ) -> bool:
        """One pass; True when anything on the host changed (the inventory is then sent again).
        `held_gpus` are held whole (or a slot of them); `held_instances` the GPU instances (GI ids, by
        GPU uuid) held, which no pass destroys or resets."""
        held = set(held_gpus)
        instances = {g: ids for g, ids in (held_instances or {}).items() if ids}
        # Out of an mps pool, the MPS daemon lets go of its GPUs before any reset or layout change.
        changed = self.mps is not None and spec.sharing.mode != "mps" and self._converge_mps(spec)
        changed = self._apply_pending(self.backend.list_gpus(), held | set(instances)) or changed
        layout_of = {g.uuid: g.mig_layout for g in spec.gpus if g.mig_layout is not None}
        for _ in range(2):  # a mode change applied by a reset is followed by the repartition
            gpus = self.backend.list_gpus()
            pairs = [(gpu_report(g), m) for g in gpus if (m := model_for_product(g.name)) is not None]
            plans = [
                p
                for p in plan_node(pairs, layout_of, held, instances)
                if p.gpu_uuid not in self.reboot_required
            ]
            done = [
                self._carry_out(p, gpus) for p in plans if p.action not in ("keep", "held", "not-mig-capable")
            ]
            if not any(done):
                break
            changed = True
        if self.mps is not None and spec.sharing.mode == "mps":
            changed = self._converge_mps(spec) or changed
        return changed

    def _converge_mps(self, spec: NodeSpecPublic) -> bool:
        """The MPS daemon serves the spec's GPUs while the node is in an mps pool, none otherwise.
        Each GPU is in exclusive-process before the daemon (re)starts on it, and one found back at
        `default` (a reboot, a driver reload) is set again and the daemon restarted; one that cannot
        be (MIG mode on, refused by NVML) is left out and logged (`mps.compute-mode-refused`). Those
        `bcd` put in exclusive-process go back to `default` once the daemon no longer serves them.
        True when anything changed."""
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
        for gpu, mode in [k for k in self._mps_refused if k[0] not in wanted and k[1] != "default"]:
            del self._mps_refused[gpu, mode]
        try:
            changed = unit.converge(served, spec.sharing.replicas, restart=reset)
        except (CommandFailed, OSError, ValueError) as exc:
            # Tried again on the next pass; the GPUs keep their mode while the daemon may serve them.
            self.log.error("mps.failed", gpus=[g.uuid for g in served], reason=str(exc))
            return reset
        if changed:
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
        if gpu.compute_mode == "exclusive-process":
            self._mps_refused.pop((gpu.uuid, "exclusive-process"), None)
            return False
        added = unit.exclusive.add(gpu.uuid)  # first: a crash after the change still gives it back
        try:
            self.backend.set_compute_mode(gpu.uuid, "exclusive-process")
        except GpuError as exc:
            if added:
                unit.exclusive.discard(gpu.uuid)
            self._mps_refuse(gpu.uuid, "exclusive-process", str(exc))
            return None
        self._mps_refused.pop((gpu.uuid, "exclusive-process"), None)
        self.log.info("mps.compute-mode", gpu=gpu.uuid, mode="exclusive-process")
        return True

    def _restore_compute_modes(self, unit: MpsUnit, gpus: Mapping[str, Gpu], served: set[str]) -> bool:
        """Set the GPUs `bcd` put in exclusive-process and the daemon no longer serves back to
        `default`; a GPU not on the node now keeps its record until it is back."""
        changed = False
        for uuid in sorted(unit.exclusive.gpus() - served):
            gpu = gpus.get(uuid)
            if gpu is None:
                continue
            if gpu.compute_mode == "exclusive-process":
                try:
                    self.backend.set_compute_mode(uuid, "default")
                except GpuError as exc:
                    self._mps_refuse(uuid, "default", str(exc))
                    continue
                self.log.info("mps.compute-mode", gpu=uuid, mode="default")
                changed = True
            self._mps_refused.pop((uuid, "default"), None)
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

    def _apply_pending(self, gpus: Sequence[Gpu], held: set[str]) -> bool:
        """Reset idle GPUs whose MIG mode change is still pending (asked for by an earlier pass)."""
        changed = False
        for g in gpus:
            if g.mig_current != g.mig_pending and g.uuid not in held and g.uuid not in self.reboot_required:
                changed = self._reset(g.uuid) or changed
        return changed

    def _reset(self, gpu: str) -> bool:
        try:
            self.backend.reset_gpu(gpu)
        except ResetFailed as exc:
            self.reboot_required.add(gpu)
            self.log.error("host.reboot-required", gpu=gpu, reason=str(exc))
            return False
        except GpuError as exc:
            self.log.warning("host.reset-refused", gpu=gpu, reason=str(exc))
            return False
        self.log.info("host.reset", gpu=gpu)
        return True

    def _carry_out(self, plan: GpuPlan, gpus: Sequence[Gpu]) -> bool:
        """Carry out one GPU's plan; True when it changed the GPU."""
        gpu = next(g for g in gpus if g.uuid == plan.gpu_uuid)
        try:
            if plan.action == "repartition":
                for gi_id in plan.destroy:
                    self.backend.destroy_instance(gpu.uuid, gi_id)
                for inst in plan.create:
                    self.backend.create_instance(gpu.uuid, inst.profile, inst.start)
                self.log.info(
                    "host.repartition",
                    gpu=gpu.uuid,
                    destroyed=list(plan.destroy),
                    created=[f"{i.profile}@{i.start}" for i in plan.create],
                )
                return True
            enable = plan.action == "enable-mig"
            if not enable:
                for gi in gpu.instances:
                    self.backend.destroy_instance(gpu.uuid, gi.gi_id)
            waits = self.backend.set_mig_mode(gpu.uuid, enable)
            self.log.info("host.mig-mode", gpu=gpu.uuid, enabled=enable, waitsForReset=waits)
            if waits:
                self._reset(gpu.uuid)
            return True
        except GpuError as exc:
            self.log.warning("host.refused", gpu=gpu.uuid, action=plan.action, reason=str(exc))
            return False
