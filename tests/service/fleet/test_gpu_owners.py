"""A GPU belongs to one node (domain.fleet.gpu_owners) on every path that writes inventory, on SQLite and
PostgreSQL: a fleet file's load, one ingest of several nodes, the database's own fence, and how a GPU
moves: its node reports it gone, or an admin releases it (`nodes.releaseGpu`)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import timedelta

import pytest

from better_compute.domain.fleet.inventory import NodeReport
from better_compute.domain.kernel.errors import (
    DomainError,
    Forbidden,
    GpuOwnedElsewhere,
    InvalidState,
    NotFound,
)
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import gpu_owners, inventory
from better_compute.service.fleet.rederive import stored_reports
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.tenancy import quotas
from better_compute.storage.store import Store
from tests.builders import T0, at, fleet_spec, stored_events

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="admin-1")
PLATFORM = Principal(tenant_id="platform", is_admin=False, credential_id="platform-1")


def reports(store: Store, *nodes: str) -> dict[str, NodeReport]:
    with store.read() as tx:
        return {r.node: r for r in stored_reports(tx, list(nodes))}


def with_gpu(report: NodeReport, other: NodeReport, index: int = 0) -> NodeReport:
    """`report` with `other`'s GPU `index` added as its last GPU."""
    taken = replace(other.gpus[index], index=len(report.gpus))
    return replace(report, gpus=(*report.gpus, taken))


def without_gpu(report: NodeReport, index: int = 0) -> NodeReport:
    return replace(report, gpus=tuple(g for g in report.gpus if g.index != index))


def node_of(store: Store, gpu: str) -> tuple[str, bool]:
    with store.read() as tx:
        found = tx.gpus.by_ids([gpu])[gpu]
        return found.node_id, found.present


def holders(store: Store, *uuids: str) -> dict[str, str]:
    with store.read() as tx:
        return {u: h.node for u, h in tx.gpus.holders(list(uuids)).items()}


def book_whole(store: Store, gpu: str, **window: object) -> str:
    """A tenant's booking of GPU `gpu`'s whole atom (an exclusive pool); its reservation id."""
    body: dict[str, object] = {
        "poolId": "p1",
        "devices": [{"class": "gpu", "count": 1, "selector": {"matchExpressions": []}}],
        "duration": "2h",
        **window,
    }
    ids = (f"rsv-{n}" for n in itertools.count())
    while True:  # book until GPU `gpu`'s atom is taken (at most the pool's four)
        view = reservations.create(store, BookingIndex(), PLATFORM, body, T0, lambda: next(ids))
        if any(a.gpu_id == gpu for a in view.atoms):
            return view.id


@pytest.fixture
def exclusive(store: Store) -> Store:
    load_fleet(store, fleet_spec(nodes=2, mode="exclusive"), T0)
    quotas.set_quota(store, ADMIN, "platform", "p1", "gpu", 64, T0)
    return store


def test_one_ingest_naming_one_gpu_under_two_nodes_is_refused_whole(exclusive: Store) -> None:
    store = exclusive
    got = reports(store, "n-1", "n-2")
    new = replace(got["n-1"].gpus[0], uuid="GPU-new", index=2)
    before = len(stored_events(store))
    with pytest.raises(DomainError) as refused:
        inventory.ingest(
            store,
            [
                replace(got["n-1"], gpus=(*got["n-1"].gpus, new)),
                replace(got["n-2"], gpus=(*got["n-2"].gpus, new)),
            ],
            at(1),
        )
    assert refused.value.reason == "GpuOwnedElsewhere" and refused.value.details["uuids"] == ["GPU-new"]
    assert "GPU-new on node n-1" in refused.value.message  # an admin's load names the nodes
    with store.read() as tx:
        assert tx.gpus.get("GPU-new") is None
    assert len(stored_events(store)) == before


def test_a_fleet_load_naming_a_gpu_another_node_holds_is_a_clear_error(exclusive: Store) -> None:
    store = exclusive
    got = reports(store, "n-1", "n-2")
    moved = got["n-2"].gpus[0].uuid
    # The GPU really moved: released from n-2, and n-1 reports it.
    gpu_owners.release(store, ADMIN, moved, at(1))
    inventory.ingest(store, [with_gpu(got["n-1"], got["n-2"])], at(1))
    assert node_of(store, moved) == ("n-1", True)
    # The fleet file still simulates n-2 with it: the load stops, naming the GPU and both nodes.
    with pytest.raises(GpuOwnedElsewhere) as refused:
        load_fleet(store, fleet_spec(nodes=2, mode="exclusive"), at(2))
    assert refused.value.message.startswith(f"node n-2 reports {moved}, which another node holds")
    assert f"{moved} on node n-1" in refused.value.message
    assert node_of(store, moved) == ("n-1", True)


def test_the_database_refuses_a_claim_on_another_nodes_gpu_a_check_let_through(exclusive: Store) -> None:
    """What storage writes is the last fence: an ingest that skipped the check (or whose check read
    before another node's claim committed) is refused as a whole."""
    store = exclusive
    got = reports(store, "n-1", "n-2")
    with pytest.raises(GpuOwnedElsewhere) as refused, store.begin() as tx:
        inventory.ingest_in(tx, [with_gpu(got["n-1"], got["n-2"])], at(1))
    assert refused.value.details == {
        "node": "n-1",
        "uuids": [got["n-2"].gpus[0].uuid],
        "reason": "GpuOwnedElsewhere",
    }
    assert node_of(store, got["n-2"].gpus[0].uuid) == ("n-2", True)


def test_many_claims_at_once_are_fenced_too(store: Store) -> None:
    """A fleet's worth of uuids in one write (PostgreSQL copies them in bulk): the same fence."""
    load_fleet(store, fleet_spec(nodes=2, gpus=8, layout="all-1g.10gb"), T0)
    got = reports(store, "n-1", "n-2")
    stolen = replace(
        got["n-1"], gpus=(*got["n-1"].gpus, *(replace(g, index=8 + g.index) for g in got["n-2"].gpus))
    )
    assert sum(1 + len(g.mig_instances) for g in stolen.gpus) >= 100
    with pytest.raises(GpuOwnedElsewhere) as refused, store.begin() as tx:
        inventory.ingest_in(tx, [stolen], at(1))
    assert refused.value.details["uuids"] == sorted(g.uuid for g in got["n-2"].gpus)
    assert holders(store, *(g.uuid for g in got["n-2"].gpus)) == {g.uuid: "n-2" for g in got["n-2"].gpus}


def test_a_gpu_its_node_reported_gone_moves_to_the_node_that_reports_it(exclusive: Store) -> None:
    store = exclusive
    got = reports(store, "n-1", "n-2")
    moved = got["n-2"].gpus[0].uuid
    with pytest.raises(GpuOwnedElsewhere):
        inventory.ingest(store, [with_gpu(got["n-1"], got["n-2"])], at(1))
    inventory.ingest(store, [without_gpu(got["n-2"])], at(2))  # pulled out of n-2
    assert holders(store, moved) == {}
    inventory.ingest(store, [with_gpu(got["n-1"], got["n-2"])], at(3))
    assert node_of(store, moved) == ("n-1", True) and holders(store, moved) == {moved: "n-1"}
    # n-2 now reporting it again is refused: it is n-1's.
    with pytest.raises(GpuOwnedElsewhere):
        inventory.ingest(store, [got["n-2"]], at(4))


def test_a_gpu_reported_gone_stays_its_nodes_while_a_tenant_books_it(exclusive: Store) -> None:
    store = exclusive
    got = reports(store, "n-1", "n-2")
    moved = got["n-2"].gpus[0].uuid
    rid = book_whole(store, moved, start=at(5).isoformat())  # later: the GPU goes before it starts
    inventory.ingest(store, [without_gpu(got["n-2"])], at(1))
    with pytest.raises(GpuOwnedElsewhere) as refused:
        inventory.ingest(store, [with_gpu(got["n-1"], got["n-2"])], at(2))
    assert refused.value.owners == {moved: "n-2"}
    reservations.cancel(store, PLATFORM, rid, at(2))
    inventory.ingest(store, [with_gpu(got["n-1"], got["n-2"])], at(3))
    assert node_of(store, moved) == ("n-1", True)


def test_releasing_a_gpu_lets_another_node_take_it_and_is_audited(exclusive: Store) -> None:
    store = exclusive
    got = reports(store, "n-1", "n-2")
    moved = got["n-2"].gpus[0].uuid
    released = gpu_owners.release(store, ADMIN, moved, at(1))
    assert (released.node_id, released.present) == ("n-2", False)
    assert holders(store, moved) == {}
    with store.read() as tx:
        atoms = [a for a in tx.atoms.of_nodes(["n-2"]) if a.gpu_id == moved]
    assert atoms and not any(a.present or a.bookable for a in atoms)
    (event,) = stored_events(store, "gpu.released")
    assert (event["subject"], event["payload"]) == (moved, {"node": "n-2", "by": "admin-1"})
    # Releasing it again writes nothing.
    gpu_owners.release(store, ADMIN, moved, at(2))
    assert len(stored_events(store, "gpu.released")) == 1
    inventory.ingest(store, [with_gpu(got["n-1"], got["n-2"])], at(3))
    assert node_of(store, moved) == ("n-1", True)
    with store.read() as tx:
        atoms = [a for a in tx.atoms.of_nodes(["n-1"]) if a.gpu_id == moved]
    assert atoms and all(a.present and a.bookable and a.pool_id == "p1" for a in atoms)


@pytest.mark.parametrize("later", [False, True], ids=["now", "later"])
def test_a_gpu_a_tenant_books_is_not_released(exclusive: Store, later: bool) -> None:
    store = exclusive
    moved = reports(store, "n-2")["n-2"].gpus[0].uuid
    window = {"start": (T0 + timedelta(days=3)).isoformat()} if later else {}
    rid = book_whole(store, moved, **window)
    with pytest.raises(InvalidState) as refused:
        gpu_owners.release(store, ADMIN, moved, at(1))
    assert refused.value.details["allocationIds"] == [rid] and refused.value.details["node"] == "n-2"
    assert rid in refused.value.message
    assert node_of(store, moved) == ("n-2", True) and holders(store, moved) == {moved: "n-2"}
    assert stored_events(store, "gpu.released") == []
    reservations.cancel(store, PLATFORM, rid, at(1)) if later else reservations.release(
        store, PLATFORM, rid, at(1)
    )
    assert gpu_owners.release(store, ADMIN, moved, at(1)).present is False


def test_only_an_admin_releases_a_gpu_it_names(exclusive: Store) -> None:
    with pytest.raises(Forbidden):
        gpu_owners.release(exclusive, PLATFORM, "GPU-x", T0)
    with pytest.raises(NotFound):
        gpu_owners.release(exclusive, ADMIN, "GPU-nowhere", T0)
