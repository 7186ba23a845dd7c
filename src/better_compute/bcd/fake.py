"""A simulated node: GPUs from the catalog that keep the hardware's rules, behind `GpuBackend`.

Demo and test fleets go through the control plane's real ingestion path with it, and convergers are
tested against it, so it refuses what NVML refuses: a profile the model lacks, a placement start the
profile does not allow, one overlapping an instance, more instances than the profile or the GPU's
slices and engines allow. An instance can be marked busy (a process on it), and is then neither
destroyed nor reset; a GPU can be told to fail its resets or its zeroing passes, and records
those that completed (`resets`, `zeroed`). A MIG mode change waits for a reset or a
reboot, and a reboot loses every instance, as on hardware.

Ids are stable: a GPU's uuid derives from the node name and its index, a MIG device's from the GPU,
its GPU instance id and profile, so a fleet simulated twice reports the same atoms. GPU-instance ids
are the driver's handles, as NVML's are, not tied to a placement: a GPU hands out the lowest free one,
or those a test scripts (`FakeGpu.gi_ids`), so the same slice can come back under other ids and
another slice under a booked one's. An instance
created after start-up gets a new MIG uuid each time, since hardware gives a re-created instance a
new one.

A node can keep its GPUs' MIG state in a file (`FakeNode.keep`, what `bcd run --nvml fake` does in
its state directory): a GPU's MIG mode and instances outlive the process that changed them, as a real
GPU's outlive a `bcd` that is killed and started again, so a restarted daemon finds what it left.
"""

from __future__ import annotations

import functools
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from better_compute.bcd.gpu import (
    COMPUTE_MODES,
    ComputeInstance,
    ComputeModeRefused,
    Gpu,
    GpuInstance,
    Health,
    InstanceInUse,
    InstanceRefused,
    MigNotSupported,
    ResetFailed,
    UnknownGpu,
    UnknownInstance,
    ZeroingFailed,
)
from better_compute.domain import catalog
from better_compute.domain.catalog import layouts
from better_compute.domain.fleet.inventory import MigInstance, NodeReport
from better_compute.domain.kernel.errors import NotFound
from better_compute.domain.kernel.name_uuids import uuid5_text
from better_compute.domain.ops.fleet import FleetSpec, NodeSpec

KEPT_STATE = "fake-gpus.json"
"""The file in its state directory where `bcd run --nvml fake` keeps the simulated GPUs' MIG state."""

_NS = uuid.UUID("0b6a3d7e-95a4-4f0e-8f44-2f6d1c7a9b10")


_placement = functools.cache(layouts.validate)
"""`layouts.validate`, once per layout and model: a simulated fleet partitions thousands of GPUs
alike (its answer is immutable)."""


def gpu_uuid(node: str, index: int) -> str:
    return "GPU-" + uuid5_text(_NS, f"{node}/{index}")


def mig_uuid(gpu: str, gi_id: int, profile: str, serial: int = 0) -> str:
    """The MIG uuid of a GPU instance; `serial` tells apart instances created after start-up."""
    key = f"{gpu}/{gi_id}/{profile}" + (f"/{serial}" if serial else "")
    return "MIG-" + uuid5_text(_NS, key)


@dataclass
class FakeGpu:
    """One simulated GPU. Its fields are its state; tests set them directly (`healthy`, `busy`)."""

    uuid: str
    index: int
    model: catalog.GpuModel
    numa_node: int
    nvlink_peers: tuple[str, ...] = ()
    healthy: bool = True
    mig_current: bool = False
    mig_pending: bool = False
    instances: list[MigInstance] = field(default_factory=list)
    busy: set[int] = field(default_factory=set)
    """GPU instance ids with work on them."""
    reset_fails: bool = False
    resets: int = 0
    """GPU resets that completed since start-up."""
    zero_fails: bool = False
    zeroed: list[int | None] = field(default_factory=list)
    """The zeroing passes that completed, in order: a GPU instance id, or None for the whole GPU."""
    mig_mode_persists: bool = True
    """Whether MIG mode survives a reboot: True on Ampere (kept in the InfoROM), False on Hopper and
    later, where MIG mode is lost on reboot or driver reload."""
    created: int = 0
    """GPU instances created since start-up, which numbers their MIG uuids."""
    compute_mode: str = "default"
    """One of `gpu.COMPUTE_MODES`; a reboot sets it back to `default`, as on hardware."""
    gi_ids: list[int] = field(default_factory=list)
    """The GPU-instance ids this GPU's driver hands out next, in order (a test's script; once used
    up, or for an id in use, the lowest free one). NVML's ids are not tied to a placement."""

    def _next_gi_id(self, taken: set[int]) -> int:
        while self.gi_ids:
            wanted = self.gi_ids.pop(0)
            if wanted not in taken:
                return wanted
        return next(i for i in range(1, len(taken) + 2) if i not in taken)

    @property
    def product(self) -> str:
        return self.model.products[0] if self.model.products else self.model.name

    @property
    def memory_mib(self) -> int:
        return int(self.model.memory_gib * 1024)

    def apply_layout(self, layout: str) -> None:
        """Partition the GPU as a node comes up already partitioned: the validator's placement order,
        MIG mode on (or off) with nothing pending."""
        placement = _placement(layout, self.model)
        enabled = placement.mig_enabled
        self.mig_current = self.mig_pending = enabled and self.model.mig_capable
        self.busy.clear()
        self.instances = []
        for inst in placement.instances:
            gi_id = self._next_gi_id({m.gi_id for m in self.instances})
            self.instances.append(
                MigInstance(
                    profile=inst.profile,
                    gi_id=gi_id,
                    ci_id=0,
                    placement_start=inst.start,
                    placement_size=inst.size,
                    uuid=mig_uuid(self.uuid, gi_id, inst.profile),
                )
            )

    def read(self) -> Gpu:
        return Gpu(
            index=self.index,
            uuid=self.uuid,
            name=self.product,
            memory_mib=self.memory_mib,
            pci_bus_id=f"00000000:{0x18 + self.index:02X}:00.0",
            numa_node=self.numa_node,
            nvlink_peers=self.nvlink_peers,
            health=Health(ecc_uncorrected=0, notes=() if self.healthy else ("marked unhealthy",)),
            mig_capable=self.model.mig_capable,
            mig_current=self.mig_current,
            mig_pending=self.mig_pending,
            instances=tuple(self._instance(m) for m in self.instances) if self.mig_current else (),
            minor_number=self.index,
            compute_mode=self.compute_mode,
        )

    def _instance(self, inst: MigInstance) -> GpuInstance:
        profile = self.model.profile(inst.profile)
        return GpuInstance(
            gi_id=inst.gi_id,
            profile=profile.name,
            profile_id=profile.profile_id,
            placement_start=inst.placement_start,
            placement_size=inst.placement_size,
            slices=profile.compute_slices,
            compute_instances=(
                ComputeInstance(ci_id=inst.ci_id, slices=profile.compute_slices, uuid=inst.uuid),
            ),
        )

    def create(self, profile_name: str, start: int) -> GpuInstance:
        if not self.model.mig_capable:
            raise InstanceRefused(f"{self.uuid} ({self.model.id}) does not support MIG")
        if not self.mig_current:
            raise InstanceRefused(f"MIG mode is not enabled on {self.uuid}")
        profile = self.model.find_profile(profile_name)
        if profile is None:
            known = ", ".join(p.name for p in self.model.profiles)
            raise InstanceRefused(f"{self.model.id} has no profile {profile_name} (profiles: {known})")
        if start not in profile.starts:
            starts = ", ".join(str(s) for s in profile.starts)
            raise InstanceRefused(f"{profile.name} cannot start at {start} (placements start at {starts})")
        end = start + profile.size
        for other in self.instances:
            if start < other.placement_start + other.placement_size and other.placement_start < end:
                raise InstanceRefused(
                    f"{profile.name} at {start}:{profile.size} overlaps {other.profile} "
                    f"at {other.placement_start}:{other.placement_size} (GPU instance {other.gi_id})"
                )
        self._check_capacity(profile)
        gi_id = self._next_gi_id({m.gi_id for m in self.instances})
        self.created += 1
        inst = MigInstance(
            profile=profile.name,
            gi_id=gi_id,
            ci_id=0,
            placement_start=start,
            placement_size=profile.size,
            uuid=mig_uuid(self.uuid, gi_id, profile.name, self.created),
        )
        self.instances.append(inst)
        return self._instance(inst)

    def _check_capacity(self, profile: catalog.MigProfile) -> None:
        """What NVML refuses beyond overlap: the profile's own limit, slices and shared engines."""
        held = [self.model.profile(m.profile) for m in self.instances] + [profile]
        if sum(p.name == profile.name for p in held) > profile.max_instances:
            raise InstanceRefused(f"{self.model.id} allows at most {profile.max_instances} {profile.name}")
        if sum(p.compute_slices for p in held) > self.model.compute_slices:
            raise InstanceRefused(f"{profile.name} does not fit: compute slices of {self.uuid} exceeded")
        if sum(p.memory_slices for p in held) > self.model.memory_slices:
            raise InstanceRefused(f"{profile.name} does not fit: memory slices of {self.uuid} exceeded")
        for engine, _ in profile.engines:
            if sum(p.engine_count(engine) for p in held) > self.model.engine_total(engine):
                raise InstanceRefused(
                    f"{profile.name} does not fit: {engine} engines of {self.uuid} exceeded"
                )

    def destroy(self, gi_id: int) -> None:
        inst = next((m for m in self.instances if m.gi_id == gi_id), None)
        if inst is None or not self.mig_current:
            raise UnknownInstance(f"{self.uuid} has no GPU instance {gi_id}")
        if gi_id in self.busy:
            raise InstanceInUse(f"GPU instance {gi_id} ({inst.profile}) of {self.uuid} is in use")
        self.instances.remove(inst)

    def set_mig_mode(self, enabled: bool) -> bool:
        if not self.model.mig_capable:
            raise MigNotSupported(f"{self.uuid} ({self.model.id}) does not support MIG")
        if not enabled and self.instances:
            raise InstanceInUse(f"{self.uuid} still has GPU instances: destroy them before disabling MIG")
        self.mig_pending = enabled
        return self.mig_current != self.mig_pending

    def set_compute_mode(self, mode: str) -> None:
        if mode not in COMPUTE_MODES:
            raise ComputeModeRefused(f"{mode!r} is not a compute mode ({', '.join(COMPUTE_MODES)})")
        if self.mig_current and mode == "exclusive-process":
            raise ComputeModeRefused(f"{self.uuid} is in MIG mode: exclusive-process is not supported there")
        self.compute_mode = mode

    def reset(self) -> None:
        if self.reset_fails:
            raise ResetFailed(f"the reset of {self.uuid} did not complete")
        if self.busy:
            raise ResetFailed(
                f"the reset of {self.uuid} was refused: GPU instances {sorted(self.busy)} in use"
            )
        self.mig_current = self.mig_pending
        self.instances = []
        self.resets += 1

    def zero(self, gi_id: int | None) -> None:
        if self.zero_fails:
            raise ZeroingFailed(f"the zeroing pass over {self.uuid} did not complete")
        if gi_id is not None:
            if not self.mig_current or gi_id not in {m.gi_id for m in self.instances}:
                raise UnknownInstance(f"{self.uuid} has no GPU instance {gi_id}")
            if gi_id in self.busy:
                raise InstanceInUse(f"GPU instance {gi_id} of {self.uuid} is in use")
        self.zeroed.append(gi_id)

    def reboot(self) -> None:
        if not self.mig_mode_persists:
            self.mig_pending = False
        self.mig_current = self.mig_pending
        self.instances = []
        self.busy.clear()
        self.compute_mode = "default"


@dataclass
class FakeNode:
    """A simulated node, and the `GpuBackend` over its GPUs."""

    name: str
    gpus: list[FakeGpu]
    observed_generation: int = 0
    kept_in: Path | None = None
    """The file the GPUs' MIG state is kept in (`keep`); None: it lives only in this process."""

    @classmethod
    def build(
        cls,
        name: str,
        model_id: str | catalog.GpuModel,
        count: int,
        *,
        numa_nodes: int = 1,
        nvlink: bool = False,
    ) -> FakeNode:
        model = catalog.get_model(model_id)
        ids = [gpu_uuid(name, i) for i in range(count)]
        per_numa = max(1, -(-count // max(1, numa_nodes)))
        gpus = [
            FakeGpu(
                uuid=ids[i],
                index=i,
                model=model,
                numa_node=i // per_numa,
                nvlink_peers=tuple(p for p in ids if p != ids[i]) if nvlink else (),
            )
            for i in range(count)
        ]
        return cls(name=name, gpus=gpus)

    @classmethod
    def from_fleet(cls, spec: FleetSpec, node: str) -> FakeNode:
        """The node `node` of a fleet file, with its GPUs partitioned to its layout."""
        found = next((n for n in spec.nodes if n.name == node), None)
        if found is None:
            names = ", ".join(n.name for n in spec.nodes[:20]) + (", …" if len(spec.nodes) > 20 else "")
            raise NotFound(f"the fleet file has no node {node!r} (nodes: {names})", {"node": node})
        return cls.for_node(spec, found)

    @classmethod
    def for_node(cls, spec: FleetSpec, node: NodeSpec) -> FakeNode:
        """A node of `spec` (its GPUs, NUMA nodes, NVLink and layout)."""
        fake = cls.build(
            node.name,
            spec.gpu_model_of(node.gpu_model),
            node.gpu_count,
            numa_nodes=node.numa_nodes,
            nvlink=node.nvlink,
        )
        fake.apply_layout(spec.layout_of_node(node))
        return fake

    def apply_layout(self, layout: str) -> None:
        for gpu in self.gpus:
            gpu.apply_layout(layout)
        self._save()

    def keep(self, path: Path) -> FakeNode:
        """Keep the GPUs' MIG state (mode current and pending, instances, the count that numbers new
        MIG uuids) in `path` from now on, as the hardware keeps it across a restart of the daemon
        (not of the machine: `reboot` loses the instances). When `path` exists, what it holds of a
        GPU of this node replaces what the node was built with; either way it is written now, and
        again after every change, whole (a process killed half-way leaves the last complete state)."""
        self.kept_in = path
        if path.exists():
            kept = json.loads(path.read_text(encoding="utf-8")).get("gpus") or {}
            for gpu in self.gpus:
                if isinstance(state := kept.get(gpu.uuid), dict):
                    _restore(gpu, state)
        self._save()
        return self

    def _save(self) -> None:
        if self.kept_in is None:
            return
        text = json.dumps({"node": self.name, "gpus": {g.uuid: _state(g) for g in self.gpus}}, indent=1)
        self.kept_in.parent.mkdir(parents=True, exist_ok=True)
        partial = self.kept_in.with_name(f".{self.kept_in.name}.partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(self.kept_in)

    def report(self) -> NodeReport:
        from better_compute.bcd.inventory import node_report

        return node_report(self, self.name, observed_generation=self.observed_generation)

    def gpu(self, gpu: str) -> FakeGpu:
        found = next((g for g in self.gpus if g.uuid == gpu), None)
        if found is None:
            raise UnknownGpu(f"node {self.name} has no GPU {gpu}")
        return found

    def mark_busy(self, gpu: str, gi_id: int, busy: bool = True) -> None:
        """Put work on a GPU instance (or take it off): a busy instance is not destroyed or reset."""
        target = self.gpu(gpu)
        if gi_id not in {m.gi_id for m in target.instances}:
            raise UnknownInstance(f"{gpu} has no GPU instance {gi_id}")
        if busy:
            target.busy.add(gi_id)
        else:
            target.busy.discard(gi_id)

    def fail_resets(self, gpu: str, fail: bool = True) -> None:
        """Make the GPU's resets fail (or succeed again), as a reset blocked by the driver does."""
        self.gpu(gpu).reset_fails = fail

    def fail_zeroing(self, gpu: str, fail: bool = True) -> None:
        """Make the GPU's zeroing passes fail (or succeed again)."""
        self.gpu(gpu).zero_fails = fail

    def reboot(self) -> None:
        """Restart the node: pending MIG modes apply (or are lost where they do not persist), every
        GPU and compute instance is gone."""
        for gpu in self.gpus:
            gpu.reboot()
        self._save()

    # GpuBackend

    def list_gpus(self) -> tuple[Gpu, ...]:
        return tuple(g.read() for g in self.gpus)

    def create_instance(self, gpu: str, profile: str, placement_start: int) -> GpuInstance:
        created = self.gpu(gpu).create(profile, placement_start)
        self._save()
        return created

    def destroy_instance(self, gpu: str, gi_id: int) -> None:
        self.gpu(gpu).destroy(gi_id)
        self._save()

    def set_mig_mode(self, gpu: str, enabled: bool) -> bool:
        waits = self.gpu(gpu).set_mig_mode(enabled)
        self._save()
        return waits

    def set_compute_mode(self, gpu: str, mode: str) -> None:
        self.gpu(gpu).set_compute_mode(mode)
        self._save()

    def reset_gpu(self, gpu: str) -> None:
        self.gpu(gpu).reset()
        self._save()

    def zero_memory(self, gpu: str, gi_id: int | None) -> None:
        self.gpu(gpu).zero(gi_id)

    def close(self) -> None:
        """Nothing to release."""


def _state(gpu: FakeGpu) -> dict[str, Any]:
    """What a GPU keeps across a restart of its daemon, as `FakeNode.keep` writes it."""
    return {
        "migCurrent": gpu.mig_current,
        "migPending": gpu.mig_pending,
        "created": gpu.created,
        "computeMode": gpu.compute_mode,
        "instances": [
            {
                "profile": m.profile,
                "giId": m.gi_id,
                "ciId": m.ci_id,
                "placementStart": m.placement_start,
                "placementSize": m.placement_size,
                "uuid": m.uuid,
            }
            for m in gpu.instances
        ],
    }


def _restore(gpu: FakeGpu, state: dict[str, Any]) -> None:
    """Put back what `_state` wrote of the GPU."""
    gpu.mig_current = bool(state.get("migCurrent"))
    gpu.mig_pending = bool(state.get("migPending"))
    gpu.created = int(state.get("created") or 0)
    mode = state.get("computeMode")
    gpu.compute_mode = mode if mode in COMPUTE_MODES else "default"
    gpu.busy.clear()
    gpu.instances = [
        MigInstance(
            profile=str(m["profile"]),
            gi_id=int(m["giId"]),
            ci_id=int(m["ciId"]),
            placement_start=int(m["placementStart"]),
            placement_size=int(m["placementSize"]),
            uuid=str(m["uuid"]),
        )
        for m in state.get("instances") or []
    ]
