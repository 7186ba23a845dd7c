"""Reservations through the HTTP API: reservations per second and p50/p99 latency.

A fleet of MIG nodes (H100, all-1g.10gb: 7 atoms per GPU) is loaded, a real server process is started
on loopback, and clients reserve one `gpu.mig` atom each for a random 1-hour window in the next 90
days, with 1 and with 8 concurrent clients (client n acts as tenant n), on SQLite and on PostgreSQL.
The server runs with access logging off and `--workers 2` on PostgreSQL (one process per core) or
`--workers 1` on SQLite (one writer: a second process would only wait on the file lock).

    python bench/reservations.py           # 1,000 nodes x 8 GPUs (56,000 MIG atoms)
    python bench/reservations.py --quick   # a small fleet, under a minute
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import (
    fleet_parser,
    load,
    machine_speed_s,
    percentile,
    postgres_database,
    sqlite_database,
)
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.tenancy import credentials, quotas, tenants
from better_compute.storage.store import Store

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="bench")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepare(url: str, nodes: int, gpus: int, tenant_count: int = 8) -> list[str]:
    """Load the fleet and give each benchmark tenant a token and room to book; returns the tokens."""
    store = Store.open(url)
    now = datetime.now(UTC)
    ids = RandomIds()
    load(store, nodes, gpus, now)
    tokens = []
    for n in range(tenant_count):
        tenant = f"bench-{n}"
        tenants.create(store, ADMIN, tenant, f"Benchmark tenant {n}", now)
        with store.begin() as tx:
            quotas.write_rows(tx, tenant, "mig", {"gpu.mig": 10_000_000}, now)
        tokens.append(credentials.create(store, ADMIN, tenant, "bench", now, new_id=ids.credential).token)
    store.close()
    return tokens


@contextmanager
def server_process(url: str, workers: int = 1) -> Iterator[tuple[str, int, float]]:
    """`serve --workers N` on the database, once `/readyz` answers; yields its address, pid and the
    seconds it took to be ready."""
    port = free_port()
    cli = Path(sys.executable).with_name("better-compute")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [
            str(cli),
            "serve",
            "--database-url",
            url,
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--no-access-log",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become ready")
            time.sleep(0.05)
        yield base, proc.pid, time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@contextmanager
def server(url: str, workers: int = 1) -> Iterator[str]:
    """`server_process`'s address alone."""
    with server_process(url, workers) as (base, _, _):
        yield base


def reservation_requests(base: str, token: str, count: int, seed: int) -> list[bytes]:
    """The client's requests, as bytes on the wire, made before the clock starts."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    host = httpx.URL(base).netloc.decode()
    out = []
    for n in range(count):
        start = (now + timedelta(hours=1 + rng.randrange(0, 24 * 90))).replace(
            minute=0, second=0, microsecond=0
        )
        body = json.dumps(
            {
                "poolId": "mig",
                "devices": [{"class": "gpu.mig", "count": 1}],
                "start": start.isoformat(),
                "duration": "1h",
                "idempotencyKey": f"bench-{seed}-{n}",
            }
        ).encode()
        head = (
            f"POST /v1/reservations HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        out.append(head.encode() + body)
    return out


_LENGTH = re.compile(rb"(?im)^content-length:\s*(\d+)")


def connect(base: str) -> socket.socket:
    """A keep-alive connection to the server, with Nagle off (requests are one write each)."""
    address = httpx.URL(base)
    sock = socket.create_connection((address.host, address.port or 80), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def exchange(sock: socket.socket, request: bytes, pending: bytes) -> tuple[bytes, bytes, bytes]:
    """Send one request on a keep-alive connection and read just enough to find the end of its
    answer: (head, body, what was read past it)."""
    sock.sendall(request)
    while b"\r\n\r\n" not in pending:
        pending += _recv(sock)
    head, _, pending = pending.partition(b"\r\n\r\n")
    found = _LENGTH.search(head)
    length = int(found.group(1)) if found else 0
    while len(pending) < length:
        pending += _recv(sock)
    return head, pending[:length], pending[length:]


def client_loop(base: str, requests: list[bytes], out: list[float], errors: list[str]) -> None:
    """One client on one keep-alive connection, sending prepared requests and reading just enough of
    each answer to find its end. The load generator shares the machine's two cores with the server
    and PostgreSQL: the less time it takes, the more of them the server gets (as with wrk)."""
    sock = connect(base)
    pending = b""
    try:
        for request in requests:
            t0 = time.perf_counter()
            head, answer, pending = exchange(sock, request, pending)
            out.append((time.perf_counter() - t0) * 1000)
            if head[9:12] != b"201":
                errors.append((head[:12] + b" " + answer[:200]).decode(errors="replace"))
    finally:
        sock.close()


def _recv(sock: socket.socket) -> bytes:
    data = sock.recv(65536)
    if not data:
        raise ConnectionError("the server closed the connection")
    return data


def run_clients(base: str, tokens: list[str], clients: int, total: int, seed: int) -> dict[str, Any]:
    """`clients` threads, client c acting as tenant c (a tenant's own requests are serialised by its
    quota lock; different tenants admit in parallel)."""
    per = total // clients
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    requests = [
        reservation_requests(base, tokens[c % len(tokens)], per, seed * 100 + c) for c in range(clients)
    ]
    threads = [
        threading.Thread(target=client_loop, args=(base, requests[c], latencies[c], errors))
        for c in range(clients)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    flat = sorted(x for xs in latencies for x in xs)
    return {
        "reservations_per_s": round(len(flat) / elapsed, 1),
        "p50_ms": round(statistics.median(flat), 2),
        "p99_ms": round(percentile(flat, 0.99), 2),
        "requests": len(flat),
        "errors": len(errors),
        **({"first_error": errors[0]} if errors else {}),
    }


def bench_database(url: str, nodes: int, gpus: int, total: int, workers: int) -> dict[str, Any]:
    tokens = prepare(url, nodes, gpus)
    results: dict[str, Any] = {}
    with server(url, workers) as base:
        # Warm every worker's caches (its pool's atoms, prepared statements): each round opens fresh
        # connections, and which worker accepts a connection is up to the kernel.
        for round_ in range(4):
            run_clients(base, tokens, 8, max(8, min(400, total) // 4), seed=1 + round_)
        for clients in (1, 8):
            results[f"clients_{clients}"] = run_clients(base, tokens, clients, total, seed=clients + 10)
    return results


def main() -> None:
    parser = fleet_parser(__doc__)
    parser.add_argument("--reservations", type=int, default=None, help="per configuration")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="server processes (default: 2 on PostgreSQL, one per core; 1 on SQLite, which has one writer)",
    )
    args = parser.parse_args()
    nodes = args.nodes or (100 if args.quick else 1000)
    total = args.reservations or (400 if args.quick else 3000)
    results: dict[str, Any] = {
        "nodes": nodes,
        "gpus_per_node": args.gpus,
        "atoms": nodes * args.gpus * 7,
        "server_workers": args.workers or {"sqlite": 1, "postgresql": 2},
        "machine_loop_s": machine_speed_s(),
    }
    for db in args.databases.split(","):
        if db == "postgresql":
            with postgres_database(args.pg_url) as url:
                outcome = bench_database(url, nodes, args.gpus, total, args.workers or 2)
        else:
            with tempfile.TemporaryDirectory() as tmp, sqlite_database(Path(tmp)) as url:
                outcome = bench_database(url, nodes, args.gpus, total, args.workers or 1)
        for name, figures in outcome.items():
            results[f"{db}_{name}"] = figures
            print(f"{db} {name}: {figures}", file=sys.stderr)
    results["machine_loop_s_after"] = machine_speed_s()
    print(f"command: python bench/reservations.py{' --quick' if args.quick else ''}", file=sys.stderr)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
