"""Fixtures of the torture suite: a migrated, empty store on PostgreSQL, as the reliability suite's."""

from __future__ import annotations

from tests.reliability.conftest import pg_store

__all__ = ["pg_store"]
