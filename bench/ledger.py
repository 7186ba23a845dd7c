"""Ledger throughput: single-atom bookings for random 1-hour windows into a big MIG fleet.

Measures, per database, bookings per second and p50/p99 latency through the ledger's use case, and in
the same run the database's raw rate for the same durability (one-row insert per transaction into a
table with the same constraint, no application code), and their ratio.

    python bench/ledger.py            # 10,000 nodes x 8 GPUs (560,000 MIG atoms)
    python bench/ledger.py --quick    # a small fleet, under a minute
"""

from __future__ import annotations

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

from bench.fleetgen import fleet_parser, load, percentile, postgres_database, sqlite_database
from better_compute.domain.kernel.errors import BookingConflict
from better_compute.domain.kernel.timewin import Window
from better_compute.service.ledger import ledger
from better_compute.storage.store import Store

NOW = datetime(2026, 12, 1, tzinfo=UTC)


class AppBookings:
    """Single-atom bookings through the ledger's use case (service -> storage -> database)."""

    def __init__(self, store: Store, atom_ids: list[str], seed: int) -> None:
        self.store, self.atom_ids, self.rng = store, atom_ids, random.Random(seed)
        self.latencies: list[float] = []
        self.conflicts = 0
        self.n = 0

    def run(self, count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            start = NOW + timedelta(hours=self.rng.randrange(0, 24 * 90))
            span = Window(start, start + timedelta(hours=1))
            self.n += 1
            t0 = time.perf_counter()
            try:
                ledger.book(
                    self.store, [self.rng.choice(self.atom_ids)], span, f"bench-{self.n}", "acme", NOW
                )
            except BookingConflict:
                self.conflicts += 1
            self.latencies.append((time.perf_counter() - t0) * 1000)
        return time.perf_counter() - started


class RawInserts:
    """The database alone: a one-row insert per transaction into a table with the same constraint, in
    the same database and with the same durability, from the bare driver."""

    def __init__(self, url: str, dialect: str, seed: int) -> None:
        self.rng = random.Random(seed)
        self.dialect = dialect
        if dialect == "postgresql":
            self.pg = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
            self.pg.execute(
                "CREATE TABLE raw_bookings (id bigserial primary key, atom_id text NOT NULL,"
                " starts_at timestamptz NOT NULL, ends_at timestamptz, EXCLUDE USING gist (atom_id WITH =,"
                " tstzrange(starts_at, ends_at, '[)') WITH &&))"
            )
        else:
            self.lite = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
            self.lite.execute("PRAGMA journal_mode=WAL")
            self.lite.execute("PRAGMA synchronous=FULL")
            self.lite.execute(
                "CREATE TABLE raw_bookings (id INTEGER PRIMARY KEY, atom_id TEXT NOT NULL,"
                " starts_at TEXT NOT NULL, ends_at TEXT)"
            )
            self.lite.execute("CREATE INDEX ix_raw_atom_start ON raw_bookings (atom_id, starts_at)")

    def run(self, count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            start = NOW + timedelta(hours=self.rng.randrange(0, 24 * 90))
            atom = f"atom-{self.rng.randrange(560_000)}"
            if self.dialect == "postgresql":
                with self.pg.transaction():
                    self.pg.execute(
                        "INSERT INTO raw_bookings (atom_id, starts_at, ends_at) VALUES (%s, %s, %s)",
                        (atom, start, start + timedelta(hours=1)),
                    )
            else:
                self.lite.execute("BEGIN IMMEDIATE")
                self.lite.execute(
                    "INSERT INTO raw_bookings (atom_id, starts_at, ends_at) VALUES (?, ?, ?)",
                    (atom, start.isoformat(), (start + timedelta(hours=1)).isoformat()),
                )
                self.lite.execute("COMMIT")
        return time.perf_counter() - started

    def close(self) -> None:
        (self.pg if self.dialect == "postgresql" else self.lite).close()


def run_one(db: str, url: str, nodes: int, gpus: int, count: int, rounds: int = 10) -> dict[str, Any]:
    """Both sides in the same run, interleaved in rounds, so that the disk's moods hit both alike."""
    store = Store.open(url, pool_size=2)
    t0 = time.perf_counter()
    load(store, nodes, gpus, NOW)
    load_s = time.perf_counter() - t0
    with store.read() as tx:
        atom_ids = [
            a.id for a in tx.atoms.page(pool_id=None, cls="gpu.mig", bookable=True, limit=None, after=None)
        ]
    app = AppBookings(store, atom_ids, seed=2)
    raw = RawInserts(url, db, seed=3)
    app.run(200)  # warm caches and connections
    raw.run(200)
    app.latencies.clear()
    app_s = raw_s = 0.0
    per_round = max(1, count // rounds)
    for _ in range(rounds):
        app_s += app.run(per_round)
        raw_s += raw.run(per_round)
    raw.close()
    store.close()
    done = per_round * rounds
    result: dict[str, Any] = {
        "atoms": len(atom_ids),
        "fleet_load_s": round(load_s, 1),
        "bookings": done,
        "bookings_per_s": round(done / app_s, 1),
        "p50_ms": round(statistics.median(app.latencies), 3),
        "p99_ms": round(percentile(app.latencies, 0.99), 3),
        "conflicts": app.conflicts,
        "raw_per_s": round(done / raw_s, 1),
    }
    result["ratio"] = round(result["bookings_per_s"] / result["raw_per_s"], 3)
    return result


def main() -> None:
    parser = fleet_parser(__doc__)
    parser.add_argument("--bookings", type=int, default=None)
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
