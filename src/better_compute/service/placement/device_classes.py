"""Device classes: `deviceClasses.create` (admin) and `deviceClasses.list` / `deviceClasses.get` (any
token: a tenant names a class when it asks for a workload, so the classes are no secret to it)."""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.selectors import document
from better_compute.domain.placement.device_classes import (
    DeviceClass,
    device_class_not_found,
    device_class_taken,
    parse_spec,
)
from better_compute.domain.placement.events import DeviceClassCreated
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.tenancy import check_ref
from better_compute.service.kernel.paging import Listing, page
from better_compute.service.kernel.ports import StorePort
from better_compute.service.placement.ports import PlacementTx


def create(
    store: StorePort[PlacementTx],
    principal: Principal,
    name: object,
    cls: object,
    selector: object,
    now: datetime,
) -> DeviceClass:
    """Create a device class (admin only); a name already taken is CONFLICT, whatever it selects."""
    require_admin(principal, "deviceClasses.create")
    item = parse_spec(name, cls, selector).created(now)
    with store.begin() as tx:
        if not add_in(tx, item, now):
            raise device_class_taken(item.name)
    return item


def add_in(tx: PlacementTx, item: DeviceClass, now: datetime) -> bool:
    """Create `item` inside the caller's transaction with its event; False when the name is taken."""
    if not tx.device_classes.add(item):
        return False
    tx.events.append(DeviceClassCreated(item.name, item.cls, document(item.selector)), now)
    return True


def register(tx: PlacementTx, item: DeviceClass, now: datetime) -> None:
    """A class a fleet file names: created when new, left alone when it is there alike (a file loads
    twice to the same result), refused when it is there with another definition (classes are never
    changed: quotas and workloads that name one must keep meaning its atoms)."""
    current = tx.device_classes.get(item.name)
    if current is None:
        if add_in(tx, item, now):
            return
        current = tx.device_classes.get(item.name)
    if current is not None and current.spec != item.spec:
        raise InvalidInput(
            f"device class {item.name} exists with another class or selector, and a device class is"
            " never changed; give the file's class another name",
            {"field": "deviceClasses", "deviceClass": item.name},
        )


def get(store: StorePort[PlacementTx], principal: Principal, name: str) -> DeviceClass:
    del principal  # any authenticated caller
    check_ref(name, "id")
    with store.read() as tx:
        found = tx.device_classes.get(name)
    if found is None:
        raise device_class_not_found(name)
    return found


def list_classes(
    store: StorePort[PlacementTx], principal: Principal, *, limit: int | None = None, after: str | None = None
) -> Listing[DeviceClass]:
    """Device classes by name."""
    del principal  # any authenticated caller
    with store.read() as tx:
        return page(tx.device_classes.all(), lambda d: d.name, limit, after)
