"""What the use cases need from storage: one small Protocol per aggregate, returning frozen records.

`storage/` implements them on SQL (one repository module per aggregate); no use case names a table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Protocol

from better_compute.domain.endpoints.records import (
    ComponentRecord,
    CopyRecord,
    EndpointInstance,
    EndpointRecord,
)
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.bindings import BindingState
from better_compute.domain.fleet.gpu_owners import Holder
from better_compute.domain.fleet.gpu_states import GpuPeriod, StateChange
from better_compute.domain.fleet.join_tokens import JoinToken
from better_compute.domain.fleet.pools import PoolSettings, SharingMode
from better_compute.domain.fleet.records import Cluster, Gpu, Node, Pool
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.domain.kernel.events import Event, LoggedEvent, StreamedEvent
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import Booking
from better_compute.domain.ledger.records import Reservation
from better_compute.domain.ledger.scrub import EndedHold
from better_compute.domain.metering.accounting import Held
from better_compute.domain.metering.billing import Price
from better_compute.domain.metering.metering import HeldTotal, MeteredBooking
from better_compute.domain.metering.showback import CopyTotal
from better_compute.domain.ops.audience import Reader
from better_compute.domain.ops.doctor import StrandedBooking
from better_compute.domain.placement.class_quotas import ClassQuota, HeldAtom
from better_compute.domain.placement.device_classes import DeviceClass
from better_compute.domain.placement.priority_classes import PriorityClass
from better_compute.domain.placement.records import Operation
from better_compute.domain.placement.workloads import Deployment, RunningReplica, Terminating, Workload
from better_compute.domain.tenancy.iam import Policy
from better_compute.domain.tenancy.records import Credential, Quota, Tenant

if TYPE_CHECKING:
    from better_compute.service.kernel.event_tail import Cursor, LogSnapshot


class Overlap(Exception):
    """A live booking already holds one of the atoms in the window (None: the store could not say which)."""

    def __init__(self, atom_id: str | None) -> None:
        super().__init__(atom_id)
        self.atom_id = atom_id


class NotBookable(Exception):
    """Some atoms do not exist or may not be booked (parent, unhealthy, missing, partition pending)."""

    def __init__(self, atom_ids: Sequence[str]) -> None:
        super().__init__(list(atom_ids))
        self.atom_ids = list(atom_ids)


class KeyTaken(Exception):
    """A concurrent request committed a reservation with the same idempotency key first."""


@dataclass(frozen=True, slots=True)
class TokenOwner:
    """Whom a token hash belongs to, as authentication needs it on every request."""

    credential_id: str
    tenant_id: str | None
    is_admin: bool
    live: bool


@dataclass(frozen=True, slots=True)
class LiveBooking:
    """A live booking as the booking index keeps it."""

    allocation_id: str
    atom_id: str
    starts_at: datetime
    ends_at: datetime | None
    tenant_id: str | None
    pool_id: str | None
    cls: str
    gpu_id: str | None = None
    """The GPU of the atom: its family is booked by one holder at a time (`domain.ledger.ledger`)."""


@dataclass(frozen=True, slots=True)
class LogPosition:
    """Where a reader of the events stream stands: just after the event `id`, written by transaction
    `tx` (None on SQLite, and for events logged before transactions were recorded).

    The stream serves events in this order, not by id alone: on PostgreSQL ids are handed out when
    events are written, not when they commit, so a later id can commit first. The stream serves only
    events of transactions older than every one still in progress, by (transaction, id), so an event
    that commits late always sorts after what was already served (storage/kernel/event_stream.py)."""

    tx: int | None
    id: int


@dataclass(frozen=True, slots=True)
class AdmissionRead:
    """What admission reads in one statement (storage.ledger.reservations.admission_snapshot)."""

    replay_id: str | None
    pool_mode: SharingMode | None
    """None when no pool has the id."""
    pool_owner: str | None
    tenant_exists: bool
    policies: list[Policy]
    limits: dict[str, int]
    credential_live: bool | None
    """Whether the credential asked about is live; None when none was asked about."""
    events: list[LoggedEvent]
    newest_event: int
    log: LogSnapshot
    pool_max_duration: str | None = None
    """The pool's `policy.maxDuration`, as set; None when it has none."""
    pool_scrub: str | None = None
    """The pool's `policy.scrub` (None: `none`, as it is unless set)."""


class TenantRepo(Protocol):
    """Tenants; every read but `any_state` sees only those not deleted."""

    def get(self, tenant_id: str) -> Tenant | None: ...

    def any_state(self, tenant_id: str) -> Tenant | None:
        """The tenant, deleted or not."""
        ...

    def hold(self, tenant_id: str) -> Tenant | None:
        """The tenant, kept from `tenants.delete` until the transaction ends (a write that gives the
        tenant something reads it so)."""
        ...

    def lock(self, tenant_id: str) -> Tenant | None:
        """The tenant, locked against every `hold` until the transaction ends (`tenants.delete`)."""
        ...

    def mark_deleted(self, tenant_id: str, at: datetime) -> None: ...

    def page(self, limit: int | None, after: str | None) -> list[Tenant]: ...

    def add(self, tenant: Tenant) -> bool:
        """Insert the tenant; False when its id is taken (nothing written then)."""
        ...

    def put(self, tenants: Sequence[Tenant]) -> None:
        """Create these tenants or rename them; an existing tenant keeps its creation time."""
        ...


class CredentialRepo(Protocol):
    def get(self, credential_id: str) -> Credential | None: ...

    def owner_of(self, token_hash: str) -> TokenOwner | None:
        """Whom the token with this hash stands for; on every request, so one fixed statement."""
        ...

    def live_admins(self) -> list[Credential]: ...

    def of_tenant(self, tenant_id: str | None) -> list[Credential]:
        """A tenant's credentials, or every credential when `tenant_id` is None."""
        ...

    def add(self, credential: Credential) -> bool: ...

    def revoke(self, credential_id: str, at: datetime) -> bool:
        """Mark the credential revoked unless it already was; True when this call revoked it."""
        ...


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


class NodeRepo(Protocol):
    def by_ids(self, node_ids: Sequence[str]) -> dict[str, Node]: ...

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


class QuotaRepo(Protocol):
    def find(self, tenant_id: str | None, pool_id: str | None) -> list[Quota]:
        """Quota rows, by tenant and pool when given, in (tenant, pool, class) order."""
        ...

    def put(self, quotas: Sequence[Quota]) -> None:
        """Create or replace these rows."""
        ...

    def remove_tenant(self, tenant_id: str) -> int:
        """Delete every row of the tenant; how many there were."""
        ...


class ClassQuotaRepo(Protocol):
    def find(
        self,
        tenant_id: str | None = None,
        device_class: str | None = None,
        scope: str | None = None,
        cluster_id: str | None = None,
    ) -> list[ClassQuota]:
        """Device-class rows, filtered by what is given (a fleet row's cluster is None, stored as
        ''), in (tenant, device class, scope, cluster) order."""
        ...

    def put(self, row: ClassQuota) -> None:
        """Create or replace the row of its (tenant, device class, scope, cluster)."""
        ...

    def remove_tenant(self, tenant_id: str) -> int:
        """Delete every device-class row of the tenant; how many there were."""
        ...


class PolicyRepo(Protocol):
    def find(
        self,
        tenant_id: str | None,
        pool_id: str | None,
        *,
        subject_type: str | None = None,
        subject_id: str | None = None,
        with_clusters: bool = False,
    ) -> list[Policy]:
        """Policies by id, filtered by each argument given: the tenant's (and, `with_clusters`, the
        clusters' policies besides, which apply to every tenant), in a pool, on a subject."""
        ...

    def get(self, policy_id: str) -> Policy | None: ...

    def for_placement(self, tenant_id: str, workload_id: str | None) -> list[Policy]:
        """In one read: the policies on the tenant, on the workload (when given) and on every cluster."""
        ...

    def add(self, policy: Policy) -> bool:
        """Insert the policy; False when its tenant (or, a cluster's policy, its cluster) already has
        one of that name."""
        ...

    def replace(self, policy: Policy, generation: int) -> bool:
        """Write the policy's limits, constraints and generation if it is still at `generation`;
        False when it is not (or is gone)."""
        ...

    def remove(self, policy_id: str) -> Policy | None:
        """Delete the policy and return it as it was; None when no policy has the id."""
        ...


class ReservationRepo(Protocol):
    """Reservations: records, the admission read and commit, and the locks they are taken under."""

    def get(self, reservation_id: str) -> Reservation | None: ...

    def by_key(self, tenant_id: str, key: str) -> Reservation | None:
        """The tenant's reservation made with this idempotency key."""
        ...

    def page(
        self, tenant_id: str | None, pool_id: str | None, limit: int | None, after: str | None
    ) -> list[Reservation]:
        """Reservations newest first (descending id, ids being time-ordered), those older than the
        id `after` when given: the order `reservations list` promises."""
        ...

    def compare_and_set(
        self, reservation_id: str, generation: int, status: str, ends_at: datetime | None
    ) -> bool:
        """Write a new status and end, bumping the generation, if it is still `generation`."""
        ...

    def lock(self, key: str) -> None:
        """Serialise writers on `key` until the transaction ends (SQLite serialises every writer)."""
        ...

    def preemptible_among(self, ids: Sequence[str]) -> list[Reservation]:
        """The reservations of these ids made with `preemptible: true` and not over yet."""
        ...

    def try_lock(self, key: str) -> bool:
        """`lock(key)` if no other transaction holds it now, without waiting: False when one does
        (a write that needs a second tenant's lock takes it so, and never deadlocks)."""
        ...

    def locked_tail(self, key: str, read: Cursor) -> tuple[list[LoggedEvent], int, LogSnapshot]:
        """`lock(key)`, then a read of the event log from `read` (as `EventRepo.after`) that sees
        every commit made before the lock was granted; one round trip when it begins the transaction."""
        ...

    def held_atoms(self, allocation_ids: Sequence[str]) -> dict[str, list[Atom]]:
        """Per allocation, the atoms its live bookings hold, in booking order."""
        ...

    def live_of_tenant(self, tenant_id: str, now: datetime, limit: int) -> list[Reservation]:
        """The tenant's reservations not over at `now` (scheduled, or active and not yet ended),
        oldest first, at most `limit`."""
        ...

    def snapshot(
        self,
        tenant_id: str,
        pool_id: str,
        key: str | None,
        read: Cursor,
        lock_key: str,
        credential_id: str | None = None,
    ) -> AdmissionRead:
        """What admission reads, at once, after taking the lock `lock_key`: the replayed reservation
        id, the pool's mode and owner, whether the tenant exists, its policies, its limits per
        class, whether `credential_id` names a live credential, and a read of the event log from
        `read` (its events, the log's last id and the read's LogSnapshot)."""
        ...

    def commit(
        self, reservation: Reservation, atom_ids: Sequence[str], now: datetime, *, scrub: bool = False
    ) -> None:
        """Write the reservation, its allocation, bookings and events, and commit: the last step
        of a transaction (raises Overlap, NotBookable, or KeyTaken when the idempotency key was
        taken concurrently; nothing is written then). `scrub`: the pool scrubs between tenants,
        and an atom another tenant released since its last scrub is NotBookable."""
        ...


class LedgerPort(Protocol):
    def book(
        self,
        atom_ids: Sequence[str],
        span: Window,
        allocation_id: str,
        tenant_id: str | None,
        now: datetime,
        *,
        require_bookable: bool = True,
    ) -> int:
        """Book all the atoms or none. On PostgreSQL this is one statement, atomic by itself."""
        ...

    def try_book(
        self, atom_ids: Sequence[str], span: Window, allocation_id: str, tenant_id: str | None, now: datetime
    ) -> bool:
        """Book all the atoms, or write nothing and answer False when one is taken or not
        bookable; the transaction goes on either way."""
        ...

    def busy_spans(self, atom_ids: Sequence[str], since: datetime) -> list[Window]: ...

    def live_on(self, atom_ids: Sequence[str], since: datetime) -> list[LiveBooking]:
        """Live bookings of these atoms that end after `since` (or never), with who holds them."""
        ...

    def book_holds(self, groups: Mapping[str, Sequence[str]], span: Window, now: datetime) -> int:
        """Book each allocation's atoms (`groups`: allocation to atoms) for the window with no
        tenant, bookable or not, all or nothing: a layout change's holds on every GPU of a node.
        Raises as `book` does; one statement on PostgreSQL."""
        ...

    def tenants_booked_until(self, node_id: str, since: datetime) -> tuple[datetime | None, bool]:
        """Of tenants' live bookings on the node's atoms that end after `since`: the latest end,
        and whether one never ends."""
        ...

    def allocation_bookings(self, allocation_id: str) -> list[Booking]: ...

    def booking_allocation(self, booking_id: str) -> str | None: ...

    def end_allocation(self, allocation_id: str, now: datetime, event: Event) -> int:
        """Cut the allocation's live bookings at `now` (cancel those not started); `event` is
        appended when any changed. Returns how many did."""
        ...

    def cancel_allocation(self, allocation_id: str, now: datetime) -> int: ...

    def extend_allocation(self, allocation_id: str, end: datetime, event: Event, now: datetime) -> int:
        """Move the end of the allocation's live bookings to `end`, appending `event`; raises
        Overlap (nothing written) when another live booking holds one of its atoms then."""
        ...

    def family_atom_ids(self, gpu_id: str) -> list[str]: ...

    def live_bookings(self, since: datetime) -> list[LiveBooking]:
        """Live bookings that end after `since` (or never)."""
        ...

    def whole_gpus_held(self, pool_ids: Sequence[str] | None, window: Window) -> list[Window]:
        """Windows of tenants' live bookings of whole GPUs in these pools (every pool when None)
        that meet `window`."""
        ...

    def any_ended_between(self, after: datetime, until: datetime) -> bool:
        """Whether a live booking's end falls in (after, until]: time alone freed its atom."""
        ...

    def taking_spans(self, atom_ids: Sequence[str], since: datetime) -> list[Window]:
        """Live bookings ending after `since` (or never) of these atoms, or of atoms of their GPUs
        that exclude them (`domain.ledger.ledger.family_excludes`)."""
        ...

    def partition_holds(self, since: datetime) -> list[Booking]:
        """Live bookings of partition changes that end after `since` (or never), in id order."""
        ...

    def overlaps(self, limit: int) -> list[tuple[Booking, Booking]]:
        """Pairs of live bookings of one atom whose windows meet (at most `limit`): none, unless
        something wrote the ledger around its fences (`better-compute doctor`'s self-check)."""
        ...

    def family_overlaps(self, since: datetime, limit: int) -> list[tuple[Booking, Booking]]:
        """Pairs of live bookings reaching past `since` of one GPU's atoms that exclude each other
        (`domain.ledger.ledger.family_excludes`) whose windows meet, at most `limit`: none, unless
        something wrote the ledger around its fences."""
        ...

    def stranded(self, now: datetime, limit: int) -> list[StrandedBooking]:
        """Tenants' live bookings not over at `now` of atoms gone, not bookable or in another pool
        than the booking's, with the atoms as they are (at most `limit`)."""
        ...


class UsageRepo(Protocol):
    """What tenants held in a period, read from the ledger (`domain.metering.metering.held`'s rule)."""

    def totals(
        self, period: Window, now: datetime, tenant_id: str | None, pool_id: str | None
    ) -> list[HeldTotal]:
        """Held time per (tenant, pool, share), summed by the database: a bill's input."""
        ...

    def bookings(
        self,
        period: Window,
        now: datetime,
        tenant_id: str | None,
        pool_id: str | None,
        after: str | None,
        limit: int,
    ) -> list[MeteredBooking]:
        """Bookings with time held in the period, in id order after the booking id `after`."""
        ...

    def copy_totals(self, period: Window, now: datetime, tenant_id: str) -> list[CopyTotal]:
        """Time the tenant's component copies held partitions in the period, summed by the database
        per (endpoint, component, share, price per GPU-hour): showback's input."""
        ...


class PriceRepo(Protocol):
    def all(self) -> list[Price]:
        """Every meter's price, by meter."""
        ...

    def put(self, price: Price) -> None:
        """Create or replace the meter's price."""
        ...


class DeviceClassRepo(Protocol):
    def get(self, name: str) -> DeviceClass | None: ...

    def all(self) -> list[DeviceClass]:
        """Every device class, by name."""
        ...

    def add(self, item: DeviceClass) -> bool:
        """Create the class; False when its name is taken (nothing is written then)."""
        ...


class WorkloadRepo(Protocol):
    """Workloads, their deployments (one per cluster) and replicas, and operations."""

    def add(self, w: Workload) -> bool:
        """Insert a new workload; False when the tenant already has one of that name."""
        ...

    def create(self, w: Workload, event: Event, at: datetime) -> bool:
        """Insert a new workload and its creation event; False (nothing written) when the tenant
        already has one of that name."""
        ...

    def record_placement(
        self,
        w: Workload,
        generation: int,
        written: Sequence[tuple[Deployment, bool]],
        added: Sequence[tuple[str, int, str]],
        events: Sequence[Event],
        now: datetime,
    ) -> bool:
        """Write a placement's outcome at once (see `SqlWorkloads.record_placement`); False, with
        nothing written, when the workload's generation moved."""
        ...

    def get(self, workload_id: str) -> Workload | None: ...

    def many(self, workload_ids: Sequence[str]) -> list[Workload]:
        """The workloads of these ids that exist, by id."""
        ...

    def by_name(self, tenant_id: str, name: str) -> Workload | None: ...

    def named(self, name: str, tenant_id: str | None, limit: int) -> list[Workload]: ...

    def page(self, tenant_id: str | None, limit: int | None, after: str | None) -> list[Workload]: ...

    def unplaced(self, limit: int) -> list[Workload]: ...

    def update(self, w: Workload, generation: int) -> bool:
        """Compare-and-set on `generation`; True when written."""
        ...

    def remove(self, workload_id: str) -> None: ...

    def deployments_of(self, workload_ids: Sequence[str]) -> dict[str, list[Deployment]]: ...

    def put_deployment(self, d: Deployment, *, new: bool = False) -> None: ...

    def remove_deployment(self, deployment_id: str) -> None: ...

    def pending_workloads(self, limit: int) -> list[str]: ...

    def replicas_of(self, deployment_ids: Sequence[str]) -> dict[str, list[tuple[int, str]]]: ...

    def awaiting(self, workload_id: str) -> set[str]:
        """Clusters where replicas this workload's placement evicted still terminate."""
        ...

    def running(self, allocation_ids: Sequence[str]) -> list[RunningReplica]:
        """The replicas among `allocation_ids`, with whose they are (other allocations left out)."""
        ...

    def add_replicas(self, deployment_id: str, items: Sequence[tuple[int, str]], now: datetime) -> None: ...

    def remove_replicas(self, deployment_id: str, indexes: Sequence[int]) -> None: ...

    def add_terminating(self, items: Sequence[Terminating]) -> None: ...

    def terminating_of(self, workload_ids: Sequence[str]) -> list[Terminating]: ...

    def terminating_since(self, at: datetime, limit: int) -> list[Terminating]: ...

    def terminating_among(self, allocation_ids: Sequence[str]) -> set[str]: ...

    def end_terminating(self, allocation_id: str) -> Terminating | None: ...

    def add_operation(self, op: Operation) -> None: ...

    def operation(self, operation_id: str) -> Operation | None: ...


class PriorityClassRepo(Protocol):
    def get(self, name: str) -> PriorityClass | None: ...

    def all(self) -> list[PriorityClass]:
        """Every priority class, by name."""
        ...

    def add(self, item: PriorityClass) -> bool:
        """Create the class; False when its name is taken (nothing is written then)."""
        ...


class EventLog(Protocol):
    def append(self, event: Event, at: datetime) -> None:
        """Append the event in the caller's transaction: it is in the log if and only if the change
        it tells of commits."""
        ...

    def append_all(self, items: Sequence[Event], at: datetime) -> None:
        """Append the events, in order, as `append` does each (in one statement: a batch of node
        reports tells of thousands of changes)."""
        ...

    def tail_start(self) -> tuple[int, LogSnapshot]:
        """The event log's last id, and the snapshot it was read in (service.kernel.event_tail)."""
        ...

    def after(self, read: Cursor) -> tuple[list[LoggedEvent], int, LogSnapshot]:
        """A read of the event log from `read`: its events (one page after `read.last`, and those of
        transactions it asks about), the log's last id, and the read's snapshot."""
        ...

    def position(self, event_id: int) -> LogPosition | None:
        """Where the events stream stands just after the event `event_id`; None when no event has it."""
        ...

    def stream(
        self,
        reader: Reader,
        after: LogPosition | None,
        limit: int,
        type_: str | None = None,
        subject: str | None = None,
    ) -> list[StreamedEvent]:
        """Up to `limit` events after `after` (from the start when None), in stream order, of those
        whose transactions ended before any still in progress began: each one `reader` may read
        (domain.ops.audience), of type `type_` and about `subject` when given."""
        ...

    def count_by_type(self, after: LogPosition | None) -> tuple[dict[str, int], LogPosition | None]:
        """How many events of each type the stream holds after `after` (from the start when None),
        and the position of the last one counted (`after` when none was)."""
        ...


class MigLayoutRepo(Protocol):
    """The MIG layout gate's rows (storage.gate.mig_layouts): compare-and-set writes, reconciler leases."""

    def all_rows(self) -> list[MigLayoutGate]: ...

    def of_nodes(self, node_ids: Sequence[str]) -> dict[str, MigLayoutGate]: ...

    def add(self, gate: MigLayoutGate) -> None: ...

    def replace(self, gate: MigLayoutGate) -> bool:
        """Write `gate` over the row at `gate.version - 1`; False when another writer moved it."""
        ...

    def remove(self, node_id: str, version: int) -> bool: ...

    def lease(
        self, owner: str, now: datetime, until: datetime, limit: int, recheck: datetime | None = None
    ) -> list[str]:
        """Take or renew leases on up to `limit` free nodes that have something to do now (a node
        scheduled for later, only once its last lease ran out before `recheck`); the nodes `owner`
        holds."""
        ...

    def leased_to(self, node_id: str, owner: str, now: datetime) -> bool: ...


class EndpointRepo(Protocol):
    """Endpoints and the nodes their variants took (storage.endpoints.endpoints)."""

    def get(self, name: str, *, lock: bool = False) -> EndpointRecord | None: ...

    def page(self, tenant_id: str | None, limit: int | None, after: str | None) -> list[EndpointRecord]: ...

    def by_status(self, statuses: Sequence[str], limit: int) -> list[EndpointRecord]:
        """Up to `limit` endpoints stored in one of `statuses`, oldest first."""
        ...

    def add(self, item: EndpointRecord) -> bool: ...

    def set_status(self, name: str, status: str, reason: str | None, at: datetime) -> None: ...

    def set_spec(self, name: str, spec: Mapping[str, object], status: str, at: datetime) -> None: ...

    def set_instance_layout(self, node_id: str, layout: str) -> None: ...

    def remove(self, name: str) -> None: ...

    def add_instances(self, items: Sequence[EndpointInstance]) -> None: ...

    def instances(self, name: str) -> list[EndpointInstance]: ...

    def instances_of_nodes(self, node_ids: Sequence[str]) -> dict[str, EndpointInstance]: ...

    def instances_of_endpoints(self, names: Sequence[str]) -> dict[str, list[EndpointInstance]]: ...


class ComponentRepo(Protocol):
    """An endpoint's components and each copy's partition (storage.endpoints.components)."""

    def get(self, name: str) -> ComponentRecord | None: ...

    def page(
        self, endpoints: Sequence[str] | None, limit: int | None, after: str | None
    ) -> list[ComponentRecord]: ...

    def of_endpoint(self, endpoint: str) -> list[ComponentRecord]: ...

    def add(self, item: ComponentRecord) -> bool: ...

    def set_spec(self, name: str, spec: Mapping[str, object], at: datetime) -> None: ...

    def remove(self, names: Sequence[str], at: datetime) -> None:
        """Remove the components and their copies, closing each placed copy's span at `at`."""
        ...

    def copies(self, names: Sequence[str]) -> dict[str, list[CopyRecord]]: ...

    def add_copies(self, items: Sequence[CopyRecord]) -> None: ...

    def place_copy(
        self,
        component: str,
        copy: int,
        atom_id: str | None,
        node_id: str | None,
        at: datetime,
        gpu_share: Fraction | None = None,
        gpu_hour_price: Decimal | None = None,
    ) -> None:
        """Give a copy its partition (None: it waits again): its open span closes at `at`, and a new
        one opens on the partition at `gpu_share` of its GPU and `gpu_hour_price` (showback)."""
        ...

    def drop_copies(self, component: str, copies: Sequence[int], at: datetime) -> None: ...


class Tx(Protocol):
    """One open transaction and the repositories bound to it."""

    @property
    def mig_layouts(self) -> MigLayoutRepo: ...

    @property
    def tenants(self) -> TenantRepo: ...

    @property
    def credentials(self) -> CredentialRepo: ...

    @property
    def clusters(self) -> ClusterRepo: ...

    @property
    def nodes(self) -> NodeRepo: ...

    @property
    def join_tokens(self) -> JoinTokenRepo: ...

    @property
    def bindings(self) -> BindingRepo: ...

    @property
    def gpus(self) -> GpuRepo: ...

    @property
    def atoms(self) -> AtomRepo: ...

    @property
    def gpu_states(self) -> GpuStateRepo: ...

    @property
    def pools(self) -> PoolRepo: ...

    @property
    def quotas(self) -> QuotaRepo: ...

    @property
    def class_quotas(self) -> ClassQuotaRepo: ...

    @property
    def policies(self) -> PolicyRepo: ...

    @property
    def reservations(self) -> ReservationRepo: ...

    @property
    def ledger(self) -> LedgerPort: ...

    @property
    def events(self) -> EventLog: ...

    @property
    def usage(self) -> UsageRepo: ...

    @property
    def prices(self) -> PriceRepo: ...

    @property
    def device_classes(self) -> DeviceClassRepo: ...

    @property
    def priority_classes(self) -> PriorityClassRepo: ...

    @property
    def endpoints(self) -> EndpointRepo: ...

    @property
    def components(self) -> ComponentRepo: ...

    @property
    def workloads(self) -> WorkloadRepo: ...


class StorePort(Protocol):
    @property
    def dialect(self) -> str: ...

    def begin(self, *, single_statement: bool = False) -> AbstractContextManager[Tx]:
        """A write transaction; `single_statement` when the work is one ledger write (see the store).
        Here and in `read`, a database that cannot be reached or written raises `Unavailable`."""
        ...

    def read(self) -> AbstractContextManager[Tx]: ...

    def check(self, *, write: bool = False) -> None:
        """Raise `Unavailable` unless the database answers now, and takes a write with `write` or
        while it is known not to (for readiness, and for `serve` to say so as it starts)."""
        ...

    def keep_connections(self) -> None:
        """Let the calling thread keep its connections between units of work (a thread that runs
        them one at a time, all day: an event loop's, or an admission worker's)."""
        ...

    def analyze(self) -> None:
        """Refresh the query planner's statistics (after bulk loads)."""
        ...
