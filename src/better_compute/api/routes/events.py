"""The events stream: `events.list` (the admin reads every event, a tenant the events about itself)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.answers import paged
from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.kernel.events import StreamedEvent, type_of
from better_compute.service.ops import events
from better_compute.wire.common import Page
from better_compute.wire.events import EventListQuery, EventPublic

router = APIRouter(prefix="/v1", tags=["events"], route_class=StrictQueryRoute)


@router.get("/events", response_model=Page[EventPublic])
def list_events(
    q: Annotated[EventListQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> Page[EventPublic]:
    found = events.list_events(
        store,
        principal,
        type_=q.type,
        subject=q.subject,
        after=q.after,
        limit=q.limit,
        since=None if q.since is None else events.since_time(q.since, now),
        last=q.last,
    )
    return paged(found, event_public)


def event_public(e: StreamedEvent) -> EventPublic:
    return EventPublic(
        id=e.id, type=type_of(e.event), subject=e.event.subject, time=e.at, payload=e.event.payload()
    )
