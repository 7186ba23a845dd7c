"""Capacity rollups: how many GPUs per model and atoms per pool there are, bookable and booked now,
and how many whole GPUs were booked over time.

`summary` and `timeline` count whole GPUs only (a GPU split into MIG instances or slots is not a
whole GPU anyone can book); `by_pool` counts atoms of each class, so fractions show there.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from fractions import Fraction

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.pools import CLASSES_BY_MODE, SharingMode
from better_compute.domain.fleet.records import Gpu
from better_compute.domain.kernel.atom_classes import ATOM_CLASSES, AtomClass
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.accounting import MICROSECONDS_PER_HOUR, Grid

_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class ModelCount:
    """Whole GPUs of one model: present, bookable whole, booked whole now, unhealthy."""

    model: str
    total: int
    bookable: int
    booked: int
    unhealthy: int


@dataclass(frozen=True, slots=True)
class ClassCount:
    """Atoms of one class in one pool: present, bookable, booked now."""

    pool_id: str
    cls: AtomClass
    total: int
    bookable: int
    booked: int


@dataclass(frozen=True, slots=True)
class WholeBooked:
    """Whole GPUs booked in one bucket: the most at once, and the GPU-hours booked."""

    span: Window
    peak: int
    hours: Fraction


def model_of(gpu: Gpu) -> str:
    """The model a GPU is counted under: its catalog model, else the product it reports."""
    return gpu.model or gpu.product


def summary(gpus: Iterable[Gpu], atoms: Iterable[Atom], booked_now: Collection[str]) -> list[ModelCount]:
    """Per GPU model, the present GPUs among `gpus`: how many, how many can be booked whole (their
    `gpu` atom is bookable: not split, healthy, not changing partition), how many are booked whole
    now (`booked_now`: atom ids a tenant's booking holds now) and how many are unhealthy."""
    whole = {a.gpu_id: a for a in atoms if a.cls == "gpu" and a.present}
    counts: dict[str, list[int]] = {}
    for gpu in gpus:
        if not gpu.present:
            continue
        row = counts.setdefault(model_of(gpu), [0, 0, 0, 0])
        atom = whole.get(gpu.id)
        row[0] += 1
        row[1] += atom is not None and atom.bookable
        row[2] += atom is not None and atom.id in booked_now
        row[3] += not gpu.healthy
    return [ModelCount(model, *row) for model, row in sorted(counts.items())]


def by_pool(
    pools: Mapping[str, SharingMode], atoms: Iterable[Atom], booked_now: Collection[str]
) -> list[ClassCount]:
    """Per pool of `pools` (id -> sharing mode) and per atom class it can have (the classes its mode
    gives, `CLASSES_BY_MODE`, and any class it holds atoms of), its present atoms: how many, how
    many are bookable, how many a tenant's booking holds now. An exclusive pool has no `gpu.slot`
    row of zeros: a row is a class the pool can hold."""
    counts = {(p, c): [0, 0, 0] for p, mode in pools.items() for c in CLASSES_BY_MODE[mode]}
    for atom in atoms:
        if not atom.present or atom.pool_id is None or atom.pool_id not in pools:
            continue
        row = counts.setdefault((atom.pool_id, atom.cls), [0, 0, 0])
        row[0] += 1
        row[1] += atom.bookable
        row[2] += atom.id in booked_now
    order = {c: n for n, c in enumerate(ATOM_CLASSES)}
    return [
        ClassCount(p, c, *row)
        for (p, c), row in sorted(counts.items(), key=lambda kv: (kv[0][0], order[kv[0][1]]))
    ]


def timeline(held: Iterable[Window], grid: Grid) -> list[WholeBooked]:
    """Per bucket of `grid`, the whole GPUs that `held` (the windows of tenants' bookings of whole
    GPUs) booked: the most at once in the bucket, and their GPU-hours there."""
    size, length = grid.size_us, grid.length_us
    count = -(-length // size)
    events: list[tuple[int, int]] = []
    for span in held:
        start = max(span.start, grid.start)
        end = grid.end if span.end is None else min(span.end, grid.end)
        if start < end:
            events += [((start - grid.start) // _MICROSECOND, 1), ((end - grid.start) // _MICROSECOND, -1)]
    events.sort()  # at one instant, ends (-1) before starts: back-to-back bookings are one GPU
    peaks = [0] * count
    held_us = [0] * count
    level = at = 0
    for when, step in events:
        _fill(peaks, held_us, level, at, when, size)
        at = when
        level += step
    return [
        WholeBooked(span, peaks[i], Fraction(held_us[i], MICROSECONDS_PER_HOUR))
        for i, span in enumerate(grid.buckets())
    ]


def _fill(peaks: list[int], held_us: list[int], level: int, start: int, end: int, size: int) -> None:
    if level == 0:
        return
    while start < end:
        bucket = start // size
        edge = min(end, (bucket + 1) * size)
        peaks[bucket] = max(peaks[bucket], level)
        held_us[bucket] += level * (edge - start)
        start = edge
