"""Inference endpoints on simulated nodes: how long until an endpoint is `InService`, and how long a
live relayout takes.

A fleet of H100 nodes (8 GPUs each, `all-1g.10gb`; 2 more than the relayout's instances) in one
mig pool is served by a real `better-compute
serve --fleet FILE` on loopback over a fresh SQLite database, as `make run` serves the demo: each node
has a simulated `bcd run` loop (fake NVML) talking HTTP to the server, and the layout gate's
reconciler runs beside it. Then, timed from the answer to the request to the endpoint reading
`InService` (polled every 20 ms):

- `in_service_s`: `endpoints.create` of 2 instances x 8 GPUs split `3g.40gb + 2 x 2g.20gb` (both
  nodes cut through the gate by their daemons, then handed to the endpoint). Goal: under 5 s
  (SageMaker adds about 17 s for partitioning alone);
- `relayout_s`: `endpoints.update` of an endpoint of `--relayout-instances` instances (4; 2 with
  `--quick`) to `3 x 2g.20gb`, with a component of one copy per instance on `mig-2g.20gb` whose
  copies move off each instance before it is re-cut: every instance re-cut in turn.

    python bench/endpoints.py            # in_service_s for 2 instances, relayout_s for 4
    python bench/endpoints.py --quick    # the relayout of 2 instances; under a minute
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bcd import _env, _healthy, _stop, _until
from bench.fleetgen import machine_speed_s, mig_fleet
from bench.reservations import free_port
from better_compute.client import Compute

LAYOUT = ["mig-3g.40gb", "mig-2g.20gb", "mig-2g.20gb"]
RELAYOUT = ["mig-2g.20gb", "mig-2g.20gb", "mig-2g.20gb"]
POLL_S = 0.02
GIVE_UP_S = 120.0


@contextmanager
def serving(root: Path, nodes: int) -> Iterator[tuple[str, str]]:
    """`serve --fleet` over a fresh SQLite database in `root`; (base URL, fleet-admin token)."""
    fleet = root / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(mig_fleet(nodes, 8)), encoding="utf-8")
    url = f"sqlite:///{root / 'bc.db'}"
    port = free_port()
    cli = str(Path(sys.executable).with_name("better-compute"))
    args = [
        cli,
        "serve",
        "--database-url",
        url,
        "--port",
        str(port),
        "--fleet",
        str(fleet),
        "--no-access-log",
    ]
    with (root / "server.log").open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=root)
    base = f"http://127.0.0.1:{port}"
    try:
        _until(lambda: _healthy(base), 60, "the server answering /healthz")
        boot = subprocess.run(
            [cli, "admin", "bootstrap", "--database-url", url],
            capture_output=True,
            text=True,
            env=_env(),
            check=True,
        )
        yield base, boot.stdout.strip().splitlines()[-1]
    finally:
        _stop(proc)


def _wait_in_service(compute: Compute, name: str) -> float:
    """Seconds until the endpoint reads `InService` (polled every `POLL_S`)."""
    started = time.perf_counter()
    while time.perf_counter() - started < GIVE_UP_S:
        if compute.endpoints.get(name).status == "InService":
            return time.perf_counter() - started
        time.sleep(POLL_S)
    raise RuntimeError(f"endpoint {name} was not InService within {GIVE_UP_S:.0f} s")


def _variant(instances: int, types: list[str]) -> dict[str, Any]:
    return {
        "name": "AllTraffic",
        "poolId": "mig",
        "instanceCount": instances,
        "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": types}],
    }


def run(relayout_instances: int) -> dict[str, Any]:
    nodes = 2 + relayout_instances  # the first endpoint keeps its two
    with (
        tempfile.TemporaryDirectory() as tmp,
        serving(Path(tmp), nodes) as (base, token),
        Compute(base, token, timeout=60) as compute,
    ):
        # Every node's simulated daemon has reported (its first spec observed) before timing.
        _until(
            lambda: all(n["observedGeneration"] > 0 for n in compute.nodes.list(limit=1000).items),
            60,
            "every node reporting",
        )
        started = time.perf_counter()
        compute.endpoints.create(name="timed", tenant_id="platform", variants=[_variant(2, LAYOUT)])
        in_service = time.perf_counter() - started + _wait_in_service(compute, "timed")
        compute.endpoints.create(
            name="rolled", tenant_id="platform", variants=[_variant(relayout_instances, LAYOUT)]
        )
        _wait_in_service(compute, "rolled")
        compute.components.create(
            name="model",
            endpoint_name="rolled",
            model="llama-3-8b",
            partition_type="mig-2g.20gb",
            copies=relayout_instances,
            min_copies=max(1, relayout_instances - 1),
        )
        started = time.perf_counter()
        compute.endpoints.update("rolled", {"AllTraffic": RELAYOUT})
        relayout = time.perf_counter() - started + _wait_in_service(compute, "rolled")
        placed = compute.components.get("model").placed_copies
    return {
        "nodes": nodes,
        "gpus_per_node": 8,
        "in_service_instances": 2,
        "relayout_instances": relayout_instances,
        "copies_placed_after": placed,
        "in_service_s": round(in_service, 3),
        "relayout_s": round(relayout, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="relayout 2 instances (under a minute)")
    parser.add_argument("--relayout-instances", type=int, default=None)
    args = parser.parse_args()
    instances = args.relayout_instances or (2 if args.quick else 4)
    speed = machine_speed_s()
    result = run(instances)
    print(json.dumps({**result, "machine_speed_s": round(speed, 4)}))  # the run's details
    print(json.dumps({"in_service_s": result["in_service_s"], "relayout_s": result["relayout_s"]}))


if __name__ == "__main__":
    main()
