"""Fleet's ports: clusters, nodes, join tokens, GPUs, atoms, bindings, GPU states and pools, and what
fleet reads or ends of the contexts above it (the ledger, workloads, the gate, endpoints), each a
Protocol of the few methods it calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from better_compute.domain.endpoints.records import (
    EndpointInstance,
)
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.bindings import BindingState
from better_compute.domain.fleet.gpu_owners import Holder
from better_compute.domain.fleet.gpu_states import GpuPeriod, StateChange
from better_compute.domain.fleet.join_tokens import JoinToken
from better_compute.domain.fleet.node_agents import NodeAgent
from better_compute.domain.fleet.pools import PoolSettings
from better_compute.domain.fleet.records import Cluster, Gpu, LayoutRefusal, Node, Pool
from better_compute.domain.fleet.replica_states import ReplicaState
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.domain.kernel.events import Event
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import Booking
from better_compute.domain.ledger.records import LiveBooking, Reservation
from better_compute.domain.ledger.scrub import EndedHold
from better_compute.domain.metering.accounting import Held
from better_compute.domain.placement.class_quotas import HeldAtom
from better_compute.domain.placement.workloads import Terminating
from better_compute.service.tenancy.ports import LiveBookings, TenancyTx, TenantReservations, WorkloadLookup


class ClusterRepo(Protocol):
    def get(self, cluster_id: str) -> Cluster | None: ...

    def page(self, limit: int | None, after: str | None) -> list[Cluster]: ...

    def all(self) -> list[Cluster]:
        """Every cluster, read lean (placement reads them on every decision)."""
        ...

    def add_missing(self, clusters: Sequence[Cluster]) -> None:
        """Insert the clusters not yet known; known ones are left as they are."""
        ...

    def set_phase(self, cluster_id: str, phase: str, previous: str) -> bool:
        """Set the cluster's phase if it is still `previous`; False, and nothing written, when it is
        not (another writer changed it since it was read)."""
        ...

    def add(self, cluster: Cluster) -> bool:
        """Insert a new cluster; False, and nothing written, when its id is taken."""
        ...


class NodeRepo(Protocol):
    def by_ids(self, node_ids: Sequence[str]) -> dict[str, Node]: ...

    def contacts(self, node_ids: Sequence[str]) -> dict[str, datetime | None]:
        """Each of these nodes' last contact (`Node.last_contact_at`: its latest signed report or spec
        read; None: never), by node id, reading only those columns (what `replica_states.live_nodes`
        decides a node's word on its containers by, on `invoke`'s path too)."""
        ...

    def page(self, cluster_id: str | None, limit: int | None, after: str | None) -> list[Node]: ...

    def add_missing(self, nodes: Sequence[Node]) -> None: ...

    def lock(self, node_ids: Sequence[str]) -> None:
        """Hold the nodes until the transaction ends: whoever derives their atoms (a report, a pool
        change) reads their pool membership only once no other such writer is under way."""
        ...

    def mark_observed(self, node_id: str, generation: int, at: datetime) -> None: ...

    def register_key(self, node_id: str, public_key: str, at: datetime) -> None:
        """Make `public_key` the node's signing key and start its report sequence from 0 again."""
        ...

    def accept_sequences(self, taken: Sequence[tuple[str, int, datetime]]) -> bool:
        """Record each `(node, sequence, at)` as its node's last accepted report where the sequence
        is greater than the stored one; whether every one was (False: one at least was not, a replay
        or a report that lost a race; the caller must not commit)."""
        ...

    def accept_read(self, node_id: str, public_key: str, sequence: int, at: datetime) -> bool:
        """Record a signed spec read: its sequence as the node's last accepted and `at` as its last
        spec read, where the sequence is greater than the stored one and the node's key is still
        `public_key`; whether it was (False: a replay, a used number or a new key; nothing written)."""
        ...

    def report_ids_taken(self, wanted: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of these `(node, reportId)` pairs were accepted before: resent reports, to be
        answered as accepted and not applied again."""
        ...

    def take_report_ids(self, taken: Sequence[tuple[str, str, datetime]]) -> None:
        """Record each `(node, reportId, at)` as accepted from its node (ids `report_ids_taken`
        said are new, under the nodes' locks)."""
        ...

    def advance_spec(self, node_id: str, generation: int, digest: str) -> bool:
        """Store `digest` with generation `generation + 1` if the node is still at `generation`."""
        ...

    def set_reboot_required(self, node_id: str, required: bool) -> None:
        """Record whether the node's last inventory said a GPU waits for a reboot."""
        ...

    def set_layout_refused(self, node_id: str, refused: Sequence[LayoutRefusal]) -> None:
        """Record the GPUs the node's last inventory said it could not bring to their layout, and why
        (none: each converged)."""
        ...

    def set_owned_elsewhere(
        self, node_id: str, holders: Sequence[tuple[str, str]], at: datetime | None
    ) -> None:
        """Record the `(uuid, holding node)` pairs of the node's last refused inventory, and when it
        was refused (none, None: an inventory of it was taken since)."""
        ...

    def set_mig_layout(self, node_ids: Sequence[str], layout: str | None) -> None:
        """The layout the nodes are told instead of their pool's (None: their pool's again)."""
        ...

    def set_cordoned(self, node_id: str, cordoned: bool) -> None:
        """Record the node's cordon (the caller holds the node: `lock`)."""
        ...

    def cordoned_ids(self) -> frozenset[str]:
        """Every cordoned node of the fleet (a handful at most: an operator's doing)."""
        ...


class JoinTokenRepo(Protocol):
    def add(self, token: JoinToken) -> None: ...

    def spend(self, token_hash: str, node_id: str, now: datetime) -> bool:
        """Mark the node's token used if it is unused and unexpired at `now`; True for the one call
        that did (of any number racing)."""
        ...

    def get(self, token_hash: str) -> JoinToken | None: ...


class ReplicaStateRepo(Protocol):
    """Each node's last word on the container it runs for an allocation (domain.fleet.replica_states)."""

    def put(self, s: ReplicaState) -> None: ...

    def of_allocations(self, allocation_ids: Sequence[str]) -> dict[str, list[ReplicaState]]:
        """Per allocation, what each node reported of its container (an empty list: none yet)."""
        ...

    def problems(self, limit: int = 1000) -> list[ReplicaState]:
        """The states carrying a problem, oldest first (what doctor lists)."""
        ...

    def ready_on(self, node_id: str) -> list[ReplicaState]:
        """What the node last said `ready`, by allocation."""
        ...

    def forget(self, allocation_ids: Sequence[str]) -> None: ...

    def forget_on(self, allocation_id: str, node_id: str) -> None:
        """Drop what one node said of an allocation's container (it removed it)."""
        ...


class NodeAgentRepo(Protocol):
    """Where each node's agent listens and the token it answers to (domain.fleet.node_agents)."""

    def put(self, agent: NodeAgent) -> None: ...

    def get(self, node_id: str) -> NodeAgent | None: ...


class BindingRepo(Protocol):
    """Each node's part of an allocation's binding (domain.fleet.bindings), as the node last reported it."""

    def put(
        self, allocation_id: str, node_id: str, state: BindingState, detail: str | None, at: datetime
    ) -> None: ...

    def of_allocations(
        self, allocation_ids: Sequence[str], *, for_update: bool = False
    ) -> dict[str, dict[str, BindingState]]:
        """Per allocation, the state each node reported (none: no node reported yet); `for_update`
        locks the rows read until the transaction ends (a node's report of them waits)."""
        ...


class GpuRepo(Protocol):
    def get(self, gpu_id: str) -> Gpu | None: ...

    def by_ids(self, gpu_ids: Sequence[str]) -> dict[str, Gpu]:
        """The GPUs with these uuids that have a row, by uuid."""
        ...

    def of_nodes(self, node_ids: Sequence[str]) -> list[Gpu]: ...

    def page(self, node_id: str | None, limit: int | None, after: str | None) -> list[Gpu]: ...

    def put(self, gpus: Sequence[Gpu]) -> None:
        """Create or replace these GPUs, in the order given. A present GPU's node holds its uuid and
        its MIG instances' (domain.fleet.gpu_owners), a GPU not present holds nothing; a uuid another
        node holds is never taken: GpuOwnedElsewhere, and the caller must not commit. Between two
        transactions the database decides: the second to claim a uuid waits for the first, and
        is refused if it committed."""
        ...

    def holders(self, uuids: Sequence[str]) -> dict[str, Holder]:
        """The node holding each of these GPU or MIG uuids that a present GPU is known by."""
        ...


class AtomRepo(Protocol):
    def of_nodes(self, node_ids: Sequence[str]) -> list[Atom]: ...

    def ids_by_gpu(self, node_ids: Sequence[str]) -> dict[str, list[str]]:
        """Every atom id of the nodes' GPUs (present or not, parents included), by GPU."""
        ...

    def of_pool(self, pool_id: str) -> list[Atom]:
        """The pool's present atoms."""
        ...

    def page(
        self,
        *,
        pool_id: str | None,
        cls: str | None,
        bookable: bool | None,
        limit: int | None,
        after: str | None,
    ) -> list[Atom]:
        """Present atoms in id order, filtered."""
        ...

    def put(self, atoms: Sequence[Atom]) -> None:
        """Create or replace these atoms, in the order given."""
        ...

    def ended_unscrubbed(
        self, now: datetime, *, pool_id: str | None = None, atom_ids: Sequence[str] | None = None
    ) -> list[EndedHold]:
        """Tenants' bookings of the pool's atoms (or of `atom_ids`), made in the atom's pool, that
        ended by `now` and after the atom's last scrub (domain.ledger.scrub.owed_by)."""
        ...

    def mark_scrubbed(self, node_id: str, atom_ids: Sequence[str], now: datetime) -> list[str]:
        """Record the node's atoms among these as scrubbed at `now`; returns those."""
        ...

    def mark_scrubbed_pool(self, pool_id: str, now: datetime) -> None:
        """Count every atom of the pool as scrubbed at `now`."""
        ...

    def held_at(self, tenant_ids: Sequence[str] | None, at: datetime) -> list[HeldAtom]:
        """The atoms these tenants (every tenant when None) hold at `at`: one per live booking of
        theirs that covers the instant, reservations and every other allocation alike, with the
        cluster of the atom's node."""
        ...


class GpuStateRepo(Protocol):
    """The history of each GPU's state (`domain.fleet.gpu_states`): periods, at most one open per GPU."""

    def open_of(self, gpu_ids: Sequence[str]) -> dict[str, GpuPeriod]:
        """The open period of each of these GPUs that has one."""
        ...

    def write(self, changes: Sequence[StateChange]) -> None:
        """Close and open periods as planned; in the transaction of the change they record."""
        ...

    def during(self, pool_ids: Sequence[str] | None, window: Window) -> list[GpuPeriod]:
        """Periods in these pools (in any pool or none, when None) that meet `window`."""
        ...

    def held_during(self, pool_ids: Sequence[str] | None, window: Window) -> list[Held]:
        """Live bookings that meet `window`, of the GPUs that have a period `during` returns."""
        ...


class PoolRepo(Protocol):
    def get(self, pool_id: str) -> Pool | None: ...

    def all(self) -> list[Pool]: ...

    def seats(self) -> list[tuple[str, str, str, str]]:
        """Every pool's (id, cluster, owner, meter): what placement needs of a pool, all fixed at
        creation, read without the settings."""
        ...

    def of_nodes(self, node_ids: Sequence[str]) -> dict[str, Pool]:
        """The pool of each node that belongs to one."""
        ...

    def members(self, pool_ids: Sequence[str] | None = None) -> dict[str, list[str]]:
        """Each pool's nodes in name order (every pool's when `pool_ids` is None)."""
        ...

    def add(self, pool: Pool) -> bool:
        """Insert the pool; False when its id or name is taken."""
        ...

    def compare_and_set(self, pool_id: str, generation: int, settings: PoolSettings) -> bool:
        """Write new settings and bump the generation if it is still `generation`; True if it was."""
        ...

    def remove(self, pool_id: str, generation: int) -> bool:
        """Delete the pool, its quota rows and policies, if it is still at `generation` (else
        nothing, and False): a concurrent change of its nodes bumps the generation first."""
        ...

    def set_members(self, pool_id: str, node_ids: Sequence[str]) -> bool:
        """Make these the pool's nodes; False (and nothing written for the rest) when another pool
        holds one of them."""
        ...


class NodeBookings(LiveBookings, Protocol):
    """What fleet asks of the ledger (`service.ledger.ports.LedgerPort`): who holds a node's atoms, and the
    end of an allocation a node reports gone."""

    def live_on(self, atom_ids: Sequence[str], since: datetime) -> list[LiveBooking]:
        """Live bookings of these atoms that end after `since` (or never), with who holds them."""
        ...

    def busy_spans(self, atom_ids: Sequence[str], since: datetime) -> list[Window]: ...

    def allocation_bookings(self, allocation_id: str) -> list[Booking]: ...

    def end_allocation(self, allocation_id: str, now: datetime, event: Event) -> int:
        """Cut the allocation's live bookings at `now` (cancel those not started); `event` is
        appended when any changed. Returns how many did."""
        ...


class TerminatingReplicas(WorkloadLookup, Protocol):
    """What fleet and the gate ask of workloads (`service.placement.ports.WorkloadRepo`): the replicas still
    terminating."""

    def terminating_among(self, allocation_ids: Sequence[str]) -> set[str]: ...

    def end_terminating(self, allocation_id: str) -> Terminating | None: ...


class NodeLayouts(Protocol):
    """What fleet reads of the MIG layout gate (`service.gate.ports.MigLayoutRepo`): the nodes it holds."""

    def of_nodes(self, node_ids: Sequence[str]) -> dict[str, MigLayoutGate]: ...


class NodeInstances(Protocol):
    """What fleet reads of endpoints (`service.endpoints.ports.EndpointRepo`): the instances on a pool's
    nodes."""

    def instances_of_nodes(self, node_ids: Sequence[str]) -> dict[str, EndpointInstance]: ...


class PoolReservations(TenantReservations, Protocol):
    """What fleet reads of reservations (`service.ledger.ports.ReservationRepo`): whether a pool still has
    some."""

    def page(
        self, tenant_id: str | None, pool_id: str | None, limit: int | None, after: str | None
    ) -> list[Reservation]:
        """Reservations newest first (descending id, ids being time-ordered), those older than the
        id `after` when given: the order `reservations list` promises."""
        ...


class FleetHooks(Protocol):
    """What fleet tells the contexts above it, inside the transaction that made the change, as it
    makes it: the gate holds a node's new atoms for its layout change and gates a pool's new shape,
    and endpoints hold an instance's atoms and move the copies on lost ones. Fleet calls each hook at
    the point the change is made, and never learns who hears it; which handler hears which hook is
    said in one place, `service/hooks.py`, which the storage's unit of work binds to itself.

    Every hook runs in the caller's transaction, under the node locks it holds."""

    def atoms_lost(self, lost: Sequence[Atom], now: datetime) -> None:
        """Atoms that were present are not any more (a GPU gone or released, an instance destroyed),
        their rows just written."""
        ...

    def atoms_found(self, found: Sequence[Atom], now: datetime) -> None:
        """Atoms that were not present are now (a repartition's instances, new slots, a node's first
        report), their rows just written; called after `atoms_lost` of the same write."""
        ...

    def nodes_leaving(self, node_ids: Sequence[str], now: datetime) -> None:
        """Nodes leave their pool, before their atoms are derived for no pool."""
        ...

    def pool_reshaped(
        self, pool_id: str, node_ids: Sequence[str], old_shape: str | None, new_shape: str, now: datetime
    ) -> None:
        """A pool's shape changed (a mig pool's layout, a slot pool's `replicas`, as
        `domain.gate.mig_gate.pool_shape` writes it), its atoms re-derived: `node_ids`, its nodes
        that stay and serve no endpoint, keep the old one until they may take the new."""
        ...

    def nodes_joined(self, pool_id: str, node_ids: Sequence[str], layout: str, now: datetime) -> None:
        """Nodes joined a mig pool of `layout`, their atoms derived for it."""
        ...

    def atom_of_unbooked(self, allocation_id: str) -> str | None:
        """The atom a handed-over allocation the ledger books for no tenant runs on now (an
        endpoint copy, `copy:<component>:<index>`, on its partition), or None: none by that name,
        or not placed. What a node may report on besides its tenants' bookings."""
        ...

    def holds_copy(self, node_id: str, allocation_id: str) -> bool | None:
        """Whether an endpoint copy (`copy:<component>:<index>`) is on the node now: a node reports
        only on the copies it runs. None: the allocation names no copy (the ledger decides)."""
        ...


class FleetTx(TenancyTx, Protocol):
    """The slice of a transaction fleet's use cases use: tenancy's, fleet's own repositories, and what
    fleet asks of the ledger, workloads, the gate and endpoints."""

    @property
    def clusters(self) -> ClusterRepo: ...

    @property
    def nodes(self) -> NodeRepo: ...

    @property
    def join_tokens(self) -> JoinTokenRepo: ...

    @property
    def bindings(self) -> BindingRepo: ...

    @property
    def replica_states(self) -> ReplicaStateRepo: ...

    @property
    def node_agents(self) -> NodeAgentRepo: ...

    @property
    def gpus(self) -> GpuRepo: ...

    @property
    def atoms(self) -> AtomRepo: ...

    @property
    def gpu_states(self) -> GpuStateRepo: ...

    @property
    def pools(self) -> PoolRepo: ...

    @property
    def ledger(self) -> NodeBookings: ...

    @property
    def workloads(self) -> TerminatingReplicas: ...

    @property
    def mig_layouts(self) -> NodeLayouts: ...

    @property
    def endpoints(self) -> NodeInstances: ...

    @property
    def reservations(self) -> PoolReservations: ...

    @property
    def hooks(self) -> FleetHooks:
        """The contexts above, told of what fleet changes in this transaction."""
        ...
