"""A simulated node: GPUs from the catalog, partitioned exactly as the validator places them.

It produces the same `NodeReport` a real node daemon sends, so demo and test fleets go through the
control plane's real ingestion path.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from better_compute.domain import catalog, layouts
from better_compute.domain.inventory import GpuReport, MigInstance, NodeReport

_NS = uuid.UUID("0b6a3d7e-95a4-4f0e-8f44-2f6d1c7a9b10")


def gpu_uuid(node: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(_NS, f"{node}/{index}"))


def mig_uuid(gpu: str, gi_id: int, profile: str) -> str:
    return "MIG-" + str(uuid.uuid5(_NS, f"{gpu}/{gi_id}/{profile}"))


@dataclass
class FakeGpu:
    uuid: str
    index: int
    model: catalog.GpuModel
    numa_node: int
    nvlink_peers: tuple[str, ...] = ()
    healthy: bool = True
    mig_current: bool = False
    mig_pending: bool = False
    instances: list[MigInstance] = field(default_factory=list)

    def apply_layout(self, layout: str) -> None:
        """Partition the GPU; instances are created in the validator's placement order."""
        placement = layouts.validate(layout, self.model)
        enabled = placement.mig_enabled
        self.mig_current = self.mig_pending = enabled and self.model.mig_capable
        self.instances = [
            MigInstance(
                profile=inst.profile,
                gi_id=n + 1,
                ci_id=0,
                placement_start=inst.start,
                placement_size=inst.size,
                uuid=mig_uuid(self.uuid, n + 1, inst.profile),
            )
            for n, inst in enumerate(placement.instances)
        ]

    def report(self) -> GpuReport:
        return GpuReport(
            uuid=self.uuid,
            product=self.model.products[0] if self.model.products else self.model.name,
            memory_mib=int(self.model.memory_gib * 1024),
            index=self.index,
            numa_node=self.numa_node,
            nvlink_peers=self.nvlink_peers,
            healthy=self.healthy,
            mig_mode_current=self.mig_current,
            mig_mode_pending=self.mig_pending,
            mig_instances=tuple(self.instances) if self.mig_current else (),
        )


@dataclass
class FakeNode:
    name: str
    gpus: list[FakeGpu]
    observed_generation: int = 0

    @classmethod
    def build(
        cls, name: str, model_id: str, count: int, *, numa_nodes: int = 1, nvlink: bool = False
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

    def apply_layout(self, layout: str) -> None:
        for gpu in self.gpus:
            gpu.apply_layout(layout)

    def report(self) -> NodeReport:
        return NodeReport(
            node=self.name,
            gpus=tuple(g.report() for g in self.gpus),
            observed_generation=self.observed_generation,
        )
