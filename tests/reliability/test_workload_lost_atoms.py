"""A workload write that loses its atoms to another tenant's writes (in another process) catches up
with the log and books on its next attempt: the index is not rebuilt from the ledger, which on a
large fleet stalls every request of the process. Only PostgreSQL lets two writers interleave so."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from better_compute.domain.kernel.events import LoggedEvent
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.fleet import pools
from better_compute.service.kernel.event_tail import Cursor, LogSnapshot
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.placement import workloads
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.tx import Tx
from better_compute.storage.store import Store
from tests.service.placement.test_workload_settle import ADMIN, NOW, body, fleet

pytestmark = pytest.mark.postgres


def one_gpu(name: str, project: str) -> dict[str, object]:
    return {**body(name, 1), "tenantId": project, "shape": {"deviceClass": "h100-80gb-sxm", "deviceCount": 1}}


class CountingIndex(BookingIndex):
    """Counts full rebuilds; syncs only when asked (a process that has not read the log lately)."""

    def __init__(self) -> None:
        super().__init__()
        self.reloads = 0

    def reload(self, tx: Tx) -> None:
        self.reloads += 1
        super().reload(tx)


def test_an_atom_lost_to_another_process_twice_is_caught_up_on_without_rebuilding_the_index(
    pg_store: Store,
) -> None:
    """Another tenant's writes take the atoms this process picks, on two attempts in a row: each
    time the index catches up with the log and the next attempt books; no full rebuild."""
    store = pg_store
    load_fleet(store, parse_fleet(fleet()), NOW)
    pools.offer(store, ADMIN, "p1", "globex", {"gpu": 16}, NOW)
    behind = workloads.Wiring(store, CountingIndex(), Stock(), RandomIds())
    other = workloads.Wiring(store, BookingIndex(), Stock(), RandomIds())
    with store.read() as tx:
        behind.index.sync(tx)
    real_sync, real_apply = behind.index.sync, behind.index.apply
    calls = {"n": 0}

    def step(catch_up: Callable[[], None]) -> None:
        # An attempt catches up after taking its lock (`apply`), a clash after it (`sync`).
        # 1: the first attempt's, left undone (the process has not read the log since `first`);
        # 2: after the first clash; 3: the second attempt's, after which `other` takes the next
        # GPU this process will pick; 4: after the second clash.
        calls["n"] += 1
        if calls["n"] == 1:
            return
        catch_up()
        if calls["n"] == 3:
            assert workloads.create(other, ADMIN, one_gpu("third", "globex"), NOW)

    def racing_sync(tx: Tx) -> None:
        step(lambda: real_sync(tx))

    def racing_apply(
        tx: Tx, read: Cursor, events: Sequence[LoggedEvent], newest: int, snap: LogSnapshot
    ) -> None:
        step(lambda: real_apply(tx, read, events, newest, snap))

    behind.index.sync = racing_sync  # type: ignore[method-assign]
    behind.index.apply = racing_apply  # type: ignore[method-assign]
    assert workloads.create(other, ADMIN, one_gpu("first", "globex"), NOW).workload.unplaced == 0

    second = workloads.create(behind, ADMIN, one_gpu("second", "acme"), NOW)
    assert second.workload.unplaced == 0
    assert calls["n"] >= 5  # two clashes were caught up on
    assert isinstance(behind.index, CountingIndex) and behind.index.reloads == 0
