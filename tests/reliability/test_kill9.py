"""kill -9 mid-load: every acknowledged reservation survives, none is duplicated, nothing overlaps.

Clients send reservations with idempotency keys to a real `better-compute serve` while it is killed
with SIGKILL, twice; after each restart every key is sent again. An acknowledged reservation (201, or
200 for a replay) must still be there and be answered again for its key; a key whose answer was lost
books at most once; no atom is ever held twice at once.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.tenancy import credentials, quotas
from better_compute.storage.store import Store
from tests.builders import ids, small_fleet
from tests.conftest import own_database
from tests.e2e.conftest import free_port

pytestmark = pytest.mark.e2e

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="kill9")
CLIENTS = 4
CYCLES = 2
ACKNOWLEDGED_BEFORE_KILL = 30
OVERLAPS = {
    "postgresql": "tstzrange(a.starts_at, a.ends_at) && tstzrange(b.starts_at, b.ends_at)",
    "sqlite": "a.starts_at < COALESCE(b.ends_at, '9999') AND b.starts_at < COALESCE(a.ends_at, '9999')",
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of this test's own: the server process owns it."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kill9.db'}"
        return
    with own_database(request.getfixturevalue("postgres_url"), "bc_kill9") as url:
        yield url


def _serve(database: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    cli = [sys.executable, "-m", "better_compute.entrypoints.cli", "serve", "--database-url", database]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*cli, "--port", str(port), "--no-access-log"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"server did not start:\n{log.read_text(errors='replace')}")
        time.sleep(0.1)


def _body(key: str, rng: random.Random, base: datetime) -> dict[str, Any]:
    start = base + timedelta(hours=rng.randrange(0, 24))
    return {
        "poolId": "p1",
        "devices": [{"class": "gpu.mig", "count": rng.choice([1, 1, 2])}],
        "start": start.isoformat(),
        "duration": f"{rng.randrange(1, 4)}h",
        "idempotencyKey": key,
    }


def test_kill9_mid_load_loses_and_duplicates_nothing(database: str, tmp_path: Path) -> None:
    store = Store.open(database)
    now = datetime.now(UTC)
    load_fleet(store, parse_fleet(small_fleet(nodes=2, layout="all-1g.10gb")), now)
    with store.begin() as tx:
        quotas.write_rows(tx, "acme", "p1", {"gpu.mig": 100_000}, now)
    token = credentials.create(store, ADMIN, "acme", "kill9", now, new_id=ids().credential).token
    dialect = store.dialect
    store.close()
    base = (now + timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    bodies: dict[str, dict[str, Any]] = {}
    acknowledged: dict[str, str] = {}  # key -> reservation id answered
    lock = threading.Lock()
    log = tmp_path / "server.log"
    headers = {"Authorization": f"Bearer {token}"}

    for cycle in range(CYCLES):
        port = free_port()
        proc = _serve(database, port, log)
        stop = threading.Event()

        def client(n: int, port: int = port, cycle: int = cycle, stop: threading.Event = stop) -> None:
            rng = random.Random(cycle * 100 + n)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=10) as http:
                for i in range(10_000):
                    if stop.is_set():
                        return
                    key = f"k{cycle}-{n}-{i}"
                    body = _body(key, rng, base)
                    with lock:
                        bodies[key] = body
                    try:
                        r = http.post("/v1/reservations", json=body)
                    except httpx.HTTPError:
                        return  # the server is gone: this answer was lost
                    if r.status_code in (200, 201):
                        with lock:
                            acknowledged[key] = r.json()["id"]
                    else:
                        assert r.status_code == 409, r.text  # a full hour: INSUFFICIENT_CAPACITY

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        before = len(acknowledged)
        deadline = time.monotonic() + 60
        while len(acknowledged) < before + ACKNOWLEDGED_BEFORE_KILL and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)  # mid-load: requests are in flight
        proc.wait(timeout=10)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
        assert len(acknowledged) >= before + ACKNOWLEDGED_BEFORE_KILL, log.read_text(errors="replace")

    # After a restart every key is sent again: acknowledged ones answer their reservation, lost ones
    # book at most once (or are refused for a full hour).
    port = free_port()
    proc = _serve(database, port, log)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=10) as http:
            for key, body in bodies.items():
                r = http.post("/v1/reservations", json=body)
                if key in acknowledged:
                    assert r.status_code == 200, (key, r.text)
                    assert r.json()["id"] == acknowledged[key]
                else:
                    assert r.status_code in (200, 201, 409), (key, r.text)
    finally:
        proc.terminate()
        proc.wait(timeout=15)

    check = Store.open(database, migrate_schema=False)
    try:
        with check.engine.connect() as conn:
            stored = dict(
                conn.execute(text("SELECT idempotency_key, id FROM reservations")).all()  # type: ignore[arg-type]
            )
            per_key = conn.execute(
                text("SELECT count(*) FROM reservations GROUP BY idempotency_key HAVING count(*) > 1")
            ).all()
            doubles = conn.execute(
                text(
                    "SELECT count(*) FROM bookings a JOIN bookings b ON a.atom_id = b.atom_id AND a.id < b.id"
                    f" WHERE a.state = 'live' AND b.state = 'live' AND {OVERLAPS[dialect]}"
                )
            ).scalar_one()
    finally:
        check.close()
    assert all(stored.get(key) == rid for key, rid in acknowledged.items())
    assert per_key == []
    assert doubles == 0
