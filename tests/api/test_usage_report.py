"""`usage.report` (`GET /v1/usage/report?month=YYYY-MM`) through the real app, on SQLite and PostgreSQL:
every tenant's GPU-hours of a month in one answer, most first, with shares of the fleet and of all
use and cost where the meter has a price; it agrees with each tenant's bill; admin only; a bad
month is refused."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.storage.store import Store
from tests.api.test_billing import Billing, error


class Month(Billing):
    """Two tenants' hour on the billing fleet (7 GPUs), read two hours after T0 (09:00Z)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        offered = self.http.post(
            "/v1/pools/a100/offers",
            json={"poolId": "a100", "tenantId": "acme", "quota": {"gpu": 1}},
            headers=self.admin,
        )
        assert offered.status_code == 200, offered.text
        price = {"meter": "gpu.a100.hours", "perHour": "2.00", "currency": "USD"}
        assert self.http.put("/v1/prices", json=price, headers=self.admin).status_code == 200
        self.reserve(self.platform, "h100-timeslice", "gpu.slot", 2)  # half an H100 for an hour
        self.reserve(self.platform, "a100", "gpu", 1)
        self.reserve(self.acme, "a100", "gpu", 1)
        self.clock.advance(hours=2)

    def report(self, who: dict[str, str] | None = None, **query: str) -> Any:
        return self.http.get("/v1/usage/report", params=query, headers=who or self.admin)


@pytest.fixture
def month(store: Store) -> Month:
    return Month(store)


@pytest.mark.both_stores
def test_the_report_has_every_tenant_in_one_answer_and_agrees_with_the_bills(month: Month) -> None:
    answer = month.report(month="2026-12")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["month"], body["from"], body["to"]) == (
        "2026-12",
        "2026-12-01T00:00:00Z",
        "2027-01-01T00:00:00Z",
    )
    assert body["capacityHours"] == "14.000000"  # 7 GPUs present from 09:00 to now, 11:00
    assert body["usedHours"] == "2.500000"
    platform, acme = body["tenants"]
    assert platform == {
        "tenantId": "platform",
        "hours": "1.500000",
        "bookings": 3,
        "shareOfFleet": "0.107143",
        "shareOfUse": "0.600000",
        "lines": [
            {"meter": "gpu.a100.hours", "hours": "1.000000", "amount": "2.00", "currency": "USD"},
            {"meter": "gpu.h100.hours", "hours": "0.500000"},  # no price: hours only, as in its bill
        ],
        "total": None,  # the H100 hours have no price
        "currency": None,
    }
    assert acme["tenantId"] == "acme" and acme["hours"] == "1.000000"
    assert (acme["total"], acme["currency"], acme["shareOfUse"]) == ("2.00", "USD", "0.400000")
    assert body["total"] is None  # not every line is priced
    for row in body["tenants"]:
        period = {"from": "2026-12-01", "to": "2027-01-01"}
        bill = month.http.get(f"/v1/bills/{row['tenantId']}", params=period, headers=month.admin).json()
        assert bill["lines"] == row["lines"] and bill.get("total") == row["total"]
    # The default month is the current one.
    assert month.report().json() == body


def test_a_month_nobody_used_and_a_month_to_come(month: Month) -> None:
    before = month.report(month="2026-11").json()
    assert before["tenants"] == [] and before["usedHours"] == "0.000000"
    assert before["capacityHours"] == "0.000000"  # the fleet joined in December
    later = month.report(month="2027-01").json()
    assert later["tenants"] == [] and later["capacityHours"] == "0.000000"  # not yet


@pytest.mark.parametrize("bad", ["2026-13", "2026-1", "26-11", "2026-11-01", "november", "0000-01", "x" * 8])
def test_a_bad_month_is_refused(month: Month, bad: str) -> None:
    answer = month.report(month=bad)
    assert answer.status_code == 400, answer.text
    assert error(answer)["code"] == "INVALID_INPUT"


def test_only_the_admin_reads_the_report(month: Month) -> None:
    answer = month.report(who=month.platform, month="2026-12")
    assert answer.status_code == 403 and error(answer)["code"] == "FORBIDDEN"
