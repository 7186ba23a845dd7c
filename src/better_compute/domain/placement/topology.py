"""How many replicas of a shape a cluster's free devices hold: a replica's devices are on one node
(its container runs there), and inside one topology domain when the workload requires it
(docs/placement.md#what-counts-as-capacity; seed 001 "Topology constraints").

Domains by kind: `nvlink`, the node's NVLink domain (atoms of one GPU are NV-connected to each other,
so a GPU with no NVLink peers is a domain of its own); `numa`, the node's NUMA node; `pcie`, the PCIe
root, taken as the NUMA node's until node reports carry the PCIe switch tree. Without the
requirement a replica needs only one node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

DomainKind = Literal["nvlink", "pcie", "numa"]
DOMAIN_KINDS: tuple[DomainKind, ...] = ("nvlink", "pcie", "numa")


@dataclass(frozen=True, slots=True)
class FreeDevice:
    """A device (atom) of the workload's class that is free from now on, and where it sits."""

    atom_id: str
    node: str
    gpu_id: str
    numa_node: int | None
    nvlink_domain: str | None


def domain_of(device: FreeDevice, kind: DomainKind | None) -> tuple[str, str]:
    """The group a replica's devices must share: the node, or a domain of `kind` on it."""
    if kind is None:
        return (device.node, "")
    if kind == "nvlink":
        return (device.node, f"nvlink:{device.nvlink_domain or device.gpu_id}")
    return (device.node, f"numa:{device.numa_node}")


@dataclass(frozen=True, slots=True)
class Room:
    """What free devices offer one shape: replicas that fit, and the most free devices in one group
    (node, or domain of the kind required)."""

    free_devices: int
    replicas: int
    largest_group: int


def room_for(devices: Iterable[FreeDevice], device_count: int, kind: DomainKind | None) -> Room:
    """Replicas of `device_count` devices that `devices` hold, each inside one group."""
    # without a kind the group is the node: counted by name, the commonest call stays one pass
    groups: Counter[str] | Counter[tuple[str, str]] = (
        Counter(d.node for d in devices) if kind is None else Counter(domain_of(d, kind) for d in devices)
    )
    return Room(
        free_devices=sum(groups.values()),
        replicas=sum(n // device_count for n in groups.values()) if device_count > 0 else 0,
        largest_group=max(groups.values(), default=0),
    )


__all__ = ["DOMAIN_KINDS", "DomainKind", "FreeDevice", "Room", "domain_of", "room_for"]
