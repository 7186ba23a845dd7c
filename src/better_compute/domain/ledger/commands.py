"""The ledger's requests as typed commands: what a caller asked for, read once at the edge.

The API builds a command from its validated wire model; a caller that holds a request as JSON (the
console's form, tests, scripts) reads it with `reserve_of`. The use case then checks the fields
against the caller, the clock and the store (`service.ledger.reservations.create`), with the messages
it always gave: a command holds what was asked, not yet whether it may be had.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import parse_duration, parse_instant, require_aware
from better_compute.domain.ledger.admission import parse_device_requests
from better_compute.domain.tenancy.tenancy import check_ref


@dataclass(frozen=True)
class Reserve:
    """`reservations.create`: book atoms of a pool for a time window."""

    pool_id: str
    devices: tuple[Mapping[str, Any], ...]
    """The device lines as JSON (`class`, `count`, `sharing`, `selector`; or `capability`, `count` and
    `sharing`), checked by `admission.parse_device_requests`; stored and echoed as sent."""
    duration: str | None = None
    """Like `4h`; None, which only a JSON request can ask (the wire requires it), never ends."""
    start: str | None = None
    """An ISO 8601 instant as sent; None: now. Text, because the request's fingerprint is of what was
    sent, and whether it has passed is decided with the clock (a retry may come after it)."""
    tenant_id: str | None = None
    """The tenant named; None: the credential's own (an admin must name one)."""
    idempotency_key: str | None = None
    preemptible: bool | None = None
    """None when not asked (the fingerprint tells an unasked `false` from an asked one)."""

    def as_sent(self, tenant_id: str) -> dict[str, Any]:
        """The request as JSON by its wire names, for `tenant_id`: what its fingerprint is of
        (`domain.ledger.reservations.request_fingerprint` drops the nulls and the key)."""
        return {
            "tenantId": tenant_id,
            "poolId": self.pool_id,
            "devices": list(self.devices),
            "start": self.start,
            "duration": self.duration,
            "idempotencyKey": self.idempotency_key,
            "preemptible": self.preemptible,
        }


@dataclass(frozen=True)
class BookPartition:
    """`partitions.book` (admin): hold every atom of one GPU, parent included, for a window (the atom
    rule, docs/concepts.md#the-atom-rule), as a layout change does; an operator's maintenance window.
    The window is checked by `domain.ledger.ledger.partition_window` against the clock."""

    gpu_id: str
    start: datetime | None = None
    """None: now."""
    end: datetime | None = None
    duration: str | None = None
    """Like `4h`; exactly one of `end` and `duration` is given."""


def reserve_of(raw: Mapping[str, Any]) -> Reserve:
    """A `reservations.create` request given as JSON (camelCase keys), as a command.

    A field of the wrong type is refused here with the message the use case gives for it; its other
    checks (ids, device lines, the window) stay the use case's, in their order. Keys the wire does
    not know are not read.
    """
    named = raw.get("tenantId")
    if named and not isinstance(named, str):
        check_ref(named, "tenantId")
    pool_id = raw.get("poolId")
    if not isinstance(pool_id, str):
        check_ref(pool_id, "poolId")
    devices = raw.get("devices")
    lines = _lines(devices)
    if lines is None:
        parse_device_requests(devices)  # refuses them by name
        raise AssertionError(f"devices {devices!r} must have been refused")
    start = raw.get("start")
    if isinstance(start, datetime):
        # the fingerprint reads a datetime as its UTC ISO 8601 text (request_fingerprint)
        start = require_aware(start, "start").isoformat()
    elif start is not None and not isinstance(start, str):
        parse_instant(start)
    duration = raw.get("duration")
    if duration is not None and not isinstance(duration, str):
        parse_duration(duration)
    key = raw.get("idempotencyKey")
    preemptible = raw.get("preemptible")
    if preemptible is not None and not isinstance(preemptible, bool):
        raise InvalidInput(
            f"preemptible must be true or false, not {preemptible!r}"[:200], {"field": "preemptible"}
        )
    return Reserve(
        pool_id=str(pool_id),
        devices=lines,
        duration=duration,
        start=start,
        tenant_id=named or None,
        idempotency_key=str(key) if key else None,
        preemptible=preemptible,
    )


def _lines(devices: object) -> tuple[Mapping[str, Any], ...] | None:
    """`devices` as a tuple of JSON objects; None when it is not a list of them."""
    if isinstance(devices, str | bytes | Mapping) or not isinstance(devices, Sequence):
        return None
    if not all(isinstance(line, Mapping) for line in devices):
        return None
    return tuple(devices)
