"""The node spec: what one node must make true, derived from its pool and the bookings on its atoms.

A node's spec says, per GPU, the MIG layout its pool asks for; the pool's sharing settings; and the
assignments: each allocation holding atoms of the node now, with the atoms and the environment a
container needs to see exactly those devices. It is derived, never stored: `plan_spec` is the one
rule, and `digest` names its content, so the server can tell when it changed
(docs/adr/0010-node-spec-and-signed-reports.md).

The generation a node sees is a counter the server advances whenever the digest it computes differs
from the one stored with the counter (`next_generation`): it moves exactly when the content does,
including when a booking merely starts or ends with time, and never goes back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from better_compute.domain.catalog import GpuModel, find_model
from better_compute.domain.fleet.atoms import Atom, mig_atom_key
from better_compute.domain.fleet.mig_plan import converged, spares
from better_compute.domain.fleet.records import Gpu, Pool
from better_compute.domain.gate.mig_gate import node_layout, told_replicas
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.domain.kernel.containers import ContainerSpec
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ledger.ledger import is_partition_change

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"

MAX_WAIT = timedelta(seconds=60)
"""The longest a spec read waits for a change (`wait`): below common proxies' idle timeouts."""


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU and the MIG layout it should have (None: the node is in no pool; leave it as it is)."""

    uuid: str
    mig_layout: str | None


@dataclass(frozen=True, slots=True)
class SharingSpec:
    """How the node's GPUs are shared: the pool's mode and its replicas (1 unless shared in slots),
    and what the node does to an atom between tenants (`policy.scrub`: none, reset or zero)."""

    mode: str
    replicas: int
    scrub: str = "none"


@dataclass(frozen=True, slots=True)
class Assignment:
    """An allocation's atoms on this node and the environment its container gets."""

    allocation_id: str
    atoms: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    tenant_id: str | None = None
    """The tenant holding the allocation: a node scrubs an atom before another tenant gets it."""
    container: ContainerSpec | None = None
    """What the node runs on the atoms (a workload replica, an endpoint copy); None for a
    reservation, whose holder starts its own container."""
    job_container: ContainerSpec | None = None
    """The container another scheduler's job runs on the atoms (a workload replica on a Slurm node:
    docs/slurm.md#replicas-as-jobs): the node never starts, stops or removes it, only watches it
    and reports its readiness as it does for its own."""


@dataclass(frozen=True, slots=True)
class PlacedCopy:
    """An endpoint copy on one of the node's atoms, as its spec needs it: handed over and run under
    `allocation_id` (`copy:<component>:<index>`) for the endpoint's tenant, running the component's
    `container` (None: the component names none)."""

    allocation_id: str
    atom_id: str
    tenant_id: str
    container: ContainerSpec | None = None


@dataclass(frozen=True, slots=True)
class NodeWork:
    """What the contexts above the gate run on a node (asked through `GateHooks.work_on`): the
    container of each workload replica by its allocation id, and the endpoint copies on its atoms.
    The gate knows neither workloads nor endpoints; it only puts these in the node's spec."""

    containers: Mapping[str, ContainerSpec] = field(default_factory=dict)
    copies: tuple[PlacedCopy, ...] = ()
    job_containers: Mapping[str, ContainerSpec] = field(default_factory=dict)
    """The container of each workload replica that its Slurm job runs, by allocation id: the node
    watches it (`Assignment.job_container`) and runs nothing itself."""


@dataclass(frozen=True, slots=True)
class LiveHold:
    """A live booking of one of the node's atoms, as the spec needs it."""

    allocation_id: str
    atom_id: str
    starts_at: datetime
    ends_at: datetime | None
    tenant_id: str | None

    def holds_at(self, now: datetime) -> bool:
        return self.starts_at <= now and (self.ends_at is None or now < self.ends_at)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    node: str
    gpus: tuple[GpuSpec, ...]
    sharing: SharingSpec
    assignments: tuple[Assignment, ...]
    booked: bool = field(default=False, compare=False)
    """Whether a tenant's booking in the ledger holds one of the node's atoms at the spec's time
    (an endpoint copy's assignment does not: its partition is the endpoint's, booked for no
    tenant). Not content: it is what the assignments say before copies are added."""

    def content(self) -> dict[str, object]:
        """The spec as plain JSON-able values, in a fixed order: what `digest` hashes."""
        return {
            "node": self.node,
            "gpus": [{"uuid": g.uuid, "migLayout": g.mig_layout} for g in self.gpus],
            "sharing": {
                "mode": self.sharing.mode,
                "replicas": self.sharing.replicas,
                "scrub": self.sharing.scrub,
            },
            "assignments": [
                {
                    "allocationId": a.allocation_id,
                    "tenantId": a.tenant_id,
                    "atoms": list(a.atoms),
                    "env": dict(sorted(a.env.items())),
                    **({"container": a.container.document()} if a.container is not None else {}),
                    **({"jobContainer": a.job_container.document()} if a.job_container is not None else {}),
                }
                for a in self.assignments
            ],
        }

    def digest(self) -> str:
        """SHA-256 of the content's canonical JSON (sorted keys, no spaces)."""
        text = json.dumps(self.content(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def device_of(atom: Atom) -> str:
    """What `NVIDIA_VISIBLE_DEVICES` names for an atom: its MIG instance's `MIG-…` uuid for a
    `gpu.mig` atom, its GPU's uuid for a whole GPU or a slot of one."""
    if atom.cls == "gpu.mig":
        uuid = atom.attributes.get("migUuid")
        if isinstance(uuid, str) and uuid:
            return uuid
    return atom.gpu_id


def plan_spec(
    node: str,
    gpus: Iterable[Gpu],
    pool: Pool | None,
    atoms: Iterable[Atom],
    holds: Iterable[LiveHold],
    now: datetime,
    *,
    carries_pool_layout: bool = True,
    gate: MigLayoutGate | None = None,
    own_layout: str | None = None,
    bookings: Iterable[LiveHold] | None = None,
    work: NodeWork | None = None,
) -> NodeSpec:
    """The node's spec at `now`: its present GPUs in index order with their pool's layout (a mig
    pool's `migLayout`; `all-disabled` in other pools), the pool's sharing, and one assignment per
    tenant allocation whose live booking holds one of the node's atoms at `now`, with its tenant (a
    layout change's own bookings are no tenant's and assign nothing). A node that does not carry
    its pool's layout gets no layout (None: leave it as it is); a node under a layout change
    (`gate`) is told the layout, or the slot count, the gate gives it (`domain.gate.mig_gate`); one with
    a layout of its own (`own_layout`: an endpoint's instance) is told that outside a change.

    A GPU not at that layout (`mig_plan.converged`) that getting there would cut a live booking
    away from, now or later (`booked_gpus`: its whole, or a booked instance the repartition
    destroys), is told none (`gpu_layout`) and keeps the one it has. `bookings` are every live
    booking of the node's atoms that ends after `now` (None: `holds`), those not handed out
    included (a terminating replica's).

    `work` says what runs: a held allocation that is a workload replica carries its container, and
    each endpoint copy on one of the node's atoms is an assignment of its own (its atom, the
    endpoint's tenant, the component's container), so the node starts it and reports on it under
    the copy's name. Copies never count as holding a GPU: their partitions are the endpoint's."""
    work = work or NodeWork()
    by_id = {a.id: a for a in atoms if a.node == node}
    held: dict[str, list[Atom]] = {}
    tenants: dict[str, str] = {}
    for hold in holds:
        atom = by_id.get(hold.atom_id)
        if atom is None or hold.tenant_id is None or not hold.holds_at(now):
            continue
        held.setdefault(hold.allocation_id, []).append(atom)
        tenants[hold.allocation_id] = hold.tenant_id
    assigned = [
        Assignment(
            allocation_id=allocation,
            atoms=tuple(a.id for a in sorted(mine, key=lambda a: a.id)),
            env={VISIBLE_DEVICES: ",".join(sorted({device_of(a) for a in mine}))},
            tenant_id=tenants[allocation],
            container=work.containers.get(allocation),
            job_container=work.job_containers.get(allocation),
        )
        for allocation, mine in held.items()
    ]
    for copy in work.copies:
        atom = by_id.get(copy.atom_id)
        if atom is None or copy.allocation_id in held:
            continue
        assigned.append(
            Assignment(
                allocation_id=copy.allocation_id,
                atoms=(atom.id,),
                env={VISIBLE_DEVICES: device_of(atom)},
                tenant_id=copy.tenant_id,
                container=copy.container,
            )
        )
    assignments = tuple(sorted(assigned, key=lambda a: a.allocation_id))
    present = sorted((g for g in gpus if g.present and g.node_id == node), key=lambda g: (g.index, g.id))
    layout = node_layout(pool, gate, carries_pool_layout=carries_pool_layout, own=own_layout, held=bool(held))
    kept = booked_gpus(by_id, holds if bookings is None else bookings, present, layout)
    sharing = (
        SharingSpec(
            pool.mode,
            told_replicas(pool, gate, held=bool(held)),
            pool.settings.scrub,
        )
        if pool is not None
        else SharingSpec("exclusive", 1)
    )
    return NodeSpec(
        node=node,
        gpus=tuple(GpuSpec(g.id, gpu_layout(g, layout, g.id in kept)) for g in present),
        sharing=sharing,
        assignments=assignments,
        booked=bool(held),
    )


def booked_gpus(
    atoms: Mapping[str, Atom], bookings: Iterable[LiveHold], gpus: Iterable[Gpu], layout: str | None
) -> frozenset[str]:
    """The GPUs (of `gpus`, by id) that bringing to `layout` would cut a live booking, now or later,
    away from: one whose whole-GPU atom, or a slot, is booked, or one whose booked MIG instance the
    way to `layout` destroys (`mig_plan.spares`: a repartition keeps an instance already where the
    layout wants one, so a node restarted at another layout that still has the booked slice is
    re-cut around it, and its atoms take work again once it is there).

    A layout change's own bookings (the gate's partition holds) do not count: they exist to let the
    change through. Nor does a booking of an atom gone from its node (an instance lost with a
    restart): nothing of it is left to cut, and putting the GPU's layout back is what gives it its
    instance again. Nor, likewise, does a booking of the whole GPU while it is split in MIG
    instances (a node restarted at another layout): the whole GPU is not there to hand over, and no
    holder's instance is cut by taking it back to its layout (an instance booked itself still counts)."""
    by_id = {g.id: g for g in gpus}
    whole: set[str] = set()
    parts: dict[str, set[int]] = {}
    for b in bookings:
        atom = atoms.get(b.atom_id)
        if is_partition_change(b.allocation_id) or atom is None or not atom.present:
            continue
        gpu = by_id.get(atom.gpu_id)
        split = gpu is not None and gpu.mig_mode_current
        if atom.cls == "gpu" and split:
            continue
        instance = _instance_of(gpu, atom) if gpu is not None and atom.cls == "gpu.mig" else None
        if instance is None:
            whole.add(atom.gpu_id)
        else:
            parts.setdefault(atom.gpu_id, set()).add(instance)
    cut = {
        g
        for g, instances in parts.items()
        if not spares(by_id[g].report(), _model_of(by_id[g]), layout, instances)
    }
    return frozenset(whole | cut)


def _instance_of(gpu: Gpu, atom: Atom) -> int | None:
    """The GPU instance (GI id) of a MIG atom as its GPU reports it now (None: not reported)."""
    return next((i.gi_id for i in gpu.mig_instances if mig_atom_key(i) == atom.key), None)


def _model_of(gpu: Gpu) -> GpuModel | None:
    return None if gpu.model is None else find_model(gpu.model)


def gpu_layout(gpu: Gpu, layout: str | None, booked: bool) -> str | None:
    """The layout a GPU's spec tells it: its node's `layout`, unless a booking holds it (`booked`)
    and it is not at that layout yet, when it is told none and keeps the one it has. A layout
    change under holders goes through the gate, whose holds are no holder's (docs/concepts.md, the gate).
    A booked GPU of a product this catalog does not know is told none too: nothing here can say it is
    at the layout, and a node whose catalog knows the product could re-cut it under its holder."""
    if layout is None or not booked:
        return layout
    model = _model_of(gpu)
    return layout if model is not None and converged(gpu.report(), model, layout) else None


def next_generation(generation: int, stored_digest: str | None, digest: str) -> int | None:
    """The generation to store with `digest`: one more than `generation` when the content changed
    since the digest stored with it, None when it did not (nothing to write)."""
    return None if stored_digest == digest else generation + 1


def check_wait(seconds: float | None) -> timedelta:
    """How long a spec read may wait for a change: 0 to `MAX_WAIT` (None: not at all)."""
    if seconds is None:
        return timedelta(0)
    if not 0 <= seconds <= MAX_WAIT.total_seconds():
        raise InvalidInput(
            f"wait must be between 0 and {int(MAX_WAIT.total_seconds())} seconds, not {seconds}",
            {"field": "wait"},
        )
    return timedelta(seconds=seconds)
