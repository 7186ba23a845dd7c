"""Cluster phases and node cordons: which parts of the fleet take new work
(docs/concepts.md#cluster-phases-and-node-cordons).

A cluster's `phase` says what an operator wants of it:

- `active`: it takes new work;
- `cordoned`: it takes no new placements, and what runs there keeps running;
- `draining`: it takes no new placements either, and its work is being moved away (a workload's
  drain acts on it); what runs there keeps running until it is moved or ends.

A node's `cordoned` flag is the same rule one level down: a cordoned node's atoms take no new
booking, and the bookings they already hold stay. Neither ever ends a booking.
"""

from __future__ import annotations

from typing import Final

from better_compute.domain.kernel.errors import InvalidInput, NotFound

ACTIVE: Final = "active"
CORDONED: Final = "cordoned"
DRAINING: Final = "draining"

PHASES: Final = (ACTIVE, CORDONED, DRAINING)
"""Every cluster phase, in the order the documentation lists them."""

_ACCEPTING: Final = frozenset({ACTIVE})


def accepts_placements(phase: str) -> bool:
    """Whether a cluster in `phase` takes new work: only an `active` one does."""
    return phase in _ACCEPTING


def check_phase(value: object, field: str = "phase") -> str:
    """A cluster phase from a request; anything else is INVALID_INPUT naming the phases there are."""
    if not isinstance(value, str) or value not in PHASES:
        raise InvalidInput(
            f"{field} must be one of {', '.join(PHASES)}, not {value!r}"[:200],
            {"field": field, "allowed": list(PHASES)},
        )
    return value


def check_cordoned(value: object, field: str = "cordoned") -> bool:
    """A node's cordon from a request: true or false, nothing else."""
    if not isinstance(value, bool):
        raise InvalidInput(f"{field} must be true or false, not {value!r}"[:200], {"field": field})
    return value


def cluster_not_found(cluster_id: str) -> NotFound:
    return NotFound(f"cluster {cluster_id} not found", {"id": cluster_id})


def node_not_found(node_id: str) -> NotFound:
    return NotFound(f"node {node_id} not found", {"node": node_id})
