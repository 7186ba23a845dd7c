"""Worst-case MIG layout validation time on every catalog model.

Enumerates, per MIG-capable model, every multiset of profiles whose compute slices reach at most one
past the GPU's (so every valid layout and every near miss), plus `all-<profile>` for each profile and
`all-disabled`, and times `validate()` cold (memoised searches cleared before each call) and warm.
Each layout is timed several times and its median kept, so the worst figure is the slowest layout,
not a scheduler hiccup.

    .venv/bin/python bench/layouts.py --quick

The last line is one JSON object: worst_us, p50_us (cold), warm_p50_us, validations, layouts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator

from better_compute.domain.catalog import GpuModel, MigProfile, mig_models
from better_compute.domain.catalog.layouts import Layout, clear_caches, format_layout, validate
from better_compute.domain.kernel.errors import InvalidInput

GOAL_US = 1000.0


def multisets(model: GpuModel) -> Iterator[Layout]:
    """Every multiset with compute slices <= the GPU's + 1 and counts <= each profile's max + 1."""
    profiles = list(model.profiles)
    budget = model.compute_slices + 1

    def walk(index: int, left: int, chosen: list[tuple[MigProfile, int]]) -> Iterator[Layout]:
        if index == len(profiles):
            if chosen:
                yield Layout.mixed([(p.name, n) for p, n in chosen])
            return
        profile = profiles[index]
        yield from walk(index + 1, left, chosen)
        for count in range(1, profile.max_instances + 2):
            cost = count * profile.compute_slices
            if cost > left:
                break
            yield from walk(index + 1, left - cost, [*chosen, (profile, count)])

    yield Layout.disabled()
    for profile in profiles:
        yield Layout.all_of(profile.name)
    yield from walk(0, budget, [])


def time_once(layout: Layout, model: GpuModel, cold: bool) -> tuple[float, bool]:
    if cold:
        clear_caches()
    start = time.perf_counter()
    try:
        validate(layout, model)
        ok = True
    except InvalidInput:
        ok = False
    return (time.perf_counter() - start) * 1e6, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions per layout (under a minute)")
    args = parser.parse_args()
    repeats = 3 if args.quick else 9

    cold_medians: list[float] = []
    warm_medians: list[float] = []
    worst = (0.0, "", "")
    validations = 0
    print(f"{'model':<14} {'layouts':>8} {'valid':>6} {'worst us':>9} {'p50 us':>8} {'warm p50 us':>12}")
    for model in mig_models():
        per_model: list[float] = []
        valid = 0
        layouts = list(multisets(model))
        for layout in layouts:
            cold = []
            for _ in range(repeats):
                elapsed, ok = time_once(layout, model, cold=True)
                cold.append(elapsed)
            warm = [time_once(layout, model, cold=False)[0] for _ in range(repeats)]
            validations += 2 * repeats
            valid += ok
            median = statistics.median(cold)
            per_model.append(median)
            cold_medians.append(median)
            warm_medians.append(statistics.median(warm))
            if median > worst[0]:
                worst = (median, model.id, format_layout(layout))
        print(
            f"{model.id:<14} {len(layouts):>8} {valid:>6} {max(per_model):>9.1f} "
            f"{statistics.median(per_model):>8.1f} {statistics.median(warm_medians[-len(layouts) :]):>12.1f}"
        )
    print(f"slowest layout: {worst[2]} on {worst[1]} ({worst[0]:.1f} us cold); goal < {GOAL_US:.0f} us")
    print(
        json.dumps(
            {
                "worst_us": round(worst[0], 1),
                "p50_us": round(statistics.median(cold_medians), 1),
                "warm_p50_us": round(statistics.median(warm_medians), 1),
                "validations": validations,
                "layouts": len(cold_medians),
                "goal_us": GOAL_US,
                "met": worst[0] < GOAL_US,
            }
        )
    )


if __name__ == "__main__":
    main()
