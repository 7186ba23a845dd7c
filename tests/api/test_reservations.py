"""Reservations through the real app, on SQLite and PostgreSQL: admission, quota, IAM, choice, lifecycle."""

from __future__ import annotations

import json
import warnings
from datetime import datetime, timedelta
from typing import Any

import pytest

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.tenancy import credentials
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, bearer, real_app, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

FLEET: dict[str, Any] = {
    "tenants": [{"id": "platform"}, {"id": "acme"}, {"id": "globex"}],
    "clusters": [
        {
            "name": "c1",
            "region": "r1",
            "nodes": [
                {"name": "mig", "replicas": 2, "gpus": {"model": "H100-80GB", "count": 2}},
                {"name": "ex", "replicas": 2, "gpus": {"model": "A100-80GB", "count": 2}},
                {"name": "ts", "gpus": {"model": "L40S-48GB", "count": 2}},
            ],
        }
    ],
    "pools": [
        {
            "name": "h100",
            "cluster": "c1",
            "mode": "mig",
            "owner": "platform",
            "policy": {"migLayout": "mixed:3g.40gb+2x2g.20gb"},
            "nodes": ["mig-1", "mig-2"],
        },
        {
            "name": "a100",
            "cluster": "c1",
            "mode": "exclusive",
            "owner": "platform",
            "nodes": ["ex-1", "ex-2"],
        },
        {
            "name": "l40s",
            "cluster": "c1",
            "mode": "timeslice",
            "owner": "platform",
            "policy": {"replicas": 4},
            "nodes": ["ts"],
        },
    ],
}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class World:
    """The app over a loaded fleet, an admin, and tokens for two tenants."""

    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet(FLEET), T0)
        self.clock = Clock()
        self.http = TestClient(real_app(store, clock=self.clock))
        self.admin = bearer(admin_token(store))
        self.acme = bearer(tenant_token(store, "acme"))
        self.globex = bearer(tenant_token(store, "globex"))
        self.platform = bearer(tenant_token(store, "platform"))

    def offer(self, pool: str, tenant: str, **quota: int) -> None:
        body = {
            "poolId": pool,
            "tenantId": tenant,
            "quota": {k.replace("_", "."): v for k, v in quota.items()},
        }
        r = self.http.post(f"/v1/pools/{pool}/offers", json=body, headers=self.admin)
        assert r.status_code in (200, 201), r.text

    def reserve(self, who: dict[str, str], pool: str, devices: list[dict[str, Any]], **extra: Any) -> Any:
        body = {"poolId": pool, "devices": devices, "duration": extra.pop("duration", "4h"), **extra}
        return self.http.post("/v1/reservations", json=body, headers=who)


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def mig(profile: str | None = None, count: int = 1, **kw: Any) -> dict[str, Any]:
    device: dict[str, Any] = {"class": "gpu.mig", "count": count, **kw}
    if profile:
        device["selector"] = {"matchExpressions": [{"key": "migProfile", "op": "In", "values": [profile]}]}
    return device


def error(r: Any) -> dict[str, Any]:
    body = r.json()
    assert set(body) == {"error"}, body
    return dict(body["error"])


def test_notebook_example_quota_then_success_then_idempotent_replay(world: World) -> None:
    # The notebook reservation of docs/concepts.md#reservations: one 3g.40gb for four hours.
    notebook = [mig("3g.40gb")]
    # A pool acme has no quota in is one it cannot see: the same answer as a pool that does not exist.
    unseen = world.reserve(world.acme, "h100", notebook, idempotencyKey="notebook-ana-0924")
    missing = world.reserve(world.acme, "h100-nowhere", notebook, idempotencyKey="notebook-ana-0924")
    assert unseen.status_code == missing.status_code == 404
    assert error(unseen)["message"] == "pool h100 not found"
    assert error(missing)["message"] == "pool h100-nowhere not found"
    assert error(unseen)["details"] == {"poolId": "h100"}
    # Offered whole GPUs only, it sees the pool, and a MIG instance needs a gpu.mig row.
    world.offer("h100", "acme", gpu=1)
    refused = world.reserve(world.acme, "h100", notebook, idempotencyKey="notebook-ana-0924")
    assert refused.status_code == 409 and error(refused)["code"] == "QUOTA_EXCEEDED"
    world.offer("h100", "acme", gpu_mig=2)
    first = world.reserve(world.acme, "h100", notebook, idempotencyKey="notebook-ana-0924")
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["status"] == "active" and body["tenantId"] == "acme" and body["poolId"] == "h100"
    assert body["start"].startswith("2026-12-01T09:00:00") and body["end"].startswith("2026-12-01T13:00:00")
    assert [(a["class"], a["attributes"]["migProfile"]) for a in body["atoms"]] == [("gpu.mig", "3g.40gb")]
    assert (body["gpuCount"], body["gpuSlices"]) == (0, 1)
    again = world.reserve(world.acme, "h100", notebook, idempotencyKey="notebook-ana-0924")
    assert again.status_code == 200 and again.json() == {**body, "replayed": True}
    other = world.reserve(world.acme, "h100", [mig("2g.20gb")], idempotencyKey="notebook-ana-0924")
    assert other.status_code == 409 and error(other)["code"] == "INVALID_STATE"
    listed = world.http.get("/v1/reservations", headers=world.acme).json()["items"]
    assert [r["id"] for r in listed] == [body["id"]]


def test_owner_needs_fraction_rows_too(world: World) -> None:
    r = world.reserve(world.platform, "h100", [mig()])
    assert r.status_code == 409 and error(r)["code"] == "QUOTA_EXCEEDED"
    whole = world.reserve(world.platform, "a100", [{"class": "gpu", "count": 1}])
    assert whole.status_code == 201, whole.text


@pytest.mark.parametrize(
    ("pool", "device", "message"),
    [
        pytest.param(
            "a100",
            {"class": "gpu.mig", "count": 1},
            "devices[0]: gpu.mig atoms exist only in mig pools",
            id="a gpu.mig request in an exclusive pool",
        ),
        pytest.param(
            "h100",
            {"class": "gpu.slot", "count": 1},
            "devices[0]: gpu.slot atoms exist only in timeslice or mps pools",
            id="a gpu.slot request in a mig pool",
        ),
        pytest.param(
            "l40s",
            {"class": "gpu.slot", "count": 1, "sharing": "mps"},
            "devices[0]: the pool shares GPUs as timeslice, not mps",
            id="an mps request in a timeslice pool",
        ),
    ],
)
def test_admission_messages(world: World, pool: str, device: dict[str, Any], message: str) -> None:
    r = world.reserve(
        world.platform, pool, [{"class": "gpu", "count": 1}, device] if pool == "l40s" else [device]
    )
    assert r.status_code == 400
    expected = message.replace("devices[0]", "devices[1]") if pool == "l40s" else message
    assert error(r) == {"code": "INVALID_INPUT", "message": expected, "details": error(r)["details"]}


@pytest.mark.parametrize(
    ("expression", "check"),
    [
        pytest.param(
            {"key": "migProfile", "op": "In", "values": ["2g.20gb"]},
            lambda a: a["migProfile"] == "2g.20gb",
            id="In keeps the named profile",
        ),
        pytest.param(
            {"key": "migProfile", "op": "NotIn", "values": ["2g.20gb"]},
            lambda a: a["migProfile"] == "3g.40gb",
            id="NotIn leaves the named profile out",
        ),
        pytest.param(
            {"key": "migUuid", "op": "Exists"},
            lambda a: a["migUuid"].startswith("MIG-"),
            id="Exists on the MIG uuid",
        ),
        pytest.param(
            {"key": "giId", "op": "Gt", "values": ["2"]},
            lambda a: a["giId"] > 2,
            id="Gt on the GPU instance id",
        ),
        pytest.param(
            {"key": "giId", "op": "Lt", "values": ["2"]},
            lambda a: a["giId"] < 2,
            id="Lt on the GPU instance id",
        ),
    ],
)
def test_selector_operators(world: World, expression: dict[str, Any], check: Any) -> None:
    world.offer("h100", "acme", gpu_mig=6)
    r = world.reserve(
        world.acme, "h100", [{"class": "gpu.mig", "count": 2, "selector": {"matchExpressions": [expression]}}]
    )
    assert r.status_code == 201, r.text
    assert len(r.json()["atoms"]) == 2
    assert all(check(a["attributes"]) for a in r.json()["atoms"])


def test_selector_that_matches_nothing_is_insufficient_capacity(world: World) -> None:
    world.offer("h100", "acme", gpu_mig=6)
    r = world.reserve(
        world.acme,
        "h100",
        [
            mig(),
            {
                "class": "gpu.mig",
                "count": 1,
                "selector": {"matchExpressions": [{"key": "migUuid", "op": "DoesNotExist"}]},
            },
        ],
    )
    assert r.status_code == 409
    err = error(r)
    assert err["code"] == "INSUFFICIENT_CAPACITY" and err["message"].startswith("devices[1]:")
    assert err["details"]["earliestStart"] is None


@pytest.mark.parametrize(
    ("pool", "device", "message", "in_pool"),
    [
        pytest.param(
            "h100",
            {"class": "gpu", "count": 1},
            "devices[0]: pool h100 has no gpu atom (atom classes in this pool: gpu.mig; its GPUs are split)",
            0,
            id="a whole gpu where every GPU is split",
        ),
        pytest.param(
            "h100",
            mig("3g.40GB"),
            "devices[0]: pool h100 has no gpu.mig atom matching the selector "
            "(profiles in this pool: 2g.20gb, 3g.40gb)",
            0,
            id="a profile spelt in capitals",
        ),
        pytest.param(
            "h100",
            mig("3g.40gb", count=5),
            "devices[0]: 5 gpu.mig atoms matching the selector wanted, pool h100 has 4 in all "
            "(profiles in this pool: 2g.20gb, 3g.40gb)",
            4,
            id="more of a profile than the pool has",
        ),
        pytest.param(
            "a100",
            {"class": "gpu", "count": 5},
            "devices[0]: 5 gpu atoms wanted, pool a100 has 4 in all",
            4,
            id="more whole GPUs than the pool has",
        ),
    ],
)
def test_a_request_the_pool_can_never_serve_says_what_the_pool_has_not_that_it_is_busy(
    world: World, pool: str, device: dict[str, Any], message: str, in_pool: int
) -> None:
    """Issue 11, defect 4: these answered "0 free" like a busy pool."""
    world.offer("h100", "platform", gpu_mig=8)  # the owner's whole GPUs need no row
    r = world.reserve(world.platform, pool, [device])
    assert r.status_code == 409
    err = error(r)
    assert err["code"] == "INSUFFICIENT_CAPACITY"
    assert err["message"] == message
    assert err["details"] == {
        "reason": "not_in_pool",
        "request": 0,
        "field": "devices[0]",
        "wanted": device["count"],
        "inPool": in_pool,
        "earliestStart": None,
    }


def test_a_busy_pool_says_all_busy_with_the_earliest_start(world: World) -> None:
    assert (
        world.reserve(world.platform, "a100", [{"class": "gpu", "count": 4}], duration="2h").status_code
        == 201
    )
    r = world.reserve(world.platform, "a100", [{"class": "gpu", "count": 1}])
    err = error(r)
    assert err["code"] == "INSUFFICIENT_CAPACITY" and err["details"]["reason"] == "all_busy"
    assert err["message"].startswith("devices[0]: 1 gpu atom wanted, 0 free in the pool for that window")
    assert err["details"]["earliestStart"].startswith("2026-12-01T")


def test_bad_selector_op_is_invalid_input(world: World) -> None:
    world.offer("h100", "acme", gpu_mig=6)
    r = world.reserve(
        world.acme,
        "h100",
        [
            {
                "class": "gpu.mig",
                "count": 1,
                "selector": {"matchExpressions": [{"key": "giId", "op": "Gt", "values": ["x"]}]},
            }
        ],
    )
    assert r.status_code == 400 and error(r)["code"] == "INVALID_INPUT"


def test_quota_counts_only_overlapping_windows(world: World) -> None:
    world.offer("h100", "acme", gpu_mig=1)
    assert world.reserve(world.acme, "h100", [mig()], duration="2h").status_code == 201
    overlapping = world.reserve(world.acme, "h100", [mig()], start="2026-12-01T10:00:00Z", duration="2h")
    assert overlapping.status_code == 409 and error(overlapping)["code"] == "QUOTA_EXCEEDED"
    assert error(overlapping)["details"]["inUse"] == 1
    after = world.reserve(world.acme, "h100", [mig()], start="2026-12-01T11:00:00Z", duration="2h")
    assert after.status_code == 201, after.text


def test_quota_counts_peak_concurrent_holding_not_every_booking_in_the_window(world: World) -> None:
    """Issue 11, defect 18: back-to-back 10:00-12:00 and 12:00-14:00, then 11:00-13:00 over both: at
    most two are held at once, so a limit of 2 admits the third; a fourth at 11:30 would make three."""
    world.offer("h100", "acme", gpu_mig=2)
    first = world.reserve(world.acme, "h100", [mig()], start="2026-12-01T10:00:00Z", duration="2h")
    second = world.reserve(world.acme, "h100", [mig()], start="2026-12-01T12:00:00Z", duration="2h")
    assert first.status_code == 201 and second.status_code == 201, (first.text, second.text)
    third = world.reserve(world.acme, "h100", [mig()], start="2026-12-01T11:00:00Z", duration="2h")
    assert third.status_code == 201, third.text
    fourth = world.reserve(world.acme, "h100", [mig()], start="2026-12-01T11:30:00Z", duration="1h")
    assert fourth.status_code == 409 and error(fourth)["code"] == "QUOTA_EXCEEDED"
    assert error(fourth)["details"]["inUse"] == 2


def test_iam_gpu_count_does_not_count_slices(world: World) -> None:
    world.offer("h100", "acme", gpu_mig=6)
    world.offer("a100", "acme", gpu=4)
    policy = {"name": "small", "tenantId": "acme", "limits": {"gpuCount": 1}}
    assert world.http.post("/v1/policies", json=policy, headers=world.admin).status_code == 201
    whole = world.reserve(world.acme, "a100", [{"class": "gpu", "count": 2}])
    assert whole.status_code == 403 and error(whole)["code"] == "FORBIDDEN"
    assert error(whole)["details"]["key"] == "gpuCount"
    slices = world.reserve(world.acme, "h100", [mig(count=3)])
    assert slices.status_code == 201, slices.text
    limit = {"name": "few-slices", "tenantId": "acme", "limits": {"gpuSlices": 2}}
    assert world.http.post("/v1/policies", json=limit, headers=world.admin).status_code == 201
    more = world.reserve(world.acme, "h100", [mig(count=3)], start="2026-12-02T09:00:00Z")
    assert more.status_code == 403 and error(more)["details"]["key"] == "gpuSlices"


def test_tenants_cannot_see_or_touch_each_others_reservations(world: World) -> None:
    world.offer("h100", "acme", gpu_mig=2)
    mine = world.reserve(world.acme, "h100", [mig()], start="2026-12-02T09:00:00Z").json()
    for method, path in (("get", ""), ("post", "/cancel"), ("post", "/release")):
        r = getattr(world.http, method)(f"/v1/reservations/{mine['id']}{path}", headers=world.globex)
        assert r.status_code == 404 and error(r)["code"] == "NOT_FOUND"
    assert world.http.get("/v1/reservations", headers=world.globex).json()["items"] == []
    assert world.http.get(f"/v1/reservations/{mine['id']}", headers=world.admin).status_code == 200
    # Booking for another tenant is NOT_FOUND, as for a tenant that does not exist (tests/api/test_visibility.py).
    acting_for_other = world.reserve(world.globex, "h100", [mig()], tenantId="acme")
    assert (
        acting_for_other.status_code == 404 and error(acting_for_other)["message"] == "tenant acme not found"
    )


def test_a_reservation_released_the_instant_it_starts_is_cancelled_not_refused(world: World) -> None:
    """Released at its very start, nothing of it has run: the whole window frees and it answers
    `cancelled` (it was refused with INVALID_INPUT "end must be after start", and kept its atoms)."""
    world.offer("a100", "acme", gpu=4)
    now = world.reserve(world.acme, "a100", [{"class": "gpu", "count": 4}], duration="2h").json()
    released = world.http.post(f"/v1/reservations/{now['id']}/release", headers=world.acme)
    assert released.status_code == 200, released.text
    assert released.json()["status"] == "cancelled"
    shown = world.http.get(f"/v1/reservations/{now['id']}", headers=world.acme).json()
    assert shown["status"] == "cancelled"
    again = world.reserve(world.platform, "a100", [{"class": "gpu", "count": 4}], duration="2h")
    assert again.status_code == 201, again.text


def test_cancel_before_start_release_while_active(world: World) -> None:
    world.offer("a100", "acme", gpu=4)
    later = world.reserve(
        world.acme, "a100", [{"class": "gpu", "count": 4}], start="2026-12-01T12:00:00Z", duration="2h"
    ).json()
    # The pool is full from 12:00 to 14:00.
    full = world.reserve(
        world.platform, "a100", [{"class": "gpu", "count": 1}], start="2026-12-01T13:00:00Z", duration="2h"
    )
    assert full.status_code == 409 and error(full)["code"] == "INSUFFICIENT_CAPACITY"
    assert error(full)["details"]["earliestStart"].startswith("2026-12-01T14:00:00")
    cancelled = world.http.post(f"/v1/reservations/{later['id']}/cancel", headers=world.acme)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert (
        world.reserve(
            world.platform,
            "a100",
            [{"class": "gpu", "count": 4}],
            start="2026-12-01T13:00:00Z",
            duration="2h",
        ).status_code
        == 201
    )

    now = world.reserve(world.acme, "a100", [{"class": "gpu", "count": 1}], duration="2h").json()
    world.clock.now = T0 + timedelta(minutes=30)
    too_late = world.http.post(f"/v1/reservations/{now['id']}/cancel", headers=world.acme)
    assert too_late.status_code == 409 and error(too_late)["code"] == "INVALID_STATE"
    released = world.http.post(f"/v1/reservations/{now['id']}/release", headers=world.acme)
    assert released.status_code == 200, released.text
    assert released.json()["status"] == "released" and released.json()["end"].startswith(
        "2026-12-01T09:30:00"
    )
    # The freed remainder of the window can be taken at once.
    again = world.reserve(world.platform, "a100", [{"class": "gpu", "count": 4}], duration="1h")
    assert again.status_code == 201, again.text


def test_requests_stay_together_and_fill_partly_used_gpus(world: World) -> None:
    world.offer("h100", "acme", gpu_mig=8)
    pair = world.reserve(world.acme, "h100", [mig("2g.20gb", count=2)]).json()
    assert len({a["gpuId"] for a in pair["atoms"]}) == 1
    one = world.reserve(world.acme, "h100", [mig()]).json()
    assert one["atoms"][0]["gpuId"] == pair["atoms"][0]["gpuId"]


def test_earliest_start_is_for_the_whole_reservation(world: World) -> None:
    gpus = {"class": "gpu", "count": 2}
    assert world.reserve(world.platform, "a100", [gpus], duration="4h").status_code == 201  # 2 of 4
    # Each request fits alone in the two free GPUs; together they need three, free from 13:00.
    both = [{"class": "gpu", "count": 1}, gpus]
    refused = world.reserve(world.platform, "a100", both, duration="1h")
    assert refused.status_code == 409 and error(refused)["code"] == "INSUFFICIENT_CAPACITY"
    earliest = error(refused)["details"]["earliestStart"]
    assert earliest.startswith("2026-12-01T13:00:00")
    assert world.reserve(world.platform, "a100", both, duration="1h", start=earliest).status_code == 201
    # Five GPUs out of four: never, so no start is given.
    never = world.reserve(world.platform, "a100", [gpus, {"class": "gpu", "count": 3}], duration="1h")
    assert never.status_code == 409 and error(never)["details"]["earliestStart"] is None


def test_whole_gpu_requests_take_unsplit_gpus_only(world: World) -> None:
    r = world.reserve(world.platform, "h100", [{"class": "gpu", "count": 1}])
    assert r.status_code == 409 and error(r)["code"] == "INSUFFICIENT_CAPACITY"
    got = world.reserve(world.platform, "a100", [{"class": "gpu", "count": 2}]).json()
    assert {a["class"] for a in got["atoms"]} == {"gpu"}
    assert len({a["node"] for a in got["atoms"]}) == 1


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({}, id="an empty body"),
        pytest.param({"poolId": "h100", "devices": [], "duration": "4h"}, id="no devices"),
        pytest.param(
            {"poolId": "h100", "devices": [{"class": "gpu", "count": 0}], "duration": "4h"},
            id="a count of zero",
        ),
        pytest.param(
            {"poolId": "h100", "devices": [{"class": "gpu", "count": True}], "duration": "4h"},
            id="a boolean count",
        ),
        pytest.param(
            {"poolId": "h100", "devices": [{"class": "gpu", "count": 1}], "duration": "soon"},
            id="a duration that is a word",
        ),
        pytest.param(
            {
                "poolId": "h100",
                "devices": [{"class": "gpu", "count": 1}],
                "duration": "4h",
                "start": "yesterday",
            },
            id="a start that is a word",
        ),
        pytest.param(
            {"poolId": "h100", "devices": [{"class": "tpu", "count": 1}], "duration": "4h"},
            id="a class that is no atom class",
        ),
        # Past what datetimes and integers can hold.
        pytest.param(
            {
                "poolId": "h100",
                "devices": [{"class": "gpu", "count": 1}],
                "duration": "1h",
                "start": "9999-12-31T23:59:59Z",
            },
            id="a window that ends past the year 9999",
        ),
        pytest.param(
            {
                "poolId": "h100",
                "devices": [
                    {
                        "class": "gpu.mig",
                        "count": 1,
                        "selector": {
                            "matchExpressions": [{"key": "giId", "op": "Lt", "values": ["9" * 5000]}]
                        },
                    }
                ],
                "duration": "1h",
            },
            id="a selector bound with 5000 digits",
        ),
    ],
)
def test_malformed_requests_are_invalid_input(world: World, body: dict[str, Any]) -> None:
    r = world.http.post("/v1/reservations", json=body, headers=world.platform)
    assert r.status_code == 400 and error(r)["code"] == "INVALID_INPUT"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param('{"a":' * 5000 + "1" + "}" * 5000, id="objects nested 5000 deep"),
        pytest.param("[" * 5000, id="lists nested 5000 deep"),
        pytest.param('{"poolId": ' + "[" * 3000, id="an unfinished list nested 3000 deep"),
        pytest.param(b'{"poolId": "\xff"}', id="a body that is not UTF-8"),
    ],
)
def test_bodies_nested_past_the_parser_are_invalid_input(world: World, raw: str | bytes) -> None:
    r = world.http.post(
        "/v1/reservations", content=raw, headers={**world.platform, "Content-Type": "application/json"}
    )
    assert r.status_code == 400 and error(r)["code"] == "INVALID_INPUT"


def test_unknown_pool_is_not_found(world: World) -> None:
    r = world.reserve(world.acme, "nope", [mig()])
    assert r.status_code == 404 and error(r)["code"] == "NOT_FOUND"


def test_a_retry_after_the_start_has_passed_still_returns_the_first_reservation(world: World) -> None:
    world.offer("h100", "acme", gpu_mig=2)
    body = {"start": "2026-12-01T09:10:00Z", "duration": "1h", "idempotencyKey": "late-retry"}
    first = world.reserve(world.acme, "h100", [mig()], **dict(body))
    assert first.status_code == 201, first.text
    world.clock.now = T0 + timedelta(hours=3)
    again = world.reserve(world.acme, "h100", [mig()], **dict(body))
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    fresh = world.reserve(world.acme, "h100", [mig()], **{**body, "idempotencyKey": "new-key"})
    assert fresh.status_code == 400 and error(fresh)["code"] == "INVALID_INPUT"


def test_a_late_retry_with_a_revoked_remembered_token_is_refused(world: World, store: Store) -> None:
    world.offer("h100", "acme", gpu_mig=2)
    created = world.http.post("/v1/credentials", headers=world.admin, json={"tenantId": "acme"}).json()
    body = {"start": "2026-12-01T09:10:00Z", "duration": "1h", "idempotencyKey": "late-revoked"}
    first = world.reserve(bearer(created["token"]), "h100", [mig()], **dict(body))
    assert first.status_code == 201  # the server now remembers whose token it is
    credentials.revoke(store, Principal(tenant_id=None, is_admin=True, credential_id="t"), created["id"], T0)
    world.clock.now = T0 + timedelta(hours=3)  # the retry's start has passed: no admission read
    again = world.reserve(bearer(created["token"]), "h100", [mig()], **dict(body))
    assert again.status_code == 401 and error(again)["details"]["reason"] == "revoked"


GOOD = {"poolId": "h100", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "4h"}


@pytest.mark.parametrize(
    ("request_kw", "status", "code", "message"),
    [
        pytest.param({}, 400, "INVALID_INPUT", "body: Field required", id="no body"),
        pytest.param(
            {"content": b"{nope", "ctype": "application/json"},
            400,
            "INVALID_INPUT",
            "[1]: JSON decode error",
            id="a body that is not JSON",
        ),
        pytest.param(
            {"content": b'{"poolId": "h100"}', "ctype": "text/plain"},
            400,
            "INVALID_INPUT",
            "body: Input should be a valid dictionary or object to extract fields from",
            id="a JSON body sent as text/plain",
        ),
        pytest.param(
            {"json": [1, 2]},
            400,
            "INVALID_INPUT",
            "body: Input should be a valid dictionary",
            id="a list instead of an object",
        ),
        pytest.param(
            {"json": {"poolId": "h100"}}, 400, "INVALID_INPUT", "devices: Field required", id="no devices"
        ),
        pytest.param(
            {"json": {**GOOD, "zzz": 1}},
            400,
            "INVALID_INPUT",
            "zzz: Extra inputs are not permitted",
            id="an unknown field",
        ),
        pytest.param(
            {"content": b"null", "ctype": "application/json"},
            400,
            "INVALID_INPUT",
            "body: Input should be a valid dictionary",
            id="a JSON null, which is a body and not a missing one",
        ),
        pytest.param(
            {"content": json.dumps(GOOD).encode(), "ctype": "application/x/+json"},
            400,
            "INVALID_INPUT",
            "body: Input should be a valid dictionary",
            id="a content type with two slashes, which is no JSON type",
        ),
        # The token is checked before the body is read: a caller without one never has it read.
        pytest.param(
            {"content": b"{nope", "ctype": "application/json", "token": "nope"},
            401,
            "UNAUTHENTICATED",
            "malformed",
            id="a bad token, so the bad body is never read",
        ),
        pytest.param(
            {"json": {"poolId": 3}, "token": "nope"},
            401,
            "UNAUTHENTICATED",
            "malformed token",
            id="a bad token with a body of the wrong shape",
        ),
        pytest.param(
            {"json": GOOD, "token": None},
            401,
            "UNAUTHENTICATED",
            "this call needs a token",
            id="no token at all",
        ),
        pytest.param(
            {"json": GOOD, "ctype": "application/vnd.bc+json; charset=utf-8"},
            201,
            None,
            None,
            id="a JSON media type with parameters",
        ),
    ],
)
def test_create_reads_bodies_and_tokens_like_every_other_route(
    world: World, request_kw: dict[str, Any], status: int, code: str | None, message: str | None
) -> None:
    world.offer("h100", "acme", gpu_mig=1)
    kw = dict(request_kw)
    token = kw.pop("token", "acme")
    headers = dict(world.acme) if token == "acme" else ({"Authorization": f"Bearer {token}"} if token else {})
    if "ctype" in kw:
        headers["content-type"] = kw.pop("ctype")
    if "json" in kw and "content-type" in headers:
        kw["content"] = json.dumps(kw.pop("json")).encode()
    r = world.http.post("/v1/reservations", headers=headers, **kw)
    assert r.status_code == status, r.text
    if code is not None:
        assert error(r)["code"] == code
        assert error(r)["message"].startswith(str(message))


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            {"poolId": "h100", "devices": [mig()], "duration": "4h", "idempotencyKey": "after-revoke"},
            id="with an idempotency key",
        ),
        pytest.param(
            {"poolId": "h100", "devices": [mig()], "duration": "4h", "tenantId": "globex"},
            id="for another tenant, which is otherwise NOT_FOUND",
        ),  # else NOT_FOUND
        pytest.param(
            {"poolId": "h100", "devices": [], "duration": "4h"},
            id="with no devices, which is otherwise INVALID_INPUT",
        ),  # else INVALID_INPUT
    ],
)
def test_a_revoked_token_cannot_reserve_even_if_the_server_remembers_it(
    world: World, store: Store, body: dict[str, Any]
) -> None:
    world.offer("h100", "acme", gpu_mig=4)
    created = world.http.post("/v1/credentials", headers=world.admin, json={"tenantId": "acme"})
    token, credential = created.json()["token"], created.json()["id"]
    first = world.reserve(bearer(token), "h100", [mig()])
    assert first.status_code == 201  # the server now knows whose token it is
    # Revoked elsewhere (another server process, the CLI): this app's memory of the token is not told.
    admin = Principal(tenant_id=None, is_admin=True, credential_id="test-admin")
    credentials.revoke(store, admin, credential, T0)
    r = world.http.post("/v1/reservations", json=body, headers=bearer(token))
    assert r.status_code == 401, r.text
    assert error(r)["details"]["reason"] == "revoked"
    # Nothing was booked, and the token stays refused.
    assert world.http.get("/v1/reservations", headers=world.acme).json()["items"] == [first.json()]
    assert world.reserve(bearer(token), "h100", [mig()]).status_code == 401


def test_create_answers_exactly_what_get_answers(world: World) -> None:
    world.offer("h100", "acme", gpu_mig=6)
    devices = [
        mig("3g.40gb"),
        {
            "class": "gpu.mig",
            "count": 2,
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "NotIn", "values": ["3g.40gb"]}]},
        },
    ]
    created = world.reserve(world.acme, "h100", devices, idempotencyKey="same-shape")
    assert created.status_code == 201, created.text
    fetched = world.http.get(f"/v1/reservations/{created.json()['id']}", headers=world.acme)
    assert created.json() == fetched.json()
    replayed = world.reserve(world.acme, "h100", devices, idempotencyKey="same-shape")
    # A replay is the same reservation, flagged as the answer to a reused key.
    assert replayed.status_code == 200 and replayed.json() == {**fetched.json(), "replayed": True}


def test_reservations_list_is_newest_first_with_a_descending_cursor(world: World) -> None:
    # Defect 8 of issue 11: the CLI says "newest first"; the API listed oldest first.
    world.offer("a100", "acme", gpu=4)
    made = []
    for _ in range(3):
        r = world.reserve(world.acme, "a100", [{"class": "gpu", "count": 1}])
        assert r.status_code == 201, r.text
        made.append(r.json()["id"])
    newest_first = list(reversed(made))
    first = world.http.get("/v1/reservations", params={"limit": 2}, headers=world.acme).json()
    assert [r["id"] for r in first["items"]] == newest_first[:2]
    assert first["nextCursor"] == newest_first[1]
    rest = world.http.get(
        "/v1/reservations", params={"limit": 2, "cursor": first["nextCursor"]}, headers=world.acme
    ).json()
    assert [r["id"] for r in rest["items"]] == newest_first[2:]
    assert rest["nextCursor"] is None
    # A page that holds exactly what is left has no cursor to an empty page.
    whole = world.http.get("/v1/reservations", params={"limit": 3}, headers=world.acme).json()
    assert [r["id"] for r in whole["items"]] == newest_first and whole["nextCursor"] is None


@pytest.mark.parametrize("cursor", ["garbage", "rsv-", "rsv-ZZ", "pool-1"])
def test_a_malformed_cursor_is_invalid_input_not_an_empty_page(world: World, cursor: str) -> None:
    # Defect 12 of issue 11: a cursor no list gave answered an empty page.
    r = world.http.get("/v1/reservations", params={"cursor": cursor}, headers=world.acme)
    assert r.status_code == 400, r.text
    assert error(r)["code"] == "INVALID_INPUT"
    assert error(r)["details"] == {"field": "cursor"}


@pytest.mark.both_stores
def test_a_replay_of_a_released_reservation_says_it_was_released_and_books_nothing(world: World) -> None:
    world.offer("a100", "acme", gpu=4)
    whole = [{"class": "gpu", "count": 4}]
    first = world.reserve(world.acme, "a100", whole, duration="2h", idempotencyKey="nightly-ana")
    assert first.status_code == 201, first.text
    assert first.json()["replayed"] is False
    world.clock.now = T0 + timedelta(minutes=30)
    released = world.http.post(f"/v1/reservations/{first.json()['id']}/release", headers=world.acme)
    assert released.status_code == 200, released.text
    assert released.json()["replayed"] is False

    again = world.reserve(world.acme, "a100", whole, duration="2h", idempotencyKey="nightly-ana")

    assert again.status_code == 200, again.text
    body = again.json()
    assert (body["id"], body["status"], body["replayed"]) == (first.json()["id"], "released", True)
    assert body["end"].startswith("2026-12-01T09:30:00")
    # Nothing was booked: the pool's four GPUs are still free for anyone.
    assert world.reserve(world.platform, "a100", whole, duration="1h").status_code == 201
    got = world.http.get(f"/v1/reservations/{body['id']}", headers=world.acme).json()
    assert got["status"] == "released" and got["replayed"] is False
