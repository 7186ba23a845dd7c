"""Warm before ready: a server process loads what its hot path needs before it says it is ready, so
that no request pays for loading the fleet (docs/operations.md, Starting and readiness).

What is loaded: the booking index (every live booking, then the event log's tail), each pool's
atoms, which admission reads on every reservation, and those atoms grouped by GPU for each class
with no selector (the shape of nearly every request). Until then the process answers `/healthz` and
`/readyz` with `starting` (503), and a worker of `serve --workers N` accepts no connection at all.
"""

from __future__ import annotations

from better_compute.domain.ledger.admission import DeviceRequest
from better_compute.service.services import Services


def warm(services: Services) -> None:
    """Load the booking index and every pool's atoms into `services`' caches.

    Only bookings that reach past the present are read: a year of ended ones changes no answer,
    and loading them only to forget them made a process slower to start and bigger for ever."""
    services.index.forget_ended(services.clock())
    with services.store.read() as tx:
        services.index.sync(tx)
        for pool in tx.pools.all():
            held = services.index.pool_atoms(tx, pool.id)
            # The shape nearly every request has (a class, no selector): grouping a big pool's
            # atoms by GPU for it is most of a cold first reservation.
            for cls in sorted({a.cls for a in held.atoms.values()}):
                held.matching_by_gpu(DeviceRequest(cls, 1))


__all__ = ["warm"]
