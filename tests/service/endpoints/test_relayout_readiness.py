"""A live relayout of an endpoint whose component runs a container never leaves it below `minCopies`
READY copies (docs/endpoints.md#changing-the-layout-live): a copy that moves is not ready until its new
node says so, so the roll moves copies off an instance ahead of its cut as far as the floor allows, and
waits (no timer) until the moved copies are ready before it cuts the instance."""

from __future__ import annotations

from pathlib import Path

from better_compute.service.endpoints import components, endpoints
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.storage.store import Store
from tests.node_world import NodeWorld
from tests.service.endpoints.test_endpoints import PLATFORM, component, relayout, two_instances

SERVER = {"image": "localhost/bc-test-busybox:1", "ports": [{"containerPort": 8080}]}
"""The model server component `small` runs, as its create request carries it."""


def test_a_live_relayout_keeps_min_copies_ready_moving_copies_ahead_and_waiting_for_them(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    daemons = two_instances(world)
    clients = {d.identity.node: world.node(d.identity) for d in daemons}
    reconciler = Reconciler(store, world.clock, "r1")
    made = components.create(
        store, PLATFORM, component("small", 4, minCopies=3, container=SERVER), world.clock.now
    )
    assert made.spec.container is not None and made.spec.container.image == SERVER["image"]
    assert (made.placed, made.ready) == (4, 0)  # placed is not ready: no node has said its copy is

    def report_new() -> None:
        """Each node reports ready the copies it runs that it has said nothing of yet."""
        for c in components.get(store, PLATFORM, "small", world.clock.now).copies:
            if c.state == "placed" and c.runtime_state is None:
                assert c.node is not None
                body = {"kind": "ReplicaState", "allocationId": f"copy:small:{c.copy}", "state": "ready"}
                clients[c.node].nodes.report(c.node, body)

    def ready() -> int:
        return components.get(store, PLATFORM, "small", world.clock.now).ready

    def cut() -> list[str]:
        shown = endpoints.get(store, PLATFORM, "chat", world.clock.now)
        return [i.node for i in shown.instances if i.state == "Updating"]

    report_new()
    assert ready() == 4
    new = ["mig-2g.20gb"] * 3
    started = endpoints.update(store, PLATFORM, relayout(new), world.clock.now)
    # cutting n-1 now would leave n-2's two ready copies: one of n-1's moves ahead, none is cut
    assert started.status == "Updating" and cut() == []
    assert (
        started.record.reason is not None and "ready copies, below its minCopies 3" in started.record.reason
    )
    assert ready() == 3
    again = endpoints.update(store, PLATFORM, relayout(new), world.clock.now)
    assert cut() == [] and again.record.reason is not None  # the moved copy is not ready: it waits
    seen = [ready()]
    for _ in range(20):
        report_new()
        seen.append(ready())
        shown = endpoints.get(store, PLATFORM, "chat", world.clock.now)
        if shown.status == "InService":
            break
        if shown.record.reason is not None:
            endpoints.update(store, PLATFORM, relayout(new), world.clock.now)
            seen.append(ready())
        for d in daemons:
            d.step(True)
        reconciler.tick()
        seen.append(ready())
    done = endpoints.get(store, PLATFORM, "chat", world.clock.now)
    assert done.status == "InService"
    assert [i.layout for i in done.instances] == ["mixed:3x2g.20gb"] * 2
    assert min(seen) >= 3
    assert ready() == 4


def test_a_component_without_a_container_keeps_todays_placed_floor(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    two_instances(world)
    components.create(store, PLATFORM, component("plain", 4, minCopies=3), world.clock.now)
    started = endpoints.update(store, PLATFORM, relayout(["mig-2g.20gb"] * 3), world.clock.now)
    # nothing is ready (no node runs anything for it), and the roll starts all the same
    assert started.status == "Updating" and started.record.reason is None
    assert [i.node for i in started.instances if i.state == "Updating"] == ["n-1"]
