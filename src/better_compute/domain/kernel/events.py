"""What every event is, and how its payload is written and read: the one contract between the writers of the
log and its readers.

Each context owns its event types (`domain/<context>/events.py`); `domain.ops.event_types` registers them
all by stored name. Each event is a frozen dataclass named after what happened; its `TYPE` is the name
stored and shown (`ledger.booked`), its `subject` what it happened to (an allocation, a pool, a node), and
its other fields the payload. `payload()` spells the payload as it is stored (camelCase keys, ISO 8601
times) and `read_event` reads it back (`parse_event`, by registered type), so a writer and a reader cannot
disagree on a key: both stores write from these definitions (the booking statements' JSON comes from
`LedgerBooked.COLUMNS`, docs/adr/0006-one-event-contract.md) and every consumer (the booking index,
metering, reconcilers) reads parsed events, never raw payloads.

A reader meets events of types it does not know (written by a newer server) as `UnknownEvent`, and keys it
does not know are ignored: the log is forward compatible like the wire.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from better_compute.domain.kernel.errors import InvalidInput


def payload_key(name: str, default: Any = dataclasses.MISSING) -> Any:
    """A field whose payload key is not its name in camelCase (`class`, `from`, `to`)."""
    return field(default=default, metadata={"key": name})


@dataclass(frozen=True, slots=True)
class Event:
    """The base of every event: what it happened to. Subclasses set `TYPE`."""

    TYPE: ClassVar[str] = ""
    subject: str

    def payload(self) -> dict[str, Any]:
        """The payload as stored: every field but `subject`, by its key."""
        return {key: _dump(getattr(self, name)) for name, key, _ in _fields(type(self))}


@dataclass(frozen=True, slots=True)
class UnknownEvent(Event):
    """An event of a type this version does not know, kept as stored."""

    type: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        return dict(self.raw)


def type_of(event: Event) -> str:
    """The type an event is stored under."""
    return event.type if isinstance(event, UnknownEvent) else event.TYPE


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An event as read from the log: its id, the transaction that wrote it (PostgreSQL; None on
    SQLite) and the event itself."""

    id: int
    tx: int | None
    event: Event


@dataclass(frozen=True, slots=True)
class StreamedEvent:
    """An event as the events stream (`events.list`) serves it: its id, when it was logged, and the
    event itself."""

    id: int
    at: datetime
    event: Event


TYPE_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
"""How event types are spelled: dotted lowercase words (`ledger.booked`, `pool.mig_layout.requested`)."""

MAX_TYPE = 64
"""The longest event type the log stores (the `events.type` column)."""

MAX_EVENT_ID = 2**63 - 1
"""The largest event id a log can hand out (a 64-bit signed integer)."""


def check_event_type(value: str, field: str = "type") -> str:
    """An event type named in a query: spelled as types are, though it may be one this version does
    not know yet (a newer server's), which then simply matches nothing it wrote."""
    if len(value) > MAX_TYPE or not TYPE_NAME.fullmatch(value):
        raise InvalidInput(
            f"{field} must be dotted lowercase words such as ledger.booked (at most {MAX_TYPE}"
            f" characters), not {value[:MAX_TYPE]!r}",
            {"field": field},
        )
    return value


def check_event_id(value: str, field: str = "after") -> int:
    """An event id named in a query (the cursor of the events stream): a positive integer."""
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19 or not 0 < int(text) <= MAX_EVENT_ID:
        raise InvalidInput(
            f"{field} must be an event id (a positive integer, the id of an event already read),"
            f" not {value[:32]!r}",
            {"field": field},
        )
    return int(text)


def read_event(cls: type[Event] | None, type_: str, subject: str, payload: Mapping[str, Any] | None) -> Event:
    """The event stored as (`type_`, `subject`, `payload`), read as `cls` (the type registered under
    `type_`, `domain.ops.event_types`); unknown payload keys are ignored, and an unknown type (`cls`
    None) is an `UnknownEvent`. A known type whose payload lacks a required key, or holds a value of
    the wrong kind, is INVALID_INPUT naming the key."""
    data = payload or {}
    if cls is None:
        return UnknownEvent(subject, type_, dict(data))
    values: dict[str, Any] = {"subject": subject}
    for name, key, load in _fields(cls):
        if key in data:
            try:
                values[name] = load(data[key])
            except _NotA as bad:
                where = f"{type_}.{key}"
                raise InvalidInput(f"event field {where} must be {bad.kind}", {"field": where}) from None
    try:
        return cls(**values)
    except TypeError:
        missing = [k for n, k, _ in _fields(cls) if n not in values]
        raise InvalidInput(f"event {type_} lacks {missing}", {"type": type_, "missing": missing}) from None


# -- Encoding ------------------------------------------------------------------------------------


Loader = Callable[[Any], Any]

_FIELDS: dict[type[Event], tuple[tuple[str, str, Loader], ...]] = {}


def _fields(cls: type[Event]) -> tuple[tuple[str, str, Loader], ...]:
    """(field name, payload key, how to read its value) of every payload field of an event type,
    worked out once per type: the tail parses every event each process reads."""
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name == "subject":
            continue
        key = f.metadata.get("key") or _camel(f.name)
        out.append((f.name, key, _loader(hints[f.name])))
    _FIELDS[cls] = tuple(out)
    return _FIELDS[cls]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _dump(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, tuple):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _dump(v) for k, v in value.items()}
    return value


def parse_time(value: object) -> datetime:
    """A stored time: ISO 8601, with an offset (PostgreSQL's JSON, Python's isoformat) or naive UTC
    (SQLite's text)."""
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


class _NotA(Exception):
    """A stored value is not of its field's kind (`kind` says what it must be)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _loader(hint: Any) -> Loader:
    """How to read a stored value of a field typed `hint` (None passes where the type allows it)."""
    args = typing.get_args(hint)
    if type(None) in args:
        inner = _loader(next(a for a in args if a is not type(None)))
        return lambda value: None if value is None else inner(value)
    origin = typing.get_origin(hint)
    if hint is datetime:
        return parse_time
    if origin is tuple:
        return _tuple
    if origin is Mapping or hint is Mapping:
        return _mapping
    if hint is bool:
        return bool
    if hint is int:
        return _int
    return _same


def _same(value: Any) -> Any:
    return value


def _tuple(value: Any) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise _NotA("a list")
    return tuple(value)


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _NotA("a mapping")
    return dict(value)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _NotA("an integer")
    return value
