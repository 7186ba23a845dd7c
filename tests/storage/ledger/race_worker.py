"""One racing process: books random windows and partition changes, and reports every outcome."""

from __future__ import annotations

import random
from datetime import timedelta

from better_compute.domain.kernel.errors import BookingConflict
from better_compute.domain.kernel.timewin import Window
from better_compute.service.ledger import ledger
from better_compute.storage.store import Store
from tests.builders import T0


def race(
    url: str, worker: int, atoms: list[str], gpus: list[str], attempts: int, seed: int
) -> list[tuple[str, str]]:
    """Returns (allocation id, outcome) for every attempt; outcome is `booked` or `conflict`."""
    rng = random.Random(seed * 1000 + worker)
    store = Store.open(url, migrate_schema=False, pool_size=1)
    outcomes: list[tuple[str, str]] = []
    try:
        for n in range(attempts):
            start = T0 + timedelta(minutes=15 * rng.randrange(0, 48))
            span = Window(start, start + timedelta(minutes=15 * rng.randrange(1, 12)))
            if rng.random() < 0.2:
                result = ledger.book_partition_change(store, rng.choice(gpus), span, T0)
                if isinstance(result, ledger.PartitionChange):
                    outcomes.append((result.booking_id, "booked"))
                else:
                    outcomes.append((f"partition-attempt-{worker}-{n}", "conflict"))
                continue
            allocation = f"w{worker}-{n}"
            chosen = rng.sample(atoms, rng.choice([1, 1, 2]))
            try:
                ledger.book(store, chosen, span, allocation, "acme", T0)
                outcomes.append((allocation, "booked"))
            except BookingConflict:
                outcomes.append((allocation, "conflict"))
    finally:
        store.close()
    return outcomes
