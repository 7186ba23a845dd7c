"""Fixtures of the reliability suite: races, stalls and crashes that only PostgreSQL can show."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from better_compute.storage.store import Store
from tests.conftest import _truncate_all, mark_serial

IN_PARALLEL = {
    "test_bad_input.py",
    "test_existence_leaks.py",
    "test_fuzz.py",
    "test_not_bookable.py",
    "test_reservation_body_fuzz.py",
}
"""The modules here that run in the test's own process, with no race and no deadline: they share the
CPUs with the rest of the suite rather than lengthen the serial group."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The races start processes and threads that wait on deadlines: they run in the serial group."""
    mark_serial(
        [i for i in items if Path(str(i.path)).name not in IN_PARALLEL], Path(__file__).resolve().parent
    )


@pytest.fixture
def pg_store(pg_store_url: str) -> Iterator[Store]:
    """A migrated, empty store on PostgreSQL (for interleavings SQLite's single writer rules out)."""
    store = Store.open(pg_store_url, migrate_schema=False)
    _truncate_all(store)
    try:
        yield store
    finally:
        store.close()
