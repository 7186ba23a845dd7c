"""Fixtures of the soak suite: the reliability suite's migrated, empty store on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import mark_serial
from tests.reliability.conftest import pg_store


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The soak starts a server and nodes of its own: it runs in the serial group."""
    mark_serial(items, Path(__file__).resolve().parent)


__all__ = ["pg_store"]
