"""Which allocations a node may hand their devices to: the atom rule, kept once more on the node.

The ledger never lets a whole GPU and a part of it (a MIG instance, a slot) be booked at once. The
node keeps that rule too, as its last line of defence: a spec that would give a container a whole GPU
while another holds a part of it, or a part while another holds the whole, or one atom to two
allocations, is refused for the later allocation, with the reason, and nothing is handed over for it.
What is already handed over stays: a bound allocation is never taken back because of a newer one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Held:
    """One atom an allocation is to hold on this node: `whole` for a whole GPU, else a part of it."""

    allocation_id: str
    atom_id: str
    gpu_uuid: str
    whole: bool


def refusals(bound: Iterable[Held], wanted: Sequence[Held]) -> Mapping[str, str]:
    """The allocations of `wanted` that must be refused, each with its reason.

    `bound` is what is handed over already; `wanted` is taken in order, each allocation whole or not
    at all, so that of two new allocations that clash the first one listed is served."""
    atoms: dict[str, str] = {}
    wholes: dict[str, str] = {}
    parts: dict[str, str] = {}

    def take(items: Iterable[Held]) -> None:
        for h in items:
            atoms[h.atom_id] = h.allocation_id
            (wholes if h.whole else parts).setdefault(h.gpu_uuid, h.allocation_id)

    take(bound)
    by_allocation: dict[str, list[Held]] = {}
    for h in wanted:
        by_allocation.setdefault(h.allocation_id, []).append(h)
    refused: dict[str, str] = {}
    for allocation_id, items in by_allocation.items():
        reason = next((r for h in items if (r := _clash(h, atoms, wholes, parts)) is not None), None)
        if reason is None:
            take(items)
        else:
            refused[allocation_id] = reason
    return refused


def _clash(
    h: Held, atoms: Mapping[str, str], wholes: Mapping[str, str], parts: Mapping[str, str]
) -> str | None:
    other = atoms.get(h.atom_id)
    if other is not None and other != h.allocation_id:
        return f"atom {h.atom_id} is held by {other}"
    whole = wholes.get(h.gpu_uuid)
    if not h.whole and whole is not None and whole != h.allocation_id:
        return f"{h.gpu_uuid} is held whole by {whole}; a part of it cannot be handed over"
    part = parts.get(h.gpu_uuid)
    if h.whole and part is not None and part != h.allocation_id:
        return f"a part of {h.gpu_uuid} is held by {part}; the whole GPU cannot be handed over"
    return None
