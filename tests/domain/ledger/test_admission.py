"""Admission: device requests parsed, then checked against the pool's sharing mode."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.domain.fleet.pools import SharingMode
from better_compute.domain.kernel.errors import InvalidInput, InvalidState
from better_compute.domain.kernel.selectors import EVERYTHING, MatchExpression, Selector
from better_compute.domain.ledger.admission import (
    MAX_COUNT,
    MAX_SELECTOR_VALUES,
    DeviceRequest,
    check_against_pool,
    check_offer,
    gpu_count,
    gpu_slices,
    parse_device_requests,
    requested_by_class,
)
from tests.builders import device_request


def test_parse_device_requests_reads_every_field() -> None:
    parsed = parse_device_requests(
        [
            {"class": "gpu", "count": 2},
            {
                "class": "gpu.mig",
                "count": 1,
                "sharing": "mig",
                "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
            },
        ]
    )
    assert parsed == [
        DeviceRequest("gpu", 2, None, EVERYTHING),
        DeviceRequest("gpu.mig", 1, "mig", Selector((MatchExpression("migProfile", "In", ("3g.40gb",)),))),
    ]


@pytest.mark.parametrize(
    ("raw", "field", "text"),
    [
        pytest.param([], "devices", "at least one", id="a reservation without devices"),
        pytest.param("gpu", "devices", "must be a list", id="devices as a string"),
        pytest.param(
            {"class": "gpu"}, "devices", "must be a list", id="devices as one object instead of a list"
        ),
        pytest.param(None, "devices", "must be a list", id="no devices at all"),
        pytest.param(["gpu"], "devices[0]", "must be an object", id="a device request that is a string"),
        pytest.param(
            [{"count": 1}],
            "devices[0].class",
            "must be one of gpu, gpu.mig, gpu.slot, not None",
            id="a device request without a class",
        ),
        pytest.param(
            [{"class": "tpu", "count": 1}],
            "devices[0].class",
            "not 'tpu'",
            id="a class that is no atom class",
        ),
        pytest.param([{"class": "gpu", "count": 0}], "devices[0].count", "at least 1", id="a count of zero"),
        pytest.param(
            [{"class": "gpu", "count": -2}], "devices[0].count", "at least 1", id="a negative count"
        ),
        pytest.param(
            [{"class": "gpu", "count": "2"}], "devices[0].count", "integer", id="a count given as a string"
        ),
        pytest.param(
            [{"class": "gpu", "count": 1.0}], "devices[0].count", "integer", id="a count given as a float"
        ),
        pytest.param(
            [{"class": "gpu", "count": True}], "devices[0].count", "integer", id="a count given as a boolean"
        ),
        pytest.param(
            [{"class": "gpu"}], "devices[0].count", "integer", id="a device request without a count"
        ),
        pytest.param(
            [{"class": "gpu", "count": 1}, {"class": "gpu", "count": 0}],
            "devices[1].count",
            "at least 1",
            id="the second request's count is named by its index",
        ),
        pytest.param(
            [{"class": "gpu", "count": 1, "sharing": "shared"}],
            "devices[0].sharing",
            "not 'shared'",
            id="an unknown sharing mode",
        ),
        pytest.param(
            [{"class": "gpu", "count": 1, "selectors": {}}],
            "devices[0].selectors",
            "unknown field",
            id="a misspelt field",
        ),
        pytest.param(
            [{"class": "gpu", "count": 1, "selector": {"matchExpressions": [{"key": "a", "op": "Is"}]}}],
            "devices[0].selector.matchExpressions[0].op",
            "unknown operator 'Is'",
            id="a selector operator that does not exist",
        ),
    ],
)
def test_parse_device_requests_names_the_bad_field(raw: Any, field: str, text: str) -> None:
    with pytest.raises(InvalidInput, match=text) as err:
        parse_device_requests(raw)
    assert err.value.details["field"] == field
    assert err.value.message.startswith(field)


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("exclusive", id="an exclusive pool"),
        pytest.param("timeslice", id="a timeslice pool"),
        pytest.param("mps", id="an mps pool"),
    ],
)
def test_mig_requests_only_in_mig_pools(mode: SharingMode) -> None:
    with pytest.raises(InvalidInput) as err:
        check_against_pool(mode, [device_request("gpu.mig")])
    assert err.value.message == "devices[0]: gpu.mig atoms exist only in mig pools"
    check_against_pool("mig", [device_request("gpu.mig")])


@pytest.mark.parametrize("mode", ["exclusive", "mig"])
def test_slot_requests_only_in_timeslice_or_mps_pools(mode: SharingMode) -> None:
    with pytest.raises(InvalidInput) as err:
        check_against_pool(mode, [device_request("gpu.slot")])
    assert err.value.message == "devices[0]: gpu.slot atoms exist only in timeslice or mps pools"
    check_against_pool("timeslice", [device_request("gpu.slot")])
    check_against_pool("mps", [device_request("gpu.slot")])


def test_sharing_must_be_exclusive_or_the_pools_mode() -> None:
    with pytest.raises(InvalidInput) as err:
        check_against_pool("timeslice", [device_request("gpu.slot", sharing="mps")])
    assert err.value.message == "devices[0]: the pool shares GPUs as timeslice, not mps"
    assert err.value.details["field"] == "devices[0].sharing"
    check_against_pool("timeslice", [device_request("gpu.slot", sharing="timeslice")])
    check_against_pool("timeslice", [device_request("gpu.slot", sharing="exclusive")])
    check_against_pool(
        "mig", [device_request("gpu.mig", sharing="mig"), device_request("gpu", sharing="exclusive")]
    )
    with pytest.raises(InvalidInput) as err:
        check_against_pool("exclusive", [device_request("gpu", sharing="mig")])
    assert err.value.message == "devices[0]: the pool shares GPUs as exclusive, not mig"


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("exclusive", id="an exclusive pool"),
        pytest.param("mig", id="a mig pool"),
        pytest.param("timeslice", id="a timeslice pool"),
        pytest.param("mps", id="an mps pool"),
    ],
)
def test_whole_gpu_requests_are_valid_in_every_pool(mode: SharingMode) -> None:
    check_against_pool(mode, [device_request("gpu", 4)])


def test_the_message_names_the_requests_index() -> None:
    with pytest.raises(InvalidInput) as err:
        check_against_pool(
            "mig", [device_request("gpu"), device_request("gpu.mig"), device_request("gpu.slot")]
        )
    assert err.value.message == "devices[2]: gpu.slot atoms exist only in timeslice or mps pools"
    with pytest.raises(InvalidInput) as err:
        check_against_pool(
            "mps", [device_request("gpu.slot"), device_request("gpu.slot", sharing="timeslice")]
        )
    assert err.value.message == "devices[1]: the pool shares GPUs as mps, not timeslice"


def test_counts_split_whole_gpus_from_fractions() -> None:
    requests = [
        device_request("gpu", 2),
        device_request("gpu.mig", 3),
        device_request("gpu.slot", 1),
        device_request("gpu", 1),
    ]
    assert requested_by_class(requests) == {"gpu": 3, "gpu.mig": 3, "gpu.slot": 1}
    assert gpu_count(requests) == 3
    assert gpu_slices(requests) == 4


@pytest.mark.parametrize("mode", ["timeslice", "mps"])
def test_timeslice_and_mps_pools_are_single_tenant(mode: SharingMode) -> None:
    with pytest.raises(InvalidState, match="single-tenant") as err:
        check_offer(mode, "acme", "globex")
    assert "do not isolate workloads" in err.value.message
    check_offer(mode, "acme", "acme")


@pytest.mark.parametrize("mode", ["exclusive", "mig"])
def test_exclusive_and_mig_pools_can_be_offered(mode: SharingMode) -> None:
    check_offer(mode, "acme", "globex")


def test_a_reservation_holds_at_most_sixteen_device_requests() -> None:
    line = {"class": "gpu", "count": 1}
    assert len(parse_device_requests([line] * 16)) == 16
    with pytest.raises(InvalidInput, match="devices holds 17 device requests; at most 16") as refused:
        parse_device_requests([line] * 17)
    assert refused.value.details["field"] == "devices"


def _values(n: int) -> dict[str, Any]:
    expr = {"key": "migProfile", "op": "NotIn", "values": [str(i) for i in range(n)]}
    return {"class": "gpu.mig", "count": 1, "selector": {"matchExpressions": [expr]}}


def test_unbounded_selectors_at_most_1024_values_per_reservation() -> None:
    assert MAX_SELECTOR_VALUES == 1024
    assert len(parse_device_requests([_values(256)] * 4)) == 4
    with pytest.raises(InvalidInput) as err:
        parse_device_requests([_values(256)] * 4 + [_values(1)])
    assert err.value.message == (
        "devices[4].selector: the reservation's selectors hold 1025 values up to here;"
        " at most 1024 in all its device requests together"
    )
    assert err.value.details == {"field": "devices[4].selector", "max": 1024}


@pytest.mark.parametrize(
    "count",
    [
        pytest.param(MAX_COUNT + 1, id="one past the limit"),
        pytest.param(2**63, id="one past the largest signed 64-bit integer"),
        pytest.param(2**80, id="far past 64 bits"),
        pytest.param(10**4000, id="a number with 4001 digits"),
    ],
)
def test_unbounded_selectors_count_at_most_65536(count: int) -> None:
    assert parse_device_requests([{"class": "gpu", "count": MAX_COUNT}])[0].count == 65536
    with pytest.raises(InvalidInput) as err:
        parse_device_requests([{"class": "gpu", "count": count}])
    assert err.value.message == (
        "devices[0].count must be at most 65536, the most atoms one device request may ask for"
    )
    assert err.value.details == {"field": "devices[0].count", "max": 65536}
