"""A node that has gone silent no longer vouches for its containers (docs/endpoints.md#what-runs,
docs/placement.md#phases-and-reasons, docs/bcd.md): once its last signed report or spec read is `READY_LEASE` old,
its copies are not ready (the endpoint leaves `InService`, `invoke` sends them nothing, a relayout does
not count them toward `minCopies`) and its workload replicas are not ready (`readyReplicas`, phase);
its next spec read makes them count again, with no new report. Through the real app with an injected
clock, on SQLite and PostgreSQL."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from better_compute.domain.fleet.events import ReplicaReadinessChanged
from better_compute.domain.fleet.replica_states import READY_LEASE
from better_compute.service.endpoints import components, endpoints
from better_compute.service.endpoints.relayout_resume import Resumer
from better_compute.service.kernel.event_tail import Cursor
from better_compute.storage.store import Store
from tests.api.test_replica_phases import Fleet
from tests.api.test_what_runs import _component, _serving
from tests.builders import T0
from tests.e2e.test_endpoint_invoke import HEADER, ModelServer
from tests.node_world import NodeWorld
from tests.service.endpoints.test_endpoints import PLATFORM, component, relayout, two_instances

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.both_stores

SERVER = {"image": "localhost/bc-test-busybox:1", "ports": [{"containerPort": 8080}]}
JUST = timedelta(microseconds=1)


@pytest.fixture
def server() -> Iterator[ModelServer]:
    made = ModelServer("llama-0").start()
    yield made
    made.stop()


def test_a_silent_nodes_ready_copy_leaves_service_gets_no_traffic_and_counts_again_once_it_reads_its_spec(
    store: Store, tmp_path: Path, server: ModelServer
) -> None:
    world = _serving(store, tmp_path)  # endpoint chat on n-1
    made = world.http.post(
        "/v1/components", json=_component(copies=1, container=SERVER), headers=world.platform
    )
    assert made.status_code == 201 and made.json()["placedCopies"] == 1, made.text
    node = world.node(world.join("n-1"))
    node.nodes.report(
        "n-1",
        {"kind": "ReplicaState", "allocationId": "copy:llama:0", "state": "ready", "address": server.address},
    )
    spoke = world.clock.now

    def shown() -> tuple[str, int, int]:
        status = world.http.get("/v1/endpoints/chat", headers=world.platform).json()["status"]
        got = world.http.get("/v1/components/llama", headers=world.platform).json()
        listed = world.http.get("/v1/components?endpointName=chat", headers=world.platform).json()
        with TestClient(world.http.app) as http:
            invoked = http.post(
                "/v1/endpoints/chat/invoke", content=b"hi", headers={**world.platform, HEADER: "llama"}
            )
        assert listed["items"][0]["readyCopies"] == got["readyCopies"]
        return str(status), int(got["readyCopies"]), invoked.status_code

    assert shown() == ("InService", 1, 200)
    world.clock.now = spoke + READY_LEASE - JUST  # the lease's last instant: still its word
    assert shown() == ("InService", 1, 200)
    seen = len(server.seen)
    world.clock.now = spoke + READY_LEASE  # silent for the lease: not ready, no traffic
    assert shown() == ("Creating", 0, 503)
    assert len(server.seen) == seen
    with TestClient(world.http.app) as http:
        refused = http.post(
            "/v1/endpoints/chat/invoke", content=b"hi", headers={**world.platform, HEADER: "llama"}
        )
    assert refused.json()["error"]["code"] == "UNAVAILABLE"
    assert "no ready copy" in refused.json()["error"]["message"]
    world.clock.now += timedelta(hours=1)
    node.nodes.spec("n-1")  # the node reaches the server again: no new report needed
    assert shown() == ("InService", 1, 200)
    assert len(server.seen) == seen + 1


def test_a_relayout_does_not_cut_on_a_silent_nodes_word_and_goes_on_once_it_speaks(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    daemons = two_instances(world)
    clients = {d.identity.node: world.node(d.identity) for d in daemons}
    components.create(store, PLATFORM, component("small", 4, minCopies=3, container=SERVER), world.clock.now)

    def report_new() -> None:
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

    def where() -> dict[str, int]:
        out: dict[str, int] = {}
        for c in components.get(store, PLATFORM, "small", world.clock.now).copies:
            if c.node is not None:
                out[c.node] = out.get(c.node, 0) + 1
        return out

    report_new()
    new = ["mig-2g.20gb"] * 3
    started = endpoints.update(store, PLATFORM, relayout(new), world.clock.now)
    assert started.status == "Updating" and cut() == []  # one of n-1's copies moved ahead to n-2
    assert where() == {"n-1": 1, "n-2": 3}
    report_new()  # n-2 says the moved copy is ready: cutting n-1 would keep 3 ready on n-2
    assert ready() == 4
    # ... but n-2 goes silent before the relayout's next step; n-1 keeps reading its spec
    world.clock.now += READY_LEASE
    clients["n-1"].nodes.spec("n-1")
    assert ready() == 1
    waiting = endpoints.update(store, PLATFORM, relayout(new), world.clock.now)
    assert cut() == []  # it waits: n-2's word does not count
    assert waiting.record.reason is not None and "keep 0 ready copies" in waiting.record.reason
    assert endpoints.get(store, PLATFORM, "chat", world.clock.now).status == "Updating"
    clients["n-2"].nodes.spec("n-2")  # n-2 speaks again: its copies count, with no new report
    assert ready() == 4
    endpoints.update(store, PLATFORM, relayout(new), world.clock.now)
    assert cut() == ["n-1"]


@pytest.mark.parametrize("returns_with", ["spec read", "report"])
def test_a_relayout_waiting_on_a_silent_node_resumes_by_itself_when_the_node_returns(
    store: Store, tmp_path: Path, returns_with: str
) -> None:
    """No operator steps it: the node's return is logged (`replica.readiness_changed`, ready again, for
    each container it last said ready) and the relayout's resumer takes the next step from the log."""
    world = NodeWorld(store, tmp_path)
    daemons = two_instances(world)
    clients = {d.identity.node: world.node(d.identity) for d in daemons}
    components.create(store, PLATFORM, component("small", 4, minCopies=3, container=SERVER), world.clock.now)
    resumer = Resumer(store, world.clock, interval=3600)

    def report_new() -> None:
        for c in components.get(store, PLATFORM, "small", world.clock.now).copies:
            if c.state == "placed" and c.runtime_state is None:
                assert c.node is not None
                body = {"kind": "ReplicaState", "allocationId": f"copy:small:{c.copy}", "state": "ready"}
                clients[c.node].nodes.report(c.node, body)

    def cut() -> list[str]:
        shown = endpoints.get(store, PLATFORM, "chat", world.clock.now)
        return [i.node for i in shown.instances if i.state == "Updating"]

    report_new()
    endpoints.update(store, PLATFORM, relayout(["mig-2g.20gb"] * 3), world.clock.now)
    report_new()  # the copy moved to n-2 is ready there
    world.clock.now += READY_LEASE  # ... and n-2 goes silent before the next step
    clients["n-1"].nodes.spec("n-1")
    assert resumer.tick() == {"chat": None}  # it looks (a first tick looks at all) and waits
    assert cut() == []
    assert resumer.tick() == {}  # nothing new in the log: nothing stepped
    before = _readiness_on(store, "n-2")
    if returns_with == "spec read":  # n-2 is heard from again
        clients["n-2"].nodes.spec("n-2")
    else:  # with a report that changes nothing it said
        again = {"kind": "ReplicaState", "allocationId": f"copy:small:{_copies_on(store, 'n-2')[0]}"}
        clients["n-2"].nodes.report("n-2", {**again, "state": "ready"})
    returned = _readiness_on(store, "n-2")[len(before) :]
    assert returned == [(f"copy:small:{c}", True) for c in sorted(_copies_on(store, "n-2"))]
    assert resumer.tick() == {"chat": "n-1"}
    assert cut() == ["n-1"]
    heard = len(_readiness_on(store, "n-2"))
    clients["n-2"].nodes.spec("n-2")  # heard from while live: nothing more is logged
    assert len(_readiness_on(store, "n-2")) == heard


def _readiness_on(store: Store, node: str) -> list[tuple[str, bool]]:
    """The `replica.readiness_changed` events of `node`'s containers, oldest first."""
    with store.read() as tx:
        found, _, _ = tx.events.after(Cursor(0))
    return [
        (e.event.subject, e.event.ready)
        for e in found
        if isinstance(e.event, ReplicaReadinessChanged) and e.event.node == node
    ]


def _copies_on(store: Store, node: str) -> list[int]:
    return [
        c.copy
        for c in components.get(store, PLATFORM, "small", T0).copies
        if c.node == node and c.runtime_state == "ready"
    ]


def test_a_silent_nodes_replicas_are_not_ready_and_count_again_once_it_reads_its_spec(
    store: Store, tmp_path: Path
) -> None:
    fleet = Fleet(store, tmp_path)
    made = fleet.workload("w-runs", 2)
    (first, node_a), (second, node_b) = fleet.replicas(made)
    fleet.report(node_a, first, "ready", address="10.0.0.1:8080")
    fleet.report(node_b, second, "created")
    spoke = fleet.clock.now

    def shown() -> tuple[str, int, int]:
        got = fleet.shown(made)
        (dep,) = got["deployments"]
        listed = fleet.http.get("/v1/deployments", headers=fleet.platform).json()["items"]
        assert [d["readyReplicas"] for d in listed] == [dep["readyReplicas"]]
        return str(dep["phase"]), int(dep["readyReplicas"]), int(got["readyReplicas"])

    assert shown() == ("running", 1, 1)
    fleet.clock.now = spoke + READY_LEASE - JUST
    assert shown() == ("running", 1, 1)
    fleet.clock.now = spoke + READY_LEASE
    assert shown() == ("placed", 0, 0)  # its container still exists as far as we know; none is ready
    fleet.node(fleet.ids[node_b]).nodes.spec(node_b)
    if node_b != node_a:  # another node's contact vouches for nothing of node_a's
        assert shown() == ("placed", 0, 0)
    fleet.node(fleet.ids[node_a]).nodes.spec(node_a)
    assert shown() == ("running", 1, 1)
