"""The classes of atom (docs/concepts.md#atoms): a whole GPU, a MIG instance, a time or MPS slot.

Fleet derives atoms of these classes; tenancy keys a quota row by one, the ledger and placement ask
for one, metering rolls usage up by one. So the names live in the kernel, below all of them.
"""

from __future__ import annotations

from typing import Literal, get_args

from better_compute.domain.kernel.errors import InvalidInput

AtomClass = Literal["gpu", "gpu.mig", "gpu.slot"]
ATOM_CLASSES: tuple[AtomClass, ...] = get_args(AtomClass)


def check_atom_class(value: object, field: str) -> AtomClass:
    """An atom class named in a request (a device request, a quota map, a filter)."""
    if value not in ATOM_CLASSES:
        raise InvalidInput(
            f"{field} must be one of {', '.join(ATOM_CLASSES)}, not {value!r}", {"field": field}
        )
    return value


__all__ = ["ATOM_CLASSES", "AtomClass", "check_atom_class"]
