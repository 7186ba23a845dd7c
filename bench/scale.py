"""How a control plane's cost grows with its fleet: start-up, memory, first and steady reservations,
and reservations after a year of history.

For each fleet size (nodes of 8 H100 in `all-1g.10gb`, 56 MIG atoms a node), on a fresh database:

1. the fleet is registered and its nodes' reports ingested in batches (`ingest_s`, on stderr);
2. `serve --workers 1` is started on the existing database: `ready_s` is the time until `/readyz`
   answers 200 (the process has loaded its booking index and the pool's atoms);
3. the first reservation's latency (`first_reservation_ms`), then the median of a stream of
   one-hour reservations at random hours of the next 90 days (`reservation_p50_ms`), one client;
4. the server's resident memory (`rss_mb_per_process`, the process and any child it started);
5. a million past bookings (a year of history: reservations, allocations, bookings and their
   events, every one ended) are written straight into the database, the server is started again,
   and the same stream is timed (`reservation_p50_ms_after_1m_bookings`).

`bytes_per_atom` is measured in this process (tracemalloc) as the memory a server's booking index
holds for the pool's atoms once warm; `bytes_per_booking` (stderr) for live bookings alike.

    python bench/scale.py            # 1,000, 4,000 and 10,000 nodes on PostgreSQL
    python bench/scale.py --quick    # 500 and 2,000 nodes, 50,000 past bookings; under a minute
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import PG_URL, machine_speed_s, mig_fleet, postgres_database, sqlite_database
from bench.reservations import connect, exchange, reservation_requests, server_process
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.tenancy import credentials, quotas, tenants
from better_compute.storage.store import Store

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="bench")
TENANT = "bench"
KEYS = (
    "ready_s",
    "rss_mb_per_process",
    "bytes_per_atom",
    "first_reservation_ms",
    "reservation_p50_ms",
    "reservation_p50_ms_after_1m_bookings",
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the fleet and its tenant -----------------------------------------------------------------------
def prepare(url: str, nodes: int, gpus: int) -> tuple[str, float]:
    """Register and ingest the fleet, and give the benchmark tenant a token and room to book;
    returns the token and the seconds the fleet took to load."""
    store = Store.open(url)
    now = datetime.now(UTC)
    t0 = time.perf_counter()
    load_fleet(store, parse_fleet(mig_fleet(nodes, gpus)), now)
    ingest_s = time.perf_counter() - t0
    tenants.create(store, ADMIN, TENANT, "Benchmark tenant", now)
    with store.begin() as tx:
        quotas.write_rows(tx, TENANT, "mig", {"gpu.mig": 100_000_000}, now)
    token = credentials.create(store, ADMIN, TENANT, "bench", now, new_id=RandomIds().credential).token
    store.close()
    return token, ingest_s


def bytes_per_atom(url: str) -> tuple[float, int]:
    """The memory a warm booking index holds for the pool's atoms, per atom (tracemalloc)."""
    store = Store.open(url)
    index = BookingIndex()
    gc.collect()
    tracemalloc.start()
    try:
        with store.read() as tx:
            index.sync(tx)
            held = index.pool_atoms(tx, "mig")
        gc.collect()
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        store.close()
    return size / max(1, len(held.atoms)), len(held.atoms)


def bytes_per_booking(count: int = 50_000) -> float:
    """The memory the booking index holds per live booking (one atom, one hour, a tenant's)."""
    index = BookingIndex()
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    rows = [(f"rsv-{n:012d}", f"atm-{n:024x}", start + timedelta(hours=n % 2000)) for n in range(count)]
    gc.collect()
    tracemalloc.start()
    try:
        for allocation, atom, at in rows:
            index._add(allocation, [atom], at, at + timedelta(hours=1), (TENANT, "mig", "gpu.mig"))
        gc.collect()
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return size / count


# -- the server -----------------------------------------------------------------------------------
def rss_mb(pid: int) -> float:
    """Resident memory of the process and its children, in MB."""
    total = 0
    pending = [pid]
    while pending:
        p = pending.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
        pending.extend(int(c) for c in children)
    return total / 1e6


def timed(base: str, batch: list[bytes]) -> list[float]:
    """Send the requests one after another on one connection; each one's latency in ms."""
    sock = connect(base)
    pending = b""
    latencies = []
    try:
        for request in batch:
            t0 = time.perf_counter()
            head, answer, pending = exchange(sock, request, pending)
            latencies.append((time.perf_counter() - t0) * 1000)
            if head[9:12] != b"201":
                raise RuntimeError((head[:12] + b" " + answer[:300]).decode(errors="replace"))
    finally:
        sock.close()
    return latencies


# -- a year of history ----------------------------------------------------------------------------
def write_history(url: str, total: int) -> float:
    """Write `total` past bookings, each an ended one-hour reservation of one MIG atom spread over the
    last year, as the ledger writes them (reservation, allocation, booking, `ledger.booked` event);
    returns the seconds it took."""
    t0 = time.perf_counter()
    store = Store.open(url)
    pg = url.startswith("postgresql")
    year_ago = datetime.now(UTC) - timedelta(days=366)
    with store.engine.begin() as conn:
        atoms = conn.execute(
            text("SELECT count(*) FROM atoms WHERE pool_id = 'mig' AND class = 'gpu.mig'")
        ).scalar_one()
        per_atom = -(-total // atoms)
        params = {
            "atoms": atoms,
            "total": total,
            "t0": year_ago.isoformat() if pg else year_ago.replace(tzinfo=None).isoformat(sep=" "),
            "step": int(365 * 86400 / per_atom) // 3600 * 3600,
            "devices": json.dumps([{"class": "gpu.mig", "count": 1}]),
            "counts": json.dumps({"gpu.mig": 1}),
        }
        # Booking i holds atom i mod atoms, the (i div atoms)th of its hours spaced `step` apart.
        offset = "(s.i / :atoms) * :step"
        if pg:
            numbers = "SELECT g AS i FROM generate_series(0, :total - 1) AS g"
            start = f"(CAST(:t0 AS timestamptz) + ({offset}) * interval '1 second')"
            end = f"({start} + interval '1 hour')"
            payload = "json_build_object('atoms', json_build_array(a.id), 'start', {s}, 'end', {e}"
        else:
            numbers = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :total - 1) "
            numbers += "SELECT i FROM n"
            start = f"strftime('%Y-%m-%d %H:%M:%f', :t0, '+' || ({offset}) || ' seconds')"
            end = f"strftime('%Y-%m-%d %H:%M:%f', :t0, '+' || ({offset} + 3600) || ' seconds')"
            payload = "json_object('atoms', json_array(a.id), 'start', {s}, 'end', {e}"
        payload = (
            payload.format(s=start, e=end) + f", 'tenantId', '{TENANT}', 'poolId', 'mig', 'class', 'gpu.mig')"
        )
        allocation = "'rsv-past-' || s.i"
        rows = {
            "reservations (id, tenant_id, pool_id, status, starts_at, ends_at, devices, gpu_count, "
            "gpu_slices, counts, idempotency_key, fingerprint, generation, created_at, preemptible)": (
                f"{allocation}, '{TENANT}', 'mig', 'scheduled', {start}, {end}, :devices, 0, 1, :counts, "
                f"NULL, 'past', 1, {start}, {'false' if pg else '0'}"
            ),
            "allocations (id, kind, tenant_id, pool_id, created_at)": (
                f"{allocation}, 'reservation', '{TENANT}', 'mig', {start}"
            ),
            "bookings (atom_id, gpu_id, pool_id, class, gpu_share, tenant_id, allocation_id, starts_at, "
            "ends_at, state, created_at)": (
                f"a.id, a.gpu_id, 'mig', 'gpu.mig', a.gpu_share, '{TENANT}', {allocation}, {start}, {end}, "
                f"'live', {start}"
            ),
            "events (type, subject, payload, at)": f"'ledger.booked', {allocation}, {payload}, {start}",
        }
        picked = (
            "WITH a AS (SELECT id, gpu_id, gpu_share, row_number() OVER (ORDER BY id) - 1 AS k FROM atoms "
            f"WHERE pool_id = 'mig' AND class = 'gpu.mig'), s AS ({numbers}) "
        )
        for into, values in rows.items():
            insert = f"INSERT INTO {into} "
            select = f"SELECT {values} FROM s JOIN a ON a.k = s.i % :atoms"
            # PostgreSQL takes the CTE before INSERT, SQLite before the SELECT.
            conn.execute(text(picked + insert + select if pg else insert + picked + select), params)
    store.analyze()
    store.close()
    return time.perf_counter() - t0


# -- one size -------------------------------------------------------------------------------------
@contextmanager
def database(kind: str, pg_url: str) -> Iterator[str]:
    if kind == "postgresql":
        with postgres_database(pg_url) as url:
            yield url
    else:
        with tempfile.TemporaryDirectory() as tmp, sqlite_database(Path(tmp)) as url:
            yield url


def one_size(url: str, nodes: int, gpus: int, stream: int, history: int) -> dict[str, Any]:
    token, ingest_s = prepare(url, nodes, gpus)
    log(f"{nodes} nodes: fleet loaded in {ingest_s:.1f} s ({nodes / ingest_s:.0f} nodes/s)")
    per_atom, atoms = bytes_per_atom(url)
    with server_process(url) as (base, pid, ready_s):
        idle_mb = rss_mb(pid)
        first_ms = timed(base, reservation_requests(base, token, 1, seed=1))[0]
        stream_ms = timed(base, reservation_requests(base, token, stream, seed=2))
        rss = rss_mb(pid)
    log(f"{nodes} nodes: ready in {ready_s:.2f} s, {idle_mb:.0f} MB idle, {rss:.0f} MB after the stream")
    written_s = write_history(url, history)
    log(f"{nodes} nodes: {history:,} past bookings written in {written_s:.1f} s")
    with server_process(url) as (base, pid, ready_again_s):
        timed(base, reservation_requests(base, token, 1, seed=3))
        after_ms = timed(base, reservation_requests(base, token, stream, seed=4))
        rss_after = rss_mb(pid)
    log(f"{nodes} nodes, after history: ready in {ready_again_s:.2f} s, {rss_after:.0f} MB")
    figures = {
        "ready_s": round(ready_s, 2),
        "rss_mb_per_process": round(max(rss, rss_after), 1),
        "bytes_per_atom": round(per_atom),
        "first_reservation_ms": round(first_ms, 2),
        "reservation_p50_ms": round(statistics.median(stream_ms), 2),
        "reservation_p50_ms_after_1m_bookings": round(statistics.median(after_ms), 2),
    }
    details = {
        "atoms": atoms,
        "ingest_s": round(ingest_s, 2),
        "nodes_per_s": round(nodes / ingest_s),
        "idle_rss_mb": round(idle_mb, 1),
        "ready_s_after_history": round(ready_again_s, 2),
        "past_bookings": history,
        "history_write_s": round(written_s, 1),
    }
    log(f"{nodes} nodes: {json.dumps({**figures, **details})}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="500 and 2,000 nodes; under a minute")
    parser.add_argument("--sizes", default=None, help="node counts, comma-separated")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--pg-url", default=PG_URL)
    parser.add_argument("--reservations", type=int, default=None, help="timed per stream")
    parser.add_argument("--history", type=int, default=None, help="past bookings written (default 1,000,000)")
    args = parser.parse_args()
    sizes = [int(s) for s in (args.sizes or ("500,2000" if args.quick else "1000,4000,10000")).split(",")]
    stream = args.reservations or (100 if args.quick else 300)
    history = args.history or (50_000 if args.quick else 1_000_000)
    log(f"machine loop: {machine_speed_s()} s; booking index: {bytes_per_booking():.0f} bytes per booking")
    results: dict[str, Any] = {}
    for nodes in sizes:
        with database(args.database, args.pg_url) as url:
            results[f"nodes_{nodes}"] = one_size(url, nodes, args.gpus, stream, history)
    log(f"command: python bench/scale.py{' --quick' if args.quick else ''} ({args.database})")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
