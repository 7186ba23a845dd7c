"""Charts for the console, drawn by the server as SVG: stacked bars, one per time bucket, with a
value axis. Nothing runs in the browser; each chart is followed by its numbers as a table, for
screen readers and for copying."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Bar", "Chart", "stacked"]

WIDTH = 960
HEIGHT = 260
LEFT = 56
"""Room for the value axis' labels."""
BOTTOM = 28
"""Room for the bucket labels."""
TOP = 8


@dataclass(frozen=True, slots=True)
class Bar:
    """One series' part of one bucket's stack."""

    x: float
    y: float
    width: float
    height: float
    series: int
    title: str


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bars: tuple[Bar, ...]
    series: tuple[str, ...]
    ticks: tuple[tuple[float, str], ...]
    """Value axis: (y, label)."""
    labels: tuple[tuple[float, str], ...]
    """Bucket labels: (x, label), thinned so they do not overlap."""
    rows: tuple[tuple[str, tuple[float, ...]], ...]
    """The numbers drawn: each bucket's label and its value per series."""


def _nice(top: float) -> float:
    """A round axis maximum at or above `top`: 1, 2 or 5 times a power of ten."""
    if top <= 0:
        return 1.0
    power = 10 ** len(str(int(top))) / 10 if top >= 1 else 1.0
    while power > top:
        power /= 10
    for step in (1, 2, 5, 10):
        if step * power >= top:
            return step * power
    return 10 * power


def stacked(
    buckets: Sequence[tuple[str, Mapping[str, float]]],
    series: Sequence[str],
    unit: str = "GPU-hours",
    *,
    top: float | None = None,
) -> Chart:
    """Stacked bars of `buckets` (label, value per series), series in `series` order, bottom up.
    `top`: the value axis' maximum (a share's 100 %); None: a round number at or above the tallest."""
    plot_w, plot_h = WIDTH - LEFT - 8, HEIGHT - TOP - BOTTOM
    totals = [sum(values.get(s, 0.0) for s in series) for _, values in buckets]
    if top is None:
        top = _nice(max(totals, default=0.0))
    step = plot_w / max(1, len(buckets))
    bars: list[Bar] = []
    for k, (label, values) in enumerate(buckets):
        base = 0.0
        for index, name in enumerate(series):
            value = values.get(name, 0.0)
            if value <= 0:
                continue
            height = value / top * plot_h
            y = TOP + plot_h - (base + value) / top * plot_h
            bars.append(
                Bar(
                    round(LEFT + k * step + step * 0.1, 2),
                    round(y, 2),
                    round(step * 0.8, 2),
                    round(height, 2),
                    index,
                    f"{label} · {name}: {value:.2f}{'' if unit == '%' else ' '}{unit}",
                )
            )
            base += value
    ticks = tuple((round(TOP + plot_h - f * plot_h, 2), f"{top * f:g}") for f in (0, 0.25, 0.5, 0.75, 1))
    every = max(1, len(buckets) // 12)
    labels = tuple(
        (round(LEFT + k * step + step / 2, 2), label)
        for k, (label, _) in enumerate(buckets)
        if k % every == 0
    )
    rows = tuple((label, tuple(values.get(s, 0.0) for s in series)) for label, values in buckets)
    return Chart(WIDTH, HEIGHT, tuple(bars), tuple(series), ticks, labels, rows)
