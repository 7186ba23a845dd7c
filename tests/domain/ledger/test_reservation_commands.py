"""`domain.ledger.commands.reserve_of`: a reservation request as JSON read into the ledger's command."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ledger.commands import Reserve, reserve_of
from better_compute.domain.ledger.reservations import request_fingerprint

BODY = {"poolId": "p1", "devices": [{"class": "gpu", "count": 1}], "duration": "4h"}


def test_reserve_of_reads_a_json_request_into_the_command() -> None:
    got = reserve_of({**BODY, "tenantId": "acme", "idempotencyKey": "k1", "preemptible": True})
    assert got == Reserve(
        pool_id="p1",
        devices=({"class": "gpu", "count": 1},),
        duration="4h",
        tenant_id="acme",
        idempotency_key="k1",
        preemptible=True,
    )


def test_the_command_fingerprints_as_the_json_request_it_was_read_from() -> None:
    raw = {**BODY, "start": "2030-01-01T00:00:00Z", "idempotencyKey": "k1"}
    assert request_fingerprint(reserve_of(raw).as_sent("acme")) == request_fingerprint(
        {**raw, "tenantId": "acme"}
    )


def test_a_datetime_start_fingerprints_as_its_utc_text() -> None:
    at = datetime(2030, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))
    got = reserve_of({**BODY, "start": at})
    assert got.start == datetime(2030, 1, 1, tzinfo=UTC).isoformat()
    assert request_fingerprint(got.as_sent("acme")) == request_fingerprint(
        {**BODY, "start": at, "tenantId": "acme"}
    )


@pytest.mark.parametrize(
    ("change", "want_message"),
    [
        pytest.param({"poolId": 7}, "poolId must be an id", id="a pool id that is not text"),
        pytest.param(
            {"devices": "gpu"}, "devices must be a list of device requests", id="devices not a list"
        ),
        pytest.param(
            {"devices": [5]}, "devices[0] must be an object with class and count", id="a line not an object"
        ),
        pytest.param(
            {"start": 5}, "start must be an ISO 8601 timestamp string", id="a start that is not text"
        ),
        pytest.param(
            {"duration": 5}, "duration must be a string such as '4h'", id="a duration that is not text"
        ),
        pytest.param(
            {"preemptible": "yes"}, "preemptible must be true or false", id="preemptible not a boolean"
        ),
    ],
)
def test_reserve_of_refuses_a_field_of_the_wrong_type_by_name(
    change: dict[str, object], want_message: str
) -> None:
    with pytest.raises(InvalidInput, match=want_message.replace("[", r"\[").replace("]", r"\]")):
        reserve_of({**BODY, **change})
