"""An atom that stops being bookable between admission's read and its commit (issue: a 500 when
`NotBookable` reached `reservations.create`): the reservation is decided again on fresh atoms."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from better_compute.domain.kernel.errors import DomainError
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0, fleet_spec
from tests.reliability.pool_race_worker import OWNER


def _mig_request() -> dict[str, Any]:
    return {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}


def _unbook_all_but(store: Store, keep: str) -> None:
    """What a node report or pool change does to atoms, done behind the index's back (no event), so
    that the index's next choice is certain to be refused by the commit."""
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE atoms SET bookable = false WHERE class = 'gpu.mig' AND id <> :keep"), {"keep": keep}
        )


def test_not_bookable_at_commit_is_decided_again(store: Store) -> None:
    fleet = fleet_spec(nodes=1, layout="all-1g.10gb")
    load_fleet(store, fleet, T0)
    with store.engine.begin() as conn:
        conn.execute(text("INSERT INTO quotas VALUES ('platform', 'p1', 'gpu.mig', 100, :t)"), {"t": T0})
        atoms = [r[0] for r in conn.execute(text("SELECT id FROM atoms WHERE class = 'gpu.mig' ORDER BY id"))]
    index = BookingIndex()
    ids = iter(f"rsv-{n:04d}" for n in range(10))
    first = reservations.create(store, index, OWNER, _mig_request(), T0, lambda: next(ids))
    keep = next(a for a in reversed(atoms) if a != first.atoms[0].id)
    _unbook_all_but(store, keep)

    second = reservations.create(store, index, OWNER, _mig_request(), T0, lambda: next(ids))
    assert [a.id for a in second.atoms] == [keep]

    # Nothing bookable is left: a clean refusal, not a server error.
    _unbook_all_but(store, "none")
    with pytest.raises(DomainError) as refused:
        reservations.create(store, index, OWNER, _mig_request(), T0, lambda: next(ids))
    assert refused.value.code == "INSUFFICIENT_CAPACITY"
