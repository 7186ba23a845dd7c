"""Suite-wide fixtures: a PostgreSQL database of this run's own, or a clear skip (a failure under CI)."""

from __future__ import annotations

import os
import shutil
import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
import typer.main
import typer.testing
from hypothesis import settings

# Hypothesis fails an example that runs longer than its deadline (200 ms by default): a wall-clock
# assertion that trips on a loaded machine or under coverage. Speed is bench/'s business.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


def _command_of(app: typer.Typer) -> object:
    """The click command of `app`, built once per app and shape (its commands, groups and callback)
    in this process, where `typer.testing.CliRunner.invoke` builds it again for every call.

    A build walks every command's signature: about 0.1 s for the `better-compute` tree, more under
    coverage, and the CLI tests invoke it thousands of times. Each invocation still gets a fresh click
    context, as a process of the real CLI does; a test's own Typer app is another key, and one that
    gains a command after a call is built again (its shape changed)."""
    shape = (len(app.registered_commands), len(app.registered_groups), app.registered_callback is not None)
    built = _COMMANDS.get(app)
    if built is None or built[0] != shape:
        built = (shape, _build_command(app))
        _COMMANDS[app] = built
    return built[1]


_build_command = typer.main.get_command
_COMMANDS: weakref.WeakKeyDictionary[typer.Typer, tuple[tuple[int, int, bool], object]] = (
    weakref.WeakKeyDictionary()
)
typer.testing._get_command = _command_of  # type: ignore[assignment]  # what CliRunner.invoke calls

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"

SERIAL = pytest.mark.xdist_group("serial")
"""The suite's serial group. `make test` spreads the tests over the CPUs with pytest-xdist
(`--dist loadgroup`); the tests of this group all go to one worker, one after another: the races,
end-to-end, soak, torture and browser tests, which start processes and servers of their own and wait
on deadlines, so they never fight each other for the CPUs. A directory's conftest marks its tests
with `mark_serial` (a `tryfirst` hook: xdist reads the group in its own hook); a module of another
directory says `pytestmark = SERIAL`."""


def mark_serial(items: list[pytest.Item], directory: Path) -> None:
    """Put every test under `directory` in the serial group."""
    for item in items:
        if directory in Path(str(item.path)).resolve().parents:
            item.add_marker(SERIAL)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An xdist worker's tests of one `xdist_group` carry the group in their node id (`...@serial`):
    that is how `--dist loadgroup` sends them to one worker. pytest 9.2's node ids are structured,
    and pytest-xdist 3.8's suffix no longer takes (pytest-dev/pytest-xdist#1386): without this, the
    serial group would be spread over the workers. It adds the suffix where xdist did not."""
    if not getattr(config.option, "loadgroup", False):  # set on xdist's workers under loadgroup
        return
    from _pytest.nodeid import NodeId

    for item in items:
        marks = item.iter_markers("xdist_group")
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
        if groups and "@" not in item.nodeid.rpartition("]")[2]:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")  # type: ignore[attr-defined]


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
    """Empty every table of `store` and put back what the migrations write: a freshly migrated store.

    On PostgreSQL a `DELETE` of each table (children first) and a restart of the sequences that were
    used: tens of milliseconds, where a `TRUNCATE` of the 33 tables rewrites each one's files and takes
    0.6 to 1.3 s, for every PostgreSQL test."""
    from sqlalchemy import text

    from better_compute.storage.kernel.tables import metadata
    from better_compute.storage.placement.priority_classes import add_standard
    from better_compute.storage.store import Store

    assert isinstance(store, Store)
    names = [t.name for t in reversed(metadata.sorted_tables)]
    with store.engine.begin() as conn:
        for name in names:
            conn.execute(text(f"DELETE FROM {name}"))
        if store.dialect == "postgresql":
            used = conn.execute(
                text(
                    "SELECT quote_ident(sequencename) FROM pg_sequences"
                    " WHERE schemaname = current_schema() AND last_value IS NOT NULL"
                )
            ).scalars()
            for sequence in used:
                conn.execute(text(f"ALTER SEQUENCE {sequence} RESTART"))
        # What the migrations write beside the schema: a freshly migrated store holds it.
        add_standard(conn, datetime(2026, 1, 1, tzinfo=UTC))


BOTH_STORES = [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
"""The `store` fixture's parameters where the storage contract is held: SQLite and PostgreSQL."""

_API_DIR = Path(__file__).resolve().parent / "api"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses the `store` fixture runs on both databases, except an HTTP story of
    tests/api: the storage contract (tests/storage, tests/service and the rest) already holds the two
    stores alike, so a story runs once, on SQLite. One that checks what differs between the two
    databases says so with `@pytest.mark.both_stores`."""
    definitions = metafunc._arg2fixturedefs.get("store", ())
    if not definitions or definitions[-1].func.__module__ != __name__:
        return  # no store, or a module's own (tests/api/test_limits.py's, on SQLite)
    if metafunc.definition.get_closest_marker("postgres_only") is not None:
        metafunc.parametrize("store", [BOTH_STORES[1]], indirect=True)  # a race SQLite cannot have
        return
    story = _API_DIR in Path(str(metafunc.definition.path)).resolve().parents
    both = not story or metafunc.definition.get_closest_marker("both_stores") is not None
    metafunc.parametrize("store", BOTH_STORES if both else ["sqlite"], indirect=True)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once per run (per xdist worker: each has its own temporary
    directory), which each SQLite `store` copies: a copy takes a millisecond, the 25 migrations
    about 150 ms of CPU."""
    from better_compute.storage.store import Store

    path = tmp_path_factory.mktemp("sqlite-template") / "bc.db"
    Store.open(f"sqlite:///{path}").close()
    # Closing the last connection checkpoints the write-ahead log into the file: the file is whole.
    assert not path.with_name("bc.db-wal").exists(), "the template's write-ahead log was not checkpointed"
    return path


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """A migrated, empty store on each database: the storage contract runs on both.

    SQLite: a copy of the run's migrated template, in the test's own directory. PostgreSQL: the run's
    migrated database, emptied."""
    from better_compute.storage.store import Store

    if request.param == "sqlite":
        path = tmp_path / "bc.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        s = Store.open(f"sqlite:///{path}", migrate_schema=False)
    else:
        s = Store.open(request.getfixturevalue("pg_store_url"), migrate_schema=False)
        _truncate_all(s)
    try:
        yield s
    finally:
        s.close()
