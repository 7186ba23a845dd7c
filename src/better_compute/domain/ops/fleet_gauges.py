"""The operational figures behind /metrics' fleet gauges: what state each node is in, and which GPU
(as DCGM's exporter names it) each allocation holds now.

An operator alerts on these: nodes that went silent, a node whose `bcd` has not been heard from for
minutes, and (with DCGM's own series) how busy each tenant keeps the GPUs it holds. The rules live
here so that the scrape and any other reader count a node or a holding the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from better_compute.domain.fleet.atoms import Atom, mig_atom_key
from better_compute.domain.fleet.records import Gpu, Node
from better_compute.domain.fleet.replica_states import is_live

NodeState = Literal["live", "silent", "unjoined"]
"""`live`: its `bcd` reached the server within the ready lease (150 s), so its containers count as
running; `silent`: it joined and was heard from, but not within the lease; `unjoined`: it is
registered and its `bcd` has never reached the server since."""
NODE_STATES: tuple[NodeState, ...] = get_args(NodeState)


def node_state(node: Node, now: datetime) -> NodeState:
    """The state of `node` at `now` (`NodeState`), by the ready lease that the placement uses."""
    contact = node.last_contact_at
    if contact is None:
        return "unjoined"
    return "live" if is_live(contact, now) else "silent"


def contact_age_seconds(node: Node, now: datetime) -> float | None:
    """Seconds since the node's `bcd` last reached the server, signed (a report or a spec read); None
    when it never has."""
    contact = node.last_contact_at
    return None if contact is None else max(0.0, (now - contact).total_seconds())


@dataclass(frozen=True, slots=True)
class HeldDevice:
    """One GPU, or one MIG instance of it, that an allocation holds now, named by DCGM's labels."""

    tenant: str
    allocation: str
    hostname: str
    """The node's id: DCGM's exporter names its host `Hostname`, so nodes named by their hostnames join."""
    uuid: str
    """The GPU's uuid (`UUID`): a MIG instance is named by its parent GPU's, as DCGM names it."""
    gpu_instance_id: str
    """The MIG GPU-instance id (`GPU_I_ID`); empty for a whole GPU or a slot, where DCGM sets none."""


def held_devices(holders: Iterable[tuple[str, str, Atom]], gpus: Mapping[str, Gpu]) -> list[HeldDevice]:
    """The devices held now, one row per (allocation, GPU or MIG instance), from (tenant, allocation,
    atom) triples and the GPUs as last reported (by uuid). Slots of one GPU held by one allocation are
    one row: DCGM measures the GPU, not the slot. A MIG atom whose instance the last report no longer
    names (the layout is changing) is left out: there is no `GPU_I_ID` to join on."""
    rows: set[HeldDevice] = set()
    for tenant, allocation, atom in holders:
        gi = ""
        if atom.cls == "gpu.mig":
            gpu = gpus.get(atom.gpu_id)
            found = [i.gi_id for i in (gpu.mig_instances if gpu else ()) if mig_atom_key(i) == atom.key]
            if not found:
                continue
            gi = str(found[0])
        rows.add(HeldDevice(tenant, allocation, atom.node, atom.gpu_id, gi))
    return sorted(rows, key=lambda d: (d.tenant, d.allocation, d.hostname, d.uuid, d.gpu_instance_id))


__all__ = ["NODE_STATES", "HeldDevice", "NodeState", "contact_age_seconds", "held_devices", "node_state"]
