"""Fixtures of the soak suite: the reliability suite's migrated, empty store on PostgreSQL."""

from __future__ import annotations

from tests.reliability.conftest import pg_store

__all__ = ["pg_store"]
