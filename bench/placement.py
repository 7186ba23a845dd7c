"""Placement across clusters: the preview's latency and workloads created and placed per second.

A fleet of `--clusters` clusters x `--nodes` nodes x 8 H100-80GB GPUs is loaded through the real
fleet path (one exclusive pool per cluster, owned by the project `acme`; a device class
`h100-80gb-sxm` selecting the H100s) into a fresh database, on SQLite and on PostgreSQL. Then:

- the preview: `POST /v1/placement/preview` for 4 replicas of 8 devices, as the project's tenant,
  through a real server process on loopback, on one keep-alive connection, timed from the
  request's first byte to the answer's last: `preview_p50_ms` / `preview_p99_ms` (and
  `healthz_p50_ms`, the same loop's floor). `placement.preview` called in this process (no HTTP)
  is timed too (`direct_p50_ms`, `direct_p99_ms`). The first call of each warms the process's
  caches (the booking index, each pool's free devices) and is left out;
- workloads: a real server process on loopback (`--workers 2` on PostgreSQL, one per core; 1 on
  SQLite, which has one writer), 8 client threads on keep-alive connections, each sending
  `POST /v1/workloads` for one replica of one device: `workloads_per_s` counts only the 201 answers
  whose workload has `placedReplicas` 1, over the wall time. Each client acts as its own project
  (acme and seven teams offered every pool), as a fleet's tenants do; a project's creates are
  serialised by its workload lock (its quota is counted under it), so
  `workloads_per_s_one_project` is the same run with every client acting as acme.

The required keys (`preview_p50_ms`, `preview_p99_ms`, `workloads_per_s`) are the last database's
figures (PostgreSQL by default); each database's figures are under its name as well.

    python bench/placement.py           # 100 clusters x 100 nodes x 8 GPUs (80,000 GPUs)
    python bench/placement.py --quick   # 20 clusters x 50 nodes x 8 GPUs, under a minute
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import (
    fleet_parser,
    machine_speed_s,
    percentile,
    postgres_database,
    sqlite_database,
)
from bench.reservations import ADMIN, connect, exchange, server
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.placement.commands import parse_workload
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.entrypoints.server import build_services
from better_compute.service.fleet import pools
from better_compute.service.placement import placement
from better_compute.service.tenancy import credentials
from better_compute.storage.store import Store

PROJECT = "acme"
TEAMS = tuple(f"team-{n}" for n in range(1, 8))
"""Seven more projects, each offered every pool: with acme, one project a client."""
DEVICE_CLASS = "h100-80gb-sxm"
CLIENTS = 8


def fleet(clusters: int, nodes: int, gpus: int) -> dict[str, object]:
    return {
        "tenants": [{"id": "platform"}, {"id": PROJECT}, *({"id": t} for t in TEAMS)],
        "deviceClasses": [
            {
                "name": DEVICE_CLASS,
                "class": "gpu",
                "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
            }
        ],
        "clusters": [
            {
                "name": f"c{c:03d}",
                "region": f"r{c % 4}",
                "nodes": [
                    {"name": f"c{c:03d}-n", "replicas": nodes, "gpus": {"model": "H100-80GB", "count": gpus}}
                ],
            }
            for c in range(clusters)
        ],
        "pools": [
            {
                "name": f"p-c{c:03d}",
                "cluster": f"c{c:03d}",
                "mode": "exclusive",
                "owner": PROJECT,
                "nodes": [f"c{c:03d}-n-{i + 1}" if nodes > 1 else f"c{c:03d}-n" for i in range(nodes)],
            }
            for c in range(clusters)
        ],
    }


def prepare(url: str, clusters: int, nodes: int, gpus: int) -> tuple[list[str], float]:
    """Load the fleet and offer every pool to the other projects; returns a token of each project
    (acme's first) and the seconds the load took."""
    store = Store.open(url)
    now = datetime.now(UTC)
    t0 = time.perf_counter()
    load_fleet(store, parse_fleet(fleet(clusters, nodes, gpus)), now, batch=250)
    loaded = time.perf_counter() - t0
    for c in range(clusters):
        for team in TEAMS:
            pools.offer(store, ADMIN, f"p-c{c:03d}", team, {"gpu": nodes * gpus}, now)
    ids = RandomIds()
    tokens = [
        credentials.create(store, ADMIN, project, "bench", now, new_id=ids.credential).token
        for project in (PROJECT, *TEAMS)
    ]
    store.close()
    return tokens, loaded


def direct_figures(url: str, count: int) -> dict[str, Any]:
    """`count` calls of `placement.preview` in this process (no HTTP), after one that warms the
    caches; latencies in ms."""
    store = Store.open(url, migrate_schema=False)
    services = build_services(store)
    spec = parse_workload(
        {"name": "preview", "shape": {"deviceClass": DEVICE_CLASS, "deviceCount": 8}, "replicas": 4}, PROJECT
    )
    principal = Principal(tenant_id=None, is_admin=True, credential_id="bench")
    try:
        direct_ms: list[float] = []
        for n in range(count + 1):
            t0 = time.perf_counter()
            placement.preview(store, services.index, services.stock, principal, spec, datetime.now(UTC))
            if n:
                direct_ms.append((time.perf_counter() - t0) * 1000)
    finally:
        store.close()
    return {
        "direct_p50_ms": round(statistics.median(direct_ms), 2),
        "direct_p99_ms": round(percentile(direct_ms, 0.99), 2),
    }


def post(host: str, token: str, path: str, body: object) -> bytes:
    """A JSON POST as bytes on the wire, made before the clock starts."""
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


def http_previews(base: str, token: str, count: int) -> dict[str, Any]:
    """`count` previews through the server on one keep-alive connection, timed from the request's
    first byte to the answer's last, after one that warms the process's caches (the booking index,
    each pool's free devices); `healthz_p50_ms` is the same loop's floor (a request that does
    nothing)."""
    host = httpx.URL(base).netloc.decode()
    shape = {"shape": {"device_class": DEVICE_CLASS, "device_count": 8}, "replicas": 4}
    preview = post(host, token, "/v1/placement/preview", shape)
    health = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    sock = connect(base)
    pending = b""
    http_ms: list[float] = []
    health_ms: list[float] = []
    shares: dict[str, int] = {}
    try:
        for n in range(count + 1):
            t0 = time.perf_counter()
            head, answer, pending = exchange(sock, preview, pending)
            elapsed = (time.perf_counter() - t0) * 1000
            if head[9:12] != b"200":
                raise RuntimeError(f"preview answered {head[:12]!r}: {answer[:300]!r}")
            if n:
                http_ms.append(elapsed)
            else:
                shares = json.loads(answer)["shares"]
        for _ in range(count):
            t0 = time.perf_counter()
            head, answer, pending = exchange(sock, health, pending)
            health_ms.append((time.perf_counter() - t0) * 1000)
    finally:
        sock.close()
    return {
        "preview_p50_ms": round(statistics.median(http_ms), 2),
        "preview_p99_ms": round(percentile(http_ms, 0.99), 2),
        "healthz_p50_ms": round(statistics.median(health_ms), 2),
        "previews": len(http_ms),
        "preview_shares": shares,
    }


def workload_requests(base: str, token: str, client: int, count: int) -> list[bytes]:
    """The client's requests, as bytes on the wire, made before the clock starts."""
    host = httpx.URL(base).netloc.decode()
    body = {"shape": {"device_class": DEVICE_CLASS, "device_count": 1}, "replicas": 1}
    return [
        post(host, token, "/v1/workloads", {"name": f"w{client * 1_000_000 + n}", **body})
        for n in range(count)
    ]


def client_loop(base: str, requests: list[bytes], placed: list[int], errors: list[str]) -> None:
    """One client on one keep-alive connection (as `bench/reservations.py`'s), reading each answer
    whole: a 201 counts when its workload has its one replica placed."""
    sock = connect(base)
    pending = b""
    try:
        for request in requests:
            head, answer, pending = exchange(sock, request, pending)
            if head[9:12] == b"201" and json.loads(answer).get("placedReplicas") == 1:
                placed.append(1)
            else:
                errors.append((head[:12] + b" " + answer[:200]).decode(errors="replace"))
    finally:
        sock.close()


def run_clients(base: str, tokens: list[str], total: int, offset: int) -> dict[str, Any]:
    """`CLIENTS` clients sending `total` creates in all; client c acts as project c of `tokens`
    (modulo their number)."""
    per = total // CLIENTS
    placed: list[int] = []
    errors: list[str] = []
    requests = [workload_requests(base, tokens[c % len(tokens)], offset + c, per) for c in range(CLIENTS)]
    threads = [
        threading.Thread(target=client_loop, args=(base, requests[c], placed, errors)) for c in range(CLIENTS)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return {
        "workloads_per_s": round(len(placed) / elapsed, 1),
        "workloads": len(placed),
        "seconds": round(elapsed, 2),
        "errors": len(errors),
        **({"first_error": errors[0]} if errors else {}),
    }


def bench_database(
    url: str, clusters: int, nodes: int, gpus: int, previews: int, total: int, workers: int
) -> dict[str, Any]:
    tokens, loaded = prepare(url, clusters, nodes, gpus)
    results: dict[str, Any] = {"load_s": round(loaded, 1), **direct_figures(url, previews)}
    with server(url, workers) as base:
        results.update(http_previews(base, tokens[0], previews))
        run_clients(base, tokens, CLIENTS * 8, offset=100)  # warm every worker's caches
        one = run_clients(base, tokens[:1], total, offset=200)
        results.update({f"{k}_one_project": v for k, v in one.items()})
        results.update(run_clients(base, tokens, total, offset=0))
    return results


def main() -> None:
    parser = fleet_parser(__doc__)
    parser.add_argument("--clusters", type=int, default=None)
    parser.add_argument("--previews", type=int, default=None)
    parser.add_argument("--workloads", type=int, default=None)
    parser.add_argument(
        "--workers", type=int, default=None, help="server processes (default: 2 on PostgreSQL, 1 on SQLite)"
    )
    args = parser.parse_args()
    clusters = args.clusters or (20 if args.quick else 100)
    nodes = args.nodes or (50 if args.quick else 100)
    previews = args.previews or (100 if args.quick else 300)
    total = args.workloads or (400 if args.quick else 2000)
    results: dict[str, Any] = {
        "fleet": f"{clusters} clusters x {nodes} nodes x {args.gpus} GPUs",
        "clusters": clusters,
        "nodes": clusters * nodes,
        "gpus": clusters * nodes * args.gpus,
        "machine_loop_s": machine_speed_s(),
    }
    for db in args.databases.split(","):
        if db == "postgresql":
            with postgres_database(args.pg_url) as url:
                outcome = bench_database(url, clusters, nodes, args.gpus, previews, total, args.workers or 2)
        else:
            with tempfile.TemporaryDirectory() as tmp, sqlite_database(Path(tmp)) as url:
                outcome = bench_database(url, clusters, nodes, args.gpus, previews, total, args.workers or 1)
        print(f"{db}: {outcome}", file=sys.stderr)
        results[db] = outcome
        for key in (
            "preview_p50_ms",
            "preview_p99_ms",
            "workloads_per_s",
            "workloads_per_s_one_project",
            "previews",
            "workloads",
        ):
            results[key] = outcome[key]
        results["database"] = db
    results["machine_loop_s_after"] = machine_speed_s()
    argv = " ".join(sys.argv[1:])
    print(f"fleet: {results['fleet']}", file=sys.stderr)
    print(f"command: python bench/placement.py{' ' + argv if argv else ''}", file=sys.stderr)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
