"""Capability requests: asking for what a device must give instead of naming its class
(docs/scheduling.md#capability-requests; users of Ray and Kubernetes ask for this: ray#37574,
ray-project/enhancements#47).

A workload's shape may say `{capability: {memoryGiB: {min: 20}, computeSlices: {min: 2},
nvlinkPeer: true}, deviceCount: 1}`. Every kind of device the project may use (an `Offer`: a whole
GPU of a model, a MIG instance of a profile, a time-slice or MPS slot of a pool's size) gives some
memory and some compute slices, at a price per hour (its share of a GPU times its meter's price, as
a bill counts it). The request resolves to the cheapest offer that gives at least what is asked
(`resolve`); of equally cheap ones, the one that strands the least (memory, then slices, beyond
the ask); of those, one with free devices now for a replica before one without. The answer says
what it resolved to and why every cheaper offer was refused.

What an offer gives:

- a whole GPU: its memory (`vramGiB`) and all its model's compute slices; `nvlinkPeer` when it
  has NVLink peers;
- a MIG instance: its profile's memory and compute slices (the catalog's); never an NVLink peer
  (MIG instances do not take part in NVLink peer traffic);
- a time-slice slot: the GPU's memory over the slots (what each may count on; nothing isolates
  it) and no compute slice of its own; an MPS slot: its share of memory the same way, and no
  slice either. A request for compute slices therefore never resolves to a slot.

The resolved offer becomes an implicit device class, `capability/...` (`implicit_class`): placement
then works exactly as for a named class, and the workload keeps it, so its replicas stay one kind
of device whatever prices do later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

from better_compute.domain import catalog
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.shares import share
from better_compute.domain.kernel.atom_classes import AtomClass
from better_compute.domain.kernel.errors import InvalidInput, NotFound
from better_compute.domain.kernel.selectors import MatchExpression, Selector
from better_compute.domain.placement.class_quotas import ClassQuota
from better_compute.domain.placement.costs import money
from better_compute.domain.placement.device_classes import DeviceClass
from better_compute.domain.tenancy.iam import Policy

PREFIX = "capability/"
"""Names of implicit device classes: `/` is in no class name a user may give, so none collides."""

MAX_MEMORY_GIB = 100_000
MAX_COMPUTE_SLICES = 1_000
FIELDS = ("memoryGiB", "computeSlices", "nvlinkPeer")
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Capability:
    """What each device must give at least."""

    memory_gib: float | None = None
    compute_slices: int | None = None
    nvlink_peer: bool = False

    def document(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.memory_gib is not None:
            out["memoryGiB"] = {"min": self.memory_gib}
        if self.compute_slices is not None:
            out["computeSlices"] = {"min": self.compute_slices}
        if self.nvlink_peer:
            out["nvlinkPeer"] = True
        return out


def _minimum(raw: object, field: str, most: float, integral: bool) -> float | int:
    if not isinstance(raw, Mapping) or set(raw) != {"min"}:
        raise InvalidInput(f"{field} must be an object {{min: <number>}}", {"field": field})
    value = raw["min"]
    kind = int if integral else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not 0 < value <= most:
        what = "an integer" if integral else "a number"
        raise InvalidInput(
            f"{field}.min must be {what} above 0 and at most {most:,}, not {value!r}"[:200],
            {"field": f"{field}.min", "max": most},
        )
    return value


def parse_capability(raw: object, field: str = "shape.capability") -> Capability:
    """A capability from a request (`memoryGiB: {min}`, `computeSlices: {min}`, `nvlinkPeer`; the
    snake_case names too); each refusal names its field."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(
            f"{field} must be an object with memoryGiB, computeSlices or nvlinkPeer", {"field": field}
        )
    aliases = {"memory_gib": "memoryGiB", "compute_slices": "computeSlices", "nvlink_peer": "nvlinkPeer"}
    given = {aliases.get(str(k), str(k)): v for k, v in raw.items()}
    unknown = sorted(k for k in given if k not in FIELDS)
    if unknown:
        raise InvalidInput(
            f"{field}.{unknown[0]} is not a capability; give {', '.join(FIELDS)}",
            {"field": f"{field}.{unknown[0]}"},
        )
    if not given or (set(given) == {"nvlinkPeer"} and given["nvlinkPeer"] is False):
        raise InvalidInput(
            f"{field} must ask for memoryGiB, computeSlices or nvlinkPeer: true", {"field": field}
        )
    memory = given.get("memoryGiB")
    slices = given.get("computeSlices")
    nvlink = given.get("nvlinkPeer", False)
    if not isinstance(nvlink, bool):
        raise InvalidInput(f"{field}.nvlinkPeer must be true or false", {"field": f"{field}.nvlinkPeer"})
    return Capability(
        memory_gib=None
        if memory is None
        else float(_minimum(memory, f"{field}.memoryGiB", MAX_MEMORY_GIB, False)),
        compute_slices=None
        if slices is None
        else int(_minimum(slices, f"{field}.computeSlices", MAX_COMPUTE_SLICES, True)),
        nvlink_peer=nvlink,
    )


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of device: an atom class and what tells its atoms apart from other kinds."""

    cls: AtomClass
    gpu_model: str | None
    mig_profile: str | None = None
    sharing: str | None = None
    slots: int | None = None
    nvlink: bool = False

    @property
    def name(self) -> str:
        """How people read it: `H100-80GB`, `H100-80GB 3g.40gb`, `L4 timeslice slot (1 of 4)`."""
        model = self.gpu_model or "unknown model"
        if self.mig_profile is not None:
            return f"{model} {self.mig_profile}"
        if self.sharing is not None:
            return f"{model} {self.sharing} slot (1 of {self.slots})"
        return model + (" (NVLink)" if self.nvlink else "")

    @property
    def class_name(self) -> str:
        """The implicit device class of this kind (`implicit_class` reads it back)."""
        parts = [self.cls, self.gpu_model or "-"]
        if self.mig_profile is not None:
            parts.append(f"mig={self.mig_profile}")
        elif self.sharing is not None:
            parts.append(f"{self.sharing}={self.slots}")
        elif self.nvlink:
            parts.append("nvlink")
        elif self.cls == "gpu":
            parts.append("no-nvlink")
        return PREFIX + "/".join(parts)


def kind_of(atom: Atom) -> Kind | None:
    """The kind of a bookable atom (None for a parent GPU of instances or slots)."""
    attrs = atom.attributes
    model = attrs.get("gpuModel")
    model_id = model if isinstance(model, str) else None
    if atom.cls == "gpu.mig":
        profile = attrs.get("migProfile")
        return Kind("gpu.mig", model_id, mig_profile=str(profile)) if profile is not None else None
    if atom.cls == "gpu.slot":
        slots = attrs.get("slots")
        return Kind(
            "gpu.slot",
            model_id,
            sharing=str(attrs.get("sharing")),
            slots=slots if isinstance(slots, int) else None,
        )
    return Kind("gpu", model_id, nvlink=atom.nvlink_domain is not None)


WHOLE = MAX_COMPUTE_SLICES
"""The compute slices a whole GPU gives a request: all of it, whatever slice count is asked (a
model without MIG has no slices, and its whole GPU is still more than any slice of it)."""


def gives(kind: Kind, atom: Atom) -> tuple[float, int]:
    """The memory (GiB) and compute slices a device of this kind gives (module docstring). Memory
    is the catalog's, for whole GPUs and instances alike (a 3g.40gb of an H100 is 39.5, the whole
    GPU 79.6), so the two compare fairly; the GPU's reported memory where the catalog lacks its
    model."""
    model = catalog.find_model(kind.gpu_model) if kind.gpu_model else None
    vram = atom.attributes.get("vramGiB")
    reported = float(vram) if isinstance(vram, int | float) and not isinstance(vram, bool) else 0.0
    memory = model.memory_gib if model is not None else reported
    if kind.cls == "gpu.mig":
        profile = model.find_profile(kind.mig_profile) if model and kind.mig_profile else None
        return (profile.memory_gib, profile.compute_slices) if profile else (0.0, 0)
    if kind.cls == "gpu.slot":
        return (round(float(memory * share(atom)), 2), 0)
    return (memory, WHOLE)


@dataclass(frozen=True, slots=True)
class Offer:
    """A kind of device the project may use, what it gives, what it costs, and how many are free."""

    kind: Kind
    memory_gib: float
    compute_slices: int
    share: Fraction
    price_per_hour: Decimal | None
    """Per device: its share of a GPU times the meter's price (the dearest of the pools holding it)."""
    currency: str | None
    free: int
    """Devices free now in the project's pools (how many more replicas could start at once)."""
    unpriced: str | None = None
    """A meter of the kind's pools with no price (then `price_per_hour` is the dearest known, or
    None when no pool of the kind has a price)."""
    covers: tuple[str, ...] = ()
    """The named device classes its devices belong to (quota rows and policies name those)."""
    clusters: tuple[str, ...] = ()
    """The clusters holding its devices in the project's pools (another project's floor in one of
    them keeps the kind out of that cluster only: `named_by_class`)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    offer: Offer
    reason: str


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a capability resolved to (None: nothing the project may use gives it), and why each
    cheaper offer was refused."""

    capability: Capability
    chosen: Offer | None
    refused: tuple[Refusal, ...]


def shortfall(capability: Capability, offer: Offer, device_count: int) -> str | None:
    """Why the offer does not give what is asked (None: it does)."""
    if capability.memory_gib is not None and offer.memory_gib < capability.memory_gib:
        return f"{_gib(offer.memory_gib)} GiB of memory, under the {_gib(capability.memory_gib)} asked"
    if capability.compute_slices is not None and offer.compute_slices < capability.compute_slices:
        return f"{offer.compute_slices} compute slice(s), under the {capability.compute_slices} asked"
    if capability.nvlink_peer and not offer.kind.nvlink:
        return "no NVLink peer"
    return None


def others_floors(tenant_id: str, rows: Iterable[ClassQuota], covers: Iterable[str]) -> dict[str | None, str]:
    """Where other projects' floors hold a class a kind's devices belong to (`covers`): the class,
    by cluster (None: a fleet-wide floor, which holds every cluster). A floor counts devices of its
    class, and a kind asked by capability is not that class, so the kind keeps out of those
    clusters: a floor in one cluster leaves the kind to the others."""
    named = set(covers)
    found: dict[str | None, str] = {}
    for r in sorted(rows, key=lambda r: (r.device_class, r.cluster_id or "")):
        if r.tenant_id != tenant_id and r.floor_devices > 0 and r.device_class in named:
            found.setdefault(r.cluster_id if r.scope == "cluster" else None, r.device_class)
    return found


def floor_denial(name: str, cluster_id: str) -> str:
    """Why a cluster takes no device of a kind asked by capability there (`others_floors`)."""
    return (
        f"device class {name}, which it is, carries other projects' floors in {cluster_id}:"
        f" ask for {name} by name"
    )


def named_by_class(
    tenant_id: str, rows: Iterable[ClassQuota], allowing: Sequence[Policy]
) -> Callable[[Offer], str | None]:
    """Why a kind that gives what is asked is still refused for the tenant: it would slip past
    what names a class. A device-class quota row of the tenant's on a class its devices belong to
    (those count devices of the class, and a kind asked by capability is not that class); other
    projects' floors on such a class in every cluster that holds the kind, or fleet-wide (a floor in
    some clusters keeps the kind out of those only: placement denies them, `others_floors`); a
    policy that allows only some device classes (`allowing`: it names classes, not kinds). Asking
    for the class by name keeps them all."""
    listed = list(rows)
    limited = {r.device_class for r in listed if r.tenant_id == tenant_id}

    def check(offer: Offer) -> str | None:
        for name in offer.covers:
            if name in limited:
                return (
                    f"device class {name}, which it is, limits the project by quota: ask for {name} by name"
                )
        floors = others_floors(tenant_id, listed, offer.covers)
        everywhere = not offer.clusters or all(c in floors for c in offer.clusters)
        if None in floors or (floors and everywhere):
            name = floors.get(None) or floors[min(c for c in floors if c is not None)]
            return f"device class {name}, which it is, carries other projects' floors: ask for {name} by name"
        if allowing:
            allowed = ", ".join(allowing[0].constraints.allowed_device_classes)
            return (
                f"policy {allowing[0].name} allows only device classes {allowed}: ask for one of them by name"
            )
        return None

    return check


def _gib(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def _rank(capability: Capability, offer: Offer, device_count: int) -> tuple[object, ...]:
    """Cheapest first (an unknown price last); then what it strands beyond the ask (memory, then
    slices); then one with room for a replica now; then by name."""
    price = offer.price_per_hour
    return (
        price is None,
        price if price is not None else Decimal(0),
        offer.memory_gib - (capability.memory_gib or 0),
        offer.compute_slices - (capability.compute_slices or 0),
        offer.free < device_count,
        offer.kind.class_name,
    )


Check = Callable[[Offer], str | None]
"""A reason an offer that gives what is asked is still refused (None: it is not)."""


def resolve(
    capability: Capability,
    offers: Iterable[Offer],
    device_count: int,
    *,
    refuses: Check | None = None,
    places: Check | None = None,
) -> Resolution:
    """The cheapest offer that gives what is asked (module docstring), and for every offer ranked
    before it, why it was refused. `refuses` rules an offer out for good (a quota or policy the
    kind would slip past); `places` says why no cluster would take a replica of it now: the first
    offer that gives it and places wins, and when none places, the first that gives it (the
    workload then waits for it)."""
    ranked = sorted(offers, key=lambda o: _rank(capability, o, device_count))
    refused: list[Refusal] = []
    waiting: tuple[Offer, int] | None = None
    for offer in ranked:
        why = shortfall(capability, offer, device_count) or (refuses(offer) if refuses else None)
        if why is None and places is not None:
            not_now = places(offer)
            if not_now is not None:
                waiting = waiting or (offer, len(refused))
                refused.append(Refusal(offer, not_now))
                continue
        if why is None:
            return Resolution(capability, offer, tuple(refused))
        refused.append(Refusal(offer, why))
    if waiting is not None:
        offer, cheaper = waiting
        return Resolution(capability, offer, tuple(refused[:cheaper]))
    return Resolution(capability, None, tuple(refused))


def price_text(offer: Offer) -> str:
    if offer.price_per_hour is None:
        return f"no price (meter {offer.unpriced})"
    return f"{money(offer.price_per_hour)}{' ' + offer.currency if offer.currency else ''} per hour"


def implicit_class(name: str) -> DeviceClass:
    """The device class an implicit name stands for (NOT_FOUND when it is not one)."""
    parts = name[len(PREFIX) :].split("/") if name.startswith(PREFIX) else []
    if len(parts) not in (2, 3) or parts[0] not in ("gpu", "gpu.mig", "gpu.slot"):
        raise NotFound(f"device class {name} not found", {"deviceClass": name})
    cls: AtomClass = parts[0]  # type: ignore[assignment]
    expressions = []
    if parts[1] != "-":
        expressions.append(MatchExpression("gpuModel", "In", (parts[1],)))
    extra = parts[2] if len(parts) == 3 else None
    if extra is not None and extra.startswith("mig="):
        expressions.append(MatchExpression("migProfile", "In", (extra[4:],)))
    elif extra is not None and "=" in extra:
        sharing, _, slots = extra.partition("=")
        expressions.append(MatchExpression("sharing", "In", (sharing,)))
        expressions.append(MatchExpression("slots", "In", (slots,)))
    elif extra == "nvlink":
        expressions.append(MatchExpression("nvlinkDomain", "Exists", ()))
    elif extra == "no-nvlink":
        expressions.append(MatchExpression("nvlinkDomain", "DoesNotExist", ()))
    return DeviceClass(name, cls, Selector(tuple(expressions)), EPOCH)


def is_implicit(name: str) -> bool:
    return name.startswith(PREFIX)


__all__ = [
    "PREFIX",
    "WHOLE",
    "Capability",
    "Kind",
    "Offer",
    "Refusal",
    "Resolution",
    "floor_denial",
    "gives",
    "implicit_class",
    "is_implicit",
    "kind_of",
    "named_by_class",
    "others_floors",
    "parse_capability",
    "price_text",
    "resolve",
    "shortfall",
]
