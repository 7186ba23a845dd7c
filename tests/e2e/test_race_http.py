"""Eight clients race through HTTP to fill a pool on PostgreSQL: nothing is ever double-booked."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.tenancy import credentials, quotas, tenants
from better_compute.storage.store import Store
from tests.builders import ids, small_fleet
from tests.conftest import own_database

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]

CLIENTS = 8
ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="race")


@pytest.fixture
def race_database(postgres_url: str) -> Iterator[str]:
    """A database of this test's own on the run's PostgreSQL server (the server process owns it)."""
    with own_database(postgres_url, "bc_race") as url:
        yield url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(race_database: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    store = Store.open(race_database)
    now = datetime.now(UTC)
    load_fleet(store, parse_fleet(small_fleet(nodes=2, layout="all-1g.10gb")), now)
    tenants.create(store, ADMIN, "globex", "Globex", now)
    for tenant in ("acme", "globex"):
        with store.begin() as tx:
            quotas.write_rows(tx, tenant, "p1", {"gpu.mig": 100}, now)
    new_id = ids().credential
    token_acme = credentials.create(store, ADMIN, "acme", "race", now, new_id=new_id).token
    token_globex = credentials.create(store, ADMIN, "globex", "race", now, new_id=new_id).token
    store.close()
    port = _free_port()
    cli = Path(sys.executable).with_name("better-compute")
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        [str(cli), "serve", "--database-url", race_database, "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"server did not start:\n{(tmp_path / 'server.log').read_text()}")
            time.sleep(0.2)
        yield base, f"{token_acme} {token_globex}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_clients_fill_the_pool_exactly_and_never_double_book(
    server: tuple[str, str], race_database: str
) -> None:
    base, tokens = server
    token_of = tokens.split()
    start = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    outcomes: list[tuple[int, str, list[str]]] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        token = token_of[n % 2]
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            for attempt in range(100):
                body = {
                    "poolId": "p1",
                    "devices": [{"class": "gpu.mig", "count": 1}],
                    "start": start.isoformat(),
                    "duration": "1h",
                    "idempotencyKey": f"c{n}-{attempt}",
                }
                r = http.post("/v1/reservations", json=body)
                code = r.json()["error"]["code"] if r.status_code != 201 else "booked"
                atoms = [a["id"] for a in r.json()["atoms"]] if r.status_code == 201 else []
                with lock:
                    outcomes.append((r.status_code, code, atoms))
                if code != "booked":
                    return

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a client is stuck"

    capacity = 2 * 2 * 7  # two nodes, two H100s each, seven 1g.10gb instances per GPU
    codes = Counter(code for _, code, _ in outcomes)
    assert set(codes) == {"booked", "INSUFFICIENT_CAPACITY"}, outcomes
    assert codes["booked"] == capacity
    assert codes["INSUFFICIENT_CAPACITY"] == CLIENTS  # every client stopped on a full pool
    assert all(status == 409 for status, code, _ in outcomes if code != "booked")
    booked = [a for _, code, atoms in outcomes if code == "booked" for a in atoms]
    assert len(booked) == len(set(booked)) == capacity

    with psycopg.connect(race_database) as conn:
        doubles = conn.execute(
            "SELECT count(*) FROM bookings a JOIN bookings b ON a.atom_id = b.atom_id AND a.id < b.id"
            " WHERE a.state = 'live' AND b.state = 'live'"
            " AND tstzrange(a.starts_at, a.ends_at) && tstzrange(b.starts_at, b.ends_at)"
        ).fetchone()
        live = conn.execute("SELECT count(*) FROM bookings WHERE state = 'live'").fetchone()
    assert doubles is not None and doubles[0] == 0
    assert live is not None and live[0] == capacity
