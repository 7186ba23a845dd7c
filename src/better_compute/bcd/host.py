"""The host converger: the node's GPUs cut to their pool's MIG layout, and the MPS daemon for mps pools.

The mig-layout unit runs `domain.fleet.mig_plan.plan_node` over what the backend shows and carries the
plan out: destroy, then create at the plan's explicit placements. A GPU a bound allocation uses whole
(or a slot of) is left alone (the plan says `held`); one whose MIG instances it uses is re-cut around
them where its layout keeps them where they are, and left alone otherwise: a held instance is never
destroyed, nor its GPU reset (`mig_plan.spares`). A MIG mode change is asked for, then applied by a GPU
reset; a reset that fails leaves the change pending and the GPU `reboot-required`: it is logged and not
tried again until the daemon restarts (a reboot is an operator's decision). A refusal of the hardware on
one GPU is logged and that GPU tried again on the next pass; the other GPUs go on.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from better_compute.bcd.gpu import Gpu, GpuBackend, GpuError, ResetFailed
from better_compute.bcd.inventory import gpu_report
from better_compute.bcd.logs import Log
from better_compute.bcd.mps import MpsUnit
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
        changed = self._apply_pending(self.backend.list_gpus(), held | set(instances))
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
        if self.mps is not None:
            mps_gpus = [g.uuid for g in spec.gpus] if spec.sharing.mode == "mps" else []
            if self.mps.converge(mps_gpus):
                self.log.info("mps.unit", gpus=mps_gpus)
                changed = True
        return changed

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
