"""A node's inventory report, built from whichever GPU backend is active.

The report is `domain.fleet.inventory.NodeReport`, the value the control plane derives atoms from, so a
node that reports through `bcd` and a simulated one go through the same ingestion. Building it only
reads the backend.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from better_compute.bcd.gpu import Gpu, GpuBackend, GpuInstance
from better_compute.domain.fleet.inventory import GpuReport, MigInstance, NodeReport
from better_compute.wire.nodes import (
    GpuReported,
    InventoryReport,
    MigInstanceReported,
    MigModeReported,
    NodeReportSend,
)


def node_report(backend: GpuBackend, node: str, *, observed_generation: int = 0) -> NodeReport:
    """The node's report as the backend reads it now."""
    return report_of(node, backend.list_gpus(), observed_generation=observed_generation)


def report_of(node: str, gpus: Iterable[Gpu], *, observed_generation: int = 0) -> NodeReport:
    """The report of GPUs already read (a caller that also shows them reads the backend once)."""
    return NodeReport(
        node=node,
        gpus=tuple(gpu_report(g) for g in gpus),
        observed_generation=observed_generation,
    )


def gpu_report(gpu: Gpu) -> GpuReport:
    """One GPU of the report; MIG instances only while MIG mode is on, as NVML lists them. A GPU
    whose MIG state was not read whole (`Gpu.partial`) says so (`mig_state_unknown`): what it lists
    is no word on what is gone."""
    return GpuReport(
        uuid=gpu.uuid,
        product=gpu.name,
        memory_mib=gpu.memory_mib,
        index=gpu.index,
        numa_node=gpu.numa_node,
        nvlink_peers=gpu.nvlink_peers,
        healthy=gpu.health.healthy,
        mig_mode_current=gpu.mig_current,
        mig_mode_pending=gpu.mig_pending,
        mig_instances=tuple(m for gi in gpu.instances for m in mig_instances(gi)) if gpu.mig_current else (),
        mig_state_unknown=gpu.partial,
    )


def mig_instances(gi: GpuInstance) -> list[MigInstance]:
    """One MIG instance per compute instance (each is a MIG device with its own uuid). A GPU instance
    without a compute instance has no device to hand out, so it is not reported. A compute instance
    narrower than its GPU instance is named `<c>c.<profile>`, as `nvidia-smi` names it."""
    return [
        MigInstance(
            profile=gi.profile if ci.slices >= gi.slices else f"{ci.slices}c.{gi.profile}",
            gi_id=gi.gi_id,
            ci_id=ci.ci_id,
            placement_start=gi.placement_start,
            placement_size=gi.placement_size,
            uuid=ci.uuid,
        )
        for ci in gi.compute_instances
    ]


def report_send(report: NodeReport) -> NodeReportSend:
    """The report as the node sends it (`nodes.report`, kind `Inventory`): what `bcd inventory
    --json` prints is exactly the body a signed report carries."""
    gpus = [
        GpuReported(
            uuid=g.uuid,
            product=g.product,
            memory_mib=g.memory_mib,
            index=g.index,
            numa_node=g.numa_node,
            nvlink_peers=list(g.nvlink_peers),
            healthy=g.healthy,
            mig_mode=MigModeReported(current=g.mig_mode_current, pending=g.mig_mode_pending),
            mig_instances=[
                MigInstanceReported(
                    profile=m.profile,
                    gi_id=m.gi_id,
                    ci_id=m.ci_id,
                    placement_start=m.placement_start,
                    placement_size=m.placement_size,
                    uuid=m.uuid,
                )
                for m in g.mig_instances
            ],
            mig_state_unknown=g.mig_state_unknown,
        )
        for g in report.gpus
    ]
    body = InventoryReport(kind="Inventory", gpus=gpus, observed_generation=report.observed_generation)
    return NodeReportSend(node=report.node, report=body)


def report_json(report: NodeReport) -> dict[str, Any]:
    """`report_send` as JSON, with the API's camelCase names."""
    return report_send(report).model_dump(mode="json", by_alias=True)
