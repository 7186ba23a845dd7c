"""Wire models keep the API's camelCase names, including `class`, a Python keyword."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from better_compute.wire.quotas import QuotaSet
from better_compute.wire.reservations import DeviceRequest, ReservationCreate, ReservationPublic
from tests.client.fakes import reservation_json

# The notebook reservation of docs/concepts.md#reservations.
NOTEBOOK_REQUEST = {
    "tenantId": "acme",
    "poolId": "mig-pool",
    "devices": [
        {
            "class": "gpu.mig",
            "count": 1,
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
        }
    ],
    "duration": "4h",
    "idempotencyKey": "notebook-ana-0924",
}


def test_the_notebook_request_round_trips() -> None:
    request = ReservationCreate.model_validate(NOTEBOOK_REQUEST)
    assert request.devices[0].cls == "gpu.mig"
    assert request.model_dump(mode="json", exclude_unset=True) == NOTEBOOK_REQUEST


def test_class_is_the_name_both_ways() -> None:
    device = DeviceRequest(cls="gpu.slot", count=2)
    assert device.model_dump(exclude_none=True) == {"class": "gpu.slot", "count": 2}
    assert DeviceRequest.model_validate({"class": "gpu", "count": 1}).cls == "gpu"
    assert QuotaSet.model_validate({"tenantId": "a", "poolId": "p", "class": "gpu.mig", "limit": 3}).cls == (
        "gpu.mig"
    )


def test_tenant_is_optional_on_create() -> None:
    request = ReservationCreate.model_validate({k: v for k, v in NOTEBOOK_REQUEST.items() if k != "tenantId"})
    assert request.tenant_id is None


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"devices": []}, id="no devices"),
        pytest.param({"devices": [{"class": "gpu.whole", "count": 1}]}, id="a class that does not exist"),
        pytest.param({"devices": [{"class": "gpu", "count": 0}]}, id="a count of zero"),
        pytest.param(
            {
                "devices": [
                    {"class": "gpu", "count": 1, "selector": {"matchExpressions": [{"key": "k", "op": "Is"}]}}
                ]
            },
            id="an operator that does not exist",
        ),
        pytest.param({"surprise": 1}, id="an unknown field"),
    ],
)
def test_malformed_requests_are_refused(change: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ReservationCreate.model_validate({**NOTEBOOK_REQUEST, **change})


def test_public_reservation_parses() -> None:
    reservation = ReservationPublic.model_validate(reservation_json())
    assert reservation.model_dump(mode="json")["atoms"][0]["class"] == "gpu"
