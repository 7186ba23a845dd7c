"""Placement constraints (docs/concepts.md#placement-constraints): which clusters a policy lets a workload be
placed in.

A policy (`domain.tenancy.iam.Policy`, the one `policies` resource) may carry, besides its per-reservation
limits, placement constraints: `allowedRegions`, `allowedResidencies`, `allowedDeviceClasses`,
`allowedClusters`, `deniedClusters` and `costCeiling`. An empty list constrains nothing. A policy is
attached to a subject (a tenant, a workload, an endpoint or a cluster); when a workload is placed,
the policies of its tenant, of the workload itself and of the cluster considered all apply
(`applicable`), and they are cumulative: the cluster must pass every one of them (`deny` answers
the first constraint broken, or None).

`costCeiling` (a decimal per hour, kept exactly as written, like a price) is the most a workload
may cost per hour; of several policies that apply, the lowest ceiling holds (`ceiling`). Placement
checks it against each cluster's price (`domain.placement.verdicts.Cost`).

The rule as users read it: docs/concepts.md#placement-constraints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from better_compute.domain.fleet.records import Cluster
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.metering.billing import check_per_hour
from better_compute.domain.tenancy.tenancy import check_class_name, check_name, check_ref

if TYPE_CHECKING:
    from better_compute.domain.tenancy.iam import Policy

MAX_ITEMS: Final = 64
"""The most entries one constraint list may hold."""

MAX_ITEM: Final = 64
"""The longest region, residency label or cluster id a list may name (a cluster id's column)."""

LIST_KEYS: Final = (
    "allowedRegions",
    "allowedResidencies",
    "allowedDeviceClasses",
    "allowedClusters",
    "deniedClusters",
)
"""The constraint lists by their wire names, in the order they are shown."""

CONSTRAINT_KEYS: Final = (*LIST_KEYS, "costCeiling")
"""Every constraint by its wire name."""


@dataclass(frozen=True, slots=True)
class Constraints:
    """One policy's placement constraints; an empty tuple (or a None ceiling) constrains nothing."""

    allowed_regions: tuple[str, ...] = ()
    allowed_residencies: tuple[str, ...] = ()
    allowed_device_classes: tuple[str, ...] = ()
    allowed_clusters: tuple[str, ...] = ()
    denied_clusters: tuple[str, ...] = ()
    cost_ceiling: str | None = None
    """Most cost per hour, a decimal string as written (`"12.50"`), in the prices' currency."""

    def is_empty(self) -> bool:
        return not (
            self.allowed_regions
            or self.allowed_residencies
            or self.allowed_device_classes
            or self.allowed_clusters
            or self.denied_clusters
            or self.cost_ceiling is not None
        )

    def as_mapping(self) -> dict[str, object]:
        """The constraints as the wire and the store spell them (camelCase keys; empty ones left out)."""
        out: dict[str, object] = {key: list(self.list(key)) for key in LIST_KEYS if self.list(key)}
        if self.cost_ceiling is not None:
            out["costCeiling"] = self.cost_ceiling
        return out

    def list(self, key: str) -> tuple[str, ...]:
        """The list named `key` (a wire name of `LIST_KEYS`)."""
        match key:
            case "allowedRegions":
                return self.allowed_regions
            case "allowedResidencies":
                return self.allowed_residencies
            case "allowedDeviceClasses":
                return self.allowed_device_classes
            case "allowedClusters":
                return self.allowed_clusters
            case "deniedClusters":
                return self.denied_clusters
        raise KeyError(key)


@dataclass(frozen=True, slots=True)
class Denial:
    """Why a cluster is refused: the policy that refuses it, the constraint broken (its wire name,
    `allowedRegions`), and a message saying both."""

    policy_id: str
    policy_name: str
    constraint: str
    message: str


def parse_constraints(raw: Mapping[str, object]) -> Constraints:
    """The constraints among `raw`'s keys (wire names; other keys are the caller's). A list is at
    most `MAX_ITEMS` entries, each a valid name (a device class's name for `allowedDeviceClasses`);
    repeated entries are kept once. Each refusal is INVALID_INPUT naming the field (and the entry)."""
    lists = {key: _names(raw.get(key), key) for key in LIST_KEYS}
    ceiling = raw.get("costCeiling")
    return Constraints(
        allowed_regions=lists["allowedRegions"],
        allowed_residencies=lists["allowedResidencies"],
        allowed_device_classes=lists["allowedDeviceClasses"],
        allowed_clusters=lists["allowedClusters"],
        denied_clusters=lists["deniedClusters"],
        cost_ceiling=None if ceiling is None else check_per_hour(ceiling, "costCeiling"),
    )


def _names(raw: object, field: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise InvalidInput(f"{field} must be a list of names", {"field": field})
    if len(raw) > MAX_ITEMS:
        raise InvalidInput(
            f"{field} holds {len(raw)} entries; a constraint list holds at most {MAX_ITEMS}",
            {"field": field, "maxItems": MAX_ITEMS},
        )
    seen: dict[str, None] = {}
    for n, item in enumerate(raw):
        where = f"{field}[{n}]"
        if field == "allowedDeviceClasses":
            name = check_class_name(item, where)
        elif field in ("allowedClusters", "deniedClusters"):
            name = check_ref(item, where)
            if len(name) > MAX_ITEM:
                raise InvalidInput(f"{where} must be at most {MAX_ITEM} characters", {"field": where})
        else:
            name = check_name(item, where, MAX_ITEM)
        seen[name] = None
    return tuple(seen)


def applicable(
    policies: Sequence[Policy], *, tenant_id: str, workload_id: str | None, cluster_id: str
) -> list[Policy]:
    """The policies that apply when a workload of `tenant_id` (`workload_id`, when it has one) is
    placed in `cluster_id`: those on the tenant, on the workload and on the cluster. An endpoint's
    policies apply to the endpoint, never to a workload."""
    out = []
    for policy in policies:
        match policy.subject_type:
            case "tenant":
                applies = policy.subject_id == tenant_id
            case "workload":
                applies = workload_id is not None and policy.subject_id == workload_id
            case "cluster":
                applies = policy.subject_id == cluster_id
            case _:
                applies = False
        if applies:
            out.append(policy)
    return out


def ceiling(policies: Sequence[Policy]) -> Decimal | None:
    """The cost ceiling per hour `policies` set together: the lowest of theirs (they are
    cumulative), or None when none sets one."""
    found = [Decimal(p.constraints.cost_ceiling) for p in policies if p.constraints.cost_ceiling is not None]
    return min(found) if found else None


def deny(policies: Sequence[Policy], cluster: Cluster, device_class: str) -> Denial | None:
    """The first constraint among `policies` that refuses placing devices of `device_class` in
    `cluster`, or None when the cluster passes them all. Every policy given is checked (they are
    cumulative; pick them with `applicable`), by name then id, so the same question always names
    the same policy; within a policy the deny-list comes first, then the allow-lists of clusters,
    regions, residencies and device classes."""
    for policy in sorted(policies, key=lambda p: (p.name, p.id)):
        denial = _broken(policy, cluster, device_class)
        if denial is not None:
            return denial
    return None


def _broken(policy: Policy, cluster: Cluster, device_class: str) -> Denial | None:
    c = policy.constraints
    name = policy.name

    def denial(constraint: str, message: str) -> Denial:
        return Denial(policy.id, name, constraint, message)

    if cluster.id in c.denied_clusters:
        return denial("deniedClusters", f"policy {name} denies cluster {cluster.id}")
    if c.allowed_clusters and cluster.id not in c.allowed_clusters:
        return denial(
            "allowedClusters",
            f"policy {name} allows clusters {_listed(c.allowed_clusters)}; "
            f"cluster {cluster.id} is not one of them",
        )
    if c.allowed_regions and cluster.region not in c.allowed_regions:
        return denial(
            "allowedRegions",
            f"policy {name} allows regions {_listed(c.allowed_regions)}; "
            f"cluster {cluster.id} is in {cluster.region}",
        )
    if c.allowed_residencies and not set(cluster.residency) & set(c.allowed_residencies):
        has = f"has residency {_listed(cluster.residency)}" if cluster.residency else "has no residency label"
        return denial(
            "allowedResidencies",
            f"policy {name} allows residencies {_listed(c.allowed_residencies)}; cluster {cluster.id} {has}",
        )
    if c.allowed_device_classes and device_class not in c.allowed_device_classes:
        return denial(
            "allowedDeviceClasses",
            f"policy {name} allows device classes {_listed(c.allowed_device_classes)}; "
            f"this placement asks for {device_class}",
        )
    return None


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names)
