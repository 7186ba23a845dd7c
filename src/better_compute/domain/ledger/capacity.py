"""What a pool could book, and when: its bookable atoms grouped by kind, with how many are free for
a window and the earliest start at which enough of them are.

A user choosing a request wants the answer per thing they could ask for (a whole GPU of a model, a
MIG profile, a slot), not per atom; grouping by class, GPU model and MIG profile is exactly the
choice a device request's class and selector make.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.catalog import profile_name_key
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.choose import earliest_common_start

MAX_FREE_COUNT = 4096
"""The most atoms one `capacity.free` question may ask to start together: more than any pool's
GPUs times seven MIG instances in practice, and a bound on the sweep's work."""


@dataclass(frozen=True, slots=True)
class FreeKind:
    """One kind of atom in a pool and its free capacity for a window.

    `free` counts atoms free for the whole window; `earliest_start` is the earliest start at or after
    the window's at which `count` of them are free for its length (the window's start when `free`
    reaches `count`; None when that never happens: too few such atoms, or bookings that never end).
    """

    cls: str
    gpu_model: str | None
    mig_profile: str | None
    atoms: int
    free: int
    earliest_start: datetime | None


def kind_of(atom: Atom) -> tuple[str, str | None, str | None]:
    """The kind an atom counts under: its class, GPU model and (for MIG instances) profile."""
    model = atom.attributes.get("gpuModel")
    profile = atom.attributes.get("migProfile") if atom.cls == "gpu.mig" else None
    return (
        atom.cls,
        model if isinstance(model, str) else None,
        profile if isinstance(profile, str) else None,
    )


def check_count(value: object, field: str = "count") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_FREE_COUNT:
        raise InvalidInput(
            f"{field} must be an integer from 1 to {MAX_FREE_COUNT}, not {value!r}",
            {"field": field, "max": MAX_FREE_COUNT},
        )
    return value


def free_by_kind(
    atoms: Iterable[Atom], busy: Mapping[str, Sequence[Window]], window: Window, count: int = 1
) -> list[FreeKind]:
    """The bookable atoms grouped by `kind_of`, each group with its free count for `window` and the
    earliest start for `count` of them; `busy` maps atom ids to their live bookings.

    Unbookable atoms (parents, GPUs changing partition, atoms gone from their node) are left out:
    nothing can book them. Kinds come whole GPUs first, then MIG profiles largest first, then slots.
    """
    groups: dict[tuple[str, str | None, str | None], list[Atom]] = {}
    for atom in atoms:
        if atom.bookable:
            groups.setdefault(kind_of(atom), []).append(atom)
    out: list[FreeKind] = []
    for (cls, model, profile), members in groups.items():
        windows = {a.id: busy.get(a.id, ()) for a in members}
        free = sum(1 for spans in windows.values() if not any(s.overlaps(window) for s in spans))
        start = (
            window.start
            if free >= count
            else earliest_common_start(windows, count, window.duration, window.start)
        )
        out.append(FreeKind(cls, model, profile, len(members), free, start))
    return sorted(out, key=_order)


def _order(kind: FreeKind) -> tuple[str, str, tuple[int, int, str]]:
    return (kind.cls, kind.gpu_model or "", profile_name_key(kind.mig_profile or ""))
