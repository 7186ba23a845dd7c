"""An endpoint's components (docs/endpoints.md#components): `components.create`, `get`, `list`, `scale` and
`delete`.

A component deploys one model on one partition type of its variant; each copy takes one free
partition of that type on an instance that has been cut (`domain.endpoints.endpoints.place_copies`), on a
node whose host still has the copy's CPU cores and memory, and copies beyond what is free wait
(`pending`, with the shortfall's reason). Waiting copies are placed again whenever the endpoint
gains partitions (an instance handed over by the layout gate: `place_pending_in`, called by
`endpoint_holds.take_over`) and whenever a component is created, scaled or deleted. No timer.

Every write to an endpoint's components holds the endpoint's row lock, so two writers never
choose the same partition; the unique key on a copy's partition is the database's fence behind it.
Lock order: a node's row before its endpoint's (the gate's hand-over holds the node's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from better_compute.domain.endpoints import endpoints as rules
from better_compute.domain.endpoints.commands import (
    CreateComponent,
    create_component_of,
    parse_component,
    parse_endpoint,
)
from better_compute.domain.endpoints.copy_states import ready_copies, ready_kept, state_of
from better_compute.domain.endpoints.endpoints import copy_allocation_id, copy_of
from better_compute.domain.endpoints.events import ComponentChanged
from better_compute.domain.endpoints.records import ComponentRecord, CopyRecord, EndpointRecord
from better_compute.domain.fleet.replica_states import ReplicaState, live_nodes
from better_compute.domain.fleet.shares import share
from better_compute.domain.kernel.errors import AlreadyExists, InvalidState, NotFound
from better_compute.domain.metering.showback import gpu_hour_price
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.tenancy import check_ref, tenant_scope
from better_compute.service.endpoints.ports import EndpointsTx
from better_compute.service.kernel.paging import Listing, fetch, page
from better_compute.service.kernel.ports import StorePort

UNLIMITED_CORES = Decimal(10**9)
UNLIMITED_MEMORY = 10**15
"""What a host that declares no CPU cores or memory offers: it is not checked."""


@dataclass(frozen=True, slots=True)
class CopyView:
    """One copy: where it runs (`placed`), or that it waits (`pending`). `mig_uuid` is the
    partition's `MIG-…` uuid once the node has reported it: what a serving gateway routes to."""

    copy: int
    state: str
    node: str | None = None
    gpu_id: str | None = None
    partition: str | None = None
    atom_id: str | None = None
    mig_uuid: str | None = None
    runtime_state: str | None = None
    """What the node it is on last said of its container (`copy_states.state_of`); None: nothing."""


@dataclass(frozen=True, slots=True)
class ComponentView:
    record: ComponentRecord
    spec: rules.ComponentSpec
    tenant_id: str
    copies: tuple[CopyView, ...]
    reason: str | None
    ready: int = 0
    """Copies ready (`copy_states.ready_copies`); without a container, the placed ones: nothing is
    started for them, the holder serves what is placed."""

    @property
    def placed(self) -> int:
        return sum(1 for c in self.copies if c.state == "placed")


def component_not_found(name: str) -> NotFound:
    return NotFound(f"component {name} not found", {"name": name})


def _endpoint(tx: EndpointsTx, principal: Principal, name: str, *, lock: bool) -> EndpointRecord:
    record = tx.endpoints.get(name, lock=lock)
    if record is None or not (principal.is_admin or principal.tenant_id == record.tenant_id):
        raise NotFound(f"endpoint {name} not found", {"endpointName": name})
    return record


Rooms = dict[str, rules.HostRoom]
"""Each node's host room (CPU cores and memory) for copies."""


@dataclass(frozen=True, slots=True)
class Cut:
    """A variant's cut instances: their partitions, each node's host room before any copy, each
    partition's share of its GPU and each node's price per GPU-hour (showback)."""

    partitions: list[rules.Partition]
    rooms: Rooms
    shares: dict[str, Fraction]
    prices: dict[str, Decimal | None]


def _cut(tx: EndpointsTx, endpoint: str, variant: rules.Variant) -> Cut:
    """The variant's instances that are cut (no layout change under way)."""
    instances = [i for i in tx.endpoints.instances(endpoint) if i.variant == variant.name]
    nodes = [i.node_id for i in instances]
    cut = [n for n in nodes if n not in tx.mig_layouts.of_nodes(nodes)]
    found = [a for a in tx.atoms.of_nodes(cut) if a.present]
    mig = [a for a in found if a.cls == "gpu.mig" and isinstance(a.attributes.get("migProfile"), str)]
    partitions = [rules.Partition(a.id, a.node, a.gpu_id, f"mig-{a.attributes['migProfile']}") for a in mig]
    gpus = Counter(node for node, _ in {(a.node, a.gpu_id) for a in found})
    hosts = tx.nodes.by_ids(cut)
    rooms = {
        n: rules.HostRoom(
            UNLIMITED_CORES if h.host_cpu_cores is None else Decimal(h.host_cpu_cores),
            UNLIMITED_MEMORY if h.host_memory_mib is None else h.host_memory_mib,
        )
        for n, h in hosts.items()
    }
    return Cut(
        partitions,
        rooms,
        {a.id: share(a) for a in mig},
        {n: gpu_hour_price(variant.price_per_instance_hour, gpus[n]) for n in cut},
    )


@dataclass(frozen=True, slots=True)
class Plan:
    """Where every copy of an endpoint's components goes (None: it waits), how many each component
    has placed, and why each one still waits (None: every copy placed)."""

    specs: dict[str, rules.ComponentSpec]
    copies: dict[str, list[CopyRecord]]
    where: dict[tuple[str, int], rules.Partition | None]
    reasons: dict[str, str | None]
    shares: dict[str, Fraction]
    """Each partition's share of its GPU, by atom id."""
    prices: dict[str, Decimal | None]
    """Each instance's price per GPU-hour, by node id."""

    def placed(self, name: str) -> int:
        return sum(1 for c in self.copies[name] if self.where[(name, c.copy)] is not None)


def plan_in(tx: EndpointsTx, endpoint: str, leaving: frozenset[str] = frozenset()) -> Plan:
    """Plan the copies of the endpoint's components: a copy keeps its partition while that is still
    there, of its type, and not on a node `leaving` (about to be re-cut); waiting copies take free
    partitions of their type (`domain.endpoints.endpoints.place_copies`). Writes nothing."""
    found = tx.components.of_endpoint(endpoint)
    specs = {c.name: parse_component(c.spec) for c in found}
    copies = tx.components.copies(sorted(specs))
    record = tx.endpoints.get(endpoint)
    variants = {v.name: v for v in parse_endpoint(record.spec).variants} if record else {}
    by_variant: dict[str, tuple[list[rules.Partition], Rooms]] = {}
    shares: dict[str, Fraction] = {}
    prices: dict[str, Decimal | None] = {}
    for variant in sorted({s.variant_name for s in specs.values()} & set(variants)):
        cut = _cut(tx, endpoint, variants[variant])
        by_variant[variant] = (
            [p for p in cut.partitions if p.node not in leaving],
            {n: r for n, r in cut.rooms.items() if n not in leaving},
        )
        shares.update(cut.shares)
        prices.update(cut.prices)
    valid = {p.atom_id: p for parts, _ in by_variant.values() for p in parts}
    # Each node's host room left after the copies that keep their partition.
    left: Rooms = {n: r for _, rooms in by_variant.values() for n, r in rooms.items()}
    where: dict[tuple[str, int], rules.Partition | None] = {}
    taken: set[str] = set()
    for name, spec in sorted(specs.items()):
        for c in copies[name]:
            kept = valid.get(c.atom_id) if c.atom_id is not None else None
            if kept is None or kept.partition_type != spec.partition_type or kept.atom_id in taken:
                where[(name, c.copy)] = None
                continue
            where[(name, c.copy)] = kept
            taken.add(kept.atom_id)
            room = left[kept.node]
            left[kept.node] = rules.HostRoom(
                room.cpu_cores - spec.cpu_cores, room.memory_mib - spec.memory_mib
            )
    reasons: dict[str, str | None] = dict.fromkeys(specs)
    holding = {name: sum(1 for c in copies[name] if where[(name, c.copy)] is not None) for name in specs}
    # Each component first places the waiting copies it needs to reach its floor, then the rest:
    # scarce partitions go where a floor depends on them (as `domain.endpoints.endpoints.plan_relayout`
    # plans).
    for floor in (True, False):
        for name, spec in sorted(specs.items()):
            waiting = [c for c in copies[name] if where[(name, c.copy)] is None]
            if floor:
                waiting = waiting[: max(0, spec.min_copies - holding[name])]
            if not waiting:
                continue
            partitions, _ = by_variant[spec.variant_name]
            on = Counter(p.node for c in copies[name] if (p := where[(name, c.copy)]) is not None)
            plan = rules.place_copies(spec, len(waiting), partitions, taken, left, on)
            for c, chosen in zip(waiting, plan.placed, strict=False):
                where[(name, c.copy)] = chosen
                taken.add(chosen.atom_id)
                room = left[chosen.node]
                left[chosen.node] = rules.HostRoom(
                    room.cpu_cores - spec.cpu_cores, room.memory_mib - spec.memory_mib
                )
            if not floor or plan.pending:
                reasons[name] = plan.reason
    return Plan(specs, copies, where, reasons, shares, prices)


def below_floor(plan: Plan) -> tuple[str, int, int] | None:
    """The first component the plan leaves with fewer placed copies than its `minCopies` (name,
    placed, floor), counting only components that had that many placed before; None: none."""
    for name, spec in sorted(plan.specs.items()):
        before = sum(1 for c in plan.copies[name] if c.atom_id is not None)
        after = plan.placed(name)
        if after < spec.min_copies <= before:
            return name, after, spec.min_copies
    return None


def below_ready_floor(
    plan: Plan, states: Mapping[str, Sequence[ReplicaState]], live: Set[str]
) -> tuple[str, int, int] | None:
    """The first component with a container the plan leaves with fewer READY copies than its
    `minCopies` (name, ready, floor): a copy that moves is not ready on its new node until that node
    says so (`domain.endpoints.copy_states`), so a step that would leave too few must wait for copies
    to become ready, and a copy on a node that is not `live` does not count (a silent node's word that
    its copies are ready is not taken: the relayout waits); None: none. Components without a container
    are `below_floor`'s."""
    for name, spec in sorted(plan.specs.items()):
        if spec.container is None:
            continue
        staying = {
            c.copy: (p.node if (p := plan.where[(name, c.copy)]) is not None else None)
            for c in plan.copies[name]
        }
        kept = ready_kept(plan.copies[name], staying, states, live)
        if kept < spec.min_copies:
            return name, kept, spec.min_copies
    return None


def move_ahead_in(
    tx: EndpointsTx,
    plan: Plan,
    leaving: str,
    states: Mapping[str, Sequence[ReplicaState]],
    live: Set[str],
    now: datetime,
) -> int:
    """Move copies of components with a container off the instance `leaving` before it is re-cut,
    as many as their `minCopies` of ready copies allows now (a copy that moves is not ready until
    its new node says so): the ones not ready first, then ready ones while the others that stay
    ready keep the floor. `plan` is `plan_in` with `leaving`: the moved copies take its partitions,
    the others keep theirs on `leaving` (which the plan gives no copy). Answers how many moved."""
    current = plan_in(tx, next(iter(plan.specs.values())).endpoint_name) if plan.specs else plan
    where = dict(plan.where)
    moved = 0
    for name, spec in sorted(plan.specs.items()):
        on = [c for c in plan.copies[name] if c.node_id == leaving]
        if not on:
            continue
        ready = {r.copy for r in ready_copies(plan.copies[name], states, live)}
        budget = len(ready) - spec.min_copies
        for c in sorted(on, key=lambda c: (c.copy in ready, c.copy)):
            key = (name, c.copy)
            # a component without a container keeps its copies there until the cut, as before
            can = (
                spec.container is not None
                and plan.where[key] is not None
                and (c.copy not in ready or budget > 0)
            )
            if not can:
                where[key] = current.where[key]
                continue
            budget -= c.copy in ready
            moved += 1
    apply_in(tx, replace(plan, where=where), now)
    return moved


def copy_states_in(tx: EndpointsTx, plan: Plan) -> dict[str, list[ReplicaState]]:
    """What the nodes said of the containers of the plan's copies."""
    ids = [copy_allocation_id(name, c.copy) for name, mine in plan.copies.items() for c in mine]
    return tx.replica_states.of_allocations(ids)


def live_in(tx: EndpointsTx, copies: Mapping[str, Sequence[CopyRecord]], now: datetime) -> frozenset[str]:
    """The nodes these copies are on that are live at `now` (`replica_states.live_nodes`): one read of
    their last contacts."""
    nodes = sorted({c.node_id for mine in copies.values() for c in mine if c.node_id is not None})
    return live_nodes(tx.nodes.contacts(nodes), now) if nodes else frozenset()


def holds_copy_in(tx: EndpointsTx, node_id: str, allocation_id: str) -> bool | None:
    """Whether the copy `allocation_id` names is on the node now (None: it names no copy; False for
    a copy that is gone, so a node learns nothing of other nodes' copies)."""
    named = copy_of(allocation_id)
    if named is None:
        return None
    component, index = named
    found = tx.components.copies([component])[component]
    return any(c.copy == index and c.node_id == node_id for c in found)


def apply_in(tx: EndpointsTx, plan: Plan, now: datetime) -> dict[str, str | None]:
    """Write the plan's moves, each copy's showback span closing and opening at `now`; the reason
    each component still waits."""
    moved: list[str] = []
    for name, mine in plan.copies.items():
        for c in mine:
            chosen = plan.where[(name, c.copy)]
            atom = chosen.atom_id if chosen is not None else None
            if atom != c.atom_id and c.atom_id is not None:
                tx.components.place_copy(name, c.copy, None, None, now)
                # What a node said of the copy's container was about the partition it left: it is
                # not ready anywhere until the node it lands on says so (a move on one node too).
                moved.append(copy_allocation_id(name, c.copy))
    tx.replica_states.forget(moved)
    for name, mine in plan.copies.items():  # freed first, then taken: the unique key never trips
        for c in mine:
            chosen = plan.where[(name, c.copy)]
            if chosen is not None and chosen.atom_id != c.atom_id:
                tx.components.place_copy(
                    name,
                    c.copy,
                    chosen.atom_id,
                    chosen.node,
                    now,
                    plan.shares[chosen.atom_id],
                    plan.prices.get(chosen.node),
                )
    return plan.reasons


def place_pending_in(tx: EndpointsTx, endpoint: str, now: datetime) -> dict[str, str | None]:
    """Give waiting copies of the endpoint's components free partitions of their type, and make a
    copy whose partition is gone (its instance re-cut or lost) wait again; the reason each
    component still waits, by component (None: every copy placed). The caller holds the
    endpoint's row lock."""
    return apply_in(tx, plan_in(tx, endpoint), now)


def ready_counts_in(tx: EndpointsTx, specs: Sequence[rules.ComponentSpec], now: datetime) -> dict[str, int]:
    """Ready copies per component with a container at `now` (`copy_states.ready_copies`)."""
    runs = [s.name for s in specs if s.container is not None]
    if not runs:
        return {}
    copies = tx.components.copies(runs)
    states = tx.replica_states.of_allocations(
        [copy_allocation_id(name, c.copy) for name in runs for c in copies[name]]
    )
    live = live_in(tx, copies, now)
    return {name: len(ready_copies(copies[name], states, live)) for name in runs}


def _waiting_reason(tx: EndpointsTx, endpoint: str, name: str, pending: int) -> str:
    """Why the component's `pending` copies wait now, as placing them now would say (no free
    partition of its type, or no host room beside the free ones): a read, never a stale reason."""
    now_says = plan_in(tx, endpoint).reasons.get(name)
    return now_says if now_says is not None else f"{pending} copies wait to be placed"


def _view(
    tx: EndpointsTx, record: ComponentRecord, tenant_id: str, now: datetime, reason: str | None = None
) -> ComponentView:
    spec = parse_component(record.spec)
    copies = tx.components.copies([record.name])[record.name]
    atoms = {a.id: a for a in tx.atoms.of_nodes(sorted({c.node_id for c in copies if c.node_id}))}
    states = (
        tx.replica_states.of_allocations([copy_allocation_id(record.name, c.copy) for c in copies])
        if spec.container is not None
        else {}
    )
    shown = []
    for c in copies:
        atom = atoms.get(c.atom_id) if c.atom_id else None
        if atom is None:
            shown.append(CopyView(c.copy, "pending"))
            continue
        uuid = atom.attributes.get("migUuid")
        said = state_of(c, states)
        shown.append(
            CopyView(
                c.copy,
                "placed",
                atom.node,
                atom.gpu_id,
                spec.partition_type,
                atom.id,
                uuid if isinstance(uuid, str) and uuid else None,
                None if said is None else said.state,
            )
        )
    pending = sum(1 for c in shown if c.state == "pending")
    if pending and reason is None:
        reason = _waiting_reason(tx, record.endpoint, record.name, pending)
    placed = sum(1 for c in shown if c.state == "placed")
    if spec.container is not None:
        ready = len(ready_copies(copies, states, live_in(tx, {record.name: copies}, now)))
    else:
        ready = placed
    return ComponentView(record, spec, tenant_id, tuple(shown), reason if pending else None, ready)


def _changed(tx: EndpointsTx, view: ComponentView, change: str, now: datetime) -> None:
    event = ComponentChanged(
        view.record.name, view.tenant_id, view.record.endpoint, change, view.spec.copies, view.placed
    )
    tx.events.append(event, now)


def create(
    store: StorePort[EndpointsTx], principal: Principal, request: CreateComponent | object, now: datetime
) -> ComponentView:
    """Create a component and place its copies on free partitions of its type (the rest wait).
    `request` is the command the API builds, or the request as JSON (`create_component_of`)."""
    spec = rules.component_spec(
        request if isinstance(request, CreateComponent) else create_component_of(request)
    )
    with store.begin() as tx:
        endpoint = _endpoint(tx, principal, spec.endpoint_name, lock=True)
        if endpoint.status in ("Failed", "Deleting"):
            raise InvalidState(
                f"endpoint {endpoint.name} is {endpoint.status}; a component needs an endpoint that is"
                " Creating or InService",
                {"endpointName": endpoint.name, "status": endpoint.status},
            )
        rules.check_component_type(spec, parse_endpoint(endpoint.spec))
        existing = tx.components.get(spec.name)
        if existing is not None:
            rules.check_type_unchanged(parse_component(existing.spec), spec.partition_type)
            raise AlreadyExists(f"component {spec.name} already exists", {"name": spec.name})
        record = ComponentRecord(spec.name, endpoint.name, rules.component_json(spec), now, now)
        if not tx.components.add(record):
            raise AlreadyExists(f"component {spec.name} already exists", {"name": spec.name})
        tx.components.add_copies([CopyRecord(spec.name, i, None, None, now) for i in range(spec.copies)])
        reasons = place_pending_in(tx, endpoint.name, now)
        view = _view(tx, record, endpoint.tenant_id, now, reasons.get(spec.name))
        _changed(tx, view, "created", now)
        return view


def _mine(
    tx: EndpointsTx, principal: Principal, name: str, *, lock: bool
) -> tuple[ComponentRecord, EndpointRecord]:
    check_ref(name, "name")
    record = tx.components.get(name)
    if record is None:
        raise component_not_found(name)
    try:
        endpoint = _endpoint(tx, principal, record.endpoint, lock=lock)
    except NotFound:
        raise component_not_found(name) from None
    if lock:  # read again under the endpoint's lock: a concurrent delete or scale went first
        record = tx.components.get(name)
        if record is None:
            raise component_not_found(name)
    return record, endpoint


def get(store: StorePort[EndpointsTx], principal: Principal, name: str, now: datetime) -> ComponentView:
    """The component and each copy (its ready copies as of `now`): the routing table a serving
    gateway reads."""
    with store.read() as tx:
        record, endpoint = _mine(tx, principal, name, lock=False)
        return _view(tx, record, endpoint.tenant_id, now)


def list_components(
    store: StorePort[EndpointsTx],
    principal: Principal,
    now: datetime,
    *,
    endpoint_name: str | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> Listing[ComponentView]:
    """Components by name: of one endpoint, or of every endpoint the caller sees (ready copies as of
    `now`)."""
    with store.read() as tx:
        if endpoint_name is not None:
            endpoints = {
                endpoint_name: _endpoint(tx, principal, check_ref(endpoint_name, "endpointName"), lock=False)
            }
        else:
            scope = tenant_scope(principal, None)
            endpoints = {e.name: e for e in tx.endpoints.page(scope, None, None)}
        names = None if principal.is_admin and endpoint_name is None else sorted(endpoints)
        found = page(tx.components.page(names, fetch(limit), after), lambda r: r.name, limit, None)
        tenants = {e.name: e.tenant_id for e in endpoints.values()}
        items = []
        for r in found.items:
            tenant = tenants.get(r.endpoint)
            if tenant is None:
                owner = tx.endpoints.get(r.endpoint)
                tenant = owner.tenant_id if owner is not None else ""
            items.append(_view(tx, r, tenant, now))
        return Listing(items, found.next_cursor)


def scale(
    store: StorePort[EndpointsTx],
    principal: Principal,
    name: str,
    copies: object,
    now: datetime,
    *,
    min_copies: object = None,
    partition_type: object = None,
) -> ComponentView:
    """Set a component's copies: new ones take free partitions (or wait); going down drops
    waiting copies first, then the newest. Its partition type is fixed for its life."""
    with store.begin() as tx:
        record, endpoint = _mine(tx, principal, name, lock=True)
        spec = parse_component(record.spec)
        rules.check_type_unchanged(spec, partition_type)
        new = rules.scaled(spec, copies, min_copies)
        have = tx.components.copies([name])[name]
        if new.copies > len(have):
            start = max((c.copy for c in have), default=-1) + 1
            tx.components.add_copies(
                [CopyRecord(name, start + i, None, None, now) for i in range(new.copies - len(have))]
            )
        elif new.copies < len(have):
            order = sorted(have, key=lambda c: (c.atom_id is not None, -c.copy))  # waiting, newest first
            dropped = [c.copy for c in order[: len(have) - new.copies]]
            tx.components.drop_copies(name, dropped, now)
            tx.replica_states.forget([copy_allocation_id(name, i) for i in dropped])
        tx.components.set_spec(name, rules.component_json(new), now)
        reasons = place_pending_in(tx, endpoint.name, now)
        refreshed = tx.components.get(name)
        assert refreshed is not None
        view = _view(tx, refreshed, endpoint.tenant_id, now, reasons.get(name))
        _changed(tx, view, "scaled", now)
        return view


def delete(store: StorePort[EndpointsTx], principal: Principal, name: str, now: datetime) -> ComponentView:
    """Delete a component: its partitions are free for the endpoint's other components' waiting
    copies at once. Answers the component as it was."""
    with store.begin() as tx:
        record, endpoint = _mine(tx, principal, name, lock=True)
        view = _view(tx, record, endpoint.tenant_id, now)
        _forget_copies_of(tx, [name])
        tx.components.remove([name], now)
        place_pending_in(tx, endpoint.name, now)
        _changed(tx, view, "deleted", now)
        return view


def remove_of_endpoint_in(tx: EndpointsTx, endpoint: str, now: datetime) -> list[str]:
    """Remove every component of an endpoint being deleted (the caller holds its lock)."""
    names = [c.name for c in tx.components.of_endpoint(endpoint)]
    _forget_copies_of(tx, names)
    tx.components.remove(names, now)
    return names


def _forget_copies_of(tx: EndpointsTx, names: Sequence[str]) -> None:
    """Forget what nodes said of the copies of components that go: a component created again under
    the name has copies of the same names, and none may inherit an old container's word."""
    copies = tx.components.copies(names)
    tx.replica_states.forget([copy_allocation_id(n, c.copy) for n in names for c in copies[n]])


__all__ = [
    "ComponentView",
    "CopyView",
    "Plan",
    "apply_in",
    "below_floor",
    "component_not_found",
    "create",
    "delete",
    "get",
    "list_components",
    "place_pending_in",
    "plan_in",
    "remove_of_endpoint_in",
    "scale",
]
