"""The event contract: every type's payload reads back as the event that wrote it."""

from __future__ import annotations

import dataclasses
import typing
from datetime import UTC, datetime
from typing import Any

import pytest

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.events import Event, UnknownEvent, check_event_id, check_event_type
from better_compute.domain.ledger.events import LedgerBooked
from better_compute.domain.ops.event_types import EVENT_TYPES, parse_event

WHEN = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def _sample(hint: Any) -> Any:
    args = typing.get_args(hint)
    if type(None) in args:
        hint = next(a for a in args if a is not type(None))
    if hint is datetime:
        return WHEN
    if typing.get_origin(hint) is tuple:
        return ("a", "b")
    if typing.get_origin(hint) is not None or hint is typing.Mapping:
        return {"gpu.mig": 3}
    return {str: "x", int: 7, bool: True, float: 2.5}[hint]


def _example(cls: type[Event]) -> Event:
    hints = typing.get_type_hints(cls)
    values = {f.name: _sample(hints[f.name]) for f in dataclasses.fields(cls) if f.name != "subject"}
    return cls("subject-1", **values)


@pytest.mark.parametrize("cls", list(EVENT_TYPES.values()), ids=list(EVENT_TYPES))
def test_every_event_reads_back_from_its_payload(cls: type[Event]) -> None:
    event = _example(cls)
    assert parse_event(cls.TYPE, "subject-1", event.payload()) == event


def test_payload_keys_are_what_the_log_has_always_stored() -> None:
    booked = LedgerBooked("rsv-1", ("atm-1",), WHEN, None, "acme", "p1", "gpu.mig", "GPU-1")
    assert booked.payload() == {
        "atoms": ["atm-1"],
        "start": "2026-12-01T09:30:00+00:00",
        "end": None,
        "tenantId": "acme",
        "poolId": "p1",
        "class": "gpu.mig",
        "gpuId": "GPU-1",
    }


def test_sqlite_times_and_unknown_keys_are_read_as_a_newer_writer_meant_them() -> None:
    stored = {"atoms": ["atm-1"], "start": "2026-12-01 09:30:00.000000", "class": "gpu", "later": 1}
    assert parse_event("ledger.booked", "r", stored) == LedgerBooked("r", ("atm-1",), WHEN, cls="gpu")


def test_an_unknown_type_is_kept_as_stored() -> None:
    event = parse_event("endpoint.scaled", "e1", {"copies": 3})
    assert event == UnknownEvent("e1", "endpoint.scaled", {"copies": 3})
    assert event.payload() == {"copies": 3}


def test_a_known_type_without_a_required_key_is_invalid_input_naming_it() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_event("ledger.released", "r", {})
    assert err.value.details == {"type": "ledger.released", "missing": ["at"]}


def test_a_value_of_the_wrong_kind_is_invalid_input_naming_the_field() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_event("node.inventory.changed", "n", {"gpus": "2", "atoms": 1})
    assert err.value.message == "event field node.inventory.changed.gpus must be an integer"


@pytest.mark.parametrize("good", ["ledger.booked", "pool.mig_layout.requested", "some.future.type"])
def test_an_event_type_is_dotted_lowercase_words(good: str) -> None:
    assert check_event_type(good) == good


@pytest.mark.parametrize(
    "bad", ["", "ledger", "Ledger.booked", "ledger.", ".booked", "a.b c", "a." + "b" * 63]
)
def test_a_malformed_event_type_is_invalid_input(bad: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_event_type(bad)
    assert refused.value.details == {"field": "type"}


def test_an_event_id_is_a_positive_64_bit_integer() -> None:
    assert check_event_id("42") == 42 and check_event_id(str(2**63 - 1)) == 2**63 - 1
    for bad in ("0", "-1", "+1", "1e3", "x", "", str(2**63), "١"):
        with pytest.raises(InvalidInput):
            check_event_id(bad)
