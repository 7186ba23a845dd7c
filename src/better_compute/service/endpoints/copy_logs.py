"""Whose log `endpoints logs` reads: a copy of a component of the caller's endpoint, on the node the
copy is on now (docs/endpoints.md#logs). The read itself is the adapter's (`service.fleet.node_agents`)."""

from __future__ import annotations

from better_compute.domain.endpoints.endpoints import copy_allocation_id
from better_compute.domain.fleet.node_agents import LogSource
from better_compute.domain.kernel.errors import NotFound
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.tenancy import check_ref
from better_compute.service.endpoints.components import component_not_found
from better_compute.service.endpoints.endpoints import _visible
from better_compute.service.endpoints.ports import EndpointsTx
from better_compute.service.fleet.node_agents import source_on
from better_compute.service.kernel.ports import StorePort


def locate(
    store: StorePort[EndpointsTx],
    principal: Principal,
    name: str,
    component: str,
    copy: int | None = None,
    serves: str = "logs",
) -> LogSource:
    """Copy `copy` of `component` of the endpoint `name` the principal may see, or, with none named,
    its first copy on a node. NOT_FOUND: another tenant's endpoint, a component not of it, no such
    copy, or one on no node now; UNAVAILABLE: its node serves no logs (nor exec: `serves`)."""
    with store.read() as tx:
        endpoint = _visible(tx, principal, name)
        found = tx.components.get(check_ref(component, "component"))
        if found is None or found.endpoint != endpoint.name:
            raise component_not_found(component)
        copies = sorted(tx.components.copies([found.name]).get(found.name, []), key=lambda c: c.copy)
        for c in copies:
            if (copy is None or c.copy == copy) and c.node_id is not None:
                return source_on(
                    tx, copy_allocation_id(c.component, c.copy), c.node_id, endpoint.tenant_id, serves
                )
        what = "a copy on a node" if copy is None else f"copy {copy} on a node"
        raise NotFound(f"component {found.name} has no {what} now", {"component": found.name, "copy": copy})
