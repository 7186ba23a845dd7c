"""Fixtures of the torture suite: a migrated, empty store on PostgreSQL, as the reliability suite's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import mark_serial
from tests.reliability.conftest import pg_store


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The torture test races placers and layout changes on PostgreSQL: it runs in the serial group."""
    mark_serial(items, Path(__file__).resolve().parent)


__all__ = ["pg_store"]
