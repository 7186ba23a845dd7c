"""Priority classes: a named priority for workloads (docs/concepts.md#priority-classes), higher wins;
`preemptible` says whether a workload of the class may be evicted to make room for a higher one.

A workload evicts preemptible replicas of lower priority to be placed
(`domain.placement.preemption`), and waiting workloads are placed again highest priority first
(`fairness.admission_order`). The class `standard` (priority 0, not preemptible) always exists, so
that a workload that names no class has one; the migration that made the table created it, and it
cannot be created again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.kernel.errors import AlreadyExists, InvalidInput, NotFound
from better_compute.domain.tenancy.tenancy import check_class_name

STANDARD = "standard"
"""The priority class that always exists (priority 0, not preemptible)."""

MIN_PRIORITY = -1_000_000
MAX_PRIORITY = 1_000_000
"""The range of `priority`: room for any ordering of classes people write, while a value stays far
from the limits of the stores' integers and of anything later code adds or compares."""


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    priority: int
    preemptible: bool
    created_at: datetime

    @property
    def id(self) -> str:
        return self.name


def check_priority(value: object, field: str = "priority") -> int:
    """An integer from MIN_PRIORITY to MAX_PRIORITY; `true` is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise InvalidInput(
            f"{field} must be an integer from {MIN_PRIORITY:,} to {MAX_PRIORITY:,}, not {value!r}"[:200],
            {"field": field, "min": MIN_PRIORITY, "max": MAX_PRIORITY},
        )
    return value


def priority_class(
    name: object, priority: object, preemptible: object, created_at: datetime
) -> PriorityClass:
    """A priority class from a request; each refusal names its field."""
    if not isinstance(preemptible, bool):
        raise InvalidInput(
            f"preemptible must be true or false, not {preemptible!r}"[:200], {"field": "preemptible"}
        )
    return PriorityClass(
        name=check_class_name(name, "name"),
        priority=check_priority(priority),
        preemptible=preemptible,
        created_at=created_at,
    )


def standard(created_at: datetime) -> PriorityClass:
    """The `standard` class as it is created with the store."""
    return PriorityClass(STANDARD, 0, False, created_at)


def priority_class_not_found(name: str) -> NotFound:
    return NotFound(f"priority class {name} not found", {"priorityClass": name})


def priority_class_taken(name: str) -> AlreadyExists:
    """CONFLICT for a name already taken (`standard` always is)."""
    why = "it always exists" if name == STANDARD else "a priority class is never changed"
    return AlreadyExists(
        f"priority class {name} already exists ({why}); choose another name", {"priorityClass": name}
    )
