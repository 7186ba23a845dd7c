"""Container logs read through the node, through the real app: the node's `bcd` reports its agent
(a real listener on a local port, over an in-test runtime) in a signed `Agent` report, and
`workloads.logs` / `endpoints.logs` read a replica's or a copy's log from the node that holds it,
for its tenant (or the admin) alone."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from better_compute.bcd.agent import Agent
from better_compute.bcd.logs import Log
from better_compute.client import (
    Compute,
    InvalidInputError,
    NotFoundError,
    UnauthenticatedError,
    UnavailableError,
)
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.storage.store import Store
from tests.builders import bearer, tenant_token
from tests.node_world import SERVER, NodeWorld

CLASS = {
    "name": "mig-1g",
    "class": "gpu.mig",
    "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["1g.10gb"]}]},
}


class Runtime:
    """The runtime's contract: the newest `tail` lines of an allocation's container; LookupError for
    one it runs nothing for."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def logs(self, allocation_id: str, tail: int) -> str:
        return "".join(self.texts[allocation_id].splitlines(keepends=True)[-tail:])


class Fleet(NodeWorld):
    def __init__(self, store: Store, tmp_path: Path) -> None:
        super().__init__(store, tmp_path)
        made = self.http.post("/v1/device-classes", json=CLASS, headers=self.admin)
        assert made.status_code == 201, made.text
        self.ids = {n: self.join(n) for n in ("n-1", "n-2")}
        self.runtimes = {n: Runtime() for n in self.ids}
        self.agents: dict[str, Agent] = {}

    def listen(self, node: str) -> Agent:
        """Start `node`'s agent and report it, as `bcd run --listen 127.0.0.1:0` does."""
        agent = Agent(self.runtimes[node], "127.0.0.1", 0, Log(io.StringIO())).start()
        self.agents[node] = agent
        self.node(self.ids[node]).nodes.report(node, agent.report())
        return agent

    def client(self, headers: dict[str, str]) -> Compute:
        return Compute(
            SERVER, headers["Authorization"].removeprefix("Bearer "), transport=self.transport(), retries=0
        )

    def replicas(self, workload_id: str) -> dict[int, tuple[str, str]]:
        """Replica number -> (allocation id, the node holding its atom)."""
        with self.store.begin() as tx:
            node_of = {a.id: a.node for a in tx.atoms.of_pool("p1")}
            deps = tx.workloads.deployments_of([workload_id])[workload_id]
            out = {}
            for rs in tx.workloads.replicas_of([d.id for d in deps]).values():
                for n, allocation in rs:
                    (booking,) = [b for b in tx.ledger.allocation_bookings(allocation) if b.state == "live"]
                    out[n] = (allocation, node_of[booking.atom_id])
        return out


@pytest.fixture
def fleet(store: Store, tmp_path: Path) -> Iterator[Fleet]:
    made = Fleet(store, tmp_path)
    yield made
    for agent in made.agents.values():
        agent.stop()


def workload(fleet: Fleet, replicas: int) -> dict[str, Any]:
    body = {"name": "w", "shape": {"device_class": "mig-1g", "device_count": 1}, "replicas": replicas}
    got = fleet.http.post("/v1/workloads", json=body, headers=fleet.platform)
    assert got.status_code == 201, got.text
    out: dict[str, Any] = got.json()
    return out


def test_a_replicas_log_is_read_through_its_nodes_agent_for_its_tenant_alone(fleet: Fleet) -> None:
    w = workload(fleet, 3)
    replicas = fleet.replicas(w["id"])
    assert sorted(replicas) == [0, 1, 2]
    for node in fleet.ids:
        fleet.listen(node)
    for n, (allocation, node) in replicas.items():
        fleet.runtimes[node].texts[allocation] = "".join(f"replica {n} line {i}\n" for i in range(300))
    tenant = fleet.client(fleet.platform)
    got = tenant.workloads.logs(w["id"], replica=2, tail=3)
    allocation, node = replicas[2]
    assert (got.allocation_id, got.node) == (allocation, node)
    assert got.lines == "replica 2 line 297\nreplica 2 line 298\nreplica 2 line 299\n"
    # By name, with no replica named: the first replica, 100 lines.
    first = tenant.workloads.logs("w")
    assert first.allocation_id == replicas[0][0] and first.lines.count("\n") == 100
    assert first.lines.startswith("replica 0 line 200\n")
    # The admin reads it too; another tenant learns nothing of it.
    assert fleet.client(fleet.admin).workloads.logs(w["id"], replica=1).allocation_id == replicas[1][0]
    acme = bearer(tenant_token(fleet.store, "acme"))
    other = fleet.http.get(f"/v1/workloads/{w['id']}/logs", headers=acme)
    assert other.status_code == 404 and other.json()["error"]["code"] == "NOT_FOUND"
    assert fleet.http.get(f"/v1/workloads/{w['id']}/logs").status_code == 401
    # Bounds: a tail past 10,000, a replica it does not have, a parameter it does not take.
    with pytest.raises(InvalidInputError):
        tenant.workloads.logs(w["id"], tail=10_001)
    with pytest.raises(NotFoundError, match="replica 7"):
        tenant.workloads.logs(w["id"], replica=7)
    assert fleet.http.get(f"/v1/workloads/{w['id']}/logs?lines=3", headers=fleet.platform).status_code == 400
    # A replica whose node runs no container for it.
    del fleet.runtimes[replicas[1][1]].texts[replicas[1][0]]
    with pytest.raises(NotFoundError, match="no container"):
        tenant.workloads.logs(w["id"], replica=1)


def test_a_node_without_an_agent_or_whose_agent_is_gone_is_unavailable(fleet: Fleet) -> None:
    w = workload(fleet, 1)
    ((allocation, node),) = fleet.replicas(w["id"]).values()
    tenant = fleet.client(fleet.platform)
    answer = fleet.http.get(f"/v1/workloads/{w['id']}/logs", headers=fleet.platform)
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "UNAVAILABLE"
    assert answer.json()["error"]["message"] == f"node {node} does not serve logs (bcd run --listen)"
    agent = fleet.listen(node)
    fleet.runtimes[node].texts[allocation] = "up\n"
    assert tenant.workloads.logs(w["id"]).lines == "up\n"
    agent.stop()  # bcd stopped: its listener is gone
    with pytest.raises(UnavailableError, match="did not answer"):
        tenant.workloads.logs(w["id"])
    # A restarted bcd has a new token; the old one is refused until it reports its agent again.
    restarted = Agent(fleet.runtimes[node], "127.0.0.1", agent.port, Log(io.StringIO()), advertise=agent.url)
    with restarted:
        with pytest.raises(UnavailableError, match="token"):
            tenant.workloads.logs(w["id"])
        fleet.node(fleet.ids[node]).nodes.report(node, restarted.report())
        assert tenant.workloads.logs(w["id"]).lines == "up\n"


def test_the_agent_report_is_kept_for_the_node_that_signs_it_and_its_token_never_shown(
    fleet: Fleet,
) -> None:
    agent = fleet.listen("n-1")
    with fleet.store.begin() as tx:
        kept = tx.node_agents.get("n-1")
        assert kept is not None and (kept.url, kept.token) == (agent.url, agent.token)
        assert tx.node_agents.get("n-2") is None
        assert agent.token not in repr(kept)
    # A node reports only its own agent, and only a URL the server can call.
    with pytest.raises(UnauthenticatedError, match="only about itself"):
        fleet.node(fleet.ids["n-2"]).nodes.report("n-1", agent.report())
    with pytest.raises(InvalidInputError):
        fleet.node(fleet.ids["n-1"]).nodes.report("n-1", {**agent.report(), "url": "http://n-1:7070/admin"})
    with pytest.raises(InvalidInputError):
        fleet.node(fleet.ids["n-1"]).nodes.report("n-1", {**agent.report(), "token": "short"})
    for path in ("/v1/nodes", "/v1/nodes/n-1", "/v1/events", "/v1/doctor", "/v1/nodes/n-1/spec"):
        shown = fleet.http.get(path, headers=fleet.admin)
        assert agent.token not in shown.text, path


def test_a_copys_log_is_read_on_the_node_the_copy_is_on(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    daemon, _ = world.daemon("n-1")
    assert daemon.step(False)
    endpoint = {
        "name": "chat",
        "variants": [
            {
                "name": "AllTraffic",
                "poolId": "p1",
                "instanceCount": 1,
                "acceleratorPartitionLayouts": [
                    {"acceleratorPartitionTypes": ["mig-3g.40gb", "mig-3g.40gb"]}
                ],
            }
        ],
    }
    made = world.http.post("/v1/endpoints", json=endpoint, headers=world.platform)
    assert made.status_code == 201, made.text
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    component = {
        "name": "llama",
        "endpointName": "chat",
        "variantName": "AllTraffic",
        "model": "llama-3-8b",
        "partitionType": "mig-3g.40gb",
        "devicesRequired": 1,
        "cpuCores": 2,
        "memoryMiB": 16384,
        "copies": 2,
    }
    created = world.http.post("/v1/components", json=component, headers=world.platform)
    assert created.status_code == 201, created.text
    assert {c["node"] for c in created.json()["copies"]} == {"n-1"}
    runtime = Runtime()
    runtime.texts = {"copy:llama:0": "copy zero\n", "copy:llama:1": "a\nb\nc\n"}
    with Agent(runtime, "127.0.0.1", 0, Log(io.StringIO()), advertise=None) as agent:
        daemon.agent = agent
        daemon.starting()  # queues the inventory, then this process's Agent report
        assert daemon.step(True) is not None
        tenant = Compute(SERVER, world.platform["Authorization"][7:], transport=world.transport(), retries=0)
        got = tenant.endpoints.logs("chat", "llama", copy=1, tail=2)
        assert (got.allocation_id, got.node, got.lines) == ("copy:llama:1", "n-1", "b\nc\n")
        assert tenant.endpoints.logs("chat", "llama").lines == "copy zero\n"
        with pytest.raises(NotFoundError):
            tenant.endpoints.logs("chat", "mistral")
        with pytest.raises(NotFoundError):
            tenant.endpoints.logs("chat", "llama", copy=5)
        acme = bearer(tenant_token(store, "acme"))
        other = world.http.get("/v1/endpoints/chat/logs", params={"component": "llama"}, headers=acme)
        assert other.status_code == 404
        missing = world.http.get("/v1/endpoints/chat/logs", headers=world.platform)
        assert missing.status_code == 400
