"""The MIG layout gate with a fake clock, through the real app, on SQLite and PostgreSQL: a pool's
new layout never repartitions a node under a holder, an idle node is scheduled at once, a booking
ending later delays its own node only, a second change replaces a pending one, a node that keeps
its own layout is released at the grant, and a node that never converges stays held."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text, update

from better_compute.domain.gate import mig_gate as rules
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import partition_allocation_id
from better_compute.service.gate import node_spec
from better_compute.service.gate.mig_gate import LEASE, RECHECK, Reconciler
from better_compute.storage.kernel.tables import nodes
from better_compute.storage.store import Store
from tests.node_world import NodeWorld

NEW = "mixed:3g.40gb+2x2g.20gb"


def change_layout(world: NodeWorld, layout: str) -> None:
    r = world.http.patch(
        "/v1/pools/p1", json={"id": "p1", "policy": {"migLayout": layout}}, headers=world.admin
    )
    assert r.status_code == 200, r.text


def told(world: NodeWorld, node: str) -> set[str | None]:
    spec = world.http.get(f"/v1/nodes/{node}/spec", headers=world.admin).json()
    return {g["migLayout"] for g in spec["gpus"]}


def gates(store: Store) -> dict[str, Any]:
    with store.read() as tx:
        return {g.node_id: g for g in tx.mig_layouts.all_rows()}


def partition_holds(store: Store) -> list[tuple[str, Any, Any]]:
    with store.engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT DISTINCT allocation_id, starts_at, ends_at FROM bookings"
                " WHERE allocation_id LIKE 'partition:%' AND state = 'live' ORDER BY allocation_id"
            )
        )
        return [tuple(r) for r in found]


def observe(world: NodeWorld, node: str) -> None:
    """The node reports it converged its current spec (what `bcd run` does after a pass)."""
    spec = world.http.get(f"/v1/nodes/{node}/spec", headers=world.admin).json()
    with world.store.begin() as tx:
        tx.nodes.mark_observed(node, int(spec["generation"]), world.clock.now)


def types(world: NodeWorld, prefix: str = "node.mig.") -> list[tuple[str, str]]:
    items = world.http.get("/v1/events", params={"limit": 500}, headers=world.admin).json()["items"]
    return [(e["type"], e["subject"]) for e in items if e["type"].startswith(prefix)]


def test_an_idle_node_is_scheduled_at_once_granted_and_released_once_converged(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    assert {g.state for g in gates(store).values()} == {rules.PENDING}
    assert told(world, "n-1") == {"all-1g.10gb"}  # frozen until the grant
    steps = reconciler.tick()
    assert {type(s) for s in steps.values()} == {rules.Schedule}
    assert all(s.at == world.clock.now for s in steps.values())  # type: ignore[union-attr]
    assert len(partition_holds(store)) == 4  # two GPUs on each of two nodes
    reconciler.tick()
    assert {g.state for g in gates(store).values()} == {rules.GRANTED}
    assert told(world, "n-1") == {NEW}
    refused = world.http.post(
        "/v1/reservations",
        json={"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"},
        headers=world.platform,
    )
    assert refused.status_code == 409, refused.text  # every atom is held by the change
    reconciler.tick()
    assert {g.state for g in gates(store).values()} == {rules.GRANTED}  # no timer releases a hold
    observe(world, "n-1")
    reconciler.tick()
    assert set(gates(store)) == {"n-2"}
    n2 = {
        g["id"]
        for g in world.http.get("/v1/gpus", params={"node": "n-2"}, headers=world.admin).json()["items"]
    }
    assert {a.split(":")[1] for a, _, _ in partition_holds(store)} == n2  # n-2's, until it converges too
    assert ("node.mig.applied", "n-1") in types(world)
    assert told(world, "n-1") == {NEW}  # the pool's own layout now


def test_a_booking_ending_later_delays_its_own_node_and_idle_time_before_still_books(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    held = world.reserve([{"class": "gpu.mig", "count": 1}], duration="3h")
    busy = held["atoms"][0]["node"]
    idle = "n-2" if busy == "n-1" else "n-1"
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    reconciler.tick()
    shown = gates(store)
    assert shown[busy].state == rules.SCHEDULED
    assert shown[busy].scheduled_from == world.clock.now + timedelta(hours=3)
    assert shown[idle].scheduled_from == world.clock.now
    reconciler.tick()
    assert gates(store)[idle].state == rules.GRANTED
    assert gates(store)[busy].state == rules.SCHEDULED
    assert told(world, busy) == {"all-1g.10gb"}  # its holder keeps its instance
    kept = world.http.get(f"/v1/reservations/{held['id']}", headers=world.platform).json()
    assert kept["status"] == "active" and kept["atoms"] == held["atoms"]
    # Idle time before the hold still books on the busy node; nothing lands past it.
    short = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "2h"}
    before = world.http.post("/v1/reservations", json=short, headers=world.platform)
    assert before.status_code == 201, before.text
    assert before.json()["atoms"][0]["node"] == busy
    past = world.http.post("/v1/reservations", json={**short, "duration": "4h"}, headers=world.platform)
    assert past.status_code == 409, past.text
    world.clock.now += timedelta(hours=3)
    reconciler.tick()
    assert gates(store)[busy].state == rules.GRANTED
    assert told(world, busy) == {NEW}
    assert [t for t in types(world) if t[1] == busy] == [
        ("node.mig.scheduled", busy),
        ("node.mig.granted", busy),
    ]


@pytest.mark.parametrize("end", ["release", "cancel"])
def test_a_booking_ended_early_lets_its_nodes_scheduled_change_go_at_the_next_pass_not_a_recheck_later(
    store: Store, tmp_path: Path, end: str
) -> None:
    """The defect: a node scheduled behind a booking was looked at again only `RECHECK` (a minute)
    after its last lease, so releasing (or cancelling) the booking that held it back left the change
    waiting for nothing. The reconciler follows the end's event to the node: its next pass moves the
    holds to now and the pass after grants it, with the clock never past the node's lease."""
    world = NodeWorld(store, tmp_path)
    start = world.clock.now + timedelta(hours=1) if end == "cancel" else None
    extra = {"start": start.isoformat()} if start is not None else {}
    long = world.reserve([{"class": "gpu.mig", "count": 1}], duration="5h", **extra)
    busy = long["atoms"][0]["node"]
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    reconciler.tick()
    held_until = (start or world.clock.now) + timedelta(hours=5)
    assert gates(store)[busy].scheduled_from == held_until
    reconciler.tick()
    assert busy not in reconciler.tick()  # scheduled for later: not looked at while nothing ended
    world.clock.now += timedelta(seconds=1)
    ended = world.http.post(f"/v1/reservations/{long['id']}/{end}", headers=world.platform)
    assert ended.status_code == 200, ended.text
    assert reconciler.tick()[busy] == rules.Schedule(world.clock.now)
    assert reconciler.tick()[busy] == rules.Grant(release=False)
    assert gates(store)[busy].state == rules.GRANTED
    assert told(world, busy) == {NEW}
    assert busy not in reconciler.woken(world.clock.now)  # stepped: the news is spent
    observe(world, busy)
    reconciler.tick()
    assert busy not in gates(store)
    assert [t for t in types(world) if t[1] == busy] == [
        ("node.mig.scheduled", busy),
        ("node.mig.scheduled", busy),
        ("node.mig.granted", busy),
        ("node.mig.applied", busy),
    ]


def test_a_booking_ended_early_wakes_no_node_it_was_not_on(store: Store, tmp_path: Path) -> None:
    """The news names the nodes of the bookings that ended, no others: releasing the booking on
    one node moves that node's change, and leaves the other's scheduled for later, unleased."""
    world = NodeWorld(store, tmp_path)

    def on(node: str, duration: str) -> Any:
        at = {"matchExpressions": [{"key": "node", "op": "In", "values": [node]}]}
        return world.reserve([{"class": "gpu.mig", "count": 1, "selector": at}], duration=duration)

    on("n-1", "5h")
    short = on("n-2", "2h")
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    reconciler.tick()
    assert {n: g.scheduled_from for n, g in gates(store).items()} == {
        "n-1": world.clock.now + timedelta(hours=5),
        "n-2": world.clock.now + timedelta(hours=2),
    }
    released = world.http.post(f"/v1/reservations/{short['id']}/release", headers=world.platform)
    assert released.status_code == 200, released.text
    assert reconciler.tick() == {"n-2": rules.Schedule(world.clock.now)}
    assert gates(store)["n-1"].scheduled_from == world.clock.now + timedelta(hours=5)


def test_a_node_whose_blocking_booking_ends_early_is_scheduled_again_sooner(
    store: Store, tmp_path: Path
) -> None:
    """A booking released hours before its end no longer holds its node's change back, even when
    no reconciler followed the release (it committed while none ran, as in a server's restart):
    once one looks at the node again (`RECHECK` after its last lease), the holds move to the end of
    the bookings left, and the node is granted then, not at the released booking's old end."""
    world = NodeWorld(store, tmp_path)
    long = world.reserve([{"class": "gpu.mig", "count": 1}], duration="5h")
    busy = long["atoms"][0]["node"]
    change_layout(world, NEW)
    Reconciler(store, world.clock, "r1").tick()
    assert gates(store)[busy].scheduled_from == world.clock.now + timedelta(hours=5)
    # Idle time before the hold books on the busy node: a 1 h booking of another of its instances.
    short = world.reserve([{"class": "gpu.mig", "count": 1}], duration="1h")
    assert short["atoms"][0]["node"] == busy
    released = world.http.post(f"/v1/reservations/{long['id']}/release", headers=world.platform)
    assert released.status_code == 200, released.text
    reconciler = Reconciler(store, world.clock, "r1")  # started after the release: it never saw it
    reconciler.tick()  # its lease has not run out: the node is not looked at yet
    assert gates(store)[busy].scheduled_from == world.clock.now + timedelta(hours=5)
    released_at = world.clock.now
    world.clock.now += LEASE + RECHECK
    steps = reconciler.tick()
    short_end = released_at + timedelta(hours=1)
    assert steps[busy] == rules.Schedule(short_end)
    moved = gates(store)[busy]
    assert moved.state == rules.SCHEDULED and moved.scheduled_from == short_end
    with store.read() as tx:
        node_gpus = {g.id for g in tx.gpus.of_nodes([busy])}
    held = {a for a, _, _ in partition_holds(store) if a.split(":")[1] in node_gpus}
    # One hold per GPU, each from the short booking's end; the old ones, never started, are gone.
    assert held == {partition_allocation_id(g, short_end) for g in node_gpus}
    world.clock.now = moved.scheduled_from
    reconciler.tick()
    assert gates(store)[busy].state == rules.GRANTED
    assert [t for t in types(world) if t[1] == busy] == [
        ("node.mig.scheduled", busy),
        ("node.mig.scheduled", busy),
        ("node.mig.granted", busy),
    ]


def test_a_booking_landing_between_a_steps_read_and_its_write_keeps_its_instance(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step plans from a read taken before the node's lock, and writes from that read: a tenant
    booking that lands on the node in between makes the schedule's holds overlap it, the ledger
    refuses them and nothing is written; the next pass schedules the node from the booking's end."""
    world = NodeWorld(store, tmp_path)
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    planned = rules.next_step
    landed: list[tuple[str, str]] = []

    def racing(gate: Any, facts: Any, now: Any) -> rules.Step:
        step = planned(gate, facts, now)
        if not landed:  # the first node's read is done: a tenant books one of its instances now
            with store.read() as tx:
                atom = next(
                    a.id for a in tx.atoms.of_pool("p1") if a.node == gate.node_id and a.cls == "gpu.mig"
                )
            with store.begin() as tx:
                tx.ledger.book([atom], Window(now, now + timedelta(hours=3)), "rsv-race", "platform", now)
            landed.append((gate.node_id, atom))
        return step

    monkeypatch.setattr(rules, "next_step", racing)
    steps = reconciler.tick()
    ((busy, atom),) = landed
    assert busy not in steps  # its schedule was refused: nothing written
    assert gates(store)[busy].state == rules.PENDING
    with store.read() as tx:
        node_gpus = {g.id for g in tx.gpus.of_nodes([busy])}
    assert not [h for h in partition_holds(store) if h[0].split(":")[1] in node_gpus]
    steps = reconciler.tick()
    until = world.clock.now + timedelta(hours=3)
    assert steps[busy] == rules.Schedule(until)
    assert gates(store)[busy].scheduled_from == until
    with store.read() as tx:
        kept = [b for b in tx.ledger.live_bookings(world.clock.now) if b.allocation_id == "rsv-race"]
    assert [(b.atom_id, b.ends_at) for b in kept] == [(atom, until)]


def test_a_second_change_replaces_a_pending_one_and_one_back_undoes_it(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    world.reserve([{"class": "gpu.mig", "count": 1}], duration="3h")
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    change_layout(world, "all-2g.20gb")
    assert {g.pending_layout for g in gates(store).values()} == {"all-2g.20gb"}
    reconciler.tick()
    scheduled = {n: g for n, g in gates(store).items() if g.state == rules.SCHEDULED}
    change_layout(world, "all-1g.10gb")  # back to what every node has: nothing to do any more
    assert gates(store) == {}
    assert partition_holds(store) == []
    assert len(scheduled) == 2
    assert sum(1 for t, _ in types(world) if t == "node.mig.applied") == 2


def test_a_node_that_keeps_its_own_layout_is_released_at_the_grant(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    with store.begin() as tx:
        tx.conn.execute(update(nodes).where(nodes.c.id == "n-1").values(carries_pool_layout=False))  # type: ignore[attr-defined]
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    reconciler.tick()
    reconciler.tick()
    assert set(gates(store)) == {"n-2"}  # n-1's holds ended at the grant: nothing repartitions it
    assert all("n-1" not in a for a, _, _ in partition_holds(store))
    assert told(world, "n-1") == {None}
    events = world.http.get("/v1/events", params={"type": "node.mig.granted"}, headers=world.admin).json()
    released = {e["subject"]: e["payload"]["released"] for e in events["items"]}
    assert released == {"n-1": True, "n-2": False}


def test_a_carries_pool_layout_false_node_gets_no_node_mig_applied_naming_a_layout_it_never_took(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    with store.begin() as tx:
        tx.conn.execute(update(nodes).where(nodes.c.id == "n-1").values(carries_pool_layout=False))  # type: ignore[attr-defined]
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    reconciler.tick()
    reconciler.tick()
    assert set(gates(store)) == {"n-2"}
    applied = world.http.get("/v1/events", params={"type": "node.mig.applied"}, headers=world.admin).json()
    assert [e["subject"] for e in applied["items"]] == []  # n-1 was released, n-2 has not converged
    granted = world.http.get("/v1/events", params={"type": "node.mig.granted"}, headers=world.admin).json()
    assert {e["subject"]: e["payload"]["released"] for e in granted["items"]}["n-1"] is True


def test_a_node_that_never_converges_stays_held(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    reconciler.tick()
    reconciler.tick()
    world.clock.now += timedelta(days=30)
    reconciler.tick()
    assert {g.state for g in gates(store).values()} == {rules.GRANTED}
    assert len(partition_holds(store)) == 4
    assert all(end is None for _, _, end in partition_holds(store))


def test_a_daemon_repartitions_an_idle_node_through_the_gate(store: Store, tmp_path: Path) -> None:
    """End to end with `bcd run`'s loop: the grant moves the node's spec, the daemon repartitions
    the idle GPUs and reports, and the next pass releases the holds; the new atoms take work."""
    world = NodeWorld(store, tmp_path)
    daemon, fake = world.daemon("n-1", layout="all-1g.10gb")
    assert daemon.step(False)
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    reconciler.tick()
    reconciler.tick()
    assert daemon.step(True)
    assert {gi.profile for g in fake.list_gpus() for gi in g.instances} == {"3g.40gb", "2g.20gb"}
    early = {
        "poolId": "p1",
        "duration": "1h",
        "devices": [
            {
                "class": "gpu.mig",
                "count": 1,
                "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
            }
        ],
    }
    # The new instances are there, but the change is not applied yet: they are held with the rest.
    assert world.http.post("/v1/reservations", json=early, headers=world.platform).status_code == 409
    shown = world.http.get("/v1/gpus", params={"node": "n-1"}, headers=world.admin).json()["items"]
    assert {i["profile"] for g in shown for i in g["migInstances"]} == {"3g.40gb", "2g.20gb"}
    reconciler.tick()
    assert "n-1" not in gates(store)
    body = {
        "poolId": "p1",
        "duration": "1h",
        "devices": [
            {
                "class": "gpu.mig",
                "count": 1,
                "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
            }
        ],
    }
    made = world.http.post("/v1/reservations", json=body, headers=world.platform)
    assert made.status_code == 201, made.text
    assert made.json()["atoms"][0]["node"] == "n-1"


def test_a_node_that_joins_the_pool_later_takes_no_work_before_its_first_converged_spec(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    moved = world.http.patch("/v1/pools/p1", json={"id": "p1", "nodes": ["n-1"]}, headers=world.admin)
    assert moved.status_code == 200, moved.text
    world.join("n-2")  # a node run by a daemon
    back = world.http.patch("/v1/pools/p1", json={"id": "p1", "nodes": ["n-1", "n-2"]}, headers=world.admin)
    assert back.status_code == 200, back.text
    assert gates(store)["n-2"].state == rules.GRANTED
    assert told(world, "n-2") == {"all-1g.10gb"}  # the pool's layout, directly
    body = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 15}], "duration": "1h"}
    refused = world.http.post("/v1/reservations", json=body, headers=world.platform)
    assert refused.status_code == 409, refused.text  # n-1's 14 instances only
    observe(world, "n-2")
    Reconciler(store, world.clock, "r1").tick()
    assert gates(store) == {}
    made = world.http.post("/v1/reservations", json=body, headers=world.platform)
    assert made.status_code == 201, made.text
    assert {a["node"] for a in made.json()["atoms"]} == {"n-1", "n-2"}


def test_a_simulated_node_that_never_joined_is_bookable_as_soon_as_it_is_added(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    world.http.patch("/v1/pools/p1", json={"id": "p1", "nodes": ["n-1"]}, headers=world.admin)
    back = world.http.patch("/v1/pools/p1", json={"id": "p1", "nodes": ["n-1", "n-2"]}, headers=world.admin)
    assert back.status_code == 200, back.text
    assert gates(store) == {}
    body = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 15}], "duration": "1h"}
    assert world.http.post("/v1/reservations", json=body, headers=world.platform).status_code == 201


def test_a_reconciler_with_few_leases_is_not_stalled_by_nodes_scheduled_for_later(
    store: Store, tmp_path: Path
) -> None:
    """A node scheduled hours ahead has nothing to do until then: it is not leased, so a reconciler
    that may hold one node at a time still reaches the others (bench/gate.py found the stall)."""
    world = NodeWorld(store, tmp_path)
    world.reserve([{"class": "gpu.mig", "count": 14}], duration="3h")  # every instance of one node
    reconciler = Reconciler(store, world.clock, "r1", batch=1)
    change_layout(world, NEW)
    for _ in range(4):
        reconciler.tick()
    states = {n: g.state for n, g in gates(store).items()}
    assert sorted(states.values()) == sorted([rules.SCHEDULED, rules.GRANTED]), states


def test_a_change_back_and_forth_after_a_grant_keeps_the_node_held(store: Store, tmp_path: Path) -> None:
    """L1 -> L2 granted, then L1 and L2 again before the next pass: the node may be part-way to
    L2, so it stays held and goes back to its L2 grant, never dropped with its holds released."""
    world = NodeWorld(store, tmp_path)
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    reconciler.tick()
    reconciler.tick()
    assert {g.state for g in gates(store).values()} == {rules.GRANTED}
    change_layout(world, "all-1g.10gb")
    assert {g.state for g in gates(store).values()} == {rules.SCHEDULED}
    change_layout(world, NEW)
    assert {(g.state, g.pending_layout) for g in gates(store).values()} == {(rules.GRANTED, NEW)}
    assert len(partition_holds(store)) == 4
    assert told(world, "n-1") == {NEW}
    observe(world, "n-1")
    reconciler.tick()
    assert set(gates(store)) == {"n-2"}


def test_a_node_under_a_change_can_leave_its_pool_and_its_holds_go(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, NEW)
    reconciler.tick()
    reconciler.tick()
    left = world.http.patch("/v1/pools/p1", json={"id": "p1", "nodes": ["n-1"]}, headers=world.admin)
    assert left.status_code == 200, left.text
    assert set(gates(store)) == {"n-1"}
    n2 = {
        g["id"]
        for g in world.http.get("/v1/gpus", params={"node": "n-2"}, headers=world.admin).json()["items"]
    }
    assert not {a.split(":")[1] for a, _, _ in partition_holds(store)} & n2


def test_instances_a_repartition_adds_are_held_until_the_change_is_applied(
    store: Store, tmp_path: Path
) -> None:
    """From three instances a GPU to seven: the four new atoms did not exist when the holds were
    made, and still take no booking before the node's change is applied."""
    world = NodeWorld(store, tmp_path, layout=NEW)
    daemon, fake = world.daemon("n-1", layout=NEW)
    assert daemon.step(False)
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, "all-1g.10gb")
    reconciler.tick()
    reconciler.tick()
    assert daemon.step(True)
    assert {gi.profile for g in fake.list_gpus() for gi in g.instances} == {"1g.10gb"}
    one = {"poolId": "p1", "duration": "1h", "devices": [{"class": "gpu.mig", "count": 1}]}
    assert world.http.post("/v1/reservations", json=one, headers=world.platform).status_code == 409
    reconciler.tick()
    assert "n-1" not in gates(store)
    made = world.http.post("/v1/reservations", json=one, headers=world.platform)
    assert made.status_code == 201 and made.json()["atoms"][0]["node"] == "n-1", made.text


def test_a_node_that_could_not_reach_the_layout_does_not_report_it_and_stays_held(
    store: Store, tmp_path: Path
) -> None:
    """A GPU whose mode change needs a reset that fails keeps the node from reporting the spec
    observed: the holds stay (the node shows rebootRequired), nothing is booked on a GPU part-way."""
    world = NodeWorld(store, tmp_path)
    daemon, fake = world.daemon("n-1", layout="all-1g.10gb")
    assert daemon.step(False)
    fake.fail_resets(fake.list_gpus()[0].uuid)
    reconciler = Reconciler(store, world.clock, "r1")
    change_layout(world, "all-disabled")
    reconciler.tick()
    reconciler.tick()
    daemon.step(True)
    daemon.step(False)
    reconciler.tick()
    assert gates(store)["n-1"].state == rules.GRANTED
    assert "host.unconverged" in daemon.log.stream.getvalue()  # type: ignore[union-attr]
    shown = {n["id"]: n for n in world.http.get("/v1/nodes", headers=world.admin).json()["items"]}
    assert shown["n-1"]["rebootRequired"] is True


def test_a_paced_reconciler_pauses_after_each_step_and_decides_the_same(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    paused: list[float] = []
    reconciler = Reconciler(store, world.clock, "r1", duty=0.25, pause=paused.append)
    change_layout(world, NEW)
    steps = reconciler.tick()
    assert {type(s) for s in steps.values()} == {rules.Schedule}
    assert len(paused) == 2 and all(p > 0 for p in paused)  # three times each step's own time


def test_a_stop_cuts_a_paced_pass_short_and_ends_its_pause(store: Store, tmp_path: Path) -> None:
    """A pass at a low duty pauses for long after each step: a stop (the server shutting down)
    waited for the whole pass, past the time a supervisor gives before SIGKILL."""
    world = NodeWorld(store, tmp_path)
    change_layout(world, NEW)
    stopping = threading.Event()
    steps: list[str] = []

    reconciler = Reconciler(store, world.clock, "r1", duty=0.0001)
    original = rules.next_step

    def counting(gate: Any, facts: Any, now: Any) -> rules.Step:
        steps.append(gate.node_id)
        stopping.set()  # the stop comes while the first node is stepped
        return original(gate, facts, now)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rules, "next_step", counting)
        runner = threading.Thread(target=reconciler.run, args=(stopping, 0.01))
        runner.start()
        runner.join(30)
    assert not runner.is_alive()
    assert len(set(steps)) == 1  # the second node was never begun


def test_a_new_slot_count_goes_through_the_gate_and_a_joined_node_is_held_until_it_has_the_slots(
    store: Store, tmp_path: Path
) -> None:
    """Issue 13: `replicas` on an mps pool changes its slot atoms through the same gate. The node's
    spec tells its frozen count until the grant; its new slots exist from the grant but take no work
    until its daemon has read them (a newer generation observed). A node with no daemon has nothing
    to wait for and is released at the grant."""
    world = NodeWorld(store, tmp_path, mode="mps")
    world.join("n-1")
    r = world.http.patch("/v1/pools/p1", json={"id": "p1", "policy": {"replicas": 2}}, headers=world.admin)
    assert r.status_code == 200, r.text

    def spec_replicas(node: str) -> int:
        spec = world.http.get(f"/v1/nodes/{node}/spec", headers=world.admin).json()
        return int(spec["sharing"]["replicas"])

    def slots(node: str) -> set[tuple[int, int]]:
        items = world.http.get("/v1/atoms", params={"class": "gpu.slot", "limit": 100}, headers=world.admin)
        return {
            (a["attributes"]["slots"], a["attributes"]["mpsUnits"])
            for a in items.json()["items"]
            if a["node"] == node and a["present"]
        }

    assert spec_replicas("n-1") == 4 and slots("n-1") == {(4, 25)}
    reconciler = Reconciler(store, world.clock, "r1")
    reconciler.tick()  # scheduled at once: both nodes are idle
    assert spec_replicas("n-1") == 4
    steps = reconciler.tick()
    assert steps == {"n-1": rules.Grant(release=False), "n-2": rules.Grant(release=True)}
    assert spec_replicas("n-1") == 2 and slots("n-1") == {(2, 50)} and slots("n-2") == {(2, 50)}
    assert set(gates(store)) == {"n-1"}
    body = {"poolId": "p1", "devices": [{"class": "gpu.slot", "count": 5}], "duration": "1h"}
    refused = world.http.post("/v1/reservations", json=body, headers=world.platform)
    assert refused.status_code == 409, refused.text  # n-2's 4 new slots only: n-1's are held
    observe(world, "n-1")
    reconciler.tick()
    assert gates(store) == {} and partition_holds(store) == []
    made = world.http.post("/v1/reservations", json=body, headers=world.platform)
    assert made.status_code == 201, made.text
    assert ("node.mig.applied", "n-1") in types(world)


@pytest.mark.parametrize(
    ("mode", "policy", "away"),
    [("mig", {"migLayout": NEW}, {"migLayout": "all-1g.10gb"}), ("mps", {"replicas": 2}, {"replicas": 4})],
)
def test_a_change_away_and_back_after_the_node_read_its_grant_is_released_once_it_reports(
    store: Store, tmp_path: Path, mode: str, policy: dict[str, Any], away: dict[str, Any]
) -> None:
    """Regression: granted, its spec read by the daemon, then changed away and back within one
    pass. The node has been told the granted shape all along, so its spec never changes again: a
    grant made again at that generation would wait forever for a newer one. It goes back to its
    first grant, and the node's report releases it."""
    world = NodeWorld(store, tmp_path, mode=mode)
    world.join("n-1")
    reconciler = Reconciler(store, world.clock, "r1")

    def patch(body: dict[str, Any]) -> None:
        r = world.http.patch("/v1/pools/p1", json={"id": "p1", "policy": body}, headers=world.admin)
        assert r.status_code == 200, r.text

    patch(policy)
    reconciler.tick()
    reconciler.tick()
    assert gates(store)["n-1"].state == rules.GRANTED
    observed = world.http.get("/v1/nodes/n-1/spec", headers=world.admin).json()["generation"]
    patch(away)
    patch(policy)
    reconciler.tick()
    with store.begin() as tx:  # the daemon reports the spec it read, which tells the granted shape
        tx.nodes.mark_observed("n-1", int(observed), world.clock.now)
    reconciler.tick()
    assert "n-1" not in gates(store)
    assert world.http.get("/v1/nodes/n-1/spec", headers=world.admin).json()["generation"] == observed


@pytest.mark.parametrize(("mode", "policy"), [("mig", {"migLayout": NEW}), ("mps", {"replicas": 2})])
def test_a_spec_read_at_a_lagging_time_after_the_grant_does_not_release_the_node(
    store: Store, tmp_path: Path, mode: str, policy: dict[str, Any]
) -> None:
    """Regression (found by the torture run): a spec read with a time before the grant (a server
    whose clock lags, or a read that took its time before the grant committed) still sees a
    tenant's booking live, so it tells the node its frozen shape, at a new generation. The node
    reports that generation converged, which says nothing about the new shape: releasing the
    node's holds then let tenants book instances the node destroyed at its next read. The gate is
    granted again at that generation, and only a report of a newer one, which tells the new shape,
    releases it."""
    world = NodeWorld(store, tmp_path, mode=mode)
    world.join("n-1")
    start = world.clock.now
    cls = "gpu.mig" if mode == "mig" else "gpu.slot"
    with store.read() as tx:
        mine = sorted(a.id for a in tx.atoms.of_pool("p1") if a.node == "n-1" and a.cls == cls)
    with store.begin() as tx:  # two holders on n-1: one for an hour, one for half of it
        tx.ledger.book([mine[0]], Window(start, start + timedelta(hours=1)), "rsv-long", "platform", start)
        tx.ledger.book([mine[1]], Window(start, start + timedelta(minutes=30)), "rsv-short", "acme", start)
    reconciler = Reconciler(store, world.clock, "r1")
    r = world.http.patch("/v1/pools/p1", json={"id": "p1", "policy": policy}, headers=world.admin)
    assert r.status_code == 200, r.text
    reconciler.tick()
    assert gates(store)["n-1"].scheduled_from == start + timedelta(hours=1)
    first = node_spec.read(store, "n-1", start)  # the daemon's read while both hold the node
    world.clock.now = start + timedelta(hours=1)
    reconciler.tick()
    assert gates(store)["n-1"].state == rules.GRANTED
    # A read whose time is a second before the grant: rsv-short has ended, rsv-long has not.
    lagging = node_spec.read(store, "n-1", start + timedelta(hours=1) - timedelta(seconds=1))
    assert lagging.generation > first.generation
    frozen = lagging.spec.content()
    assert frozen == {**first.spec.content(), "assignments": frozen["assignments"]}  # the old shape
    with store.begin() as tx:  # the node reports it has that spec (it had the old shape already)
        tx.nodes.mark_observed("n-1", lagging.generation, world.clock.now)
    reconciler.tick()
    assert gates(store)["n-1"].state == rules.GRANTED
    with store.read() as tx:
        n1_gpus = {g.id for g in tx.gpus.of_nodes(["n-1"])}
    assert {h[0].split(":")[1] for h in partition_holds(store)} >= n1_gpus  # still held
    landed = world.http.post(
        "/v1/reservations",
        json={"poolId": "p1", "devices": [{"class": cls, "count": 1}], "duration": "1h"},
        headers=world.platform,
    )
    # nothing lands on what n-1 will cut (n-2, if it was released, may take it)
    assert landed.status_code == 409 or landed.json()["atoms"][0]["node"] != "n-1", landed.text
    told_new = node_spec.read(store, "n-1", world.clock.now)
    assert told_new.generation > lagging.generation and told_new.spec.content() != frozen
    with store.begin() as tx:
        tx.nodes.mark_observed("n-1", told_new.generation, world.clock.now)
    reconciler.tick()
    assert "n-1" not in gates(store)


def test_a_node_back_in_its_pool_before_it_read_another_spec_is_released_once_it_has_the_layout(
    store: Store, tmp_path: Path
) -> None:
    """A node taken out of its pool and put back before its daemon read a spec in between is told
    what it already has: no newer generation comes, and having converged the one it has counts."""
    world = NodeWorld(store, tmp_path)
    daemon, _ = world.daemon("n-2")
    assert daemon.step(False)
    for members in (["n-1"], ["n-1", "n-2"]):
        moved = world.http.patch("/v1/pools/p1", json={"id": "p1", "nodes": members}, headers=world.admin)
        assert moved.status_code == 200, moved.text
    assert gates(store)["n-2"].state == rules.GRANTED
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    assert gates(store) == {}
    body = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 15}], "duration": "1h"}
    made = world.http.post("/v1/reservations", json=body, headers=world.platform)
    assert made.status_code == 201, made.text


def test_a_node_granted_the_layout_it_has_waits_for_the_generation_it_has_not_converged(
    store: Store, tmp_path: Path
) -> None:
    """Counting a grant that changes nothing as applied needs the node to have converged the spec
    it has: one that has not reported it stays held until it does."""
    world = NodeWorld(store, tmp_path)
    world.join("n-2")
    assert told(world, "n-2") == {"all-1g.10gb"}  # its spec is handed out; nothing says it converged
    for members in (["n-1"], ["n-1", "n-2"]):
        moved = world.http.patch("/v1/pools/p1", json={"id": "p1", "nodes": members}, headers=world.admin)
        assert moved.status_code == 200, moved.text
    reconciler = Reconciler(store, world.clock, "r1")
    reconciler.tick()
    assert gates(store)["n-2"].state == rules.GRANTED
    observe(world, "n-2")
    reconciler.tick()
    assert gates(store) == {}
