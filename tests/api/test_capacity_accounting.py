"""Capacity accounting and rollups through the real app, on SQLite and PostgreSQL: every GPU-hour in
one state, summing to capacity exactly; a past range unchanged by what happens later; the rollups;
bad input refused by name; a tenant sees only the pools it may see."""

from __future__ import annotations

import warnings
from dataclasses import replace
from datetime import datetime
from fractions import Fraction
from typing import Any

import pytest

from better_compute.domain.kernel.errors import InvalidState
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.accounting import StateHours, grid_of
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import inventory, pools
from better_compute.service.fleet.rederive import stored_reports
from better_compute.service.ledger import capacity, ledger
from better_compute.storage.store import Store
from tests.api.test_reservations import Clock, error, mig
from tests.builders import T0, admin_token, at, bearer, real_app, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

FLEET: dict[str, Any] = {
    "tenants": [{"id": "platform"}, {"id": "acme"}],
    "clusters": [
        {
            "name": "c1",
            "region": "r1",
            "nodes": [
                {"name": "m", "gpus": {"model": "H100-80GB", "count": 1}},
                {"name": "x", "gpus": {"model": "H100-80GB", "count": 1}},
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
            "nodes": ["m"],
            "ownerQuota": {"gpu.mig": 3},
        },
        {"name": "x100", "cluster": "c1", "mode": "exclusive", "owner": "platform", "nodes": ["x"]},
    ],
}

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="test-admin")


class Fleet:
    """The app over two one-GPU pools: `h100` (mig, 3g.40gb + 2x 2g.20gb) and `x100` (exclusive)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        load_fleet(store, parse_fleet(FLEET), T0)
        self.clock = Clock()
        self.http = TestClient(real_app(store, clock=self.clock))
        self.admin = bearer(admin_token(store))
        self.platform = bearer(tenant_token(store, "platform"))
        self.acme = bearer(tenant_token(store, "acme"))

    def reserve(self, pool: str, device: dict[str, Any], start: datetime | None = None, **kw: Any) -> Any:
        body: dict[str, Any] = {"poolId": pool, "devices": [device], "duration": kw.pop("duration", "1h")}
        if start is not None:
            body["start"] = start.isoformat()
        r = self.http.post("/v1/reservations", json=body, headers=self.platform)
        assert r.status_code == 201, r.text
        return r.json()

    def get(self, what: str, who: dict[str, str] | None = None, **params: str) -> Any:
        return self.http.get(f"/v1/capacity/{what}", params=params, headers=who or self.admin)

    def hours(self, pool: str | None, start: datetime, end: datetime, bucket: str = "1h") -> list[StateHours]:
        """The exact answer, from the use case the route calls."""
        answer = capacity.accounting(self.store, ADMIN, pool, grid_of(start, end, bucket))
        return [hours for _, hours in answer.buckets]

    def set_health(self, node: str, healthy: bool, now: datetime) -> None:
        with self.store.read() as tx:
            (report,) = stored_reports(tx, [node])
        gpus = tuple(replace(g, healthy=healthy) for g in report.gpus)
        inventory.ingest(self.store, [replace(report, gpus=gpus)], now)

    def gpu_of(self, node: str) -> str:
        with self.store.read() as tx:
            (gpu,) = tx.gpus.of_nodes([node])
        return gpu.id


@pytest.fixture
def fleet(store: Store) -> Fleet:
    return Fleet(store)


def hours(**states: Fraction | int) -> StateHours:
    return StateHours(**{k: Fraction(v) for k, v in states.items()})


THREE_G = Fraction(3, 7)


def test_a_half_booked_mig_gpu_shows_three_sevenths_booked_and_four_sevenths_free(fleet: Fleet) -> None:
    fleet.reserve("h100", mig("3g.40gb"))
    r = fleet.get(
        "accounting", poolId="h100", **{"from": "2026-12-01T09:00:00Z", "to": "2026-12-01T11:00:00Z"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["poolId"], body["bucket"]) == ("h100", "1h")
    first, second = body["buckets"]
    assert first["from"].startswith("2026-12-01T09:00:00") and first["to"].startswith("2026-12-01T10:00:00")
    assert first["hours"] == {
        "capacity": "1.000000",
        "booked": "0.428571",
        "free": "0.571429",
        "changing": "0.000000",
        "unhealthy": "0.000000",
        "cordoned": "0.000000",
    }
    assert second["hours"]["free"] == "1.000000"
    assert body["total"]["capacity"] == "2.000000" and body["total"]["booked"] == "0.428571"
    assert fleet.hours("h100", T0, at(2)) == [hours(booked=THREE_G, free=Fraction(4, 7)), hours(free=1)]


def test_states_sum_to_capacity_exactly_across_pools(fleet: Fleet) -> None:
    fleet.reserve("h100", mig("3g.40gb"), duration="90m")
    fleet.reserve("h100", mig("2g.20gb"), start=at(0.25), duration="20m")
    fleet.reserve("x100", {"class": "gpu", "count": 1}, start=at(0.5), duration="2h")
    buckets = fleet.hours(None, at(-1), at(4), "25m")
    # Two GPUs for the four hours since they were first reported; nothing before.
    assert sum((b.capacity for b in buckets), Fraction(0)) == 8
    assert buckets[0].capacity == 0
    for b in buckets:
        assert sum(b.by_state().values(), Fraction(0)) == b.capacity
    total = sum(buckets, StateHours())
    assert total.booked == THREE_G * Fraction(3, 2) + Fraction(2, 7) * Fraction(1, 3) + 2


def test_a_partition_change_shows_as_changing(fleet: Fleet) -> None:
    gpu = fleet.gpu_of("x")
    assert ledger.book_partition_change(fleet.store, gpu, Window(at(1), at(2)), T0).status == "booked"
    assert fleet.hours("x100", T0, at(2)) == [hours(free=1), hours(changing=1)]
    answer = fleet.get(
        "accounting", poolId="x100", **{"from": "2026-12-01T10:00:00Z", "to": "2026-12-01T11:00Z"}
    )
    assert answer.json()["total"]["changing"] == "1.000000"


def test_an_unhealthy_gpus_unbooked_part_is_unhealthy_and_the_past_is_unchanged(fleet: Fleet) -> None:
    fleet.reserve("h100", mig("3g.40gb"))
    fleet.reserve("h100", mig("3g.40gb"), start=at(3))
    before = fleet.hours("h100", T0, at(2))
    fleet.set_health("m", False, at(2.5))
    assert fleet.hours("h100", T0, at(2)) == before
    assert fleet.hours("h100", at(2), at(4)) == [
        hours(free=Fraction(1, 2), unhealthy=Fraction(1, 2)),
        hours(booked=THREE_G, unhealthy=Fraction(4, 7)),
    ]
    fleet.set_health("m", True, at(5))
    assert fleet.hours("h100", at(4), at(6)) == [hours(unhealthy=1), hours(free=1)]
    assert fleet.hours("h100", T0, at(2)) == before


def test_a_node_leaving_its_pool_leaves_the_past_as_it_was(fleet: Fleet) -> None:
    fleet.reserve("h100", mig("3g.40gb"))
    before = fleet.hours("h100", T0, at(2))
    pools.update(fleet.store, ADMIN, "h100", nodes=[], now=at(3))
    assert fleet.hours("h100", T0, at(2)) == before
    assert fleet.hours("h100", at(2), at(4)) == [hours(free=1), hours()]
    # Out of any pool, the GPU is still the fleet's capacity.
    assert [b.capacity for b in fleet.hours(None, at(3), at(4))] == [2]


def test_rereporting_an_unchanged_node_writes_no_history(fleet: Fleet, store: Store) -> None:
    gpu = fleet.gpu_of("m")
    with store.read() as tx:
        first = tx.gpu_states.open_of([gpu])[gpu]
    fleet.set_health("m", True, at(1))
    with store.read() as tx:
        assert tx.gpu_states.open_of([gpu])[gpu] == first
        assert len(tx.gpu_states.during(None, Window(at(-1)))) == 2


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"from": "2026-12-01T11:00:00Z", "to": "2026-12-01T11:00:00Z"}, "to", "must be after from"),
        ({"from": "2026-12-01T12:00:00Z", "to": "2026-12-01T11:00:00Z"}, "to", "must be after from"),
        ({"from": "2026-12-01T00:00:00Z", "to": "2027-12-01T00:00:00Z"}, "bucket", "at most 1000"),
        ({"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z", "bucket": "soon"}, "bucket", "soon"),
        ({"from": "2026-12-01T00:00:00", "to": "2026-12-02T00:00:00Z"}, "from", "timezone"),
        ({"to": "2026-12-02T00:00:00Z"}, "from", "from"),
        ({"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z", "pool": "h100"}, "pool", "poolId"),
    ],
)
@pytest.mark.parametrize("what", ["accounting", "timeline"])
def test_bad_input_is_invalid_input_naming_the_field(
    fleet: Fleet, what: str, params: dict[str, str], field: str, words: str
) -> None:
    r = fleet.get(what, **params)
    assert r.status_code == 400, r.text
    refused = error(r)
    assert refused["code"] == "INVALID_INPUT" and words in refused["message"]
    assert refused["details"].get("field", field) == field


@pytest.mark.parametrize("what", ["accounting", "timeline", "summary", "by-pool"])
def test_an_unknown_or_hidden_pool_is_not_found(fleet: Fleet, what: str) -> None:
    window = {"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z"}
    params = window if what in ("accounting", "timeline") else {}
    missing = fleet.get(what, poolId="nowhere", **params)
    hidden = fleet.get(what, fleet.acme, poolId="h100", **params)
    assert missing.status_code == hidden.status_code == 404
    assert error(hidden)["message"] == "pool h100 not found"


def test_a_tenant_sees_only_the_pools_it_may_see(fleet: Fleet) -> None:
    fleet.reserve("x100", {"class": "gpu", "count": 1})
    window = {"from": "2026-12-01T09:00:00Z", "to": "2026-12-01T10:00:00Z"}
    nothing = fleet.get("accounting", fleet.acme, **window).json()
    assert nothing["poolId"] is None and nothing["total"]["capacity"] == "0.000000"
    assert fleet.get("summary", fleet.acme).json()["models"] == []
    assert fleet.get("by-pool", fleet.acme).json()["rows"] == []
    assert fleet.get("timeline", fleet.acme, **window).json()["buckets"][0]["booked"] == 0
    r = fleet.http.post(
        "/v1/pools/x100/offers",
        json={"poolId": "x100", "tenantId": "acme", "quota": {"gpu": 1}},
        headers=fleet.admin,
    )
    assert r.status_code in (200, 201), r.text
    seen = fleet.get("accounting", fleet.acme, **window).json()["total"]
    assert (seen["capacity"], seen["booked"]) == ("1.000000", "1.000000")
    assert {row["poolId"] for row in fleet.get("by-pool", fleet.acme).json()["rows"]} == {"x100"}
    assert fleet.get("timeline", fleet.acme, **window).json()["buckets"][0]["booked"] == 1
    assert fleet.get("accounting", **window).json()["total"]["capacity"] == "2.000000"


def test_summary_counts_whole_gpus_per_model(fleet: Fleet) -> None:
    fleet.reserve("x100", {"class": "gpu", "count": 1})
    fleet.reserve("h100", mig("3g.40gb"))
    body = fleet.get("summary").json()
    assert body["at"].startswith("2026-12-01T09:00:00") and body["poolId"] is None
    assert body["models"] == [{"model": "H100-80GB", "total": 2, "bookable": 1, "booked": 1, "unhealthy": 0}]
    fleet.set_health("x", False, at(0.5))
    assert fleet.get("summary", poolId="x100").json()["models"] == [
        {"model": "H100-80GB", "total": 1, "bookable": 0, "booked": 1, "unhealthy": 1}
    ]


def test_by_pool_counts_atoms_per_class_with_what_is_booked_now(fleet: Fleet, store: Store) -> None:
    """Only the classes a pool can have: no `gpu.slot` rows of zeros for a mig or exclusive pool."""
    fleet.reserve("h100", mig("2g.20gb"))
    fleet.reserve("h100", mig("3g.40gb"), start=at(2))  # later: not booked now
    ledger.book_partition_change(store, fleet.gpu_of("x"), Window(T0, at(1)), T0)  # held, not booked
    rows = {
        (r["poolId"], r["class"]): (r["total"], r["bookable"], r["booked"])
        for r in fleet.get("by-pool").json()["rows"]
    }
    assert rows == {
        ("h100", "gpu"): (1, 0, 0),
        ("h100", "gpu.mig"): (3, 3, 1),
        ("x100", "gpu"): (1, 1, 0),
    }


def test_timeline_counts_whole_gpus_booked_per_bucket(fleet: Fleet) -> None:
    fleet.reserve("x100", {"class": "gpu", "count": 1}, duration="90m")
    fleet.reserve("h100", mig("3g.40gb"))  # a fraction: not a whole GPU
    window = {"from": "2026-12-01T09:00:00Z", "to": "2026-12-01T12:00:00Z"}
    body = fleet.get("timeline", **window).json()
    assert [(b["booked"], b["hours"]) for b in body["buckets"]] == [
        (1, "1.000000"),
        (1, "0.500000"),
        (0, "0.000000"),
    ]
    assert body["bucket"] == "1h" and body["poolId"] is None
    by_day = fleet.get("timeline", poolId="h100", bucket="1d", **window).json()
    assert [(b["booked"], b["hours"]) for b in by_day["buckets"]] == [(0, "0.000000")]


def test_a_refused_pool_change_leaves_the_history_as_it_was(fleet: Fleet) -> None:
    """The history is written in the change's own transaction: a change refused after its atoms
    were re-derived (a node leaving under a live booking) records nothing."""
    fleet.reserve("h100", mig("3g.40gb"), duration="4h")
    with pytest.raises(InvalidState):
        pools.update(fleet.store, ADMIN, "h100", nodes=[], now=at(1))
    assert [b.capacity for b in fleet.hours("h100", at(1), at(3))] == [1, 1]


def test_a_gpu_gone_from_its_nodes_report_is_no_capacity_from_then_on(fleet: Fleet) -> None:
    with fleet.store.read() as tx:
        (report,) = stored_reports(tx, ["x"])
    inventory.ingest(fleet.store, [replace(report, gpus=())], at(1))
    assert fleet.hours("x100", T0, at(2)) == [hours(free=1), hours()]
    inventory.ingest(fleet.store, [report], at(1.5))
    assert fleet.hours("x100", at(1), at(2)) == [hours(free=Fraction(1, 2))]
