"""Usage, bills and prices through the real app, on SQLite and PostgreSQL: what a tenant is billed for
its reservations, exactly, and who may read which bill."""

from __future__ import annotations

import warnings
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

import pytest

from better_compute.domain.metering.metering import hours, microseconds, shown
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.metering import bills, usage
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, bearer, real_app, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

FLEET: dict[str, Any] = {
    "tenants": [{"id": "platform"}, {"id": "acme"}, {"id": "globex"}],
    "clusters": [
        {
            "name": "eu",
            "region": "eu-1",
            "nodes": [
                {
                    "name": "h-mig",
                    "gpus": {"model": "H100-80GB", "count": 2, "migLayout": "mixed:3g.40gb+2x2g.20gb"},
                },
                {"name": "h-ts", "gpus": {"model": "H100-80GB", "count": 1}},
                {"name": "l-mps", "gpus": {"model": "L40S-48GB", "count": 1}},
                {"name": "rtx", "gpus": {"model": "RTX-PRO-6000", "count": 1, "migLayout": "all-1g.24gb"}},
                {"name": "a100", "gpus": {"model": "A100-80GB", "count": 2}},
            ],
        }
    ],
    "pools": [
        {
            "name": "h100-mig",
            "cluster": "eu",
            "mode": "mig",
            "owner": "platform",
            "policy": {"migLayout": "mixed:3g.40gb+2x2g.20gb"},
            "nodes": ["h-mig"],
            "ownerQuota": {"gpu.mig": 8},
            "meter": "gpu.h100.hours",
        },
        {
            "name": "h100-timeslice",
            "cluster": "eu",
            "mode": "timeslice",
            "owner": "platform",
            "policy": {"replicas": 4},
            "nodes": ["h-ts"],
            "ownerQuota": {"gpu.slot": 4},
            "meter": "gpu.h100.hours",
        },
        {
            "name": "l40s-mps",
            "cluster": "eu",
            "mode": "mps",
            "owner": "platform",
            "policy": {"replicas": 3},
            "nodes": ["l-mps"],
            "ownerQuota": {"gpu.slot": 3},
        },
        {
            "name": "rtx-mig",
            "cluster": "eu",
            "mode": "mig",
            "owner": "platform",
            "policy": {"migLayout": "all-1g.24gb"},
            "nodes": ["rtx"],
            "ownerQuota": {"gpu.mig": 4},
        },
        {"name": "a100", "cluster": "eu", "mode": "exclusive", "owner": "platform", "nodes": ["a100"]},
    ],
}

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="test-admin")
DAY = {"from": "2026-12-01", "to": "2026-12-02"}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **length: float) -> None:
        self.now += timedelta(**length)


class Billing:
    """The app over the fleet above at a clock the test moves, with tokens for the admin and tenants."""

    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet(FLEET), T0)
        self.store = store
        self.clock = Clock()
        self.http = TestClient(real_app(store, clock=self.clock))
        self.admin = bearer(admin_token(store))
        self.platform = bearer(tenant_token(store, "platform"))
        self.acme = bearer(tenant_token(store, "acme"))
        self.globex = bearer(tenant_token(store, "globex"))

    def reserve(self, who: dict[str, str], pool: str, cls: str, count: int = 1, **extra: Any) -> str:
        device: dict[str, Any] = {"class": cls, "count": count}
        if "profile" in extra:
            expression = {"key": "migProfile", "op": "In", "values": [extra.pop("profile")]}
            device["selector"] = {"matchExpressions": [expression]}
        body = {"poolId": pool, "devices": [device], "duration": extra.pop("duration", "1h"), **extra}
        made = self.http.post("/v1/reservations", json=body, headers=who)
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def bill(self, tenant: str, who: dict[str, str] | None = None, **period: str) -> Any:
        return self.http.get(f"/v1/bills/{tenant}", params=period or DAY, headers=who or self.admin)

    def lines(self, tenant: str, **period: str) -> dict[str, str]:
        answer = self.bill(tenant, **period)
        assert answer.status_code == 200, answer.text
        return {line["meter"]: line["hours"] for line in answer.json()["lines"]}

    def rows(self, who: dict[str, str] | None = None, **query: Any) -> list[dict[str, Any]]:
        params = {**DAY, **query}
        answer = self.http.get("/v1/usage", params=params, headers=who or self.admin)
        assert answer.status_code == 200, answer.text
        return list(answer.json()["items"])


@pytest.fixture
def world(store: Store) -> Billing:
    return Billing(store)


def error(response: Any) -> dict[str, Any]:
    return dict(response.json()["error"])


def test_two_of_four_slots_and_a_3g_for_an_hour_bill_0_928571_gpu_h100_hours(world: Billing) -> None:
    world.reserve(world.platform, "h100-timeslice", "gpu.slot", 2)
    world.reserve(world.platform, "h100-mig", "gpu.mig", profile="3g.40gb")
    answer = world.bill("platform")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "tenantId": "platform",
        "from": "2026-12-01T00:00:00Z",
        "to": "2026-12-02T00:00:00Z",
        "lines": [{"meter": "gpu.h100.hours", "hours": "0.928571"}],
        "showback": [],  # no endpoint
    }
    shares = sorted(r["share"] for r in world.rows())
    assert shares == ["1/4", "1/4", "3/7"]


def test_a_release_half_way_through_bills_half(world: Billing) -> None:
    rid = world.reserve(world.platform, "a100", "gpu", 2)
    world.clock.advance(minutes=30)
    released = world.http.post(f"/v1/reservations/{rid}/release", json={"id": rid}, headers=world.platform)
    assert released.status_code == 200, released.text
    assert world.lines("platform") == {"gpu.a100.hours": "1.000000"}  # two GPUs for half an hour
    assert {(r["end"], r["hours"]) for r in world.rows()} == {("2026-12-01T09:30:00Z", "0.500000")}


def test_a_reservation_cancelled_before_its_start_bills_nothing(world: Billing) -> None:
    rid = world.reserve(world.platform, "h100-mig", "gpu.mig", start="2026-12-01T12:00:00Z")
    assert world.lines("platform") == {"gpu.h100.hours": "0.428571"}  # booked, not yet cancelled
    cancelled = world.http.post(f"/v1/reservations/{rid}/cancel", json={"id": rid}, headers=world.platform)
    assert cancelled.status_code == 200, cancelled.text
    assert world.lines("platform") == {}
    assert world.rows() == []


def test_an_mps_slot_with_three_replicas_bills_33_hundredths(world: Billing) -> None:
    world.reserve(world.platform, "l40s-mps", "gpu.slot")
    [row] = world.rows()
    assert (row["share"], row["hours"], row["meter"], row["gpuModel"]) == (
        "33/100",
        "0.330000",
        "gpu.l40s.hours",
        "L40S-48GB",
    )


def test_a_mig_1g_on_an_rtx_pro_6000_bills_a_quarter(world: Billing) -> None:
    world.reserve(world.platform, "rtx-mig", "gpu.mig", duration="2h")
    [row] = world.rows()
    assert (row["share"], row["hours"], row["class"], row["gpuModel"]) == (
        "1/4",
        "0.500000",
        "gpu.mig",
        "RTX-PRO-6000",
    )


def test_an_open_ended_booking_bills_up_to_now(world: Billing) -> None:
    from better_compute.domain.kernel.timewin import Window
    from better_compute.service.ledger import ledger

    atom = world.http.get("/v1/atoms", params={"pool": "a100"}, headers=world.admin).json()["items"][0]["id"]
    ledger.book(world.store, [atom], Window(T0), "open-1", "acme", T0)
    world.clock.advance(minutes=90)
    assert world.lines("acme") == {"gpu.a100.hours": "1.500000"}
    world.clock.advance(hours=1)
    assert world.lines("acme") == {"gpu.a100.hours": "2.500000"}


def test_a_bills_lines_sum_exactly_to_its_rows(world: Billing) -> None:
    world.reserve(world.platform, "h100-timeslice", "gpu.slot", 3, duration="1h7m")
    world.reserve(world.platform, "h100-mig", "gpu.mig", 2, duration="13m")
    world.reserve(world.platform, "l40s-mps", "gpu.slot", 2, duration="3h1m")
    world.reserve(world.platform, "rtx-mig", "gpu.mig", 3, duration="59m", start="2026-12-01T23:30:00Z")
    rows = world.rows(limit=2)  # one page of two, then the rest below
    cursor = world.http.get("/v1/usage", params={**DAY, "limit": 2}, headers=world.admin).json()["nextCursor"]
    while cursor:
        page = world.http.get(
            "/v1/usage", params={**DAY, "limit": 2, "cursor": cursor}, headers=world.admin
        ).json()
        rows += page["items"]
        cursor = page["nextCursor"]
    assert len(rows) == 10 and len({r["bookingId"] for r in rows}) == 10
    exact: dict[str, Fraction] = {}
    for r in rows:
        held = datetime.fromisoformat(r["end"]) - datetime.fromisoformat(r["start"])
        exact[r["meter"]] = exact.get(r["meter"], Fraction(0)) + hours(
            Fraction(r["share"]), microseconds(held)
        )
    assert world.lines("platform") == {meter: shown(total) for meter, total in exact.items()}
    # The use cases themselves, before any rounding: equal as fractions.
    bill = bills.get_bill(world.store, ADMIN, "platform", since="2026-12-01", until="2026-12-02", now=T0)
    listed = usage.list_usage(world.store, ADMIN, since="2026-12-01", until="2026-12-02", limit=1000, now=T0)
    assert {line.meter: line.hours for line in bill.lines} == exact
    assert sum((u.hours for u in listed.items), Fraction(0)) == sum(exact.values())
    # The last reservation runs past midnight: the day bills its first half hour only.
    assert exact["gpu.rtx.hours"] == 3 * Fraction(1, 4) * Fraction(1, 2)


def test_usage_recomputed_twice_is_identical(world: Billing) -> None:
    world.reserve(world.platform, "h100-timeslice", "gpu.slot", 2)
    world.reserve(world.platform, "h100-mig", "gpu.mig", profile="3g.40gb", duration="3h")
    first = (world.bill("platform").json(), world.rows())
    second = (world.bill("platform").json(), world.rows())
    assert first == second and first[1]


def test_a_month_is_the_default_period_and_a_period_cuts_bookings(world: Billing) -> None:
    world.reserve(world.platform, "a100", "gpu", start="2026-12-31T23:00:00Z", duration="2h")
    december = world.http.get("/v1/bills/platform", headers=world.platform).json()
    assert (december["from"], december["to"]) == ("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z")
    assert december["lines"] == [{"meter": "gpu.a100.hours", "hours": "1.000000"}]
    assert world.lines("platform", **{"from": "2027-01-01", "to": "2027-02-01"}) == {
        "gpu.a100.hours": "1.000000"
    }


def test_prices_turn_hours_into_money(world: Billing) -> None:
    world.reserve(world.platform, "h100-timeslice", "gpu.slot", 2)
    world.reserve(world.platform, "h100-mig", "gpu.mig", profile="3g.40gb")
    world.reserve(world.platform, "a100", "gpu")
    price = {"meter": "gpu.h100.hours", "perHour": "2.50", "currency": "usd"}
    set_ = world.http.put("/v1/prices", json=price, headers=world.admin)
    assert set_.status_code == 200, set_.text
    assert set_.json() == {**price, "currency": "USD", "updatedAt": "2026-12-01T09:00:00Z"}
    partly = world.bill("platform").json()
    assert partly["lines"] == [
        {"meter": "gpu.a100.hours", "hours": "1.000000"},
        {"meter": "gpu.h100.hours", "hours": "0.928571", "amount": "2.32", "currency": "USD"},
    ]
    assert "total" not in partly  # a line without a price: no total
    world.http.put(
        "/v1/prices",
        json={"meter": "gpu.a100.hours", "perHour": "1.1", "currency": "USD"},
        headers=world.admin,
    )
    assert world.bill("platform").json()["total"] == "3.42"
    listed = world.http.get("/v1/prices", headers=world.acme).json()["items"]
    assert [(p["meter"], p["perHour"]) for p in listed] == [
        ("gpu.a100.hours", "1.1"),
        ("gpu.h100.hours", "2.50"),
    ]
    world.http.put(
        "/v1/prices", json={"meter": "gpu.a100.hours", "perHour": "1", "currency": "EUR"}, headers=world.admin
    )
    assert "total" not in world.bill("platform").json()  # two currencies do not add up


def test_a_tenant_reads_its_own_bill_and_usage_only(world: Billing) -> None:
    world.reserve(world.platform, "a100", "gpu")
    own = world.bill("platform", world.platform)
    assert own.status_code == 200 and own.json()["lines"]
    for tenant in ("platform", "nobody"):  # another tenant's, real or not: the same answer
        refused = world.bill(tenant, world.acme)
        assert refused.status_code == 404, refused.text
        assert error(refused) == {
            "code": "NOT_FOUND",
            "message": f"tenant {tenant} not found",
            "details": {"tenantId": tenant},
        }
        listed = world.http.get("/v1/usage", params={**DAY, "tenantId": tenant}, headers=world.acme)
        assert listed.status_code == 404 and error(listed)["message"] == f"tenant {tenant} not found"
    assert world.rows(world.acme) == []  # its own usage: none, and not platform's
    assert world.rows(world.acme, poolId="a100") == []  # a pool filter narrows its own rows only
    assert len(world.rows(world.platform)) == 1 == len(world.rows(tenantId="platform"))
    denied = world.http.put(
        "/v1/prices", json={"meter": "m", "perHour": "1", "currency": "USD"}, headers=world.acme
    )
    assert denied.status_code == 403 and error(denied)["code"] == "FORBIDDEN"


@pytest.mark.parametrize(
    ("path", "params", "status", "message"),
    [
        ("/v1/bills/platform", {"from": "2026-12-02", "to": "2026-12-01"}, 400, "from must be before to"),
        ("/v1/bills/platform", {"from": "2026-12-01", "to": "2026-12-01"}, 400, "from must be before to"),
        ("/v1/bills/platform", {"from": "2026-02-30", "to": "2026-03-01"}, 400, "is not a calendar date"),
        (
            "/v1/bills/platform",
            {"from": "last week", "to": "2026-12-01"},
            400,
            "is not a date (2030-01-01) or",
        ),
        (
            "/v1/bills/platform",
            {"from": "2026-12-01T00:00:00", "to": "2026-12-02"},
            400,
            "from must carry a timezone",
        ),
        ("/v1/bills/platform", {"from": "2026-12-01"}, 400, "give both from and to, or neither"),
        ("/v1/bills/platform", {"from": "2026-01-01", "to": "2027-01-03"}, 400, "at most 366 days"),
        (
            "/v1/bills/platform",
            {"from": "9999-12-31T23:59:59-23:59", "to": "2026-01-01"},
            400,
            "outside the years",
        ),
        ("/v1/bills/nobody", DAY, 404, "tenant nobody not found"),
        ("/v1/bills/a%00b", DAY, 400, "contains a NUL character"),
        ("/v1/bills/" + "t" * 300, DAY, 400, "tenantId must be an id"),
        ("/v1/usage", {**DAY, "tenantId": "nobody"}, 404, "tenant nobody not found"),
        ("/v1/usage", {**DAY, "poolId": "nowhere"}, 404, "pool nowhere not found"),
        ("/v1/usage", {**DAY, "cursor": "rsv-1"}, 400, "cursor 'rsv-1' is not a booking id"),
        ("/v1/usage", {**DAY, "limit": "0"}, 400, "limit"),
        ("/v1/usage", {"to": "2026-12-01"}, 400, "from is missing"),
    ],
)
def test_bad_input_is_refused_clearly_never_a_500(
    world: Billing, path: str, params: dict[str, str], status: int, message: str
) -> None:
    refused = world.http.get(path, params=params, headers=world.admin)
    assert refused.status_code == status, refused.text
    assert error(refused)["code"] == ("NOT_FOUND" if status == 404 else "INVALID_INPUT")
    assert message in error(refused)["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"meter": "gpu.h100.hours", "perHour": "-2.50", "currency": "USD"}, "perHour must not be negative"),
        (
            {"meter": "gpu.h100.hours", "perHour": "1e3", "currency": "USD"},
            "perHour must be a decimal string",
        ),
        ({"meter": "gpu.h100.hours", "perHour": 2.5, "currency": "USD"}, "perHour"),
        (
            {"meter": "gpu.h100.hours", "perHour": "2.50", "currency": "dollars"},
            "currency must be an ISO 4217 code",
        ),
        (
            {"meter": "gpu.h100.hours", "perHour": "2.50", "currency": "US"},
            "currency must be an ISO 4217 code",
        ),
        ({"meter": "", "perHour": "2.50", "currency": "USD"}, "meter must be a non-empty string"),
        ({"meter": "m" * 65, "perHour": "2.50", "currency": "USD"}, "meter must be at most 64 characters"),
        ({"meter": "gpu.h100.hours", "perHour": "2.50"}, "currency"),
    ],
)
def test_a_bad_price_is_invalid_input(world: Billing, body: dict[str, Any], message: str) -> None:
    refused = world.http.put("/v1/prices", json=body, headers=world.admin)
    assert refused.status_code == 400, refused.text
    assert error(refused)["code"] == "INVALID_INPUT" and message in error(refused)["message"]
    assert world.http.get("/v1/prices", headers=world.admin).json()["items"] == []
