"""Inference endpoints through the layout gate (docs/endpoints.md), on SQLite and PostgreSQL: creating one
takes idle nodes of a mig pool and cuts them to its layout, with `bcd run`'s loop repartitioning; the
endpoint holds its nodes once cut, so no tenant lands there; deleting one gives them back to the
pool's layout; a pool short of idle nodes leaves it `Failed`, saying why."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from better_compute.bcd.daemon import Daemon
from better_compute.domain.kernel.errors import (
    AlreadyExists,
    Forbidden,
    InvalidInput,
    InvalidState,
    NotFound,
    UnknownProfile,
)
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.endpoints import components, endpoints
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ops.placement_retry import Retrier
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.placement.workloads import Wiring
from better_compute.storage.store import Store
from tests.builders import T0, CountingIds
from tests.node_world import NodeWorld

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="test-admin")
PLATFORM = Principal(tenant_id="platform", is_admin=False, credential_id="test-platform")
ACME = Principal(tenant_id="acme", is_admin=False, credential_id="test-acme")
TYPES = ["mig-3g.40gb", "mig-2g.20gb", "mig-2g.20gb"]


def body(name: str = "chat", count: int = 1, types: list[str] | None = None, pool: str = "p1") -> Any:
    return {
        "name": name,
        "tenantId": "platform",
        "variants": [
            {
                "name": "AllTraffic",
                "poolId": pool,
                "instanceCount": count,
                "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": types or TYPES}],
                "pricePerInstanceHour": 25.25,
            }
        ],
    }


def live_holders(store: Store, node: str) -> set[str]:
    """The allocations holding the node's atoms from now on (the ledger's word, not the index's)."""
    with store.engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT DISTINCT b.allocation_id FROM bookings b JOIN atoms a ON a.id = b.atom_id"
                " WHERE a.node_id = :node AND b.state = 'live' AND b.ends_at IS NULL"
            ),
            {"node": node},
        )
        return {str(r[0]).split(":")[0] + ":" for r in found}


def reserve_3g(world: NodeWorld) -> Any:
    selector = {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]}
    return world.http.post(
        "/v1/reservations",
        json={
            "poolId": "p1",
            "duration": "1h",
            "devices": [{"class": "gpu.mig", "count": 1, "selector": selector}],
        },
        headers=world.platform,
    )


def test_an_endpoint_cuts_an_idle_node_to_its_layout_holds_it_and_gives_it_back_when_deleted(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    daemon, fake = world.daemon("n-1")
    assert daemon.step(False)
    reconciler = Reconciler(store, world.clock, "r1")
    created = endpoints.create(store, PLATFORM, body(), world.clock.now)
    assert created.status == "Creating"
    assert [(i.node, i.state, i.layout) for i in created.instances] == [
        ("n-1", "Creating", "mixed:3g.40gb+2x2g.20gb")
    ]
    assert live_holders(store, "n-1") == {"partition:"}  # held by the gate while it is cut
    assert daemon.step(True)
    assert (
        sorted(gi.profile for g in fake.list_gpus() for gi in g.instances)
        == ["2g.20gb"] * 4 + ["3g.40gb"] * 2
    )
    assert reserve_3g(world).status_code == 409  # cut, not yet handed over: still the gate's
    reconciler.tick()
    shown = endpoints.get(store, PLATFORM, "chat", world.clock.now)
    assert shown.status == "InService"
    assert [(i.state, i.gpus, i.partitions) for i in shown.instances] == [
        ("InService", 2, {"mig-2g.20gb": 4, "mig-3g.40gb": 2})
    ]
    assert live_holders(store, "n-1") == {"endpoint:"}  # the endpoint's from the gate's last instant
    assert reserve_3g(world).status_code == 409  # no tenant lands on the endpoint's partitions
    # A change of the pool's layout leaves the endpoint's node alone.
    r = world.http.patch(
        "/v1/pools/p1", json={"id": "p1", "policy": {"migLayout": "all-2g.20gb"}}, headers=world.admin
    )
    assert r.status_code == 200, r.text
    with store.read() as tx:
        assert set(tx.mig_layouts.of_nodes(["n-1", "n-2"])) == {"n-2"}
    out = world.http.patch("/v1/pools/p1", json={"id": "p1", "nodes": ["n-2"]}, headers=world.admin)
    assert out.status_code == 409 and "serves endpoint chat" in out.json()["error"]["message"]

    gone = endpoints.delete(store, PLATFORM, "chat", world.clock.now)
    assert gone.view.status == "Deleting"
    with pytest.raises(NotFound):
        endpoints.get(store, PLATFORM, "chat", world.clock.now)
    assert live_holders(store, "n-1") == {"partition:"}  # back through the gate, held meanwhile
    assert daemon.step(True)
    assert {gi.profile for g in fake.list_gpus() for gi in g.instances} == {"2g.20gb"}  # the pool's now
    reconciler.tick()
    assert live_holders(store, "n-1") == set()
    types = [
        e["type"]
        for e in world.http.get("/v1/events", params={"limit": 500}, headers=world.admin).json()["items"]
    ]
    assert "endpoint.created" in types and "endpoint.deleted" in types


def test_a_pool_short_of_idle_nodes_leaves_the_endpoint_failed_saying_why(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    world.join("n-1")
    world.reserve([{"class": "gpu.mig", "count": 1}], duration="2h")  # lands on n-1 or n-2
    failed = endpoints.create(store, PLATFORM, body(count=2), world.clock.now)
    assert failed.status == "Failed" and failed.instances == ()
    assert failed.record.reason is not None
    assert "asks for 2 instances and pool p1 has" in failed.record.reason
    assert (
        "run no daemon (never joined)" in failed.record.reason or "booked by tenants" in failed.record.reason
    )
    with store.read() as tx:
        assert tx.mig_layouts.of_nodes(["n-1", "n-2"]) == {}  # nothing taken, nothing cut
    assert endpoints.get(store, ADMIN, "chat", world.clock.now).status == "Failed"


def test_endpoint_refusals_name_what_is_wrong(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    world.join("n-1")
    with pytest.raises(UnknownProfile, match=r"mig-4g\.20gb is not offered by H100-80GB"):
        endpoints.create(store, PLATFORM, body(types=["mig-4g.20gb"]), world.clock.now)
    with pytest.raises(NotFound, match="tenant platform not found"):
        endpoints.create(store, ACME, body(), world.clock.now)  # a tenant creates for itself only
    with pytest.raises(NotFound, match="pool p9 not found"):
        endpoints.create(store, PLATFORM, body(pool="p9"), world.clock.now)
    acme = {**body(), "tenantId": "acme"}
    with pytest.raises((Forbidden, NotFound)):
        endpoints.create(store, ACME, acme, world.clock.now)  # not the pool's owner
    endpoints.create(store, PLATFORM, body(), world.clock.now)
    with pytest.raises(AlreadyExists, match="endpoint chat already exists"):
        endpoints.create(store, ADMIN, body(), world.clock.now)
    with pytest.raises(NotFound, match="endpoint chat not found"):
        endpoints.get(store, ACME, "chat", world.clock.now)  # another tenant's reads as missing
    with pytest.raises(InvalidInput):
        endpoints.create(store, PLATFORM, {**body(), "extra": 1}, world.clock.now)


def component(name: str, copies: int, partition: str = "mig-2g.20gb", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "endpointName": "chat",
        "variantName": "AllTraffic",
        "model": "llama-3-8b",
        "partitionType": partition,
        "devicesRequired": 1,
        "copies": copies,
        **extra,
    }


def in_service(world: NodeWorld) -> Any:
    """Endpoint `chat` on n-1 (2 GPUs of 3g.40gb + 2 x 2g.20gb), cut and handed over."""
    daemon, _ = world.daemon("n-1")
    assert daemon.step(False)
    endpoints.create(world.store, PLATFORM, body(), world.clock.now)
    assert daemon.step(True)
    Reconciler(world.store, world.clock, "r1").tick()
    assert endpoints.get(world.store, PLATFORM, "chat", world.clock.now).status == "InService"
    return daemon


def test_copies_take_free_partitions_of_their_type_and_the_rest_wait(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    in_service(world)
    small = components.create(store, PLATFORM, component("small", 3), world.clock.now)
    assert [c.state for c in small.copies] == ["placed"] * 3
    assert all(c.partition == "mig-2g.20gb" and c.node == "n-1" and c.mig_uuid for c in small.copies)
    assert len({c.atom_id for c in small.copies}) == 3
    big = components.create(store, PLATFORM, component("big", 3, "mig-3g.40gb"), world.clock.now)
    assert [c.state for c in big.copies] == ["placed", "placed", "pending"]  # two 3g partitions
    assert big.reason == "1 copies wait: no free mig-3g.40gb partition"
    more = components.scale(store, PLATFORM, "small", 5, world.clock.now)
    assert [c.state for c in more.copies] == ["placed"] * 4 + ["pending"]  # four 2g partitions
    components.delete(store, PLATFORM, "big", world.clock.now)
    fewer = components.scale(store, PLATFORM, "small", 2, world.clock.now)
    assert [c.state for c in fewer.copies] == ["placed", "placed"] and fewer.spec.min_copies == 1
    with pytest.raises(InvalidInput, match="does not declare"):
        components.create(store, PLATFORM, component("odd", 1, "mig-1g.10gb"), world.clock.now)
    with pytest.raises(InvalidInput, match="devicesRequired must be 1"):
        components.create(store, PLATFORM, component("wide", 1, devicesRequired=2), world.clock.now)
    with pytest.raises(InvalidState, match=r"partition type is mig-2g\.20gb for its life"):
        components.scale(store, PLATFORM, "small", 2, world.clock.now, partition_type="mig-3g.40gb")
    with pytest.raises(InvalidState, match=r"partition type is mig-2g\.20gb for its life"):
        components.create(store, PLATFORM, component("small", 1, "mig-3g.40gb"), world.clock.now)
    with pytest.raises(AlreadyExists):
        components.create(store, PLATFORM, component("small", 1), world.clock.now)
    with pytest.raises(NotFound, match="component small not found"):
        components.get(store, ACME, "small", world.clock.now)  # another tenant's reads as missing


def test_copies_asked_for_before_the_instances_are_cut_are_placed_when_the_gate_hands_them_over(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    daemon, _ = world.daemon("n-1")
    assert daemon.step(False)
    endpoints.create(store, PLATFORM, body(), world.clock.now)
    early = components.create(store, PLATFORM, component("early", 2), world.clock.now)
    assert [c.state for c in early.copies] == ["pending", "pending"]  # nothing is cut yet
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()  # the hand-over places them, no timer
    assert [c.state for c in components.get(store, PLATFORM, "early", world.clock.now).copies] == [
        "placed",
        "placed",
    ]


def test_copies_stay_within_the_hosts_cpu_cores_and_memory(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path, host={"cpuCores": 8, "memoryGiB": 64})
    in_service(world)
    heavy = components.create(
        store, PLATFORM, component("heavy", 4, cpuCores=3, memoryMiB=8192), world.clock.now
    )
    assert [c.state for c in heavy.copies] == ["placed", "placed", "pending", "pending"]  # 8 cores / 3
    assert heavy.reason is not None and "lack the host room (3 CPU cores and 8192 MiB a copy)" in heavy.reason


def test_a_copy_waiting_for_host_cpu_says_so_not_wait_for_a_free_partition(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path, host={"cpuCores": 8, "memoryGiB": 64})
    in_service(world)
    components.create(store, PLATFORM, component("heavy", 4, cpuCores=3, memoryMiB=8192), world.clock.now)
    read = components.get(store, PLATFORM, "heavy", world.clock.now)
    listed = components.list_components(store, PLATFORM, world.clock.now, endpoint_name="chat").items
    for shown in (read, *listed):
        assert [c.state for c in shown.copies].count("pending") == 2
        assert shown.reason == (
            "2 copies wait: the nodes with a free mig-2g.20gb partition lack the host room"
            " (3 CPU cores and 8192 MiB a copy)"
        )
    short = components.create(store, PLATFORM, component("short", 6, "mig-3g.40gb"), world.clock.now)
    assert components.get(store, PLATFORM, "short", world.clock.now).reason == short.reason
    assert short.reason is not None and "no free mig-3g.40gb partition" in short.reason


def test_deleting_an_endpoint_deletes_its_components(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    in_service(world)
    components.create(store, PLATFORM, component("small", 2), world.clock.now)
    endpoints.delete(store, PLATFORM, "chat", world.clock.now)
    with pytest.raises(NotFound):
        components.get(store, PLATFORM, "small", world.clock.now)


def two_instances(world: NodeWorld) -> Any:
    """Endpoint `chat` on n-1 and n-2 (each GPU 3g.40gb + 2 x 2g.20gb), cut and handed over."""
    daemons = [world.daemon(n)[0] for n in ("n-1", "n-2")]
    for d in daemons:
        assert d.step(False)
    endpoints.create(world.store, PLATFORM, body(count=2), world.clock.now)
    for d in daemons:
        assert d.step(True)
    Reconciler(world.store, world.clock, "r1").tick()
    assert endpoints.get(world.store, PLATFORM, "chat", world.clock.now).status == "InService"
    return daemons


def placed_by_node(name: str, store: Store) -> dict[str, int]:
    shown = components.get(store, PLATFORM, name, T0)
    return dict(Counter(c.node for c in shown.copies if c.state == "placed"))


def relayout(types: list[str]) -> dict[str, Any]:
    return {
        "name": "chat",
        "variants": [
            {"name": "AllTraffic", "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": types}]}
        ],
    }


def test_a_live_relayout_recuts_instance_by_instance_and_never_takes_a_component_below_min_copies(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    daemons = two_instances(world)
    reconciler = Reconciler(store, world.clock, "r1")
    components.create(store, PLATFORM, component("small", 4), world.clock.now)  # minCopies 3
    assert placed_by_node("small", store) == {"n-1": 2, "n-2": 2}
    started = endpoints.update(store, PLATFORM, relayout(["mig-2g.20gb"] * 3), world.clock.now)
    assert started.status == "Updating"
    assert [(i.node, i.state) for i in started.instances] == [("n-1", "Updating"), ("n-2", "InService")]
    assert placed_by_node("small", store) == {"n-2": 4}  # moved off n-1 before it is cut
    seen = [sum(placed_by_node("small", store).values())]
    for _ in range(2):  # each instance: its daemon re-cuts it, the gate hands it back, the next starts
        for d in daemons:
            d.step(True)
        reconciler.tick()
        seen.append(sum(placed_by_node("small", store).values()))
    done = endpoints.get(store, PLATFORM, "chat", world.clock.now)
    assert done.status == "InService"
    assert [(i.layout, i.partitions) for i in done.instances] == [("mixed:3x2g.20gb", {"mig-2g.20gb": 6})] * 2
    assert min(seen) >= 3 and seen[-1] == 4
    assert placed_by_node("small", store) == {"n-1": 4}  # n-2's copies moved to n-1 before n-2 was cut
    items = world.http.get("/v1/events", params={"type": "endpoint.updated"}, headers=world.admin).json()[
        "items"
    ]
    assert [(e["payload"]["status"], e["payload"]["node"]) for e in items] == [
        ("Updating", ""),
        ("Updating", "n-1"),
        ("Updating", "n-2"),
        ("InService", ""),
    ]


def test_a_relayout_that_would_take_a_component_below_min_copies_or_drop_its_type_is_refused_up_front(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    two_instances(world)
    components.create(store, PLATFORM, component("big", 4, "mig-3g.40gb", minCopies=4), world.clock.now)
    with pytest.raises(
        InvalidState,
        match="component big would run 2 copies while instance n-1 is re-cut, below its minCopies 4",
    ):
        endpoints.update(store, PLATFORM, relayout(["mig-3g.40gb", "mig-3g.40gb"]), world.clock.now)
    with pytest.raises(InvalidState, match=r"component big runs 4 copies on mig-3g\.40gb"):
        endpoints.update(store, PLATFORM, relayout(["mig-2g.20gb"] * 3), world.clock.now)
    with pytest.raises(InvalidInput, match="has no variant Canary"):
        endpoints.update(
            store,
            PLATFORM,
            {
                **relayout(["mig-7g.80gb"]),
                "variants": [
                    {
                        "name": "Canary",
                        "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": ["mig-7g.80gb"]}],
                    }
                ],
            },
            world.clock.now,
        )
    shown = endpoints.get(store, PLATFORM, "chat", world.clock.now)
    assert shown.status == "InService" and {i.layout for i in shown.instances} == {"mixed:3g.40gb+2x2g.20gb"}
    with store.read() as tx:
        assert tx.mig_layouts.of_nodes(["n-1", "n-2"]) == {}  # nothing moved


def test_an_endpoint_on_the_layout_its_nodes_already_have_goes_in_service(
    store: Store, tmp_path: Path
) -> None:
    """The README's layout section leaves the pool at `mixed:3g.40gb+2x2g.20gb`; an endpoint of that
    layout changes nothing the node is told, so its spec generation never moves: the node having
    converged its current spec counts as applied, and the endpoint goes InService."""
    world = NodeWorld(store, tmp_path, layout="mixed:3g.40gb+2x2g.20gb")
    daemon, fake = world.daemon("n-1")
    assert daemon.step(False)
    before = sorted(ci.uuid for g in fake.list_gpus() for gi in g.instances for ci in gi.compute_instances)
    created = endpoints.create(store, PLATFORM, body(), world.clock.now)
    assert created.status == "Creating"
    assert daemon.step(True)  # nothing new to converge
    Reconciler(store, world.clock, "r1").tick()
    shown = endpoints.get(store, PLATFORM, "chat", world.clock.now)
    assert shown.status == "InService"
    assert [(i.state, i.partitions) for i in shown.instances] == [
        ("InService", {"mig-2g.20gb": 4, "mig-3g.40gb": 2})
    ]
    assert live_holders(store, "n-1") == {"endpoint:"}
    assert (
        sorted(ci.uuid for g in fake.list_gpus() for gi in g.instances for ci in gi.compute_instances)
        == before
    )  # never re-cut


def test_an_endpoint_on_its_pools_layout_gives_its_node_back_when_deleted(
    store: Store, tmp_path: Path
) -> None:
    """Deleting an endpoint whose layout is its pool's sends the node back through the gate to the
    layout it already has: released at once, not held for a generation that never comes."""
    world = NodeWorld(store, tmp_path, layout="mixed:3g.40gb+2x2g.20gb")
    daemon, _ = world.daemon("n-1")
    assert daemon.step(False)
    reconciler = Reconciler(store, world.clock, "r1")
    endpoints.create(store, PLATFORM, body(), world.clock.now)
    assert daemon.step(True)
    reconciler.tick()
    endpoints.delete(store, PLATFORM, "chat", world.clock.now)
    assert daemon.step(True)
    reconciler.tick()
    assert live_holders(store, "n-1") == set()
    assert reserve_3g(world).status_code == 201


def test_a_failed_endpoint_is_retried_when_capacity_frees(store: Store, tmp_path: Path) -> None:
    """Short of idle nodes it is `Failed`, saying why; it waits as a pending workload does, and
    takes its nodes when a booking that held one is released, with no timer: then InService."""
    world = NodeWorld(store, tmp_path)
    daemons = [world.daemon(n)[0] for n in ("n-1", "n-2")]
    for d in daemons:
        assert d.step(False)
    held = world.reserve([{"class": "gpu.mig", "count": 1}], duration="2h")
    failed = endpoints.create(store, PLATFORM, body(count=2), world.clock.now)
    assert failed.status == "Failed" and failed.record.reason is not None
    assert "1 are booked by tenants" in failed.record.reason
    retrier = Retrier(Wiring(store, BookingIndex(), Stock(), CountingIds()), world.clock)
    assert retrier.tick() == 0  # nothing freed: it stays Failed, nothing taken
    assert endpoints.get(store, PLATFORM, "chat", world.clock.now).status == "Failed"
    with store.read() as tx:
        assert tx.mig_layouts.of_nodes(["n-1", "n-2"]) == {}
    released = world.http.post(f"/v1/reservations/{held['id']}/release", headers=world.platform)
    assert released.status_code == 200, released.text
    assert retrier.tick() == 1
    taken = endpoints.get(store, PLATFORM, "chat", world.clock.now)
    assert taken.status == "Creating" and taken.record.reason is None
    assert [i.node for i in taken.instances] == ["n-1", "n-2"]
    for d in daemons:
        assert d.step(True)
    Reconciler(store, world.clock, "r1").tick()
    assert endpoints.get(store, PLATFORM, "chat", world.clock.now).status == "InService"
    updates = world.http.get("/v1/events", params={"type": "endpoint.updated"}, headers=world.admin).json()
    assert [e["payload"]["status"] for e in updates["items"]] == ["Creating"]
    assert retrier.tick() == 0  # taken once


def test_a_failed_endpoints_reason_follows_what_holds_it_back(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    world.daemon("n-1")[0].step(False)
    failed = endpoints.create(store, PLATFORM, body(count=2), world.clock.now)
    assert failed.record.reason is not None and "run no daemon (never joined)" in failed.record.reason
    assert endpoints.retry(store, world.clock.now) == 0
    same = endpoints.get(store, PLATFORM, "chat", world.clock.now).record
    assert (same.reason, same.generation) == (failed.record.reason, failed.record.generation)  # no write
    cordon = world.http.patch("/v1/nodes/n-1", json={"cordoned": True}, headers=world.admin)
    assert cordon.status_code == 200, cordon.text
    assert endpoints.retry(store, world.clock.now) == 0
    again = endpoints.get(store, PLATFORM, "chat", world.clock.now)
    assert again.status == "Failed" and again.record.reason is not None
    assert "1 are cordoned" in again.record.reason


def test_a_rebooted_nodes_stale_observed_generation_does_not_put_an_endpoint_in_service(
    store: Store, tmp_path: Path
) -> None:
    """A node at the endpoint's layout reboots and comes back MIG-off (its `bcd` restarted, the
    reset that turns MIG on failing): its spec generation has not moved, but what it observed before
    the restart is no longer true, so the gate must not count it as converged; the endpoint goes
    InService once the node has converged again."""
    world = NodeWorld(store, tmp_path, layout="mixed:3g.40gb+2x2g.20gb")
    daemon, fake = world.daemon("n-1")
    assert daemon.step(False)
    for gpu in fake.gpus:  # Hopper: MIG mode is lost on a reboot
        gpu.mig_mode_persists = False
        gpu.reset_fails = True
    fake.reboot()
    daemon = Daemon(
        daemon.identity, fake, daemon.compute, cdi_root=daemon.devices.cdi_root, log=daemon.log, wait=0
    )
    daemon.starting()  # as `bcd run` starts
    assert daemon.flush()
    reconciler = Reconciler(store, world.clock, "r1")
    assert endpoints.create(store, PLATFORM, body(), world.clock.now).status == "Creating"
    daemon.step(False)
    assert daemon.host.reboot_required  # the reset failed: MIG stays off
    reconciler.tick()
    assert (
        endpoints.get(store, PLATFORM, "chat", world.clock.now).status == "Creating"
    )  # before the fix: InService
    for gpu in fake.gpus:
        gpu.reset_fails = False
    daemon = Daemon(
        daemon.identity, fake, daemon.compute, cdi_root=daemon.devices.cdi_root, log=daemon.log, wait=0
    )
    daemon.starting()
    assert daemon.step(False)
    reconciler.tick()
    assert endpoints.get(store, PLATFORM, "chat", world.clock.now).status == "InService"
