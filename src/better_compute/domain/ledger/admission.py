"""Admission of a reservation's device requests against the pool they ask of.

The rules are docs/concepts.md#reservations (admission, step 1) and
docs/concepts.md#quotas-iam-policies-and-tenancy (single-tenant pools).

A request that can never be served in a pool is refused up front, with a message naming the
request, rather than left to fail as "no capacity": a `gpu.mig` request in a timeslice pool is a
mistake, not a shortage. The messages below are quoted in docs/concepts.md#reservations and are
part of the interface.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from better_compute.domain.fleet.pools import SHARING_MODES, SharingMode
from better_compute.domain.kernel.atom_classes import AtomClass, check_atom_class
from better_compute.domain.kernel.errors import InvalidInput, SingleTenantPool
from better_compute.domain.kernel.selectors import EVERYTHING, Selector, parse_selector

FRACTIONAL_CLASSES: frozenset[AtomClass] = frozenset({"gpu.mig", "gpu.slot"})
"""Atom classes that are a piece of a GPU: they charge their own quota and count as `gpuSlices`."""

SINGLE_TENANT_MODES: frozenset[SharingMode] = frozenset({"timeslice", "mps"})
"""Sharing modes whose workloads are not isolated from each other, so one tenant owns the pool."""

_REQUEST_FIELDS = frozenset({"class", "count", "sharing", "selector"})


@dataclass(frozen=True)
class DeviceRequest:
    """`count` atoms of class `cls`, narrowed by `selector`; `sharing` None takes the pool's.

    `same_gpu`: all `count` atoms must come from one GPU ("N slots on one GPU", a share of one GPU
    cut into time-slice slots). Without it, choosing only prefers one GPU and splits a count no free
    GPU holds across GPUs; with it, such a request is refused instead (`choose.NoFit`).
    """

    cls: AtomClass
    count: int
    sharing: SharingMode | None = None
    selector: Selector = EVERYTHING
    same_gpu: bool = False


MAX_DEVICE_REQUESTS = 16
"""Lines in one reservation's `devices`: each line is a group kept together, and a reservation is
decided all at once; more lines than this is a batch of reservations, better sent as such."""

MAX_COUNT = 65_536
"""Atoms one device request may ask for: more than a 1,024-node pool of 8-GPU nodes holds even
split into MIG instances (57,344), so only a mistake or an attack asks for more. Choosing sizes its
shortlist by the count, and counts are stored, summed into quota and compared with 32-bit limits: a
count of 2**80 is refused here rather than carried through all of that."""

MAX_SELECTOR_VALUES = 1_024
"""Selector values in one reservation, all its device requests together. Each request's selector
is bounded on its own (`selectors.MAX_EXPRESSIONS` x `selectors.MAX_VALUES`); this bounds what one
reservation stores and echoes with every answer about it."""


def parse_device_requests(raw: object) -> list[DeviceRequest]:
    """The `devices` of a reservation request, each field checked and named as `devices[i].field`."""
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Sequence):
        raise InvalidInput("devices must be a list of device requests", {"field": "devices"})
    if not raw:
        raise InvalidInput("devices must hold at least one device request", {"field": "devices"})
    if len(raw) > MAX_DEVICE_REQUESTS:
        raise InvalidInput(
            f"devices holds {len(raw)} device requests; at most {MAX_DEVICE_REQUESTS} per reservation"
            f" (one request's count may be as large as {MAX_COUNT})",
            {"field": "devices", "max": MAX_DEVICE_REQUESTS},
        )
    requests: list[DeviceRequest] = []
    values = 0
    for i, item in enumerate(raw):
        request = parse_device_request(item, f"devices[{i}]")
        values += sum(len(expr.values) for expr in request.selector.match_expressions)
        if values > MAX_SELECTOR_VALUES:
            raise InvalidInput(
                f"devices[{i}].selector: the reservation's selectors hold {values} values up to here;"
                f" at most {MAX_SELECTOR_VALUES} in all its device requests together",
                {"field": f"devices[{i}].selector", "max": MAX_SELECTOR_VALUES},
            )
        requests.append(request)
    return requests


def parse_device_request(raw: object, field: str) -> DeviceRequest:
    """One device request; unknown fields are refused so a typo (`selectors`) is not silently ignored."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{field} must be an object with class and count", {"field": field})
    unknown = sorted(str(k) for k in raw if k not in _REQUEST_FIELDS)
    if unknown:
        raise InvalidInput(
            f"{field}.{unknown[0]}: unknown field; use class, count, sharing and selector",
            {"field": f"{field}.{unknown[0]}"},
        )
    cls = check_atom_class(raw.get("class"), f"{field}.class")
    count = raw.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidInput(
            f"{field}.count must be an integer of at least 1, not {count!r}", {"field": f"{field}.count"}
        )
    if count > MAX_COUNT:
        raise InvalidInput(
            f"{field}.count must be at most {MAX_COUNT}, the most atoms one device request may ask for",
            {"field": f"{field}.count", "max": MAX_COUNT},
        )
    sharing = raw.get("sharing")
    if sharing is not None and sharing not in SHARING_MODES:
        raise InvalidInput(
            f"{field}.sharing must be one of {', '.join(SHARING_MODES)}, not {sharing!r}",
            {"field": f"{field}.sharing"},
        )
    selector = parse_selector(raw.get("selector"), f"{field}.selector")
    return DeviceRequest(cls=cls, count=count, sharing=sharing, selector=selector)


def check_against_pool(mode: SharingMode, requests: Sequence[DeviceRequest]) -> None:
    """Refuse the first request the pool's sharing mode can never serve, with the exact messages of
    docs/concepts.md#reservations.

    Only mig pools accept `gpu.mig` (a MIG-mode GPU in another pool is not for reservation), only
    timeslice and mps pools have slots, and a request that names its own sharing must name the
    pool's or `exclusive`: asking for MPS and silently getting time slicing would change how the
    workload behaves. Whole `gpu` requests are valid everywhere.
    """
    for i, request in enumerate(requests):
        where = f"devices[{i}]"
        if request.cls == "gpu.mig" and mode != "mig":
            raise InvalidInput(
                f"{where}: gpu.mig atoms exist only in mig pools",
                {"field": f"{where}.class", "poolMode": mode},
            )
        if request.cls == "gpu.slot" and mode not in SINGLE_TENANT_MODES:
            raise InvalidInput(
                f"{where}: gpu.slot atoms exist only in timeslice or mps pools",
                {"field": f"{where}.class", "poolMode": mode},
            )
        if request.sharing is not None and request.sharing not in ("exclusive", mode):
            raise InvalidInput(
                f"{where}: the pool shares GPUs as {mode}, not {request.sharing}",
                {"field": f"{where}.sharing", "poolMode": mode, "sharing": request.sharing},
            )


def requested_by_class(requests: Sequence[DeviceRequest]) -> dict[AtomClass, int]:
    """How many atoms of each class the requests ask for together (what quota is charged)."""
    totals: dict[AtomClass, int] = {}
    for request in requests:
        totals[request.cls] = totals.get(request.cls, 0) + request.count
    return totals


def gpu_count(requests: Sequence[DeviceRequest]) -> int:
    """Whole GPUs asked for: the reservation's `gpuCount`."""
    return sum(r.count for r in requests if r.cls == "gpu")


def gpu_slices(requests: Sequence[DeviceRequest]) -> int:
    """Fractions asked for (MIG instances and slots): the reservation's `gpuSlices`."""
    return sum(r.count for r in requests if r.cls in FRACTIONAL_CLASSES)


def check_offer(pool_mode: SharingMode, owner_tenant_id: str, tenant_id: str) -> None:
    """Refuse offering a timeslice or mps pool to anyone but its owner
    (docs/concepts.md#quotas-iam-policies-and-tenancy).

    Time slicing and MPS do not isolate one workload from another the way MIG does: a tenant
    sharing a GPU that way could see or starve another tenant's work. mig and exclusive pools can
    be offered freely.
    """
    if pool_mode in SINGLE_TENANT_MODES and tenant_id != owner_tenant_id:
        raise SingleTenantPool(
            f"{pool_mode} pools are single-tenant: timeslice and mps sharing do not isolate workloads "
            f"the way MIG does, so this pool cannot be offered to {tenant_id}, only used by its owner "
            f"{owner_tenant_id}",
            {"poolMode": pool_mode, "ownerTenantId": owner_tenant_id, "tenantId": tenant_id},
        )
