"""Server-side render time of each console page, on the demo fleet and on a large one.

Each page is asked for through the app in-process (`TestClient`: routing, the session check, the
reads and the template), as a logged-in fleet admin who sees everything (the login page, logged
out), after a few reservations so the pages have bookings to draw. The fleet and bookings pages
show a page of nodes at a time (16 and 4), so their cost does not grow with the fleet. The figure
is the median of several renders, in milliseconds. The goals: under 200 ms on the demo fleet, and
under 1 s with 1,000 nodes.

    python bench/console.py            # the demo fleet and 1,000 nodes (8 H100 each, all-1g.10gb)
    python bench/console.py --quick    # the demo fleet and 250 nodes, under a minute

The last line is JSON with one key, `render_ms`: per fleet (`demo`, `nodes_<N>`), page to ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import mig_fleet
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.server import build_app, build_services
from better_compute.service.tenancy import credentials
from better_compute.settings import Settings
from better_compute.storage.store import Store

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo-fleet.yaml"
PAGES = {
    "login": "/console/login",
    "fleet": "/console/fleet",
    "bookings": "/console/bookings?days=1",
    "usage": "/console/usage?days=1",
    "reserve": "/console/reserve",
    "placement": "/console/placement",
    "endpoints": "/console/endpoints",
    "events": "/console/events",
}


def measure(fleet: dict[str, object], pool: str, repeats: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        store = Store.open(f"sqlite:///{home}/bc.db")
        try:
            load_fleet(store, parse_fleet(fleet), NOW)
            ids = iter(range(10**9))
            services = build_services(store, clock=lambda: NOW)
            http = TestClient(build_app(services, Settings()))
            token = credentials.bootstrap_admin(
                store, NOW, new_id=lambda: f"cred-{next(ids)}", force=True
            ).token
            headers = {"Authorization": f"Bearer {token}"}
            quota = {"tenantId": "platform", "poolId": pool, "class": "gpu.mig", "limit": 64}
            if pool == "mig":
                http.put("/v1/quotas", json=quota, headers=headers)
            for _ in range(3):
                device = {"class": "gpu.mig" if pool == "mig" else "gpu", "count": 1}
                body = {"tenantId": "platform", "poolId": pool, "duration": "2h", "devices": [device]}
                made = http.post("/v1/reservations", json=body, headers=headers)
                assert made.status_code == 201, made.text
            answer = http.post("/console/login", data={"token": token}, follow_redirects=False)
            assert answer.status_code == 303, answer.text
            anonymous = TestClient(http.app)
            out = {}
            for name, path in PAGES.items():
                times = []
                for _ in range(repeats):
                    began = time.perf_counter()
                    page = (anonymous if name == "login" else http).get(path)
                    times.append((time.perf_counter() - began) * 1000)
                    assert page.status_code == 200, (path, page.status_code)
                out[name] = round(statistics.median(times), 1)
            return out
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="250 nodes instead of 1,000; under a minute")
    parser.add_argument("--nodes", type=int, help="nodes of the large fleet")
    args = parser.parse_args()
    nodes = args.nodes or (250 if args.quick else 1000)
    demo = measure(yaml.safe_load(DEMO.read_text()), "a100-exclusive", 5)
    large = measure(mig_fleet(nodes, 8), "mig", 3)
    print(f"demo fleet: {demo}", file=sys.stderr)
    print(f"{nodes} nodes: {large}", file=sys.stderr)
    print(f"command: python bench/console.py{' --quick' if args.quick else ''}", file=sys.stderr)
    print(json.dumps({"render_ms_demo": demo, f"render_ms_{nodes}_nodes": large}), file=sys.stderr)
    print(json.dumps({"render_ms": {"demo": demo, f"nodes_{nodes}": large}}))


if __name__ == "__main__":
    main()
