"""Ledger throughput: single-atom bookings for random 1-hour windows into a big MIG fleet.

Measures, per database, bookings per second and p50/p99 latency through the ledger's use case, and in
the same run the database's raw rate for the same durability (one-row insert per transaction into a
table with the same constraint, no application code), and their ratio.

    python bench/ledger.py            # 10,000 nodes x 8 GPUs (560,000 MIG atoms)
    python bench/ledger.py --quick    # a small fleet, under a minute
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import PG_URL, load, postgres_database, sqlite_database
from better_compute.domain.errors import BookingConflict
from better_compute.domain.ledger import Span
from better_compute.service import ledger
from better_compute.storage.store import Store

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def book_loop(store: Store, atom_ids: list[str], count: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    latencies: list[float] = []
    conflicts = 0
    started = time.perf_counter()
    for n in range(count):
        start = NOW + timedelta(hours=rng.randrange(0, 24 * 90))
        span = Span(start, start + timedelta(hours=1))
        t0 = time.perf_counter()
        try:
            ledger.book(store, [rng.choice(atom_ids)], span, f"bench-{seed}-{n}", "acme", NOW)
        except BookingConflict:
            conflicts += 1
        latencies.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - started
    return {
        "bookings_per_s": round(count / elapsed, 1),
        "p50_ms": round(statistics.median(latencies), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "conflicts": conflicts,
    }


def raw_postgres(url: str, count: int, seed: int) -> float:
    rng = random.Random(seed)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")
        conn.execute(
            "CREATE TABLE raw_bookings (id bigserial primary key, atom_id text NOT NULL,"
            " starts_at timestamptz NOT NULL, ends_at timestamptz, EXCLUDE USING gist (atom_id WITH =,"
            " tstzrange(starts_at, ends_at, '[)') WITH &&))"
        )
        started = time.perf_counter()
        for _ in range(count):
            start = NOW + timedelta(hours=rng.randrange(0, 24 * 90))
            with conn.transaction():
                conn.execute(
                    "INSERT INTO raw_bookings (atom_id, starts_at, ends_at) VALUES (%s, %s, %s)",
                    (f"atom-{rng.randrange(560_000)}", start, start + timedelta(hours=1)),
                )
        return count / (time.perf_counter() - started)


def raw_sqlite(path: str, count: int, seed: int) -> float:
    rng = random.Random(seed)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE raw_bookings (id INTEGER PRIMARY KEY, atom_id TEXT NOT NULL, starts_at TEXT NOT NULL,"
        " ends_at TEXT)"
    )
    conn.execute("CREATE INDEX ix_raw_atom_start ON raw_bookings (atom_id, starts_at)")
    started = time.perf_counter()
    for _ in range(count):
        start = NOW + timedelta(hours=rng.randrange(0, 24 * 90))
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO raw_bookings (atom_id, starts_at, ends_at) VALUES (?, ?, ?)",
            (f"atom-{rng.randrange(560_000)}", start.isoformat(), (start + timedelta(hours=1)).isoformat()),
        )
        conn.execute("COMMIT")
    conn.close()
    return count / (time.perf_counter() - started)


def run_one(db: str, url: str, nodes: int, gpus: int, count: int) -> dict[str, Any]:
    store = Store.open(url, pool_size=2)
    t0 = time.perf_counter()
    load(store, nodes, gpus, NOW)
    load_s = time.perf_counter() - t0
    with store.read() as tx:
        atom_ids = [
            a["id"] for a in tx.inventory.list("atoms", filters={"class": "gpu.mig", "bookable": True})
        ]
    book_loop(store, atom_ids, min(200, count // 5), seed=1)  # warm caches and connections
    measured = book_loop(store, atom_ids, count, seed=2)
    store.close()
    if db == "postgresql":
        raw = raw_postgres(url.replace("postgresql+psycopg://", "postgresql://"), count, seed=3)
    else:
        raw = raw_sqlite(url.removeprefix("sqlite:///") + ".raw", count, seed=3)
        Path(url.removeprefix("sqlite:///") + ".raw").unlink(missing_ok=True)
    result = {
        "atoms": len(atom_ids),
        "fleet_load_s": round(load_s, 1),
        "bookings": count,
        **measured,
        "raw_per_s": round(raw, 1),
    }
    result["ratio"] = round(result["bookings_per_s"] / raw, 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a small fleet; finishes in under a minute")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--bookings", type=int, default=None)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default=PG_URL)
    args = parser.parse_args()
    nodes = args.nodes or (150 if args.quick else 10_000)
    count = args.bookings or (1500 if args.quick else 5000)
    results: dict[str, Any] = {"nodes": nodes, "gpus_per_node": args.gpus}
    for db in args.databases.split(","):
        if db == "postgresql":
            with postgres_database(args.pg_url) as url:
                results[db] = run_one(db, url, nodes, args.gpus, count)
        else:
            with tempfile.TemporaryDirectory() as tmp, sqlite_database(Path(tmp)) as url:
                results[db] = run_one(db, url, nodes, args.gpus, count)
        print(f"{db}: {results[db]}", file=sys.stderr)
    print(f"command: python bench/ledger.py{' --quick' if args.quick else ''}", file=sys.stderr)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
