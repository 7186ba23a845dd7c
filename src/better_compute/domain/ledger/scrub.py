"""Scrubbing between tenants: which atoms a previous holder's data may still be on.

In a pool whose `policy.scrub` is not `none`, an atom a tenant held is **owed a scrub** from the
moment that tenant's booking of it ends until the node reports `ScrubDone` for it. While it is owed,
admission gives it to no other tenant; the tenant that left it may book it again (its own data).

Nothing is written when a booking ends with time, so the rule is derived, never kept by a timer:
an atom is owed to the tenant of the last of its tenants' bookings in the pool that ended at or
before `now` and after the atom was last scrubbed (`scrubbed_at`, the server's clock when the
node's `ScrubDone` was taken). A layout change's own bookings are no tenant's and do not count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class EndedHold:
    """A tenant's booking of an atom that has ended, with when the atom was last scrubbed."""

    atom_id: str
    tenant_id: str
    ended_at: datetime
    scrubbed_at: datetime | None = None


def owed_by(ended: Iterable[EndedHold], now: datetime) -> dict[str, str]:
    """Atom id -> the tenant it is owed to at `now`: the tenant of its last booking that ended by
    `now` and after its last scrub. Atoms with no such booking are clean (absent)."""
    last: dict[str, EndedHold] = {}
    for hold in ended:
        if hold.ended_at > now:
            continue
        if hold.scrubbed_at is not None and hold.ended_at <= hold.scrubbed_at:
            continue
        seen = last.get(hold.atom_id)
        if seen is None or (hold.ended_at, hold.tenant_id) > (seen.ended_at, seen.tenant_id):
            last[hold.atom_id] = hold
    return {atom: hold.tenant_id for atom, hold in last.items()}


def owed_to_others(owed: Mapping[str, str], tenant_id: str | None) -> set[str]:
    """The atoms `tenant_id` may not have now: those owed a scrub by another tenant (every owed
    atom when `tenant_id` is None, as for the admin, who books for no tenant of its own)."""
    return {atom for atom, holder in owed.items() if holder != tenant_id}
