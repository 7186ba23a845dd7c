"""The per-cluster scheduler's choice of devices for a deployment's replicas
(docs/placement.md#the-flow, step 5).

Each replica's `device_count` devices come from one group (a node, or one domain of the kind the
workload requires: `topology.domain_of`); inside the group they are taken in NVLink-domain, NUMA-node
and GPU order, so that a replica keeps its devices as close together as the group allows (the same
GPU's MIG instances, then NV-connected GPUs, then one NUMA node), as reservations do. Between groups
the fullest one that still holds a replica goes first (best fit): partly used nodes fill up before
empty ones are broken into. Ties go to the smallest ids, so the answer is deterministic, unless a
`salt` is given: then ties (between equally full groups, and between equally close runs of a group)
are broken by a rotation the salt sets. Server processes each pass their own, so that two placing
at once, each unaware of the other's uncommitted choice, rarely pick the same atoms; the quality of
the choice is the same either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from better_compute.domain.placement.topology import DomainKind, FreeDevice, domain_of


def _closeness(device: FreeDevice) -> tuple[str, int, str, str]:
    return (
        device.nvlink_domain or device.gpu_id,
        -1 if device.numa_node is None else device.numa_node,
        device.gpu_id,
        device.atom_id,
    )


def choose_replicas(
    devices: Iterable[FreeDevice], device_count: int, replicas: int, kind: DomainKind | None, salt: int = 0
) -> list[tuple[str, ...]]:
    """Atom ids for up to `replicas` replicas of `device_count` devices each (fewer when the devices
    hold fewer); no atom is given twice. `salt` breaks ties (module docstring)."""
    groups: dict[tuple[str, str], list[FreeDevice]] = {}
    for device in devices:
        groups.setdefault(domain_of(device, kind), []).append(device)
    order = {key: n for n, key in enumerate(sorted(groups))}
    ordered: set[tuple[str, str]] = set()
    """Groups whose members are in closeness order: only those a replica is taken from are sorted,
    so a choice costs a pass over the devices, not a sort of every node's."""
    out: list[tuple[str, ...]] = []
    while len(out) < replicas:
        fitting = [
            (len(m), (order[key] - salt) % len(order), key)
            for key, m in groups.items()
            if len(m) >= device_count
        ]
        if not fitting:
            break
        _, _, key = min(fitting)
        members = groups[key]
        if key not in ordered:
            members.sort(key=_closeness)
            ordered.add(key)
        taken = _closest_run(members, device_count, salt)
        gone = set(taken)
        groups[key] = [d for d in members if d.atom_id not in gone]
        out.append(taken)
    return out


def _closest_run(members: Sequence[FreeDevice], count: int, salt: int = 0) -> tuple[str, ...]:
    """`count` devices of a group, preferring a run that shares an NVLink domain, then a NUMA node
    (equally close runs: the first, rotated by `salt`)."""
    runs = len(members) - count + 1
    best: tuple[int, int, int] | None = None
    at = 0
    for i in range(runs):
        run = members[i : i + count]
        score = (len({_closeness(d)[0] for d in run}), len({d.numa_node for d in run}), (i - salt) % runs)
        if best is None or score < best:
            best, at = score, i
    return tuple(d.atom_id for d in members[at : at + count])


__all__ = ["choose_replicas"]
