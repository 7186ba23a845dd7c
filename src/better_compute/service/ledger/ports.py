"""The ledger's ports: bookings (`LedgerPort`) and reservations, the records they return, and the
errors a booking write raises.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.pools import SharingMode
from better_compute.domain.fleet.slurm_holds import Mirror
from better_compute.domain.kernel.events import Event, LoggedEvent
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.choose import FragmentationGrowth
from better_compute.domain.ledger.ledger import Booking
from better_compute.domain.ledger.records import LiveBooking, Reservation
from better_compute.domain.metering.billing import Price
from better_compute.domain.ops.doctor import StrandedBooking
from better_compute.domain.placement.device_classes import DeviceClass
from better_compute.domain.tenancy.iam import Policy
from better_compute.service.fleet.ports import FleetTx
from better_compute.service.tenancy.ports import DeviceClassLookup

if TYPE_CHECKING:
    from better_compute.service.kernel.event_tail import Cursor, LogSnapshot
    from better_compute.service.ledger.booking_index import PoolAtoms


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

    def nodes_booked_by(self, allocation_ids: Sequence[str]) -> set[str]:
        """The nodes whose atoms these allocations booked (their ended bookings included)."""
        ...

    def booking_allocation(self, booking_id: str) -> str | None: ...

    def end_allocation(self, allocation_id: str, now: datetime, event: Event) -> int:
        """Cut the allocation's live bookings at `now` (cancel those not started); `event` is
        appended when any changed. Returns how many did."""
        ...

    def cancel_allocation(self, allocation_id: str, now: datetime) -> int: ...

    def rebind(self, moves: Sequence[tuple[str, str, str]], now: datetime, events: Sequence[Event]) -> int:
        """Move live bookings, each (allocation, source atom, target atom) of `moves` at once (two may
        swap), windows kept; raises Overlap naming a target another live booking holds then (nothing
        written), NotBookable for a target that is no atom. Appends `events` when any moved."""
        ...

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


class DeviceClassList(DeviceClassLookup, Protocol):
    """What the ledger reads of device classes (`service.placement.ports.DeviceClassRepo`): a reservation may
    ask by capability."""

    def all(self) -> list[DeviceClass]:
        """Every device class, by name."""
        ...


class PriceList(Protocol):
    """What the ledger reads of prices (`service.metering.ports.PriceRepo`): a capability's offers carry their
    price."""

    def all(self) -> list[Price]:
        """Every meter's price, by meter."""
        ...


class SlurmJobRepo(Protocol):
    """What the Slurm follower last read of each job it mirrors (domain.fleet.slurm_holds.Mirror)."""

    def put(self, cluster_id: str, mirrors: Sequence[Mirror], now: datetime) -> None:
        """The cluster's rows become `mirrors`; any other row of the cluster is dropped."""
        ...

    def of_allocations(self, allocation_ids: Sequence[str]) -> dict[str, list[Mirror]]:
        """The jobs mirrored for each allocation (one per node), by allocation."""
        ...

    def lease(self, cluster_id: str, owner: str, now: datetime, until: datetime) -> bool:
        """Take or renew the lease to follow a Slurm cluster; False while another owner holds it."""

    def job_ids(self, allocation_ids: Sequence[str]) -> dict[str, int]:
        """The Slurm job id each of `allocation_ids` had, kept after its job is gone from the mirror;
        those that never had one are left out."""
        ...


class LedgerTx(FleetTx, Protocol):
    """The slice of a transaction the ledger's use cases use: fleet's, and the ledger's own repositories."""

    @property
    def ledger(self) -> LedgerPort: ...

    @property
    def reservations(self) -> ReservationRepo: ...

    @property
    def device_classes(self) -> DeviceClassList: ...

    @property
    def prices(self) -> PriceList: ...

    @property
    def slurm_jobs(self) -> SlurmJobRepo: ...


class Gradients(Protocol):
    """Where admission gets the fragmentation gradient its choice breaks rule 2's ties with
    (`domain.ledger.choose`, docs/concepts.md#reservations): the pool's recorded request sizes over
    its atoms. The ledger may not know the measure (it is placement's), so the composition root
    hands one in (`service.placement.recorded_demand.RecordedDemand`).

    What it answers may lag what the pool's bookings held by a bounded while: the gradient only
    chooses between GPUs the choice rules find equally good, so a stale one never makes a choice
    that breaks a rule, or a refusal, only a different one of equals."""

    def of_pool(
        self, pool_id: str, pool_atoms: PoolAtoms, now: datetime
    ) -> Callable[[Container[str]], FragmentationGrowth]:
        """For the pool (its atoms as the index has them now), what turns the atoms taken in a
        window into the gradient over that window's free capacity."""
        ...
