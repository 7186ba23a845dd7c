"""The endpoint copies a node runs, as its spec tells them (docs/endpoints.md#what-runs): each copy on
one of the node's partitions is handed over under its own name (`copy:<component>:<index>`), for the
endpoint's tenant, running the component's model server. The gate asks this through its hook
(`GateHooks.work_on`, wired in `service/hooks.py`); it knows nothing of endpoints."""

from __future__ import annotations

from collections.abc import Sequence

from better_compute.domain.endpoints.commands import parse_component
from better_compute.domain.endpoints.endpoints import ComponentSpec, copy_allocation_id, copy_of
from better_compute.domain.gate.node_spec import PlacedCopy
from better_compute.service.endpoints.ports import EndpointsTx


def placed_on_in(tx: EndpointsTx, atom_ids: Sequence[str]) -> tuple[PlacedCopy, ...]:
    """The copies placed on `atom_ids`, each with its atom, tenant and container."""
    specs: dict[str, ComponentSpec] = {}
    out: list[PlacedCopy] = []
    for row in tx.components.placed_on(atom_ids):
        copy = row.copy
        if copy.atom_id is None:
            continue
        spec = specs.get(copy.component)
        if spec is None:
            spec = specs[copy.component] = parse_component(row.spec)
        out.append(
            PlacedCopy(
                allocation_id=copy_allocation_id(copy.component, copy.copy),
                atom_id=copy.atom_id,
                tenant_id=row.tenant_id,
                container=spec.container,
            )
        )
    return tuple(out)


def atom_of_in(tx: EndpointsTx, allocation_id: str) -> str | None:
    """The partition copy `allocation_id` (`copy:<component>:<index>`) is placed on now; None for
    another name, a copy that does not exist, or one waiting for a partition."""
    named = copy_of(allocation_id)
    if named is None:
        return None
    component, index = named
    return next((c.atom_id for c in tx.components.copies([component])[component] if c.copy == index), None)


__all__ = ["atom_of_in", "placed_on_in"]
