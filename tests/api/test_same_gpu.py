"""`sameGpu` on a reservation's device line, through the real app on SQLite and PostgreSQL: N slots
of a time-slice pool all on one GPU, or a refusal that says why; never split across GPUs."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, bearer, real_app, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.both_stores  # the choice, and its refusal, are the same on both databases

FLEET: dict[str, Any] = {
    "tenants": [{"id": "platform"}],
    "clusters": [
        {
            "name": "c1",
            "region": "r1",
            "nodes": [
                {"name": "ts", "gpus": {"model": "L40S-48GB", "count": 2}},
                {"name": "ex", "gpus": {"model": "A100-80GB", "count": 1}},
            ],
        }
    ],
    "pools": [
        {
            "name": "l40s",
            "cluster": "c1",
            "mode": "timeslice",
            "owner": "platform",
            "policy": {"replicas": 4},
            "nodes": ["ts"],
        },
        {"name": "a100", "cluster": "c1", "mode": "exclusive", "owner": "platform", "nodes": ["ex"]},
    ],
}


class World:
    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet(FLEET), T0)
        self.http = TestClient(real_app(store, clock=lambda: T0))
        self.platform = bearer(tenant_token(store, "platform"))
        admin = bearer(admin_token(store))
        for pool, quota in (("l40s", {"gpu.slot": 100}), ("a100", {"gpu": 1, "gpu.mig": 2})):
            body = {"poolId": pool, "tenantId": "platform", "quota": quota}
            offered = self.http.post(f"/v1/pools/{pool}/offers", json=body, headers=admin)
            assert offered.status_code in (200, 201), offered.text

    def reserve(self, devices: list[dict[str, Any]], **extra: Any) -> Any:
        body = {"poolId": extra.pop("pool", "l40s"), "devices": devices, "duration": "4h", **extra}
        return self.http.post("/v1/reservations", json=body, headers=self.platform)


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def slots(count: int, **kw: Any) -> dict[str, Any]:
    return {"class": "gpu.slot", "count": count, **kw}


def gpus_of(body: dict[str, Any]) -> list[str]:
    return sorted(a["gpuId"] for a in body["atoms"])


def error(r: Any) -> dict[str, Any]:
    return dict(r.json()["error"])


def test_same_gpu_slots_land_on_one_gpu_where_a_plain_count_splits(world: World) -> None:
    # 3 of GPU one's 4 slots, then 3 of the other's: one slot free on each GPU.
    first, second = world.reserve([slots(3)]), world.reserve([slots(3)])
    assert first.status_code == second.status_code == 201, (first.text, second.text)
    assert len(set(gpus_of(first.json()))) == len(set(gpus_of(second.json()))) == 1
    assert gpus_of(first.json())[0] != gpus_of(second.json())[0]
    # Two slots on one GPU: no GPU has two free, so it is refused, with when it could be served.
    together = world.reserve([slots(2, sameGpu=True)])
    assert together.status_code == 409, together.text
    refused = error(together)
    assert refused["code"] == "INSUFFICIENT_CAPACITY"
    assert refused["message"] == (
        "devices[0]: 2 gpu.slot atoms wanted on one GPU, at most 1 free on any one GPU of the pool for"
        " that window; the earliest start at which it could be served is 2026-12-01T13:00:00+00:00"
    )
    assert refused["details"]["earliestStart"] == "2026-12-01T13:00:00+00:00"  # when the first 3 end
    # The same two slots without sameGpu split over the two GPUs, as before.
    split = world.reserve([slots(2)])
    assert split.status_code == 201, split.text
    assert len(set(gpus_of(split.json()))) == 2
    assert split.json()["devices"] == [{**slots(2), "sharing": None, "selector": None, "sameGpu": False}]


def test_same_gpu_is_echoed_and_kept_on_one_gpu(world: World) -> None:
    world.reserve([slots(1)])  # one GPU partly used: the busiest-first rule would start there
    made = world.reserve([slots(4, sameGpu=True)], idempotencyKey="four-on-one")
    assert made.status_code == 201, made.text
    body = made.json()
    assert len(body["atoms"]) == 4 and len(set(gpus_of(body))) == 1
    assert body["devices"][0]["sameGpu"] is True
    got = world.http.get(f"/v1/reservations/{body['id']}", headers=world.platform).json()
    assert got["devices"][0]["sameGpu"] is True and got["atoms"] == body["atoms"]


def test_same_gpu_false_is_the_line_without_it(world: World) -> None:
    """A line sent with `sameGpu: false` is the line without it: the same idempotency fingerprint."""
    plain = world.reserve([slots(1)], idempotencyKey="k1")
    assert plain.status_code == 201, plain.text
    again = world.reserve([slots(1, sameGpu=False)], idempotencyKey="k1")
    assert again.status_code == 200 and again.json()["id"] == plain.json()["id"], again.text
    assert again.json()["devices"][0]["sameGpu"] is False


def test_more_slots_than_a_gpu_has_is_refused_for_good(world: World) -> None:
    r = world.reserve([slots(5, sameGpu=True)])
    assert r.status_code == 409, r.text
    refused = error(r)
    assert refused["code"] == "INSUFFICIENT_CAPACITY"
    assert refused["message"] == (
        "devices[0]: 5 gpu.slot atoms wanted on one GPU, and no GPU of pool l40s has more than 4"
    )
    assert refused["details"]["wanted"] == 5 and refused["details"]["inPool"] == 4
    assert refused["details"]["earliestStart"] is None
    # without sameGpu the pool's 8 slots serve it
    assert world.reserve([slots(5)]).status_code == 201


@pytest.mark.parametrize(
    ("pool", "line", "message"),
    [
        pytest.param(
            "a100",
            {"class": "gpu", "count": 1, "sameGpu": True},
            "devices[0].sameGpu: only a gpu.slot line can ask for its atoms on one GPU, not a gpu line"
            " (a MIG instance is one piece of one GPU already; whole GPUs are kept together)",
            id="whole GPUs",
        ),
        pytest.param(
            "a100",
            {"class": "gpu.mig", "count": 2, "sameGpu": True},
            "devices[0].sameGpu: only a gpu.slot line can ask for its atoms on one GPU, not a gpu.mig line"
            " (a MIG instance is one piece of one GPU already; whole GPUs are kept together)",
            id="MIG instances",
        ),
        pytest.param(
            "l40s",
            {"capability": {"memoryGiB": {"min": 10}}, "count": 1, "sameGpu": True},
            "devices[0].sameGpu: a line asked by capability takes capability, count and sharing"
            " (the capability chooses the class)",
            id="a line asked by capability",
        ),
    ],
)
def test_same_gpu_on_a_line_that_is_not_slots_is_invalid_input(
    world: World, pool: str, line: dict[str, Any], message: str
) -> None:
    r = world.reserve([line], pool=pool)
    assert r.status_code == 400, r.text
    assert error(r)["code"] == "INVALID_INPUT"
    assert error(r)["message"] == message
    assert error(r)["details"]["field"] == "devices[0].sameGpu"


def test_same_gpu_must_be_a_boolean(world: World) -> None:
    r = world.reserve([slots(2, sameGpu="yes")])
    assert r.status_code == 400, r.text
    assert error(r)["code"] == "INVALID_INPUT"
    assert "sameGpu" in error(r)["message"]
