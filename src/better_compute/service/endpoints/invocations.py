"""`endpoints.invoke`'s side of the server that is not HTTP: which ready copies of a component a request
may go to (`route`), and how many requests each copy has outstanding from this process (`Balancer`)
(docs/endpoints.md#invoking-an-endpoint).

`route` reads the routing table from the database on every request, in one short read of two
statements (the component joined to its endpoint's tenant, its copies and their nodes' last contact;
then the copies' last `ReplicaState`, each by its key), rather than from a cache: a copy a node
reports not ready stops getting traffic as soon as that report commits, and a copy whose node has
gone silent (no contact for `READY_LEASE`) as soon as the lease runs out, in every server process
alike, with nothing to invalidate and no timer deciding anything (each request decides at its own
`now`). A request the read finds nothing to route for reads again to say what is missing
(`_refuse`). `bench/endpoints.py` measures what the read adds.

The `Balancer` is per process: with several server processes each spreads its own requests by
what it has outstanding itself (none sees the others' counts), which still sends each copy about its
share under even load.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import NoReturn

from better_compute.domain.endpoints.copy_states import ReadyCopy, ready_copies
from better_compute.domain.endpoints.endpoints import copy_allocation_id
from better_compute.domain.endpoints.invoke_routing import (
    CopyKey,
    NoReadyCopy,
    invoke_path,
    order_copies,
    routable,
)
from better_compute.domain.fleet.replica_states import live_nodes
from better_compute.domain.kernel.errors import NotFound
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.endpoints.ports import EndpointsTx
from better_compute.service.kernel.ports import StorePort


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request for a component may go: its ready copies with an address, in copy order, and the
    path their model servers take requests on."""

    endpoint: str
    component: str
    path: str
    copies: tuple[ReadyCopy, ...]


def route(
    store: StorePort[EndpointsTx], principal: Principal, endpoint: str, component: str, now: datetime
) -> Route:
    """The component's ready copies at `now` (NOT_FOUND for an endpoint the caller may not see, as for
    one that does not exist, and for a component that is not the endpoint's; `NoReadyCopy` for none
    ready)."""
    with store.read() as tx:
        read = tx.components.routing(component)
        if read is None or read.component.endpoint != endpoint or not principal.acts_for(read.tenant_id):
            _refuse(tx, principal, endpoint, component)
        copies = read.copies
        states = tx.replica_states.of_allocations(
            [copy_allocation_id(c.component, c.copy) for c in copies if c.node_id is not None]
        )
    ready = ready_copies(copies, states, live_nodes(read.contacts, now))
    reachable = routable(ready)
    if not reachable:
        why = "no ready copy" if not ready else "no ready copy whose node reported its address"
        raise NoReadyCopy(endpoint, component, why)
    return Route(endpoint, component, invoke_path(read.component.spec), tuple(reachable))


def _refuse(tx: EndpointsTx, principal: Principal, endpoint: str, component: str) -> NoReturn:
    """NOT_FOUND for a request the routing read found nothing to route for: of the endpoint when the
    caller may not see it (as when it does not exist), else of the component on it."""
    found = tx.endpoints.get(endpoint)
    if found is None or not principal.acts_for(found.tenant_id):
        raise NotFound(f"endpoint {endpoint} not found", {"endpointName": endpoint})
    raise NotFound(
        f"component {component} not found on endpoint {endpoint}",
        {"endpointName": endpoint, "component": component},
    )


class Balancer:
    """Requests outstanding per copy in this process, and whose turn it is among equals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outstanding: dict[CopyKey, int] = {}
        self._turns = itertools.count()

    def order(self, copies: tuple[ReadyCopy, ...]) -> list[ReadyCopy]:
        """The copies in the order a request should try them (`domain...order_copies`)."""
        with self._lock:
            return order_copies(copies, self._outstanding, next(self._turns))

    def take(self, copy: ReadyCopy) -> Callable[[], None]:
        """Count a request at `copy`; call what this returns, once, when it is done (answer included)."""
        key = (copy.component, copy.copy)
        with self._lock:
            self._outstanding[key] = self._outstanding.get(key, 0) + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            with self._lock:
                left = self._outstanding[key] - 1
                if left:
                    self._outstanding[key] = left
                else:
                    del self._outstanding[key]

        return release

    def load(self) -> dict[CopyKey, int]:
        """A copy of the counts (for tests and metrics)."""
        with self._lock:
            return dict(self._outstanding)


__all__ = ["Balancer", "Route", "route"]
