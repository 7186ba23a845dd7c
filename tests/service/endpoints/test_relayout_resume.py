"""A live relayout that waits for moved copies to be ready goes on by itself once their nodes say they
are (docs/endpoints.md#changing-the-layout-live): a `ReplicaState` report that changes a copy's
readiness writes `replica.readiness_changed`, the report route wakes `serve`'s resumer loop
(service.endpoints.relayout_resume), and the loop takes the relayout's next step from the event log. No
second `endpoints.update`, no timer. On SQLite and PostgreSQL; racing resumers on their own
connections step it once."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import text

from better_compute.service.endpoints import components, endpoints, relayout_resume
from better_compute.service.endpoints.relayout_resume import Resumer
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.service.services import Services
from better_compute.storage.store import Store
from tests.builders import T0
from tests.conftest import SERIAL
from tests.node_world import NodeWorld
from tests.service.endpoints.test_endpoints import PLATFORM, component, relayout, two_instances

CONTAINER = {"image": "localhost/bc-test-busybox:1", "command": ["busybox", "httpd", "-f"], "ports": [8080]}
NEW = ["mig-2g.20gb"] * 3

pytestmark = SERIAL  # a relayout rolled through two nodes and the app: seconds each


class Nodes:
    """The endpoint's two nodes, saying what their containers do as `bcd` would: a copy's container
    is ready on the node it is placed on now, and removed from the one it left."""

    def __init__(self, world: NodeWorld, daemons: list[Any]) -> None:
        self.world = world
        self.daemons = daemons
        self.clients = {d.identity.node: world.node(d.identity) for d in daemons}
        self.said: dict[int, str] = {}

    def report(self) -> int:
        """Each node reports on the copies that came or went since it last did; how many reports."""
        sent = 0
        for c in components.get(self.world.store, PLATFORM, "small", self.world.clock.now).copies:
            if c.state != "placed" or c.node is None or self.said.get(c.copy) == c.node:
                continue
            copy = f"copy:small:{c.copy}"
            if c.copy in self.said:
                left = self.said[c.copy]
                self.clients[left].nodes.report(
                    left, {"kind": "ReplicaState", "allocationId": copy, "state": "removed"}
                )
            self.clients[c.node].nodes.report(
                c.node, {"kind": "ReplicaState", "allocationId": copy, "state": "ready"}
            )
            self.said[c.copy] = c.node
            sent += 1
        return sent

    def converge(self) -> None:
        for d in self.daemons:
            d.step(True)


def waiting_relayout(store: Store, tmp_path: Path) -> tuple[NodeWorld, Nodes]:
    """Endpoint `chat` on n-1 and n-2, component `small` (4 copies, minCopies 3, a container sent
    through the request) ready everywhere, re-laid-out: one copy moved off n-1 ahead of its cut, and
    the relayout waits for it to be ready."""
    world = NodeWorld(store, tmp_path)
    nodes = Nodes(world, two_instances(world))
    components.create(
        store, PLATFORM, component("small", 4, minCopies=3, container=CONTAINER), world.clock.now
    )
    nodes.report()
    assert components.get(store, PLATFORM, "small", world.clock.now).ready == 4
    started = endpoints.update(store, PLATFORM, relayout(NEW), world.clock.now)
    assert started.status == "Updating" and started.record.reason is not None
    assert "the copies that moved are ready" in started.record.reason
    assert cut(world) == []
    return world, nodes


def cut(world: NodeWorld) -> list[str]:
    shown = endpoints.get(world.store, PLATFORM, "chat", world.clock.now)
    return [i.node for i in shown.instances if i.state == "Updating"]


class Loop:
    """`serve`'s resumer loop (`Resumer.run`) in a thread, woken by the app's report route; `settle`
    waits until a pass that began after the last wake-up has ended."""

    def __init__(self, world: NodeWorld) -> None:
        services: Services = world.http.app.state.services  # type: ignore[attr-defined]
        self.wakeup = services.relayout_wakeup
        self.stopping = threading.Event()
        self.idle = False
        self.passes = 0
        self.changed = threading.Condition()
        # An hour between passes: only a wake-up makes this loop look at the log in a test.
        self.resumer = Resumer(world.store, world.clock, self.wakeup, interval=3600)
        self.thread = threading.Thread(
            target=self.resumer.run, args=(self.stopping, self._pause), daemon=True
        )

    def _pause(self, seconds: float) -> bool:
        with self.changed:
            self.idle, self.passes = True, self.passes + 1
            self.changed.notify_all()
        woke = self.wakeup.wait(seconds)
        with self.changed:
            self.idle = False
        return woke

    def settle(self) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.idle and not self.wakeup.is_set(), 30)

    def __enter__(self) -> Loop:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.wakeup.set()
        self.thread.join(10)


def test_a_waiting_relayout_goes_on_when_the_moved_copies_are_reported_ready(
    store: Store, tmp_path: Path
) -> None:
    world, nodes = waiting_relayout(store, tmp_path)
    gate = Reconciler(store, world.clock, "r1")
    seen = [components.get(store, PLATFORM, "small", world.clock.now).ready]
    with Loop(world) as loop:
        loop.settle()  # its first pass looks at every waiting endpoint: the moved copy is not ready yet
        assert cut(world) == [] and loop.passes == 1
        for _ in range(10):
            while True:  # what moved is ready where it went, and gone where it left
                before = loop.passes
                if not nodes.report():
                    break
                loop.settle()
                assert loop.passes > before  # the report route woke the loop
                seen.append(components.get(store, PLATFORM, "small", world.clock.now).ready)
            if endpoints.get(store, PLATFORM, "chat", world.clock.now).status == "InService":
                break
            nodes.converge()
            gate.tick()
            seen.append(components.get(store, PLATFORM, "small", world.clock.now).ready)
    done = endpoints.get(store, PLATFORM, "chat", world.clock.now)
    assert done.status == "InService" and done.record.reason is None
    assert [i.layout for i in done.instances] == ["mixed:3x2g.20gb"] * 2
    assert min(seen) >= 3
    assert components.get(store, PLATFORM, "small", world.clock.now).ready == 4
    # each instance was cut once, after a wait, with no second endpoints.update
    cuts = world.http.get("/v1/events", params={"type": "endpoint.updated"}, headers=world.admin).json()
    assert [e["payload"]["node"] for e in cuts["items"] if e["payload"].get("layout")] == ["n-1", "n-2"]
    # the reports that changed a copy's readiness are in the log, by type, for the admin
    changes = world.http.get(
        "/v1/events", params={"type": "replica.readiness_changed"}, headers=world.admin
    ).json()["items"]
    seen_changes = [{"subject": e["subject"], **e["payload"]} for e in changes]
    assert {"subject": "copy:small:0", "ready": True, "state": "ready", "node": "n-2"} in seen_changes
    # The move itself took n-1's word on the copy away (forgotten in the move's transaction), so
    # n-1's later `removed` changes no readiness and writes no event.
    assert not [c for c in seen_changes if c["state"] == "removed"]
    assert all(e["payload"]["ready"] == (e["payload"]["state"] == "ready") for e in changes)
    hidden = world.http.get(
        "/v1/events", params={"type": "replica.readiness_changed"}, headers=world.platform
    )
    assert hidden.status_code == 200 and hidden.json()["items"] == []


def test_a_report_that_changes_no_readiness_writes_no_event(store: Store, tmp_path: Path) -> None:
    world, nodes = waiting_relayout(store, tmp_path)
    before = world.http.get("/v1/events", params={"type": "replica.readiness_changed"}, headers=world.admin)
    node = nodes.said[1]
    body = {"kind": "ReplicaState", "allocationId": "copy:small:1", "state": "ready"}
    nodes.clients[node].nodes.report(node, body)  # ready again: no change
    after = world.http.get("/v1/events", params={"type": "replica.readiness_changed"}, headers=world.admin)
    assert after.json()["items"] == before.json()["items"]


def _steps(store: Store) -> tuple[int, int, list[tuple[str, str | None]]]:
    """What the relayout did, by SQL: the layout changes granted, the cuts logged, and where each of
    the component's copies is."""
    with store.engine.connect() as conn:
        gates = conn.execute(text("SELECT count(*) FROM capacity_mig_layouts")).scalar_one()
        cuts = conn.execute(
            text("SELECT payload FROM events WHERE type = 'endpoint.updated' ORDER BY id")
        ).scalars()
        cut = sum(1 for p in cuts if (p if isinstance(p, dict) else json.loads(p)).get("layout"))
    shown = components.get(store, PLATFORM, "small", T0)
    return gates, cut, sorted((str(c.copy), c.node) for c in shown.copies)


def test_racing_resumers_on_their_own_connections_step_a_relayout_once(store: Store, tmp_path: Path) -> None:
    """Six resumers (six servers' loops, each its own tail and its own connection) read the same
    `ready` report at once: one cuts n-1, the others find it being cut; an event seen again (a
    resumer started afterwards reads the log from a load) changes nothing."""
    world, nodes = waiting_relayout(store, tmp_path)
    assert nodes.report() == 1  # the moved copy is ready where it went; nothing resumed yet
    assert cut(world) == []
    racers = 6
    barrier = threading.Barrier(racers)
    results: list[dict[str, str | None]] = []
    errors: list[BaseException] = []

    def race() -> None:
        resumer = Resumer(store, world.clock)
        try:
            with store.read() as tx:  # load its tail first, so the race is over the step itself
                resumer._follower.sync(tx)
            barrier.wait(30)
            results.append(resumer.tick())
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=race) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    # every one of them took the step, under the locks; one cut n-1, the others found it being cut
    assert sorted(str(r) for r in results) == [str({"chat": "n-1"})] + [str({"chat": None})] * (racers - 1)
    assert cut(world) == ["n-1"]
    after = _steps(store)
    assert after[:2] == (1, 1)
    assert Resumer(store, world.clock).tick() == {}  # read again from a load: nothing waits
    assert relayout_resume.resume(store, "chat", world.clock.now) is None  # stepped again: nothing more
    assert _steps(store) == after
