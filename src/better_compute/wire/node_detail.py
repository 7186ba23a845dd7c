"""`nodes.get` (admin): one node as an operator inspects it, as `kubectl describe node` shows one.

Everything the server knows of the node in one read: its state, its GPUs as reported and the MIG
layout each is told, every atom with the bookings that hold it (whose, under which allocation,
from and until when) and its layout change under way. It names other tenants' allocations, so it
is the fleet admin's alone.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from better_compute.wire.common import WireAnswer, WireRequest
from better_compute.wire.inventory import AtomPublic, GpuPublic, NodePublic


class NodeGet(WireRequest):
    """`nodes.get`: the node's id (the path's)."""

    node: str = Field(min_length=1)


class AtomHolderPublic(WireAnswer):
    """A live booking on an atom: `allocationId` is a reservation's id (`rsv-…`, kind
    `reservation`), a workload replica's (`dep-….rN`, kind `replica`), an endpoint instance's hold
    (`endpoint:<name>:<node>`, kind `endpoint`) or a partition booking's (`partition:…`, kind
    `partition`: maintenance or a layout change; no tenant's). `endsAt` null: it never ends."""

    allocation_id: str
    kind: str
    tenant_id: str | None = None
    starts_at: datetime
    ends_at: datetime | None = None


class NodeAtomPublic(AtomPublic):
    """An atom of the node, with the bookings that hold it now or later, earliest first."""

    holders: list[AtomHolderPublic] = Field(default_factory=list)


class NodeGpuPublic(GpuPublic):
    """A GPU as its node last reported it, and the MIG layout its spec tells it now (`toldLayout`;
    null: the node is in no pool, so it is left as it is). The layout is pending while what the
    GPU reports differs from it; `layoutRefused` says why the node could not apply it."""

    told_layout: str | None = None


class LayoutGatePublic(WireAnswer):
    """The node's layout change under way (docs/concepts.md, the gate): `state` `pending` (waiting
    for its bookings to end), `scheduled` (its GPUs' holds start at `scheduledFrom`) or `granted`
    (the node is told `pendingLayout`); `frozenLayout` is what it is told until the grant."""

    pool_id: str
    state: str
    frozen_layout: str | None = None
    pending_layout: str
    requested_at: datetime
    scheduled_from: datetime | None = None
    granted_at: datetime | None = None


class NodeDetailPublic(WireAnswer):
    """`nodes.get`: the node, its GPUs, its atoms and their holders, and its layout gate (null: no
    layout change under way). `at` is the moment the answer describes."""

    at: datetime
    node: NodePublic
    joined_at: datetime | None = None
    """When the node's `bcd` joined (registered its key); null: it never joined."""
    gpus: list[NodeGpuPublic]
    atoms: list[NodeAtomPublic]
    gate: LayoutGatePublic | None = None
