"""Bills and usage exports over a month of a million bookings.

A fleet of every sharing mode (H100 MIG `mixed:3g.40gb+2x2g.20gb`, H100 time-sliced by 4, L40S MPS by
3, whole A100s) is loaded through the real fleet path; then a month (January 2030) of back-to-back
bookings of random lengths on every atom, for one tenant, is written straight into the ledger (COPY
on PostgreSQL, executemany on SQLite; each booking with its atom's share, as the booking statements
write it), a few of them crossing the month's edges and a few cancelled. Measured, per database:

- `bill_s`: the tenant's bill for the month through the use case (`service.metering.bills.get_bill`; the
  database sums held time per pool and share), the median of three reads; the goal is under 5 s;
- `export_peak_rss_mb`: the peak resident memory of `better-compute usage export --format csv
  --out FILE` of the same month, run as its own process against a real `better-compute serve`
  (its VmHWM, Linux); the goal is under 200 MB. The largest of the databases' is the
  figure; each one's is under `export_peak_rss_mb_by_store`.

The export's totals are checked against the bill (they must be equal), and its rows counted.

    python bench/usage.py            # 1,000,000 bookings
    python bench/usage.py --quick    # 50,000 bookings, under a minute
"""

from __future__ import annotations

import csv
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import fleet_parser, machine_speed_s, postgres_database, sqlite_database
from bench.reservations import server
from better_compute.domain.fleet.shares import share
from better_compute.domain.metering.metering import shown
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.metering import bills
from better_compute.service.tenancy import credentials
from better_compute.storage.ledger.ledger import COLUMNS, sqlite_time
from better_compute.storage.store import Store

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="bench")
MONTH_FROM, MONTH_TO = "2030-01-01", "2030-02-01"
START = datetime(2030, 1, 1, tzinfo=UTC)
END = datetime(2030, 2, 1, tzinfo=UTC)
NOW = datetime(2030, 2, 15, tzinfo=UTC)
TENANT = "acme"


def bench_fleet(gpus_per_pool: int) -> dict[str, Any]:
    """Four pools of `gpus_per_pool` GPUs each (8 per node), one per sharing mode, all `acme`'s."""
    nodes = max(1, gpus_per_pool // 8)

    def node(name: str, model: str, layout: str | None = None) -> dict[str, Any]:
        gpus: dict[str, Any] = {"model": model, "count": 8}
        if layout:
            gpus["migLayout"] = layout
        return {"name": name, "replicas": nodes, "gpus": gpus} if nodes > 1 else {"name": name, "gpus": gpus}

    def members(name: str) -> list[str]:
        return [f"{name}-{i + 1}" for i in range(nodes)] if nodes > 1 else [name]

    def pool(name: str, mode: str, policy: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "cluster": "bench", "mode": mode, "owner": TENANT, "policy": policy,
                "nodes": members(name)}  # fmt: skip

    layout = "mixed:3g.40gb+2x2g.20gb"
    return {
        "tenants": [{"id": TENANT}],
        "clusters": [
            {
                "name": "bench",
                "region": "r1",
                "nodes": [
                    node("mig", "H100-80GB", layout),
                    node("ts", "H100-80GB"),
                    node("mps", "L40S-48GB"),
                    node("ex", "A100-80GB"),
                ],
            }
        ],
        "pools": [
            pool("mig", "mig", {"migLayout": layout}),
            pool("ts", "timeslice", {"replicas": 4}),
            pool("mps", "mps", {"replicas": 3}),
            pool("ex", "exclusive", {}),
        ],
    }


def atoms_of(store: Store) -> list[tuple[str, str, str, str, str]]:
    """(id, gpu, pool, class, share) of every bookable atom."""
    with store.read() as tx:
        found = tx.atoms.page(pool_id=None, cls=None, bookable=True, limit=None, after=None)
    return [(a.id, a.gpu_id, a.pool_id or "", a.cls, str(share(a))) for a in found]


def bookings(atoms: list[tuple[str, str, str, str, str]], count: int, seed: int) -> Iterator[tuple[Any, ...]]:
    """`count` bookings spread over the atoms, back to back on each with short gaps, covering the
    month; the first of each atom starts before the month, and about one in a hundred is cancelled."""
    rng = random.Random(seed)
    per_atom = max(1, count // len(atoms))
    span = (END - START).total_seconds() / per_atom  # average seconds per booking on an atom
    written = 0
    for n, (atom_id, gpu_id, pool_id, cls, atom_share) in enumerate(atoms):
        wanted = per_atom if n < len(atoms) - 1 else count - written
        at = START - timedelta(seconds=rng.uniform(0, span))
        for _ in range(wanted):
            length = timedelta(seconds=rng.uniform(0.3, 1.5) * span * 0.9, microseconds=rng.randrange(10**6))
            state = "cancelled" if rng.random() < 0.01 else "live"
            written += 1
            yield (
                atom_id,
                gpu_id,
                pool_id,
                cls,
                atom_share,
                TENANT,
                f"bench-{written}",
                at,
                at + length,
                state,
                at,
            )
            at += length + timedelta(seconds=rng.uniform(0, 0.1) * span)


def load_bookings(store: Store, url: str, rows: Iterator[tuple[Any, ...]]) -> int:
    count = 0
    if store.dialect == "postgresql":
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            with conn.cursor() as cur, cur.copy(f"COPY bookings ({COLUMNS}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
                    count += 1
            conn.commit()
        return count
    db = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    db.execute("PRAGMA synchronous=OFF")
    db.execute("BEGIN")
    batch: list[tuple[Any, ...]] = []
    marks = ",".join("?" * len(COLUMNS.split(",")))
    insert = f"INSERT INTO bookings ({COLUMNS}) VALUES ({marks})"
    for row in rows:
        batch.append((*row[:7], sqlite_time(row[7]), sqlite_time(row[8]), row[9], sqlite_time(row[10])))
        if len(batch) == 10_000:
            db.executemany(insert, batch)
            count += len(batch)
            batch.clear()
    db.executemany(insert, batch)
    count += len(batch)
    db.execute("COMMIT")
    db.close()
    return count


def export(base: str, token: str, out: Path) -> tuple[float, float]:
    """Run `usage export` of the month as its own process; its wall time and peak RSS (MB).

    The peak is the process's own `VmHWM` (Linux), read from /proc every 20 ms until it exits.
    Not wait4's ru_maxrss: the kernel carries the forking process's high-water mark over exec, so
    that would report this benchmark's own memory, not the export's."""
    cli = Path(sys.executable).with_name("better-compute")
    args = [str(cli), "usage", "export", "--from", MONTH_FROM, "--to", MONTH_TO, "--format", "csv"]
    args += ["--out", str(out), "--server", base, "--token", token]
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    peak_kb = 0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak_kb = max(peak_kb, int(line.split()[1]))
        except (OSError, ValueError):
            pass  # between exit and reaping
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"usage export failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return elapsed, peak_kb / 1024


def exported_totals(out: Path) -> tuple[int, dict[str, str]]:
    rows = 0
    totals: dict[str, str] = {}
    with out.open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            if row["kind"] == "booking":
                rows += 1
            else:
                totals[row["meter"]] = row["hours"]
    return rows, totals


def run_one(url: str, count: int, gpus_per_pool: int) -> dict[str, Any]:
    store = Store.open(url, pool_size=2)
    t0 = time.perf_counter()
    load_fleet(store, parse_fleet(bench_fleet(gpus_per_pool)), START, batch=250)
    atoms = atoms_of(store)
    written = load_bookings(store, url, bookings(atoms, count, seed=5))
    store.analyze()
    load_s = time.perf_counter() - t0
    times = []
    bill = None
    for _ in range(3):
        t1 = time.perf_counter()
        bill = bills.get_bill(store, ADMIN, TENANT, since=MONTH_FROM, until=MONTH_TO, now=NOW)
        times.append(time.perf_counter() - t1)
    assert bill is not None
    lines = {line.meter: shown(line.hours) for line in bill.lines}
    token = credentials.bootstrap_admin(store, NOW, new_id=RandomIds().credential, force=True).token
    store.close()
    with server(url) as base, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "usage.csv"
        export_s, rss_mb = export(base, token, out)
        rows, totals = exported_totals(out)
    if totals != lines:
        raise AssertionError(f"the export's totals {totals} are not the bill's {lines}")
    return {
        "atoms": len(atoms),
        "bookings": written,
        "load_s": round(load_s, 1),
        "bill_s": round(statistics.median(times), 3),
        "bill_first_s": round(times[0], 3),
        "bill_lines": lines,
        "export_s": round(export_s, 1),
        "export_rows": rows,
        "export_peak_rss_mb": round(rss_mb, 1),
    }


def main() -> None:
    parser = fleet_parser(__doc__)
    parser.add_argument("--bookings", type=int, default=None)
    args = parser.parse_args()
    count = args.bookings or (50_000 if args.quick else 1_000_000)
    gpus_per_pool = args.nodes * 8 if args.nodes else (16 if args.quick else 64)
    results: dict[str, Any] = {
        "bookings": count,
        "gpus_per_pool": gpus_per_pool,
        "machine_loop_s": machine_speed_s(),
    }
    per_store: dict[str, dict[str, Any]] = {}
    for db in args.databases.split(","):
        if db == "postgresql":
            with postgres_database(args.pg_url) as url:
                per_store[db] = run_one(url, count, gpus_per_pool)
        else:
            with tempfile.TemporaryDirectory() as tmp, sqlite_database(Path(tmp)) as url:
                per_store[db] = run_one(url, count, gpus_per_pool)
        print(f"{db}: {per_store[db]}", file=sys.stderr)
    results["bill_s"] = {db: r["bill_s"] for db, r in per_store.items()}
    results["export_peak_rss_mb"] = max(r["export_peak_rss_mb"] for r in per_store.values())
    results["export_peak_rss_mb_by_store"] = {db: r["export_peak_rss_mb"] for db, r in per_store.items()}
    results["export_s"] = {db: r["export_s"] for db, r in per_store.items()}
    results["export_rows"] = {db: r["export_rows"] for db, r in per_store.items()}
    results["load_s"] = {db: r["load_s"] for db, r in per_store.items()}
    results["bill_lines"] = {db: r["bill_lines"] for db, r in per_store.items()}
    print(f"command: python bench/usage.py{' --quick' if args.quick else ''}", file=sys.stderr)
    # Everything measured, then, last, exactly the figures the goals are stated in.
    print(json.dumps(results))
    print(json.dumps({key: results[key] for key in ("bill_s", "export_peak_rss_mb")}))


if __name__ == "__main__":
    main()
