"""Defects 2 and 13 of issue 11, as a user meets them in a shell: a PostgreSQL database that does not
exist, a PostgreSQL port nobody listens on, and `serve` on a port that is taken are each one
`error: ...` line with the fix, never a traceback.

Item 3 of issue 35: a database that goes away under a running server (PostgreSQL cut off behind a
proxy, a SQLite file that cannot be written) is answered 503 `UNAVAILABLE` with `Retry-After`, and
said in one line when it starts and one when it ends, never a traceback per request."""

from __future__ import annotations

import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.tenancy import credentials, quotas
from better_compute.storage.store import Store
from tests.builders import ids, small_fleet
from tests.conftest import own_database
from tests.e2e.conftest import free_port, run_cli, start_server
from tests.e2e.tcp_proxy import Proxy

COMMANDS = [["serve"], ["admin", "bootstrap"], ["migrate"]]


@pytest.mark.postgres
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_postgres_database_that_does_not_exist(command: list[str], postgres_url: str, tmp_path: Path) -> None:
    base, _, _ = postgres_url.rpartition("/")
    name = f"bc_missing_{uuid.uuid4().hex[:8]}"
    server = base.rpartition("@")[2]
    host, _, port = server.partition(":")

    done = run_cli([*command, "--database-url", f"{base}/{name}"], tmp_path)

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f'error: database "{name}" does not exist on ')
    assert f"create it (createdb -h {host} -p {port or 5432}" in done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_postgres_port_that_refuses(command: list[str], tmp_path: Path) -> None:
    port = free_port()  # nobody listens on it

    done = run_cli([*command, "--database-url", f"postgresql://postgres@127.0.0.1:{port}/bc"], tmp_path)

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: no PostgreSQL server answers at postgres@127.0.0.1:{port} (")
    assert done.stderr.rstrip().endswith(
        "start it, or fix the host and port in --database-url (or BC_DATABASE_URL)"
    )


def test_serve_on_a_busy_port_says_which_port_to_use(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        done = run_cli(
            ["serve", "--database-url", f"sqlite:///{tmp_path / 'bc.db'}", "--port", str(port)], tmp_path
        )

    assert done.returncode == 2
    assert done.stderr == (
        f"error: cannot listen on 127.0.0.1:{port}: address already in use; pass another --port"
        f" (make run: use PORT={port + 1} make run) and point the CLI at it with"
        f" BC_SERVER=http://127.0.0.1:{port + 1}\n"
    )
    assert not (tmp_path / "bc.db").exists()  # refused before the database was made


# Issue 35, item 3: a database that cannot be reached or written is 503 UNAVAILABLE with Retry-After,
# `/readyz` is not ready, and the server says so in one line when it starts and one when it ends.

OUTAGE_BOUND = 30.0
"""How long an outcome may take to show (it is polled for, never timed)."""
AT_ONCE = 8
ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="outage")


def eventually(probe: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + OUTAGE_BOUND
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {OUTAGE_BOUND:.0f} s: {what}")
        time.sleep(0.05)


def pool_with_quota(database_url: str) -> tuple[str, str]:
    """A MIG pool `p1` in which tenant acme may book, written in-process; acme's token and an admin's."""
    store = Store.open(database_url)
    try:
        now = datetime.now(UTC)
        load_fleet(store, parse_fleet(small_fleet(nodes=2)), now)  # 28 MIG instances
        with store.begin() as tx:
            quotas.write_rows(tx, "acme", "p1", {"gpu.mig": 100}, now)
        new_id = ids().credential
        acme = credentials.create(store, ADMIN, "acme", "outage", now, new_id=new_id).token
        return acme, credentials.bootstrap_admin(store, now, new_id=new_id).token
    finally:
        store.close()


def booking(key: str) -> dict[str, object]:
    start = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    return {
        "poolId": "p1",
        "devices": [{"class": "gpu.mig", "count": 1}],
        "start": start.isoformat(),
        "duration": "1h",
        "idempotencyKey": key,
    }


def book_at_once(http: httpx.Client, headers: dict[str, str], keys: list[str]) -> list[httpx.Response]:
    with ThreadPoolExecutor(len(keys)) as clients:
        return list(
            clients.map(lambda key: http.post("/v1/reservations", json=booking(key), headers=headers), keys)
        )


def assert_unavailable(answer: httpx.Response, retry_after: str) -> None:
    assert answer.status_code == 503, f"{answer.request.method} {answer.request.url}: {answer.text}"
    assert answer.json()["error"]["code"] == "UNAVAILABLE"
    assert answer.headers["Retry-After"] == retry_after


@pytest.mark.postgres
def test_postgres_outage_answers_500_and_a_traceback_per_request(postgres_url: str, tmp_path: Path) -> None:
    """PostgreSQL goes away under a running server (its connections cut, its port refusing) and comes
    back: 503 UNAVAILABLE with Retry-After meanwhile, one log line each way, nothing lost."""
    with ExitStack() as stack:
        direct = stack.enter_context(own_database(postgres_url, "bc_outage"))
        url = make_url(direct)
        proxy = stack.enter_context(Proxy((url.host or "127.0.0.1", url.port or 5432)))
        acme_token, admin_token = pool_with_quota(direct)
        through = url.set(port=proxy.port).render_as_string(hide_password=False)
        with (
            start_server(tmp_path, fleet=None, database_url=through, admin_token=admin_token) as server,
            httpx.Client(base_url=server.url, timeout=30) as http,
        ):
            acme = {"Authorization": f"Bearer {acme_token}"}
            admin = {"Authorization": f"Bearer {server.admin_token}"}
            # At once, so that several admission threads each keep a connection the outage will cut.
            before = book_at_once(http, acme, [f"before-{n}" for n in range(AT_ONCE)])
            assert [r.status_code for r in before] == [201] * AT_ONCE, [r.text for r in before]

            proxy.cut()
            assert_unavailable(http.get("/readyz"), "5")
            assert_unavailable(http.post("/v1/reservations", json=booking("during"), headers=acme), "5")
            assert_unavailable(http.get(f"/v1/reservations/{before[0].json()['id']}", headers=acme), "5")
            assert_unavailable(http.get("/v1/tenants", headers=admin), "5")
            assert_unavailable(http.post("/v1/tenants", json={"id": "t1", "name": "T1"}, headers=admin), "5")
            assert_unavailable(http.get("/readyz"), "5")

            proxy.restore()
            eventually(lambda: http.get("/readyz").status_code == 200, "/readyz ready again")
            for made in before:  # nothing acknowledged was lost
                kept = http.get(f"/v1/reservations/{made.json()['id']}", headers=acme)
                assert kept.status_code == 200 and kept.json()["atoms"] == made.json()["atoms"]
            # Every admission thread books again at once: none is left with a connection that is gone.
            after = book_at_once(http, acme, [f"after-{n}" for n in range(AT_ONCE)])
            assert [r.status_code for r in after] == [201] * AT_ONCE, [r.text for r in after]
            # What was refused was not applied: sent again, it is booked now.
            resent = http.post("/v1/reservations", json=booking("during"), headers=acme)
            assert resent.status_code == 201, resent.text
            assert http.post("/v1/tenants", json={"id": "t1", "name": "T1"}, headers=admin).status_code == 201
        output = server.output()

    assert "Traceback" not in output, output
    database = f"the PostgreSQL database {url.database} on 127.0.0.1:{proxy.port}"
    said = [line for line in output.splitlines() if line.startswith(database)]
    assert len(said) == 2, output
    assert said[0].startswith(f"{database} cannot be reached (")
    assert said[0].endswith(
        "): requests that need it answer 503 UNAVAILABLE and /readyz is not ready until it answers again"
    )
    assert said[1].startswith(f"{database} answers again, after ")


def unprivileged() -> list[str]:
    """A command that runs another without the power to write what its mode forbids (the superuser's
    CAP_DAC_OVERRIDE), so that a file's read-only mode holds for a test run as root too."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv (util-linux): a read-only mode would not hold")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]


@pytest.fixture
def read_only_sqlite(tmp_path: Path) -> tuple[Path, str, str]:
    """A migrated SQLite file with a pool, acme's token and an admin's, then made read-only (mode 0444)."""
    path = tmp_path / "bc.db"
    acme_token, admin_token = pool_with_quota(f"sqlite:///{path}")
    path.chmod(0o444)
    return path, acme_token, admin_token


def test_read_only_sqlite_file_is_ready_then_500s_and_tracebacks(
    read_only_sqlite: tuple[Path, str, str], tmp_path: Path
) -> None:
    path, acme_token, admin_token = read_only_sqlite
    database_url = f"sqlite:///{path}"
    with (
        start_server(
            tmp_path / "serve",
            fleet=None,
            database_url=database_url,
            admin_token=admin_token,
            ready=False,
            runner=unprivileged(),
        ) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        acme = {"Authorization": f"Bearer {acme_token}"}
        admin = {"Authorization": f"Bearer {admin_token}"}
        eventually(lambda: "serving on" in server.output(), "serve says it serves")
        assert_unavailable(http.get("/readyz"), "30")
        assert_unavailable(http.get("/healthz"), "30")
        assert http.get("/v1/tenants", headers=admin).status_code == 200  # reads are served
        assert_unavailable(http.post("/v1/reservations", json=booking("ro"), headers=acme), "30")
        assert_unavailable(http.post("/v1/tenants", json={"id": "t1", "name": "T1"}, headers=admin), "30")
        assert_unavailable(http.get("/readyz"), "30")
        said = server.output()

    lines = [line for line in said.splitlines() if "cannot be written" in line]
    assert lines == [
        f"the SQLite database {path} cannot be written (attempt to write a readonly database): requests"
        " that write answer 503 UNAVAILABLE and /readyz is not ready until it can be written"
    ], said
    assert said.index(lines[0]) < said.index("serving on")  # said as it starts, before it serves
    assert "Traceback" not in said, said


def test_admin_bootstrap_on_a_read_only_sqlite_file_prints_a_traceback(
    read_only_sqlite: tuple[Path, str, str], tmp_path: Path
) -> None:
    path, _, _ = read_only_sqlite

    done = run_cli(
        ["admin", "bootstrap", "--force", "--database-url", f"sqlite:///{path}"],
        tmp_path,
        runner=unprivileged(),
    )

    assert done.returncode == 1
    assert done.stderr == (
        f"error: cannot write to the SQLite database {path} (attempt to write a readonly database):"
        f" make {path} and its directory writable by the user that runs better-compute\n"
    )
