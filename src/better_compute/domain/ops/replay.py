"""Replay's values: the demand it replays, the policy set it replays under, the limits on what one
replay may ask, and the figures it reports (docs/replay.md).

Replay runs the server's own admission, placement, preemption and retry over recorded or given
demand in virtual time (`service.ops.replay`); what lives here is pure: reading a demand file or a
policy file into values, and turning what happened to each request into per-tenant figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from better_compute.domain.endpoints.endpoints import MAX_INSTANCES, MAX_VARIANTS
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import parse_instant
from better_compute.domain.placement.fragmentation import WHOLE, TaskShape

MAX_WINDOW = timedelta(days=31)
"""The longest window one replay covers: a month of history is what the question asks about, and
virtual time costs only what happens in it, but a window is a client-controlled size."""
MAX_REQUESTS = 10000
"""The most demand items one replay takes (a request's scale steps counted with it): the whole
default openb trace (7,064 tasks asking for GPUs) is one replay, of a few minutes (docs/traces.md);
a replay holds a server thread that long."""
MAX_FLEET_NODES = 2000
"""The most nodes a replayed fleet (a fleet file's, `replicas` expanded) may have: each is
simulated and its first report ingested into the throwaway store."""
MAX_BODY_BYTES = 8 * 1024 * 1024
"""The largest `replay.run` request body: 10,000 requests with a fleet file and two policy sets fit
within it (the whole default openb trace, 7,064 requests with its 1,213 nodes, is 1.7 MB); the
API's other methods keep the server's default cap."""
MAX_CHANGES = 500
"""The most entries a policy set's changes (or a fleet's node changes) may hold."""
MAX_SCALES = 100
"""The most scale steps (and, apart, the most drain steps) one workload request may carry."""


def _instant(raw: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> datetime | None:
    value = raw.get(key)
    if value is None:
        if required:
            raise InvalidInput(f"{where}.{key} is required", {"field": f"{where}.{key}"})
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidInput(f"{where}.{key} must carry its UTC offset", {"field": f"{where}.{key}"})
        return value
    return parse_instant(value, f"{where}.{key}")


def _text(raw: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{where}.{key} must be a non-empty string", {"field": f"{where}.{key}"})
    return value


def _count(raw: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{where}.{key} must be an integer of 0 or more", {"field": f"{where}.{key}"})
    return value


def _after(at: datetime, then: datetime | None, field: str) -> datetime | None:
    """`then` (None: not given), which must come after `at`: a request deleted or ended before it
    is made would be made after its end, at the same instant or later."""
    if then is not None and then <= at:
        raise InvalidInput(
            f"{field} ({then.isoformat()}) must come after the request is made ({at.isoformat()})",
            {"field": field},
        )
    return then


@dataclass(frozen=True)
class Window:
    """The virtual time a replay covers, `[since, until)`."""

    since: datetime
    until: datetime

    @property
    def hours(self) -> float:
        return (self.until - self.since).total_seconds() / 3600


def check_window(since: datetime, until: datetime) -> Window:
    """A replay's window: it ends after it begins, and covers at most MAX_WINDOW."""
    for name, value in (("since", since), ("until", until)):
        if value.tzinfo is None:
            raise InvalidInput(f"{name} must carry its UTC offset (such as Z)", {"field": name})
    if until <= since:
        raise InvalidInput(
            f"the replay window ends ({until.isoformat()}) before it begins ({since.isoformat()})",
            {"field": "until"},
        )
    if until - since > MAX_WINDOW:
        raise InvalidInput(
            f"a replay window is at most {MAX_WINDOW.days} days; this one is {(until - since).days}",
            {"field": "until", "limit": MAX_WINDOW.days},
        )
    return Window(since, until)


@dataclass(frozen=True)
class WorkloadAsk:
    """A workload created at `at`, scaled at each `scales` step, drained from a cluster at each
    `drains` step (instant, cluster, whether the drain was forced), deleted at `until` (None: it
    lives past the window's end)."""

    key: str
    at: datetime
    tenant: str
    name: str
    shape: Mapping[str, Any]
    replicas: int
    priority_class: str | None = None
    until: datetime | None = None
    scales: tuple[tuple[datetime, int], ...] = ()
    drains: tuple[tuple[datetime, str, bool], ...] = ()


@dataclass(frozen=True)
class ReservationAsk:
    """A reservation asked at `at` for `[start, end)` (`start` None: from `at`), released early at
    `release` (None: it runs to its end)."""

    key: str
    at: datetime
    tenant: str
    pool: str
    devices: tuple[Mapping[str, Any], ...]
    end: datetime
    start: datetime | None = None
    preemptible: bool = False
    release: datetime | None = None


@dataclass(frozen=True)
class EndpointAsk:
    """An endpoint created at `at` (`variants` as `endpoints.create` takes them: each a `poolId`,
    an `instanceCount` and its `acceleratorPartitionLayouts`), deleted at `until` (None: it lives
    past the window's end)."""

    key: str
    at: datetime
    tenant: str
    name: str
    variants: tuple[Mapping[str, Any], ...]
    until: datetime | None = None

    def body(self) -> dict[str, Any]:
        """The `endpoints.create` request it makes."""
        return {"name": self.name, "tenantId": self.tenant, "variants": [dict(v) for v in self.variants]}

    def pools(self) -> set[str]:
        """The pools its variants take nodes of."""
        return {str(v.get("poolId")) for v in self.variants if isinstance(v.get("poolId"), str)}

    def instances(self) -> int:
        """How many nodes it asks for in all (each variant's count is checked when it is read)."""
        return max(1, sum(n for v in self.variants if isinstance(n := v.get("instanceCount"), int)))


Ask = WorkloadAsk | ReservationAsk | EndpointAsk


@dataclass(frozen=True)
class Demand:
    """The requests a replay makes, each at its own instant."""

    asks: tuple[Ask, ...]

    def tenants(self) -> set[str]:
        return {a.tenant for a in self.asks}


def size_of(asks: Sequence[Ask]) -> int:
    """What counts against MAX_REQUESTS: each request, each of a workload's scale and drain steps,
    and each instance of an endpoint (each is a node cut twice, through the layout gate)."""
    return sum(_size(a) for a in asks)


def _size(ask: Ask) -> int:
    if isinstance(ask, EndpointAsk):
        return ask.instances()
    if isinstance(ask, WorkloadAsk):
        return 1 + len(ask.scales) + len(ask.drains)
    return 1


def check_size(asks: Sequence[Ask]) -> None:
    size = size_of(asks)
    if size > MAX_REQUESTS:
        raise InvalidInput(
            f"a replay takes at most {MAX_REQUESTS} requests (scale and drain steps, and endpoint"
            f" instances, counted); this demand has {size}",
            {"field": "demand", "limit": MAX_REQUESTS, "given": size},
        )


def check_within(demand: Demand, window: Window) -> None:
    """Every request of a demand file is made within the window: one made before it or after it
    would be measured as refused, though it was never made (a mistake in the file's times)."""
    for i, ask in enumerate(demand.asks):
        if not window.since <= ask.at < window.until:
            raise InvalidInput(
                f"requests[{i}] is made at {ask.at.isoformat()}, outside the replay window"
                f" [{window.since.isoformat()}, {window.until.isoformat()})",
                {"field": f"requests[{i}].at"},
            )


def parse_demand(raw: object) -> Demand:
    """A demand file (docs/replay.md#demand-files): `{requests: [...]}`, each a workload
    (`kind: workload`: `at`, `tenant`, `name`, `shape`, `replicas`, `priorityClass`, `until`,
    `scale: [{at, replicas}]`, `drain: [{at, cluster, force}]`) or a reservation
    (`kind: reservation`: `at`, `tenant`, `pool`, `devices`, `start`, `end`, `preemptible`,
    `release`) or an endpoint (`kind: endpoint`: `at`, `tenant`, `name`, `variants`, `until`)."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("requests"), list):
        raise InvalidInput("a demand file is an object with a list `requests`", {"field": "demand"})
    items: list[Any] = raw["requests"]
    if len(items) > MAX_REQUESTS:
        raise InvalidInput(
            f"a replay takes at most {MAX_REQUESTS} requests; this demand has {len(items)}",
            {"field": "demand.requests", "limit": MAX_REQUESTS, "given": len(items)},
        )
    asks = [_ask(item, i) for i, item in enumerate(items)]
    check_size(asks)
    return Demand(tuple(asks))


def _steps(item: Mapping[str, Any], key: str, where: str) -> list[tuple[datetime, Mapping[str, Any], str]]:
    """A workload request's `scale` or `drain` steps: at most MAX_SCALES objects, each with its
    instant, as (instant, step, where it is)."""
    steps = item.get(key) or []
    if not isinstance(steps, list) or len(steps) > MAX_SCALES:
        raise InvalidInput(
            f"{where}.{key} is a list of at most {MAX_SCALES} steps", {"field": f"{where}.{key}"}
        )
    found = []
    for j, step in enumerate(steps):
        at = f"{where}.{key}[{j}]"
        if not isinstance(step, Mapping):
            raise InvalidInput(f"{at} must be an object", {"field": at})
        when = _instant(step, "at", at)
        assert when is not None
        found.append((when, step, at))
    return found


def _ask(item: object, i: int) -> Ask:
    where = f"requests[{i}]"
    if not isinstance(item, Mapping):
        raise InvalidInput(f"{where} must be an object", {"field": where})
    kind = item.get("kind", "workload")
    at = _instant(item, "at", where)
    assert at is not None
    tenant = _text(item, "tenant", where)
    key = str(item.get("id") or f"{kind}-{i + 1}")
    if kind == "workload":
        shape = item.get("shape")
        if not isinstance(shape, Mapping):
            raise InvalidInput(f"{where}.shape must be an object", {"field": f"{where}.shape"})
        scales = [(when, _count(step, "replicas", at_)) for when, step, at_ in _steps(item, "scale", where)]
        drains = []
        for when, step, at_ in _steps(item, "drain", where):
            force = step.get("force", False)
            if not isinstance(force, bool):
                raise InvalidInput(f"{at_}.force must be true or false", {"field": f"{at_}.force"})
            drains.append((when, _text(step, "cluster", at_), force))
        priority = item.get("priorityClass")
        if priority is not None and not isinstance(priority, str):
            raise InvalidInput(f"{where}.priorityClass must be a string", {"field": f"{where}.priorityClass"})
        return WorkloadAsk(
            key,
            at,
            tenant,
            _text(item, "name", where, key),
            dict(shape),
            _count(item, "replicas", where, 1),
            priority,
            _after(at, _instant(item, "until", where, required=False), f"{where}.until"),
            tuple(sorted(scales)),
            tuple(sorted(drains)),
        )
    if kind == "reservation":
        devices = item.get("devices")
        if not isinstance(devices, list) or not all(isinstance(d, Mapping) for d in devices):
            raise InvalidInput(
                f"{where}.devices must be a list of device lines", {"field": f"{where}.devices"}
            )
        start = _instant(item, "start", where, required=False)
        end = _after(start or at, _instant(item, "end", where), f"{where}.end")
        assert end is not None
        preemptible = item.get("preemptible", False)
        if not isinstance(preemptible, bool):
            raise InvalidInput(
                f"{where}.preemptible must be true or false", {"field": f"{where}.preemptible"}
            )
        return ReservationAsk(
            key,
            at,
            tenant,
            _text(item, "pool", where),
            tuple(dict(d) for d in devices),
            end,
            start,
            preemptible,
            _instant(item, "release", where, required=False),
        )
    if kind == "endpoint":
        variants = item.get("variants")
        if not (isinstance(variants, list) and 1 <= len(variants) <= MAX_VARIANTS):
            raise InvalidInput(
                f"{where}.variants must list 1 to {MAX_VARIANTS} variants, as endpoints.create takes them",
                {"field": f"{where}.variants"},
            )
        for j, v in enumerate(variants):
            if not isinstance(v, Mapping):
                raise InvalidInput(
                    f"{where}.variants[{j}] must be an object", {"field": f"{where}.variants[{j}]"}
                )
            count = v.get("instanceCount")
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_INSTANCES:
                raise InvalidInput(
                    f"{where}.variants[{j}].instanceCount must be an integer from 1 to {MAX_INSTANCES}",
                    {"field": f"{where}.variants[{j}].instanceCount"},
                )
        return EndpointAsk(
            key,
            at,
            tenant,
            _text(item, "name", where, key),
            tuple(dict(v) for v in variants),
            _after(at, _instant(item, "until", where, required=False), f"{where}.until"),
        )
    raise InvalidInput(f"{where}.kind must be workload, reservation or endpoint", {"field": f"{where}.kind"})


# -- The policy set -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicySet:
    """Policy changes laid over a replay's base (today's, or the fleet file's): priority classes,
    device-class quota rows (floors and weights among them), policies (cost ceilings and placement
    constraints) and prices, each as its `create`/`set` request takes it. A row whose key matches
    one already there replaces it (a quota row's key is tenant, device class, scope, cluster; a
    priority class's its name; a policy's its name and subject; a price's its meter)."""

    priority_classes: tuple[Mapping[str, Any], ...] = ()
    quotas: tuple[Mapping[str, Any], ...] = ()
    policies: tuple[Mapping[str, Any], ...] = ()
    prices: tuple[Mapping[str, Any], ...] = ()

    def tenants(self) -> set[str]:
        """The tenants the changes name (each must exist in the replayed fleet)."""
        named = [q.get("tenantId") for q in self.quotas] + [p.get("tenantId") for p in self.policies]
        return {t for t in named if isinstance(t, str)}

    def __len__(self) -> int:
        return len(self.priority_classes) + len(self.quotas) + len(self.policies) + len(self.prices)


POLICY_KEYS = ("priorityClasses", "quotas", "policies", "prices")


def parse_policy_set(raw: object, where: str = "policy") -> PolicySet:
    """A policy file (docs/replay.md#policy-files): `{priorityClasses, quotas, policies, prices}`,
    each a list of the objects `priority-classes create`, `quotas set` (device-class rows),
    `policies create` and `prices set` take. At most MAX_CHANGES entries in all."""
    if raw is None:
        return PolicySet()
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where} must be an object", {"field": where})
    unknown = sorted(set(raw) - set(POLICY_KEYS))
    if unknown:
        raise InvalidInput(
            f"{where} has unknown keys {unknown}; it may hold {list(POLICY_KEYS)}", {"field": where}
        )
    lists: dict[str, tuple[Mapping[str, Any], ...]] = {}
    for key in POLICY_KEYS:
        items = raw.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
            raise InvalidInput(f"{where}.{key} must be a list of objects", {"field": f"{where}.{key}"})
        lists[key] = tuple(dict(i) for i in items)
    policy = PolicySet(lists["priorityClasses"], lists["quotas"], lists["policies"], lists["prices"])
    if len(policy) > MAX_CHANGES:
        raise InvalidInput(
            f"{where} holds {len(policy)} entries; a policy set's changes are at most {MAX_CHANGES}",
            {"field": where, "limit": MAX_CHANGES},
        )
    return policy


def check_fleet_size(nodes: int) -> None:
    if nodes > MAX_FLEET_NODES:
        raise InvalidInput(
            f"a replayed fleet has at most {MAX_FLEET_NODES} nodes; this one has {nodes}",
            {"field": "fleet", "limit": MAX_FLEET_NODES, "given": nodes},
        )


# -- Figures -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What happened to one request in a replay: the GPU-hours it held and those it asked for and
    did not get (with the reason it was last given), how long it waited for all it asked, and how
    many of its replicas (or whether it) were preempted."""

    key: str
    tenant: str
    granted_hours: float = 0.0
    refused_hours: float = 0.0
    refused_reason: str | None = None
    wait_s: float | None = None
    """Seconds from the ask to having all it asked (None: never had it all)."""
    preempted: int = 0
    refused: bool = False
    """Refused outright (a reservation admission refused, a workload never placed)."""


@dataclass(frozen=True)
class Figures:
    """One tenant's (or the whole replay's) figures."""

    requests: int = 0
    refused_requests: int = 0
    gpu_hours_granted: float = 0.0
    gpu_hours_refused: Mapping[str, float] = field(default_factory=dict)
    wait_p50_s: float | None = None
    wait_p99_s: float | None = None
    preemptions: int = 0
    cost: str | None = None
    currency: str | None = None
    fragmentation: float | None = None
    """The fleet's fragmentation share over the window (time-weighted mean of the share of free GPU
    capacity the demand's request sizes cannot use, `domain.placement.fragmentation`); overall
    figures only: it is the fleet's, not a tenant's."""


def request_shapes(
    asks: Sequence[Ask], atom_class_of: Mapping[str, str], share_of: Mapping[str, float]
) -> list[tuple[TaskShape, float]]:
    """The demand's request sizes as the fragmentation measure takes them (`domain.placement.
    fragmentation`), each request weighing 1: a replica (or a reservation's device line) of whole
    GPUs is a task of that many GPUs; one of a fraction of a GPU (a MIG instance, a slot) a task of
    that share, once per device. `atom_class_of` maps a device class to its atom class,
    `share_of` an atom class to the share of a GPU one of its devices is."""
    counts: dict[TaskShape, float] = {}

    def add(cls: str, devices: int) -> None:
        share = share_of.get(cls, 1.0)
        if cls == "gpu" or share >= 1.0:
            shape = TaskShape(gpus=max(1, devices))
            counts[shape] = counts.get(shape, 0.0) + 1.0
            return
        milli = max(1, min(WHOLE - 1, round(share * WHOLE)))
        shape = TaskShape(milli=milli)
        counts[shape] = counts.get(shape, 0.0) + max(1, devices)

    for ask in asks:
        if isinstance(ask, EndpointAsk):
            continue  # it takes whole idle nodes, which no free piece of a GPU is ever short of
        if isinstance(ask, WorkloadAsk):
            cls = atom_class_of.get(str(ask.shape.get("deviceClass", "")), "gpu")
            count = ask.shape.get("deviceCount", 1)
            add(cls, count if isinstance(count, int) else 1)
        else:
            for line in ask.devices:
                count = line.get("count", 1)
                add(str(line.get("class", "gpu")), count if isinstance(count, int) else 1)
    return sorted(counts.items(), key=lambda item: (item[0].gpus, item[0].milli))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q` percentile (0..100) by nearest rank: a value some request actually waited."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def figures(outcomes: Sequence[Outcome]) -> Figures:
    """The figures of `outcomes`: requests whose ask came within the window; a request that never
    got all it asked waits the rest of the window (its wait is counted as what it waited so far)."""
    refused: dict[str, float] = {}
    for o in outcomes:
        if o.refused_hours > 0:
            reason = o.refused_reason or "unknown"
            refused[reason] = round(refused.get(reason, 0.0) + o.refused_hours, 6)
    waits = [o.wait_s for o in outcomes if o.wait_s is not None]
    return Figures(
        requests=len(outcomes),
        refused_requests=sum(1 for o in outcomes if o.refused),
        gpu_hours_granted=round(sum(o.granted_hours for o in outcomes), 6),
        gpu_hours_refused=dict(sorted(refused.items())),
        wait_p50_s=percentile(waits, 50),
        wait_p99_s=percentile(waits, 99),
        preemptions=sum(o.preempted for o in outcomes),
    )


def differences(policy: Figures, against: Figures) -> dict[str, float | None]:
    """What `against` changes from `policy`: each figure's difference (against less policy); None
    where either side has no figure (no wait measured, no price known)."""

    def minus(b: float | None, a: float | None) -> float | None:
        return None if a is None or b is None else round(b - a, 6)

    def cost(f: Figures) -> float | None:
        return None if f.cost is None else float(f.cost)

    same_currency = policy.currency == against.currency
    return {
        "requests": against.requests - policy.requests,
        "refusedRequests": against.refused_requests - policy.refused_requests,
        "gpuHoursGranted": minus(against.gpu_hours_granted, policy.gpu_hours_granted),
        "gpuHoursRefused": minus(
            sum(against.gpu_hours_refused.values()), sum(policy.gpu_hours_refused.values())
        ),
        "waitP50Seconds": minus(against.wait_p50_s, policy.wait_p50_s),
        "waitP99Seconds": minus(against.wait_p99_s, policy.wait_p99_s),
        "preemptions": against.preemptions - policy.preemptions,
        "cost": minus(cost(against), cost(policy)) if same_currency else None,
        "fragmentation": minus(against.fragmentation, policy.fragmentation),
    }


__all__ = [
    "MAX_BODY_BYTES",
    "MAX_CHANGES",
    "MAX_FLEET_NODES",
    "MAX_REQUESTS",
    "MAX_SCALES",
    "MAX_WINDOW",
    "Ask",
    "Demand",
    "EndpointAsk",
    "Figures",
    "Outcome",
    "PolicySet",
    "ReservationAsk",
    "Window",
    "WorkloadAsk",
    "check_fleet_size",
    "check_size",
    "check_window",
    "check_within",
    "differences",
    "figures",
    "parse_demand",
    "parse_policy_set",
    "percentile",
    "request_shapes",
    "size_of",
]
