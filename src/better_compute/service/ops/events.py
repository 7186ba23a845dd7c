"""The events stream: `events.list`, pages of the event log for people and scripts to follow.

Every change the server makes appends an event in its own transaction (domain/kernel/events.py); this is
where callers read them back, oldest first, resuming after the last id they received. The store
serves only settled events in an order that no later commit can get in front of
(storage/kernel/event_stream.py), so following the stream page after page skips nothing and repeats
nothing. Which events a caller may read is `domain.ops.audience`'s rule: the admin reads every event, a
tenant the events about itself.
"""

from __future__ import annotations

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.events import StreamedEvent, check_event_id, check_event_type
from better_compute.domain.ops.audience import Reader
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.tenancy import check_ref, tenant_scope
from better_compute.service.fleet.pools import seen_pool_ids
from better_compute.service.kernel.paging import DEFAULT_LIMIT, Listing
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ops.ports import OpsTx


def list_events(
    store: StorePort[OpsTx],
    principal: Principal,
    *,
    type_: str | None = None,
    subject: str | None = None,
    after: str | None = None,
    limit: int | None = None,
) -> Listing[StreamedEvent]:
    """A page of the events the caller may read, after the event `after` (an id from an earlier
    page; from the start without it), of type `type_` and about `subject` when given. `next_cursor`
    is the last item's id when the page is full, so more may follow; a follower that reached the end
    asks again after the last id it received."""
    wanted_type = None if type_ is None else check_event_type(type_)
    wanted_subject = None if subject is None else check_ref(subject, "subject")
    after_id = None if after is None else check_event_id(after)
    size = limit or DEFAULT_LIMIT
    with store.read() as tx:
        start = None
        if after_id is not None:
            start = tx.events.position(after_id)
            if start is None:
                raise InvalidInput(
                    f"after: no event has id {after_id}; pass the id of an event already read",
                    {"field": "after"},
                )
        own = tenant_scope(principal, None)  # None for the admin, else the token's own tenant
        reader = Reader(own, frozenset(seen_pool_ids(tx, principal)) if own is not None else frozenset())
        found = tx.events.stream(reader, start, size + 1, wanted_type, wanted_subject)
    page = found[:size]
    return Listing(page, str(page[-1].id) if len(found) > size and page else None)
