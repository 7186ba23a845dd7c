"""When the store cannot be reached or written: told apart from our own faults once, here, and logged
once when it starts and once when it ends.

A database that is down, restarting or out of connections, and a SQLite file that cannot be opened
or written, are not faults of the request: nothing was applied and the same request may succeed
later. `unavailable` turns those errors (and only those: an integrity or syntax error stays what it
is, a fault the server answers 500 for) into the domain's `Unavailable`, which the API answers
503 `UNAVAILABLE` with `Retry-After`, and which the background loops wait out without a traceback.

`Outage` is one store's state: a unit of work that fails so starts an outage (one log line, saying
why) and one that succeeds afterwards ends it (one line, saying how long it lasted). A store that
cannot be *written* (a read-only file, a PostgreSQL standby) still reads, so a read that succeeds
does not end that outage: only a write does (`Store` then makes sure with a write of its own that
changes nothing).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from typing import Literal

import psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from better_compute.domain.kernel.errors import Unavailable

log = logging.getLogger("better_compute.storage.kernel.outage")

Kind = Literal["unreachable", "read_only"]
"""Why the store cannot be used: it does not answer (nothing works), or it answers but refuses writes."""

RETRY_AFTER: dict[Kind, int] = {"unreachable": 5, "read_only": 30}
"""Seconds a caller is told to wait (`Retry-After`): a database restarting is back within seconds; a
read-only one waits for an operator."""

_SQLSTATES_UNREACHABLE = frozenset(
    {
        "57P01",  # admin_shutdown: the server is stopping and ended the connection
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: starting up, shutting down, in recovery
        "57P05",  # idle_session_timeout: the connection was ended under us
        "53300",  # too_many_connections
    }
)
_SQLSTATE_READ_ONLY = "25006"  # read_only_sql_transaction: a standby, or default_transaction_read_only
_SQLITE_READONLY = 8
_SQLITE_CANTOPEN = 14


def kind_of(error: BaseException) -> Kind | None:
    """Whether `error` says the store cannot be reached or written, and which; None for any other
    error (a constraint refused, a statement that is wrong: our faults, not the store's)."""
    if isinstance(error, PoolTimeout):  # every connection of the pool in use, past its timeout
        return "unreachable"
    if isinstance(error, DBAPIError):
        if error.connection_invalidated:  # SQLAlchemy saw the connection drop under a statement
            return "unreachable"
        return kind_of(error.orig) if error.orig is not None else None
    if isinstance(error, psycopg.Error):
        state = error.sqlstate
        if state == _SQLSTATE_READ_ONLY:
            return "read_only"
        if state in _SQLSTATES_UNREACHABLE or (state or "").startswith("08"):
            return "unreachable"
        # No SQLSTATE: the client's own failure to connect, send or receive (refused, reset, closed).
        if state is None and isinstance(error, psycopg.OperationalError):
            return "unreachable"
        return None
    if isinstance(error, sqlite3.OperationalError):
        primary = getattr(error, "sqlite_errorcode", 0) & 0xFF
        text = str(error)
        if primary == _SQLITE_READONLY or "attempt to write a readonly database" in text:
            return "read_only"
        if primary == _SQLITE_CANTOPEN or "unable to open database file" in text:
            return "unreachable"
    return None


def _cause(error: BaseException) -> str:
    """The driver's own words for `error`, on one line (the SQL and parameters left out)."""
    orig = error.orig if isinstance(error, DBAPIError) and error.orig is not None else error
    return " ".join(str(orig).split()) or type(orig).__name__


def refusal(kind: Kind, cause: str) -> Unavailable:
    """What a caller is answered while the store is out of reach for `kind`. Its message does not
    name the database or give the driver's words (`cause`): those are for the operator."""
    retry = RETRY_AFTER[kind]
    what = "cannot be reached" if kind == "unreachable" else "cannot be written"
    return Unavailable(
        f"the database {what} now; nothing was applied: send the request again in {retry} s",
        retry_after=retry,
        read_only=kind == "read_only",
        cause=cause,
    )


class Outage:
    """Whether one store is out of reach, as its last units of work found it; logs each change once.

    Cheap while nothing is wrong: a unit of work that succeeds reads one attribute."""

    def __init__(self, database: str) -> None:
        self.database = database
        """The database in words, for the log (`describe`)."""
        self.kind: Kind | None = None
        """Why it is out of reach now; None while it is not."""
        self.started = 0
        """How many outages have started: a connection made before the latest one began is gone."""
        self._since = 0.0
        self._lock = threading.Lock()

    def failed(self, error: BaseException) -> Unavailable | None:
        """The refusal to raise for `error`, noting the outage (logged if it starts now); None when
        `error` is not the store's being out of reach (raise it as it is)."""
        kind = kind_of(error)
        if kind is None:
            return None
        cause = _cause(error)
        with self._lock:
            if self.kind is None:
                self.kind, self._since = kind, time.monotonic()
                self.started += 1
                log.error("%s", self._started(kind, cause))
        return refusal(kind, cause)

    def _started(self, kind: Kind, cause: str) -> str:
        if kind == "unreachable":
            return (
                f"{self.database} cannot be reached ({cause}): requests that need it answer 503"
                " UNAVAILABLE and /readyz is not ready until it answers again"
            )
        return (
            f"{self.database} cannot be written ({cause}): requests that write answer 503 UNAVAILABLE"
            " and /readyz is not ready until it can be written"
        )

    def ended(self) -> None:
        """The store answered (and took a write, if it could not): the outage, if any, is over."""
        with self._lock:
            kind, self.kind = self.kind, None
            if kind is not None:
                lasted = time.monotonic() - self._since
                what = "answers" if kind == "unreachable" else "can be written"
                log.warning("%s %s again, after %.1f s", self.database, what, lasted)


__all__ = ["RETRY_AFTER", "Kind", "Outage", "kind_of", "refusal"]
