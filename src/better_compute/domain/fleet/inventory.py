"""What a node says it has: the report a node daemon sends, as plain values.

The control plane never invents hardware; atoms are derived from these reports (see `atoms.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MigInstance:
    """One MIG instance (a GPU instance with its compute instance) as NVML reports it."""

    profile: str
    gi_id: int
    ci_id: int
    placement_start: int
    placement_size: int
    uuid: str


@dataclass(frozen=True)
class GpuReport:
    """One GPU of a node; `memory_mib` is NVML's total framebuffer size."""

    uuid: str
    product: str
    memory_mib: int
    index: int = 0
    numa_node: int | None = None
    nvlink_peers: tuple[str, ...] = ()
    healthy: bool = True
    mig_mode_current: bool = False
    mig_mode_pending: bool = False
    mig_instances: tuple[MigInstance, ...] = ()
    mig_state_unknown: bool = False
    """The node could not read the GPU's MIG state whole (`bcd.gpu.Gpu.partial`): its MIG mode and
    instances here say nothing, neither that an instance is there nor that it is gone."""

    @property
    def partition_pending(self) -> bool:
        """A MIG mode change waits for a reset: nothing may land on the GPU until it completes."""
        return self.mig_mode_current != self.mig_mode_pending


@dataclass(frozen=True)
class NodeReport:
    """A node's whole inventory at one moment; `observed_generation` is the last spec it converged."""

    node: str
    gpus: tuple[GpuReport, ...] = field(default_factory=tuple)
    observed_generation: int = 0
