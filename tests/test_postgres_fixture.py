"""Defect 13 of issue 11: `make test` on a PostgreSQL server without the database `test` creates it
instead of skipping every PostgreSQL test as "not reachable"; what it cannot fix, it says how to."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from tests.conftest import MAINTENANCE_DATABASE, _pg_admin_url, _with_database, admin_connection


@pytest.mark.postgres
def test_a_missing_admin_database_is_created(postgres_url: str) -> None:
    name = f"bc_admin_{uuid.uuid4().hex[:8]}"
    missing = _with_database(_pg_admin_url(), name)
    try:
        with admin_connection(missing) as admin:
            (current,) = admin.execute("SELECT current_database()").fetchone() or (None,)
        assert current == name
    finally:
        with psycopg.connect(_with_database(_pg_admin_url(), MAINTENANCE_DATABASE), autocommit=True) as m:
            m.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_an_unreachable_server_says_what_to_do() -> None:
    url = "postgresql://postgres@/test?host=/nonexistent"  # a socket directory that is not there

    with pytest.raises(psycopg.OperationalError) as refused:
        admin_connection(url)

    message = str(refused.value)
    assert message.startswith(f"PostgreSQL not reachable at {url}: ")
    assert message.endswith(
        "start PostgreSQL there, or set BC_TEST_POSTGRES_URL to a server the suite may create databases on"
    )
