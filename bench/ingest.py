"""Ingesting a fleet's first reports on PostgreSQL: from a fleet file, and from `bcd` processes.

A fleet of N nodes (8 H100 each, `all-1g.10gb`: 64 atoms a node) is measured two ways, each on a
fresh database:

- `fleet_file_s`: `load_fleet` as `serve --fleet` runs it: register the file, simulate each node and
  ingest the reports in batches, one transaction per batch.
- `bcd_reports_s`: the nodes are registered and joined (each with its own Ed25519 key), a real
  `serve --workers 2` is started, and every node's first inventory report is sent signed, as `bcd`
  sends it, by `--clients` concurrent connections (the requests built and signed before the clock
  starts); the time until every one is accepted. The server writes the reports that arrive while it
  writes others in one batch (`service.fleet.report_batches`).

Goal: 10,000 nodes in under 60 s both ways.

    python bench/ingest.py            # 10,000 nodes
    python bench/ingest.py --quick    # 1,000 nodes, under a minute
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import PG_URL, machine_speed_s, mig_fleet, postgres_database
from bench.reservations import connect, exchange, server_process
from better_compute.bcd.identity import public_key_text
from better_compute.bcd.inventory import report_json
from better_compute.domain.fleet.node_reports import (
    HEADER_NODE,
    HEADER_SEQUENCE,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    signed_bytes,
)
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet, simulated_nodes
from better_compute.service.fleet import joining
from better_compute.storage.store import Store


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fleet_file(url: str, nodes: int) -> float:
    store = Store.open(url)
    spec = parse_fleet(mig_fleet(nodes, 8))
    t0 = time.perf_counter()
    load_fleet(store, spec, datetime.now(UTC))
    elapsed = time.perf_counter() - t0
    store.close()
    return elapsed


def joined_reports(url: str, nodes: int, host: str) -> list[bytes]:
    """Register the fleet (no reports), join every node with a key of its own, and build each node's
    first inventory report as `bcd` sends it, signed, with a `reportId`."""
    store = Store.open(url)
    spec = parse_fleet(mig_fleet(nodes, 8))
    now = datetime.now(UTC)
    load_fleet(store, spec, now, simulate=False)
    out = []
    for fake in simulated_nodes(spec):
        key = Ed25519PrivateKey.generate()
        token = joining.issue_in_process(store, fake.name, now).token
        joining.join(store, fake.name, token, public_key_text(key), now)
        # With a reportId of its own, as `bcd` sends every report it queued (bcd.queue).
        body = json.dumps({**report_json(fake.report()), "reportId": str(uuid.uuid4())}).encode()
        target = f"/v1/nodes/{fake.name}/reports"
        stamp = int(time.time())
        signature = key.sign(signed_bytes("POST", target, fake.name, stamp, 1, body))
        head = (
            f"POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{HEADER_NODE}: {fake.name}\r\n{HEADER_TIMESTAMP}: {stamp}\r\n"
            f"{HEADER_SEQUENCE}: 1\r\n{HEADER_SIGNATURE}: {base64.b64encode(signature).decode()}\r\n\r\n"
        )
        out.append(head.encode() + body)
    store.close()
    return out


def send_all(base: str, requests: list[bytes], clients: int) -> tuple[float, list[str]]:
    """Send the requests, `clients` at a time, each on a connection of its own as each node's `bcd`
    sends it; (seconds, errors)."""
    errors: list[str] = []

    def client(share: list[bytes]) -> None:
        for request in share:
            sock = connect(base)
            try:
                head, answer, _ = exchange(sock, request, b"")
            finally:
                sock.close()
            if head[9:12] != b"200":
                errors.append((head[:12] + b" " + answer[:300]).decode(errors="replace"))

    threads = [threading.Thread(target=client, args=(requests[c::clients],)) for c in range(clients)]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - t0, errors


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1,000 nodes; under a minute")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--clients", type=int, default=64, help="concurrent connections sending reports")
    parser.add_argument("--pg-url", default=PG_URL)
    args = parser.parse_args()
    nodes = args.nodes or (1000 if args.quick else 10_000)
    log(f"machine loop: {machine_speed_s()} s")
    with postgres_database(args.pg_url) as url:
        file_s = fleet_file(url, nodes)
    log(f"fleet file: {nodes} nodes in {file_s:.1f} s ({nodes / file_s:.0f} nodes/s)")
    results: dict[str, Any] = {"nodes": nodes, "fleet_file_s": round(file_s, 2)}
    with postgres_database(args.pg_url) as url:
        t0 = time.perf_counter()
        requests = joined_reports(url, nodes, "127.0.0.1")
        log(f"{nodes} nodes joined and their reports signed in {time.perf_counter() - t0:.1f} s")
        with server_process(url, workers=2) as (base, _, _):
            bcd_s, errors = send_all(base, requests, args.clients)
    if errors:
        raise SystemExit(f"{len(errors)} reports refused; the first: {errors[0]}")
    log(
        f"bcd reports: {nodes} nodes in {bcd_s:.1f} s ({nodes / bcd_s:.0f} reports/s, {args.clients} clients)"
    )
    results["bcd_reports_s"] = round(bcd_s, 2)
    log(f"command: python bench/ingest.py{' --quick' if args.quick else ''}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
