"""Priority classes: `priorityClasses.create` (admin) and `priorityClasses.list` /
`priorityClasses.get` (any token: a tenant names one when it asks for a workload). Recorded only:
nothing acts on a priority yet."""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.placement.events import PriorityClassCreated
from better_compute.domain.placement.priority_classes import (
    PriorityClass,
    priority_class,
    priority_class_not_found,
    priority_class_taken,
)
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.tenancy import check_ref
from better_compute.service.kernel.paging import Listing, page
from better_compute.service.kernel.ports import StorePort
from better_compute.service.placement.ports import PlacementTx


def create(
    store: StorePort[PlacementTx],
    principal: Principal,
    name: object,
    priority: object,
    preemptible: object,
    now: datetime,
) -> PriorityClass:
    """Create a priority class (admin only); a name already taken (`standard` always is) is CONFLICT."""
    require_admin(principal, "priorityClasses.create")
    item = priority_class(name, priority, preemptible, now)
    with store.begin() as tx:
        if not tx.priority_classes.add(item):
            raise priority_class_taken(item.name)
        tx.events.append(PriorityClassCreated(item.name, item.priority, item.preemptible), now)
    return item


def get(store: StorePort[PlacementTx], principal: Principal, name: str) -> PriorityClass:
    del principal  # any authenticated caller
    check_ref(name, "id")
    with store.read() as tx:
        found = tx.priority_classes.get(name)
    if found is None:
        raise priority_class_not_found(name)
    return found


def list_classes(
    store: StorePort[PlacementTx], principal: Principal, *, limit: int | None = None, after: str | None = None
) -> Listing[PriorityClass]:
    """Priority classes by name (`standard` among them)."""
    del principal  # any authenticated caller
    with store.read() as tx:
        return page(tx.priority_classes.all(), lambda p: p.name, limit, after)
