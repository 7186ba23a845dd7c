"""`bcd inventory` without `--json`: the node's GPUs for a person at the node, one block per GPU.

A table of ten columns (a 40-character uuid, a PCI address, MIG devices' uuids...) cannot be read in
80 columns: rich shrank it until uuids were cut. Each GPU is a block of `Label  value` lines instead,
as `kubectl describe` prints, the longest line a MIG device's uuid and memory (about 75 characters),
so the whole listing reads in 80 columns and pipes into grep with every uuid whole."""

from __future__ import annotations

from collections.abc import Sequence

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


_LABEL = 14
"""The width of the labels' column: `NVLink peers` and two spaces."""


def _block(label: str, value: str) -> list[str]:
    first, *rest = value.split("\n") or [""]
    return [f"  {label:<{_LABEL}}{first}".rstrip(), *(f"  {'':<{_LABEL}}{line}".rstrip() for line in rest)]


def inventory_lines(node: str, gpus: Sequence[Gpu]) -> list[str]:
    """The node's GPUs, each a block: its index and uuid, then its product, memory, PCI address,
    NUMA node, NVLink peers, health, MIG mode and instances (each with its MIG devices)."""
    lines = [f"{node}: {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"]
    for g in gpus:
        lines.append("")
        lines.append(f"GPU {g.index}  {g.uuid}")
        rows = [
            ("Product", g.name),
            ("Memory", f"{g.memory_mib} MiB"),
            ("PCI", g.pci_bus_id),
            ("NUMA", "-" if g.numa_node is None else str(g.numa_node)),
            ("NVLink peers", str(len(g.nvlink_peers))),
            ("Health", "ok" if g.health.healthy else "\n".join(g.health.problems)),
            ("MIG", _mig(g)),
        ]
        instances = _instances(g)
        if instances:
            rows.append(("Instances", instances))
        for label, value in rows:
            lines.extend(_block(label, value))
    return lines
