"""`bcd inventory` without `--json`: the node's GPUs as a table for a person at the node."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from better_compute.bcd.gpu import Gpu


def _mig(gpu: Gpu) -> str:
    if not gpu.mig_capable:
        return "-"
    now = "on" if gpu.mig_current else "off"
    if gpu.mig_pending != gpu.mig_current:
        return f"{now} → {'on' if gpu.mig_pending else 'off'} (pending)"
    return now


def _memory(mib: int | None) -> str:
    return "" if mib is None else f" {mib} MiB"


def _instances(gpu: Gpu) -> str:
    """Each GPU instance with its compute instances (their MIG device's uuid and memory), then the
    compute instances left out for want of a MIG device, with why."""
    lines = [
        f"{gi.profile} @{gi.placement_start}:{gi.placement_size} GI {gi.gi_id}"
        + "".join(f"\n  CI {ci.ci_id} {ci.uuid}{_memory(ci.memory_mib)}" for ci in gi.compute_instances)
        for gi in gpu.instances
    ]
    lines.extend(gpu.unlisted)
    return "\n".join(lines)


def inventory_table(node: str, gpus: Sequence[Gpu]) -> Table:
    table = Table(title=f"{node}: {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}", title_justify="left")
    for column in (
        "#",
        "uuid",
        "product",
        "memory",
        "PCI",
        "NUMA",
        "NVLink peers",
        "health",
        "MIG",
        "instances",
    ):
        table.add_column(
            column, justify="right" if column in ("#", "memory", "NUMA", "NVLink peers") else "left"
        )
    for g in gpus:
        table.add_row(
            str(g.index),
            g.uuid,
            g.name,
            f"{g.memory_mib} MiB",
            g.pci_bus_id,
            "-" if g.numa_node is None else str(g.numa_node),
            str(len(g.nvlink_peers)),
            "ok" if g.health.healthy else "; ".join(g.health.problems),
            _mig(g),
            _instances(g),
        )
    return table
