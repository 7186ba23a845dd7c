"""Pool use cases: create over free nodes, update with compare-and-swap, re-derive atoms, offer
(docs/concepts.md#fleet-pools-and-sharing-modes, docs/concepts.md#quotas-iam-policies-and-tenancy)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.gate import mig_gate as rules
from better_compute.domain.kernel.errors import (
    ConcurrentChange,
    Conflict,
    Forbidden,
    GenerationMismatch,
    InvalidInput,
    InvalidState,
    NotFound,
)
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import inventory, pools
from better_compute.service.gate import mig_gate
from better_compute.service.ledger import ledger
from better_compute.service.tenancy import quotas
from better_compute.service.tx import Tx
from better_compute.storage.store import Store
from tests.builders import T0, at, bare_fleet, stored_events

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="admin")
ACME = Principal(tenant_id="acme", is_admin=False, credential_id="acme")
PLATFORM = Principal(tenant_id="platform", is_admin=False, credential_id="platform")


@pytest.fixture
def fleet(store: Store) -> Store:
    load_fleet(store, parse_fleet(bare_fleet()), T0)
    return store


def create(store: Store, name: str = "p", **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "cluster_id": "c1",
        "mode": "mig",
        "owner_tenant_id": "platform",
        "nodes": ["h-1"],
    }
    args.update(kw)
    return pools.create(store, ADMIN, name=name, now=T0, **args)


def atoms_of(store: Store, node: str, cls: str | None = None) -> list[Atom]:
    return [a for a in inventory.list_atoms(store, cls=cls, limit=1000).items if a.node == node]


def events(store: Store, type_: str) -> list[dict[str, Any]]:
    return stored_events(store, type_)


def test_create_claims_the_nodes_and_rederives_their_atoms(fleet: Store) -> None:
    assert {a.pool_id for a in atoms_of(fleet, "l")} == {None}
    pool = create(fleet, "slots", mode="timeslice", nodes=["l"], policy={"replicas": 4})
    assert pool.pool.generation == 1 and pool.nodes == ("l",) and pool.pool.meter == "gpu.l40s.hours"
    assert pool.pool.settings.as_mapping() == {"replicas": 4}
    slots = atoms_of(fleet, "l", "gpu.slot")
    assert len(slots) == 8 and {a.pool_id for a in slots} == {"slots"}
    assert {a.attributes["slots"] for a in slots} == {4}
    parents = atoms_of(fleet, "l", "gpu")
    assert len(parents) == 2 and not any(a.bookable for a in parents)
    assert pools.get_pool(fleet, ADMIN, "slots").nodes == ("l",)
    (event,) = events(fleet, "pool.created")
    assert event["subject"] == "slots" and event["payload"]["nodes"] == ["l"]


def test_create_writes_the_owners_quota_rows(fleet: Store) -> None:
    create(fleet, owner_tenant_id="acme", owner_quota={"gpu.mig": 14, "gpu": 2})
    with fleet.read() as tx:
        rows = tx.quotas.find("acme", "p")
    assert [(r.cls, r.limit) for r in rows] == [("gpu", 2), ("gpu.mig", 14)]
    # Without ownerQuota there are no rows: the owner's default covers whole GPUs only.
    create(fleet, "q", nodes=["h-2"])
    with fleet.read() as tx:
        assert tx.quotas.find("platform", "q") == []


def test_create_refuses_what_cannot_be_a_pool(fleet: Store) -> None:
    create(fleet, nodes=["h-1"])
    cases: list[tuple[type[Exception], dict[str, Any]]] = [
        (Conflict, {}),
        (InvalidState, {"name": "other", "nodes": ["h-1"]}),
        (InvalidInput, {"name": "other", "nodes": ["x"]}),
        (InvalidInput, {"name": "other", "nodes": ["h-2", "h-2"]}),
        (NotFound, {"name": "other", "nodes": ["ghost"]}),
        (NotFound, {"name": "other", "cluster_id": "c9", "nodes": []}),
        (NotFound, {"name": "other", "owner_tenant_id": "nobody"}),
        (InvalidInput, {"name": "Other Pool"}),
        (InvalidInput, {"name": "other", "mode": "shared"}),
        (InvalidInput, {"name": "other", "mode": "exclusive", "policy": {"replicas": 2}}),
        (InvalidInput, {"name": "other", "mode": "mps", "policy": {"replicas": 49}}),
        (InvalidInput, {"name": "other", "nodes": ["l"], "policy": {"migLayout": "all-1g.10gb"}}),
        (InvalidInput, {"name": "other", "nodes": ["h-2"], "policy": {"migLayout": "mixed:2x4g.40gb"}}),
        (InvalidInput, {"name": "other", "nodes": ["h-2"], "owner_quota": {"gpu.big": 1}}),
    ]
    for error, kw in cases:
        with pytest.raises(error):
            create(fleet, **kw)
    with pytest.raises(Forbidden):
        pools.create(
            fleet, ACME, name="mine", cluster_id="c1", mode="exclusive", owner_tenant_id="acme", now=T0
        )
    assert [p.id for p in pools.list_pools(fleet, ADMIN).items] == ["p"]


def test_a_refused_layout_names_the_node_and_the_profile(fleet: Store) -> None:
    with pytest.raises(InvalidInput) as err:
        create(fleet, nodes=["h-1"], policy={"migLayout": "mixed:2x4g.40gb"})
    assert "node h-1" in err.value.message
    assert err.value.details["node"] == "h-1" and err.value.details["profile"] == "4g.40gb"


def test_a_mig_pool_without_nodes_refuses_a_layout_no_catalog_model_could_take(fleet: Store) -> None:
    """Issue 11, defect 16: with no node to check it on, any well-formed layout was taken."""
    with pytest.raises(InvalidInput) as err:
        create(fleet, "empty", nodes=[], policy={"migLayout": "mixed:9x9g.99gb"})
    assert err.value.message.startswith("pools.create: policy.migLayout mixed:9x9g.99gb fits no GPU model")
    create(fleet, "empty", nodes=[], policy={"migLayout": "all-1g.10gb"})
    with pytest.raises(InvalidInput, match="fits no GPU model in the catalog"):
        pools.update(fleet, ADMIN, "empty", policy={"migLayout": "all-9g.99gb"}, now=at(1))


def settle(store: Store, node: str, now: datetime) -> list[rules.Step]:
    """Step the node's layout gate at `now` until it waits or is gone (what a reconciler does)."""
    taken: list[rules.Step] = []
    while (step := mig_gate.step(store, node, now)) is not None and not isinstance(step, rules.Wait):
        taken.append(step)
    return taken


def test_replicas_go_through_the_gate_and_keep_surviving_ids(fleet: Store) -> None:
    create(fleet, "slots", mode="mps", nodes=["l"], policy={"replicas": 4})
    before = {(a.gpu_id, a.key): a.id for a in atoms_of(fleet, "l", "gpu.slot")}
    updated = pools.update(fleet, ADMIN, "slots", policy={"replicas": 2}, now=at(1))
    assert updated.pool.generation == 2 and updated.pool.settings.as_mapping() == {"replicas": 2}
    # Frozen until the gate grants the node its new count: the slots are as they were.
    assert {a.attributes["mpsUnits"] for a in atoms_of(fleet, "l", "gpu.slot")} == {25}
    # An idle node is scheduled at once and granted; one with no daemon is released at the grant.
    steps = settle(fleet, "l", at(1))
    assert [type(s) for s in steps] == [rules.Schedule, rules.Grant] and steps[1] == rules.Grant(release=True)
    slots = atoms_of(fleet, "l", "gpu.slot")
    assert len(slots) == 4 and {a.attributes["mpsUnits"] for a in slots} == {50}
    assert all(before[a.gpu_id, a.key] == a.id for a in slots)
    assert all(a.bookable for a in slots)
    pools.update(fleet, ADMIN, "slots", policy={"replicas": 8}, now=at(2))
    settle(fleet, "l", at(2))
    assert len(atoms_of(fleet, "l", "gpu.slot")) == 16
    with fleet.read() as tx:
        assert tx.mig_layouts.all_rows() == []
        assert list(tx.ledger.live_on([a.id for a in atoms_of(fleet, "l")], at(2))) == []


@pytest.mark.parametrize("mode", ["timeslice", "mps"])
def test_replicas_wait_for_the_slots_bookings_and_never_resize_a_booked_slot(fleet: Store, mode: str) -> None:
    """Issue 11, defect 20: slot:0 survives 3 -> 2, but its share would grow from 33 to 50 MPS units
    under its holder. The change is accepted and waits at the gate: the node keeps 3 slots until
    its last booking ends, idle time before then still books, and nothing lands past it."""
    create(fleet, "slots", mode=mode, nodes=["l"], policy={"replicas": 3})
    first = next(a for a in atoms_of(fleet, "l", "gpu.slot") if a.key == "slot:0")
    ledger.book(fleet, [first.id], Window(at(0), at(5)), "rsv-a", "platform", T0)
    ledger.book(fleet, [first.id], Window(at(5), at(7)), "rsv-b", "platform", T0)
    pools.update(fleet, ADMIN, "slots", policy={"replicas": 2}, now=at(1))
    assert settle(fleet, "l", at(1)) == [rules.Schedule(at(7))]
    assert {a.attributes["slots"] for a in atoms_of(fleet, "l", "gpu.slot")} == {3}
    if mode == "mps":
        assert {a.attributes["mpsUnits"] for a in atoms_of(fleet, "l", "gpu.slot")} == {33}
    other = next(
        a for a in atoms_of(fleet, "l", "gpu.slot") if a.key == "slot:1" and a.gpu_id == first.gpu_id
    )
    ledger.book(fleet, [other.id], Window(at(2), at(6)), "rsv-c", "platform", at(1))  # before: books
    with pytest.raises(Conflict):
        ledger.book(fleet, [other.id], Window(at(6), at(9)), "rsv-d", "platform", at(1))  # past it
    assert settle(fleet, "l", at(6)) == []  # the node's last booking has not ended
    assert settle(fleet, "l", at(7)) == [rules.Grant(release=True)]
    assert {a.attributes["slots"] for a in atoms_of(fleet, "l", "gpu.slot")} == {2}
    if mode == "mps":
        assert {a.attributes["mpsUnits"] for a in atoms_of(fleet, "l", "gpu.slot")} == {50}


def test_a_new_count_back_to_the_frozen_one_undoes_the_change(fleet: Store) -> None:
    create(fleet, "slots", mode="timeslice", nodes=["l"], policy={"replicas": 3})
    first = next(a for a in atoms_of(fleet, "l", "gpu.slot") if a.key == "slot:0")
    ledger.book(fleet, [first.id], Window(at(0), at(5)), "rsv-a", "platform", T0)
    pools.update(fleet, ADMIN, "slots", policy={"replicas": 2}, now=at(1))
    settle(fleet, "l", at(1))
    pools.update(fleet, ADMIN, "slots", policy={"replicas": 3}, now=at(2))
    with fleet.read() as tx:
        assert tx.mig_layouts.all_rows() == []  # undone: the holds went with it
    ledger.book(fleet, [first.id], Window(at(5), at(9)), "rsv-b", "platform", at(2))
    assert {a.attributes["slots"] for a in atoms_of(fleet, "l", "gpu.slot")} == {3}


def test_generation_is_compared_and_always_bumped(fleet: Store) -> None:
    create(fleet)
    assert pools.update(fleet, ADMIN, "p", generation=1, now=at(1)).pool.generation == 2
    with pytest.raises(GenerationMismatch) as err:
        pools.update(fleet, ADMIN, "p", policy={"migLayout": "all-7g.80gb"}, generation=1, now=at(2))
    assert err.value.details == {
        "poolId": "p",
        "generation": 2,
        "expected": 1,
        "reason": "generation_mismatch",
    }
    assert pools.get_pool(fleet, ADMIN, "p").pool.settings.as_mapping() == {"migLayout": "all-disabled"}
    with pytest.raises(InvalidInput):
        pools.update(fleet, ADMIN, "p", mode="exclusive", now=at(2))
    with pytest.raises(Forbidden):
        pools.update(fleet, PLATFORM, "p", now=at(2))
    with pytest.raises(NotFound):
        pools.update(fleet, ADMIN, "ghost", now=at(2))


class RacingStore:
    """A store whose first `races` generation swaps lose to a concurrent writer."""

    def __init__(self, store: Store, races: int) -> None:
        self.store = store
        self.races = races
        self.dialect = store.dialect

    @contextmanager
    def begin(self) -> Iterator[Tx]:
        with self.store.begin() as tx:
            if self.races > 0:
                self.races -= 1
                tx.pools.compare_and_set = lambda *a, **k: False  # type: ignore[method-assign]
            yield tx

    def read(self) -> Any:
        return self.store.read()


def test_a_lost_race_is_retried_unless_the_client_named_a_generation(fleet: Store) -> None:
    create(fleet)
    assert pools.update(RacingStore(fleet, 2), ADMIN, "p", now=at(1)).pool.generation == 2
    with pytest.raises(GenerationMismatch):
        pools.update(RacingStore(fleet, 1), ADMIN, "p", generation=2, now=at(1))
    with pytest.raises(ConcurrentChange):
        pools.update(RacingStore(fleet, pools.UPDATE_ATTEMPTS), ADMIN, "p", now=at(1))
    assert pools.get_pool(fleet, ADMIN, "p").pool.generation == 2


def test_a_new_mig_layout_is_validated_recorded_and_requested(fleet: Store) -> None:
    create(fleet, nodes=["h-1", "h-2"], policy={"migLayout": "all-1g.10gb"})
    with pytest.raises(InvalidInput):
        pools.update(fleet, ADMIN, "p", policy={"migLayout": "mixed:3x3g.40gb"}, now=at(1))
    updated = pools.update(fleet, ADMIN, "p", policy={"migLayout": "mixed:3g.40gb+2x2g.20gb"}, now=at(1))
    assert updated.pool.settings.as_mapping() == {"migLayout": "mixed:3g.40gb+2x2g.20gb"}
    (event,) = events(fleet, "pool.mig_layout.requested")
    assert event["payload"] == {
        "from": "all-1g.10gb",
        "to": "mixed:3g.40gb+2x2g.20gb",
        "nodes": ["h-1", "h-2"],
    }
    # The same layout again requests nothing new.
    pools.update(fleet, ADMIN, "p", policy={"migLayout": "mixed:2x2g.20gb+3g.40gb"}, now=at(2))
    assert len(events(fleet, "pool.mig_layout.requested")) == 1


def test_nodes_join_and_leave_a_pool(fleet: Store) -> None:
    create(fleet, mode="exclusive", nodes=["h-1"])
    pools.update(fleet, ADMIN, "p", nodes=["h-1", "h-2"], now=at(1))
    assert {a.pool_id for a in atoms_of(fleet, "h-2")} == {"p"}
    pools.update(fleet, ADMIN, "p", nodes=["h-2"], now=at(2))
    assert {a.pool_id for a in atoms_of(fleet, "h-1")} == {None}
    assert pools.get_pool(fleet, ADMIN, "p").nodes == ("h-2",)
    with pytest.raises(InvalidInput):
        pools.update(fleet, ADMIN, "p", nodes=["x"], now=at(3))
    # A node whose atom is booked cannot leave.
    atom = atoms_of(fleet, "h-2", "gpu")[0]
    ledger.book(fleet, [atom.id], Window(at(3)), "r1", "platform", T0)
    with pytest.raises(InvalidState):
        pools.update(fleet, ADMIN, "p", nodes=[], now=at(4))
    assert pools.get_pool(fleet, ADMIN, "p").nodes == ("h-2",)


@pytest.mark.parametrize(("mode", "policy"), [("timeslice", {"replicas": 2}), ("mps", {"replicas": 4})])
def test_single_tenant_pools_refuse_offers_to_others(fleet: Store, mode: str, policy: dict[str, int]) -> None:
    create(fleet, mode=mode, nodes=["l"], policy=policy)
    with pytest.raises(InvalidState):
        pools.offer(fleet, ADMIN, "p", "acme", {"gpu.slot": 1}, T0)
    with pytest.raises(InvalidState):
        quotas.set_quota(fleet, PLATFORM, "acme", "p", "gpu.slot", 1, T0)
    rows = pools.offer(fleet, PLATFORM, "p", "platform", {"gpu.slot": 2}, T0)
    assert [(r.tenant_id, r.cls, r.limit) for r in rows] == [("platform", "gpu.slot", 2)]


def test_offers_write_rows_and_open_the_pool_to_the_tenant(fleet: Store) -> None:
    create(fleet, nodes=["h-1"])
    assert pools.list_pools(fleet, ACME).items == []
    with pytest.raises(NotFound):
        pools.get_pool(fleet, ACME, "p")
    with pytest.raises(NotFound):
        pools.offer(fleet, ACME, "p", "acme", {"gpu": 1}, T0)
    rows = pools.offer(fleet, PLATFORM, "p", "acme", {"gpu.mig": 3, "gpu": 1}, T0)
    assert [(r.cls, r.limit) for r in rows] == [("gpu", 1), ("gpu.mig", 3)]
    assert [p.id for p in pools.list_pools(fleet, ACME).items] == ["p"]
    assert pools.visible_pool_ids(fleet, ACME) == {"p"} and pools.visible_pool_ids(fleet, ADMIN) is None
    with pytest.raises(Forbidden):
        pools.offer(fleet, ACME, "p", "beta", {"gpu": 1}, T0)
    (event,) = events(fleet, "pool.offered")
    assert event["payload"] == {"tenantId": "acme", "quota": {"gpu.mig": 3, "gpu": 1}}
