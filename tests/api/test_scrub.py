"""Scrubbing between tenants through the real app, on SQLite and PostgreSQL: an atom one tenant left
in a pool with `policy.scrub` is not given to another tenant until its node reports `ScrubDone`
(whether the booking was released early or ended with time), the tenant that left it may book it
again, a node clears only its own atoms, and `bcd` scrubs before it hands the atom over."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from better_compute.bcd.daemon import Daemon
from better_compute.bcd.fake import FakeNode
from better_compute.client import ForbiddenError
from better_compute.storage.store import Store
from tests.builders import bearer, tenant_token
from tests.node_world import NodeWorld

GPUS = 4
"""Whole GPUs in the pool: two nodes of two."""


def scrubbing_world(store: Store, tmp_path: Path, scrub: str = "reset") -> NodeWorld:
    world = NodeWorld(store, tmp_path, mode="exclusive")
    r = world.http.patch("/v1/pools/p1", json={"id": "p1", "policy": {"scrub": scrub}}, headers=world.admin)
    assert r.status_code == 200, r.text
    assert r.json()["policy"]["scrub"] == scrub
    quota = {"tenantId": "acme", "poolId": "p1", "class": "gpu", "limit": 64}
    assert world.http.put("/v1/quotas", json=quota, headers=world.admin).status_code == 200
    return world


def acme(world: NodeWorld) -> dict[str, str]:
    return bearer(tenant_token(world.store, "acme"))


def reserve(world: NodeWorld, headers: dict[str, str], count: int, **extra: Any) -> Any:
    body = {"poolId": "p1", "devices": [{"class": "gpu", "count": count}], "duration": "1h", **extra}
    return world.http.post("/v1/reservations", json=body, headers=headers)


def release(world: NodeWorld, rid: str) -> None:
    r = world.http.post(f"/v1/reservations/{rid}/release", json={"id": rid}, headers=world.platform)
    assert r.status_code == 200, r.text


def pending(world: NodeWorld, headers: dict[str, str]) -> list[str]:
    items = world.http.get("/v1/atoms", params={"pool": "p1"}, headers=headers).json()["items"]
    return sorted(a["id"] for a in items if a["scrubPending"])


def free_gpus(world: NodeWorld, headers: dict[str, str]) -> int:
    now = world.clock.now
    params = {"pool": "p1", "from": now.isoformat(), "to": (now + timedelta(hours=1)).isoformat()}
    r = world.http.get("/v1/capacity/free", params=params, headers=headers)
    assert r.status_code == 200, r.text
    return sum(k["free"] for k in r.json()["kinds"] if k["class"] == "gpu")


def scrub_done(world: NodeWorld, node: str, atoms: list[str]) -> None:
    world.node(world.join(node)).nodes.report(node, {"kind": "ScrubDone", "atoms": atoms})


def test_a_released_atom_goes_to_no_other_tenant_until_its_node_scrubs_it(
    store: Store, tmp_path: Path
) -> None:
    world = scrubbing_world(store, tmp_path)
    other = acme(world)
    held = reserve(world, world.platform, 1).json()
    (atom,) = held["atoms"]
    world.clock.now += timedelta(minutes=10)
    release(world, held["id"])
    assert pending(world, other) == [atom["id"]]
    assert pending(world, world.platform) == []  # its own data: not pending for the tenant that left it
    assert free_gpus(world, other) == GPUS - 1
    assert free_gpus(world, world.platform) == GPUS
    refused = reserve(world, other, GPUS)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["details"]["reason"] == "all_busy"
    others = reserve(world, other, GPUS - 1).json()
    assert atom["id"] not in [a["id"] for a in others["atoms"]]
    # Another node's report does not clear it: refused, and the atom stays owed.
    elsewhere = "n-2" if atom["node"] == "n-1" else "n-1"
    with pytest.raises(ForbiddenError):
        scrub_done(world, elsewhere, [atom["id"]])
    assert pending(world, other) == [atom["id"]]
    assert reserve(world, other, 1).status_code == 409
    scrub_done(world, atom["node"], [atom["id"]])
    assert pending(world, other) == []
    rebooked = reserve(world, other, 1)
    assert rebooked.status_code == 201, rebooked.text
    assert [a["id"] for a in rebooked.json()["atoms"]] == [atom["id"]]


def test_the_tenant_that_left_an_atom_may_book_it_again(store: Store, tmp_path: Path) -> None:
    world = scrubbing_world(store, tmp_path, scrub="zero")
    first = reserve(world, world.platform, GPUS).json()
    world.clock.now += timedelta(minutes=10)
    release(world, first["id"])
    again = reserve(world, world.platform, GPUS)
    assert again.status_code == 201, again.text
    assert sorted(a["id"] for a in again.json()["atoms"]) == sorted(a["id"] for a in first["atoms"])


def test_a_booking_that_ended_with_time_is_owed_a_scrub_too(store: Store, tmp_path: Path) -> None:
    world = scrubbing_world(store, tmp_path)
    other = acme(world)
    held = reserve(world, world.platform, 1).json()
    (atom,) = held["atoms"]
    assert pending(world, other) == []  # held, not yet left
    world.clock.now += timedelta(hours=2)  # the hour ended; nothing was written
    assert pending(world, other) == [atom["id"]]
    assert reserve(world, other, GPUS).status_code == 409
    scrub_done(world, atom["node"], [atom["id"]])
    assert reserve(world, other, GPUS).status_code == 201


def test_without_a_scrub_policy_atoms_go_to_the_next_tenant_at_once(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path, mode="exclusive")
    quota = {"tenantId": "acme", "poolId": "p1", "class": "gpu", "limit": 64}
    assert world.http.put("/v1/quotas", json=quota, headers=world.admin).status_code == 200
    other = acme(world)
    held = reserve(world, world.platform, 1).json()
    world.clock.now += timedelta(minutes=10)
    release(world, held["id"])
    assert pending(world, other) == []
    assert reserve(world, other, GPUS).status_code == 201


def test_the_spec_carries_each_assignments_tenant_and_the_pools_scrub(store: Store, tmp_path: Path) -> None:
    world = scrubbing_world(store, tmp_path, scrub="zero")
    held = reserve(world, world.platform, 1).json()
    node = held["atoms"][0]["node"]
    spec = world.node(world.join(node)).nodes.spec(node)
    assert spec.sharing.scrub == "zero"
    assert [(a.allocation_id, a.tenant_id) for a in spec.assignments] == [(held["id"], "platform")]


def test_turning_scrub_on_owes_nothing_for_earlier_releases(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path, mode="exclusive")
    quota = {"tenantId": "acme", "poolId": "p1", "class": "gpu", "limit": 64}
    assert world.http.put("/v1/quotas", json=quota, headers=world.admin).status_code == 200
    held = reserve(world, world.platform, 1).json()
    world.clock.now += timedelta(minutes=10)
    release(world, held["id"])
    world.clock.now += timedelta(minutes=1)
    r = world.http.patch("/v1/pools/p1", json={"id": "p1", "policy": {"scrub": "reset"}}, headers=world.admin)
    assert r.status_code == 200, r.text
    assert reserve(world, acme(world), GPUS).status_code == 201


def daemon_for(world: NodeWorld, node: str) -> tuple[Daemon, FakeNode]:
    return world.daemon(node, mode="exclusive")


def test_scrub_before_a_cross_tenant_rebook(store: Store, tmp_path: Path) -> None:
    """The issue's requirement: an atom released by one tenant is reset by `bcd` and reported clean
    before another tenant can book it, and only then handed to that tenant."""
    world = scrubbing_world(store, tmp_path, scrub="reset")
    other = acme(world)
    daemons = dict(daemon_for(world, n) for n in ("n-1", "n-2"))
    for d in daemons:
        assert d.step(False)
    held = reserve(world, world.platform, 1).json()
    (atom,) = held["atoms"]
    daemon, fake = next((d, f) for d, f in daemons.items() if d.node == atom["node"])
    assert daemon.step(True)
    assert (
        world.http.get(f"/v1/reservations/{held['id']}", headers=world.platform).json()["binding"] == "bound"
    )
    world.clock.now += timedelta(minutes=10)
    release(world, held["id"])
    assert reserve(world, other, GPUS).status_code == 409  # not scrubbed yet
    gpu = fake.gpu(atom["gpuId"])
    assert gpu.resets == 0
    daemon.step(True)  # takes the devices back, resets the GPU, reports ScrubDone
    assert gpu.resets == 1
    assert pending(world, other) == []
    rebooked = reserve(world, other, GPUS)
    assert rebooked.status_code == 201, rebooked.text
    for d in daemons:
        d.step(True)
    shown = world.http.get(f"/v1/reservations/{rebooked.json()['id']}", headers=other).json()
    assert shown["binding"] == "bound"
    assert gpu.resets == 1  # handed over clean, not reset again
    scrubbed = world.http.get("/v1/events", params={"type": "node.scrubbed"}, headers=world.admin).json()
    assert [e["payload"]["atoms"] for e in scrubbed["items"]] == [[atom["id"]]]
