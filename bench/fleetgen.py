"""Big benchmark fleets, registered and ingested through the real fleet and inventory paths."""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import psycopg

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


def mig_fleet(nodes: int, gpus: int, layout: str = "all-1g.10gb") -> dict[str, object]:
    return {
        "tenants": [{"id": "platform"}, {"id": "acme"}],
        "clusters": [
            {
                "name": "bench",
                "region": "r1",
                "nodes": [{"name": "node", "replicas": nodes, "gpus": {"model": "H100-80GB", "count": gpus}}],
            }
        ],
        "pools": [
            {
                "name": "mig",
                "cluster": "bench",
                "mode": "mig",
                "owner": "platform",
                "policy": {"migLayout": layout},
                "nodes": [f"node-{i + 1}" if nodes > 1 else "node" for i in range(nodes)],
            }
        ],
    }


def load(store: Store, nodes: int, gpus: int, now: datetime) -> int:
    return load_fleet(store, parse_fleet(mig_fleet(nodes, gpus)), now, batch=250)


@contextmanager
def postgres_database(admin_url: str = PG_URL) -> Iterator[str]:
    """A throwaway PostgreSQL database for one benchmark run."""
    name = f"bc_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rpartition("/")[0] + "/" + name
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def sqlite_database(directory: Path) -> Iterator[str]:
    path = directory / f"bench-{uuid.uuid4().hex[:8]}.db"
    try:
        yield f"sqlite:///{path}"
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def fleet_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options every fleet benchmark takes: `--quick`, the fleet's size and the databases."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small fleet; finishes in under a minute")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default=PG_URL)
    return parser


def percentile(samples: list[float], q: float) -> float:
    """The `q` quantile of `samples` (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def machine_speed_s() -> float:
    """Seconds a fixed pure-Python loop takes here and now (the best of three).

    Shared and virtual machines change speed over a day, by a factor of two or more; printed beside a
    benchmark's figures, this says how fast the machine was while they were taken."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        total = 0
        for i in range(10_000_000):
            total += i
        best = min(best, time.perf_counter() - start)
    return round(best, 3)
