"""Node inventory -> atoms, exactly as the table of docs/concepts.md#atoms says.

An atom is the unit the ledger books. Its id is derived from its physical identity (GPU uuid, kind,
the slice of a MIG instance or slot number), so re-ingesting a report yields the same ids and bookings
keep pointing at them. A MIG instance is named by its shape (`mig_key`: its profile and where it
starts on the GPU), never by the GPU-instance and compute-instance ids: the driver hands those out,
and gives the same slice other ids, or another slice the same ids, after a reboot or a re-partition.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from better_compute.domain import catalog
from better_compute.domain.catalog import GpuModel, normalize_profile_name
from better_compute.domain.fleet.inventory import GpuReport, MigInstance, NodeReport
from better_compute.domain.fleet.mig_plan import converged
from better_compute.domain.fleet.pools import PoolSharing, check_replicas, mps_units
from better_compute.domain.kernel.atom_classes import AtomClass
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.name_uuids import uuid5_hex
from better_compute.domain.kernel.selectors import Selector

AttrValue = str | int | float | bool

_ATOM_NAMESPACE = uuid.UUID("6f1d8e52-3c1b-4b8e-9a55-0c5b3f1e2a77")


def attribute_filters(items: Iterable[str], field: str = "attr") -> dict[str, str]:
    """`key=value` filters on atom attributes (a value may itself contain `=`)."""
    wanted: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(f"{field} must be key=value, not {item!r}", {"field": field})
        wanted[key] = value
    return wanted


def atom_id_for(gpu_uuid: str, key: str) -> str:
    """The stable id of the atom with this physical identity: the first 24 hex digits of the
    version 5 uuid of `<gpu uuid>/<key>`."""
    return "atm-" + uuid5_hex(_ATOM_NAMESPACE, f"{gpu_uuid}/{key}")[:24]


_SUB_GI = re.compile(r"^\d+c\.")
"""A compute instance narrower than its GPU instance is named `<c>c.<profile>` (`bcd.inventory`)."""


def mig_key(profile: str, placement_start: int, ci_id: int = 0) -> str:
    """The physical identity of a MIG instance within its GPU: `mig:<profile>@<placement start>`.

    NVML's GPU-instance and compute-instance ids are the driver's handles, not the slice: a node
    rebooted at another layout, or one re-created, can have another slice at a booked instance's
    ids and the booked slice at other ids. The profile and the placement start (on the GPU's
    memory-slice axis) are the slice itself: a restored slice gets back its atom id whatever ids the
    driver gives it, and another slice never takes a booked one's. A GPU instance holds one full-width
    compute instance (what `bcd` creates), so its key needs nothing more; a narrower compute instance
    (`<c>c.<profile>`, made by hand: several may share a GPU instance) adds its compute-instance id
    (`mig:1c.3g.40gb@4.2`), which is as stable as the driver keeps it."""
    name = normalize_profile_name(profile)
    key = f"mig:{name}@{placement_start}"
    return f"{key}.{ci_id}" if _SUB_GI.match(name) else key


def mig_atom_key(instance: MigInstance) -> str:
    """`mig_key` of a reported MIG instance."""
    return mig_key(instance.profile, instance.placement_start, instance.ci_id)


def legacy_mig_key(gi_id: int, ci_id: int) -> str:
    """The key a MIG atom had before atoms were named by their slice (`mig:<gi>.<ci>`, the driver's
    ids): what state written then (a node's scrub record) still names it by."""
    return f"mig:{gi_id}.{ci_id}"


class Attributes(Mapping[str, AttrValue]):
    """An atom's attributes, compact: a process holds every atom of its pools (hundreds of thousands
    on a big fleet), and a dict of strings per atom was most of each one's memory.

    The keys' positions are shared by every mapping with the same keys in the same order (one
    small dict per shape of attributes, not per atom); each mapping holds only a tuple of its
    values, strings among them interned (`compact`), so that every atom of a GPU model shares its
    product and profile names. It reads as any mapping does, compares equal to the dict with the
    same items, and is immutable."""

    __slots__ = ("_at", "_values")

    _SHAPES: ClassVar[dict[tuple[str, ...], dict[str, int]]] = {}

    def __init__(self, items: Mapping[str, AttrValue]) -> None:
        keys = tuple(items)
        at = self._SHAPES.get(keys)
        if at is None:
            at = self._SHAPES.setdefault(
                tuple(sys.intern(k) for k in keys), {k: n for n, k in enumerate(keys)}
            )
        self._at = at
        self._values = tuple(
            sys.intern(v) if type(v) is str and k not in UNIQUE_ATTRIBUTES else v for k, v in items.items()
        )

    def __getitem__(self, key: str) -> AttrValue:
        return self._values[self._at[key]]

    def __contains__(self, key: object) -> bool:
        return key in self._at

    def __iter__(self) -> Iterator[str]:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


UNIQUE_ATTRIBUTES = frozenset({"migUuid"})
"""Attributes whose value differs on every atom: interning them would only add an entry each."""


def compact(items: Mapping[str, AttrValue]) -> Attributes:
    """`items` as a compact `Attributes` (itself, when it already is one)."""
    return items if isinstance(items, Attributes) else Attributes(items)


@dataclass(frozen=True, slots=True)
class Atom:
    """A bookable (or, for parents and pending GPUs, unbookable) piece of one GPU."""

    id: str
    gpu_id: str
    node: str
    cls: AtomClass
    key: str
    """Physical identity within the GPU: `gpu`, `mig:<profile>@<placement start>` (`mig_key`) or
    `slot:<n>`."""
    bookable: bool
    partition_pending: bool
    pool_id: str | None
    numa_node: int | None
    nvlink_domain: str | None
    attributes: Mapping[str, AttrValue] = field(default_factory=dict)
    present: bool = True
    """False once its node stopped reporting it: kept, unbookable, so bookings keep pointing at it."""


NODE_KEY = "node"
"""The selector key that names an atom's node (`node In [gpu-a-1]` pins a device line to nodes,
`NotIn` keeps it off them). The node is where the atom lives, not one of the GPU's own attributes,
so it is not stored among `attributes`; `selects` reads it from the atom. An `In` names at most
`selectors.MAX_VALUES` nodes, as every expression does."""


def selects(selector: Selector, atom: Atom) -> bool:
    """Whether `atom` matches `selector`: its `node` expressions against the atom's node, the others
    against its attributes. Every request and device class is matched through here, so the `node`
    key means the same wherever a selector is given."""
    for expr in selector.match_expressions:
        if expr.key == NODE_KEY:
            if not expr.matches({NODE_KEY: atom.node}):
                return False
        elif not expr.matches(atom.attributes):
            return False
    return True


def nvlink_domains(gpus: Iterable[GpuReport]) -> dict[str, str | None]:
    """Each GPU's NVLink domain: its connected component over reported peers, named by its least uuid.

    A GPU with no NVLink peers has no domain.
    """
    gpu_list = list(gpus)
    parent: dict[str, str] = {g.uuid: g.uuid for g in gpu_list}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for gpu in gpu_list:
        for peer in gpu.nvlink_peers:
            if peer in parent:
                a, b = find(gpu.uuid), find(peer)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    linked = {g.uuid for g in gpu_list if any(p in parent for p in g.nvlink_peers)}
    linked |= {p for g in gpu_list for p in g.nvlink_peers if p in parent}
    return {g.uuid: (f"nvl-{find(g.uuid)}" if g.uuid in linked else None) for g in gpu_list}


def vram_gib(memory_mib: int) -> int:
    return round(memory_mib / 1024)


def derive_gpu_atoms(
    gpu: GpuReport,
    node: str,
    pool: PoolSharing | None,
    gpu_model: str | None,
    nvlink_domain: str | None = None,
    layout: str | None = None,
) -> list[Atom]:
    """The atoms of one GPU. The parent `gpu` atom always comes first.

    `pool` None means the GPU belongs to no pool; it is treated like an exclusive GPU.
    `gpu_model` is the catalog model id (None when the product is unknown to the catalog).
    `layout` is the MIG layout the GPU's node is told to give it (None: none, it is left as it is).
    A GPU whose MIG mode change waits for its reset, or one not at the layout it is told
    (`mig_plan.converged`: a node that joined, was re-imaged or restarted at another) is not
    schedulable until it is: every atom unbookable and `partitionPending`, since its node is about
    to cut them away.
    """
    pending = gpu.partition_pending or not converged(gpu, _model(gpu_model), layout)
    usable = gpu.healthy and not pending
    base: dict[str, AttrValue] = {"gpuProduct": gpu.product}
    if gpu_model is not None:
        base["gpuModel"] = gpu_model
    if gpu.numa_node is not None:
        base["numaNode"] = gpu.numa_node
    pool_id = pool.pool_id if pool else None
    mode = pool.mode if pool else "exclusive"

    def make(cls: AtomClass, key: str, bookable: bool, attrs: dict[str, AttrValue]) -> Atom:
        return Atom(
            id=atom_id_for(gpu.uuid, key),
            gpu_id=gpu.uuid,
            node=node,
            cls=cls,
            key=key,
            bookable=bookable and usable,
            partition_pending=pending,
            pool_id=pool_id,
            numa_node=gpu.numa_node,
            nvlink_domain=nvlink_domain,
            attributes=attrs,
        )

    parent_attrs = dict(base)
    parent_attrs["vramGiB"] = vram_gib(gpu.memory_mib)
    if nvlink_domain is not None:
        parent_attrs["nvlinkDomain"] = nvlink_domain

    if gpu.mig_mode_current:
        atoms = [make("gpu", "gpu", False, parent_attrs)]
        for inst in sorted(gpu.mig_instances, key=lambda i: (i.gi_id, i.ci_id)):
            attrs = dict(base)
            attrs.update(
                {"migProfile": inst.profile, "giId": inst.gi_id, "ciId": inst.ci_id, "migUuid": inst.uuid}
            )
            atoms.append(make("gpu.mig", mig_atom_key(inst), True, attrs))
        return atoms

    if mode in ("timeslice", "mps"):
        assert pool is not None
        replicas = check_replicas(pool.replicas)
        atoms = [make("gpu", "gpu", False, parent_attrs)]
        for slot in range(replicas):
            attrs = dict(base)
            attrs.update(
                {"sharing": mode, "slot": slot, "slots": replicas, "vramGiB": vram_gib(gpu.memory_mib)}
            )
            if mode == "mps":
                attrs["mpsUnits"] = mps_units(replicas)
            atoms.append(make("gpu.slot", f"slot:{slot}", True, attrs))
        return atoms

    return [make("gpu", "gpu", True, parent_attrs)]


def derive_node_atoms(
    report: NodeReport,
    pool_of_gpu: Callable[[str], PoolSharing | None],
    model_of_product: Callable[[str], str | None],
    layout: str | None = None,
) -> dict[str, list[Atom]]:
    """Every atom of a node, keyed by GPU uuid; `layout`: the MIG layout the node is told to give
    its GPUs (`mig_gate.node_layout`; None: none)."""
    domains = nvlink_domains(report.gpus)
    return {
        gpu.uuid: derive_gpu_atoms(
            gpu,
            report.node,
            pool_of_gpu(gpu.uuid),
            model_of_product(gpu.product),
            domains[gpu.uuid],
            layout,
        )
        for gpu in report.gpus
    }


def _model(model_id: str | None) -> GpuModel | None:
    return None if model_id is None else catalog.find_model(model_id)
