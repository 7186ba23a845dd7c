"""The MIG layout gate's records: one row per node whose layout change is under way."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class MigLayoutGate:
    """A node of a mig pool whose layout change is under way (docs/concepts.md, the gate;
    `domain.gate.mig_gate`): frozen at `frozen_layout` while `state` is `pending` or `scheduled`, told
    `pending_layout` once `granted`. `scheduled_from` is when its GPU families' partition bookings start;
    `granted_generation` the node's spec generation at the grant (a higher one observed carries the
    new layout). `lease_owner` / `lease_until`: which reconciler works on the node, until when."""

    node_id: str
    pool_id: str
    frozen_layout: str | None
    pending_layout: str
    state: str
    requested_at: datetime
    scheduled_from: datetime | None = None
    granted_at: datetime | None = None
    granted_generation: int | None = None
    version: int = 1
    lease_owner: str | None = None
    lease_until: datetime | None = None
