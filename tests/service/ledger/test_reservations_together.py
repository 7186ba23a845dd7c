"""A reservation of several device requests is kept together as one request of their total would be
(docs/concepts.md#reservations, step 4), through the service on both stores."""

from __future__ import annotations

import itertools

import pytest

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet

OWNER = Principal(tenant_id="platform", is_admin=False, credential_id="together")


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_the_device_requests_of_one_reservation_are_placed_together(store: Store, nodes: int) -> None:
    """Issue 11, defect 19: `[{gpu,1},{gpu,1}]` on an empty pool landed on two nodes, while one
    request of count 2 stays on one."""
    load_fleet(store, parse_fleet(small_fleet(nodes=nodes, mode="exclusive")), T0)
    ids = (f"rsv-{n}" for n in itertools.count())
    index = BookingIndex()
    for devices in ([{"class": "gpu", "count": 2}], [{"class": "gpu", "count": 1}] * 2):
        view = reservations.create(
            store, index, OWNER, {"poolId": "p1", "devices": devices, "duration": "1h"}, T0, lambda: next(ids)
        )
        assert len({a.node for a in view.atoms}) == 1, (devices, [(a.node, a.gpu_id) for a in view.atoms])
