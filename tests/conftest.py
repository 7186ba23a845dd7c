"""Suite-wide fixtures: a PostgreSQL database of this run's own, or a clear skip (a failure under CI)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import psycopg
import pytest
from hypothesis import settings

# Hypothesis fails an example that runs longer than its deadline (200 ms by default): a wall-clock
# assertion that trips on a loaded machine or under coverage. Speed is bench/'s business.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _pg_admin_url() -> str:
    return os.environ.get("BC_TEST_POSTGRES_URL", DEFAULT_PG_URL)


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


MAINTENANCE_DATABASE = "postgres"
"""The database every PostgreSQL server has: where the suite's own database is created from."""


def admin_connection(admin_url: str) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection to `admin_url`, the database the suite creates its own from.

    A server that is up but has no such database (a fresh PostgreSQL has only `postgres`) gets it
    created, from the maintenance database, rather than every PostgreSQL test skipped as "not
    reachable". Any other failure is an OperationalError whose message says what to do."""
    try:
        return psycopg.connect(admin_url, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        base, _, name = admin_url.rpartition("/")
        if f'database "{name}" does not exist' not in str(exc) or name == MAINTENANCE_DATABASE:
            raise psycopg.OperationalError(
                f"PostgreSQL not reachable at {admin_url}: {str(exc).strip()}; start PostgreSQL there,"
                " or set BC_TEST_POSTGRES_URL to a server the suite may create databases on"
            ) from exc
    with psycopg.connect(f"{base}/{MAINTENANCE_DATABASE}", autocommit=True, connect_timeout=3) as maint:
        exists = maint.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists is None:
            maint.execute(f'CREATE DATABASE "{name}"')
    return psycopg.connect(admin_url, autocommit=True, connect_timeout=3)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, as a libpq URL; dropped afterwards."""
    admin_url = _pg_admin_url()
    try:
        admin = admin_connection(admin_url)
    except psycopg.OperationalError as exc:
        message = str(exc).strip()
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    name = f"bc_test_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def own_database(postgres_url: str, prefix: str) -> Iterator[str]:
    """A database of one test's own on the run's PostgreSQL server (for a server process to own),
    as a libpq URL; dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(postgres_url, name)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sqlalchemy_url(libpq_url: str) -> str:
    """The SQLAlchemy form of a libpq URL, using psycopg 3."""
    if libpq_url.startswith("postgresql://"):
        return "postgresql+psycopg://" + libpq_url.removeprefix("postgresql://")
    return libpq_url


@pytest.fixture(scope="session")
def pg_store_url(postgres_url: str) -> str:
    """The per-run PostgreSQL database, migrated once."""
    from better_compute.storage.store import Store

    store = Store.open(postgres_url)
    store.close()
    return postgres_url


def _truncate_all(store: object) -> None:
    from sqlalchemy import text

    from better_compute.storage.kernel.tables import metadata
    from better_compute.storage.store import Store

    assert isinstance(store, Store)
    from better_compute.storage.placement.priority_classes import add_standard

    names = [t.name for t in reversed(metadata.sorted_tables)]
    with store.engine.begin() as conn:
        if store.dialect == "postgresql":
            conn.execute(text("TRUNCATE " + ", ".join(names) + " RESTART IDENTITY CASCADE"))
        else:
            for name in names:
                conn.execute(text(f"DELETE FROM {name}"))
        # What the migrations write beside the schema: a freshly migrated store holds it.
        add_standard(conn, datetime(2026, 1, 1, tzinfo=UTC))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[object]:
    """A migrated, empty store on each database: the storage contract runs on both."""
    from pathlib import Path

    from better_compute.storage.store import Store

    if request.param == "sqlite":
        assert isinstance(tmp_path, Path)
        s = Store.open(f"sqlite:///{tmp_path / 'bc.db'}")
    else:
        s = Store.open(request.getfixturevalue("pg_store_url"), migrate_schema=False)
        _truncate_all(s)
    try:
        yield s
    finally:
        s.close()
