"""A workload write that keeps losing its atoms to other processes settles on its last attempt: the
replicas it could book are booked, the rest stay unplaced for the retrier, and the write is not
refused. The losing process is modelled by an index that never catches up after its first load
(each attempt chooses the same taken atoms again), as a process outrun on every attempt would."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from better_compute.domain.kernel.events import LoggedEvent
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.kernel.event_tail import Cursor, LogSnapshot
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.placement import workloads
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.tx import Tx
from better_compute.storage.store import Store

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="test-admin")
NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)


class OutrunIndex(BookingIndex):
    """Loads once, then never sees another booking."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded = False

    def sync(self, tx: Tx) -> None:
        if not self.loaded:
            super().sync(tx)
            self.loaded = True

    def apply(
        self, tx: Tx, read: Cursor, events: Sequence[LoggedEvent], newest: int, snapshot: LogSnapshot
    ) -> None:
        return None  # a write's read of the log after its lock

    def reload(self, tx: Tx) -> None:
        return None


def fleet() -> dict[str, object]:
    return {
        "tenants": [{"id": "platform"}, {"id": "acme"}, {"id": "globex"}],
        "deviceClasses": [
            {
                "name": "h100-80gb-sxm",
                "class": "gpu",
                "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
            }
        ],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [{"name": "n", "replicas": 2, "gpus": {"model": "H100-80GB", "count": 8}}],
            }
        ],
        "pools": [
            {"name": "p1", "cluster": "c1", "mode": "exclusive", "owner": "acme", "nodes": ["n-1", "n-2"]}
        ],
    }


def body(name: str, replicas: int) -> dict[str, object]:
    return {
        "tenantId": "acme",
        "name": name,
        "shape": {"deviceClass": "h100-80gb-sxm", "deviceCount": 8},
        "replicas": replicas,
    }


def test_a_write_outrun_on_every_attempt_books_what_it_can_and_leaves_the_rest_unplaced(store: Store) -> None:
    load_fleet(store, parse_fleet(fleet()), NOW)
    outrun = workloads.Wiring(store, OutrunIndex(), Stock(), RandomIds())
    with store.read() as tx:
        outrun.index.sync(tx)  # loaded while the fleet is empty
    other = workloads.Wiring(store, BookingIndex(), Stock(), RandomIds())
    first = workloads.create(other, ADMIN, body("first", 1), NOW)
    assert first.workload.unplaced == 0

    # Its index still shows both nodes free: every attempt picks the node `first` holds.
    second = workloads.create(outrun, ADMIN, body("second", 2), NOW)
    assert (second.workload.unplaced, [d.booked for d in second.deployments]) == (1, [1])
    assert second.deployments[0].phase == "admitted"
    with store.read() as tx:
        held = {b.allocation_id for b in tx.ledger.live_bookings(NOW)}
        again = tx.workloads.get(second.id)
    assert again is not None and again.unplaced == 1
    assert len(held) == 2  # one replica of each workload, eight GPUs each, no atom twice

    # With an index that catches up, the retrier finds nothing free and places nothing more.
    assert workloads.retry(other, NOW) == 0
