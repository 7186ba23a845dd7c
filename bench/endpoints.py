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

- `placed_to_ready_s`: from `components.create` answering (its copies placed) to the component's
  `readyCopies` reaching its copies: each simulated node's runtime (`--runtime fake`: a container is a
  real local HTTP server) started the copy's container, probed it ready and reported it
  (`placed_to_first_invoke_s`: to the first `invoke` answered by a copy).
- `invoke_p50_ms`, `invoke_p99_ms`: `endpoints.invoke` through the server to a model server (a small
  asyncio HTTP server in a process of its own, answering `POST /invocations` at once), from 64
  concurrent clients in a load generator of its own (`bench/invoke_load.py`, raw asyncio streams,
  kept-alive connections, warmed first); `direct_p50_ms`, `direct_p99_ms`: the same clients calling
  the model server directly, in alternating rounds of the same run, so that the machine's noise falls
  on both; `invoke_overhead_p50_ms`/`invoke_overhead_p99_ms` are the differences (goal for p99: 5 ms),
  and `one_client_overhead_p50_ms`/`_p99_ms` the same for one client alone (no queueing). For this the
  ready copies' addresses are pointed at that model server in the database, as a node's report would
  say, since the fake runtime's servers are threads of the server process and would be timed with it.

    python bench/endpoints.py            # in_service_s for 2 instances, relayout_s for 4
    python bench/endpoints.py --quick    # the relayout of 2 instances, fewer invokes; under a minute
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bcd import _env, _healthy, _stop, _until
from bench.fleetgen import machine_speed_s, mig_fleet
from bench.invoke_load import ANSWER
from bench.reservations import free_port
from better_compute.client import Compute
from better_compute.client import UnavailableError as Unavailable
from better_compute.domain.endpoints.endpoints import copy_allocation_id
from better_compute.domain.fleet.replica_states import ReplicaState
from better_compute.storage.store import Store
from better_compute.wire.invocations import COMPONENT_HEADER

LAYOUT = ["mig-3g.40gb", "mig-2g.20gb", "mig-2g.20gb"]
RELAYOUT = ["mig-2g.20gb", "mig-2g.20gb", "mig-2g.20gb"]
POLL_S = 0.02
GIVE_UP_S = 60.0


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
        "--runtime",
        "fake",
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


CLIENTS = 64


def _p(times: list[float], q: int) -> float:
    return statistics.quantiles(times, n=100, method="inclusive")[q - 1]


def _until_ready(compute: Compute, component: str, copies: int) -> None:
    started = time.perf_counter()
    while compute.components.get(component).ready_copies < copies:
        if time.perf_counter() - started > GIVE_UP_S:
            raise RuntimeError(f"component {component} had no {copies} ready copies in {GIVE_UP_S:.0f} s")
        time.sleep(POLL_S)


def _first_invoke(compute: Compute) -> None:
    started = time.perf_counter()
    last: object = None
    while True:
        try:
            last = compute.endpoints.invoke("timed", "bench-model", b"{}")
            if last[0] == 200:
                return
        except Unavailable as exc:
            last = exc
        if time.perf_counter() - started > GIVE_UP_S:
            raise RuntimeError(f"no invoke answered within {GIVE_UP_S:.0f} s: {last}")
        time.sleep(POLL_S)


def invoke_bench(compute: Compute, base: str, token: str, db_url: str, rounds: int) -> dict[str, Any]:
    """`placed_to_ready_s` for a component of 2 copies on the first endpoint, then `invoke` through the
    server against the model server directly, from `CLIENTS` clients in a process of their own."""
    started = time.perf_counter()
    made = compute.components.create(
        name="bench-model",
        endpoint_name="timed",
        model="m",
        partition_type="mig-2g.20gb",
        copies=2,
        container={"image": "localhost/bench-model:1"},
    )
    placed = time.perf_counter()
    _until_ready(compute, "bench-model", len(made.copies))
    ready = time.perf_counter()
    _first_invoke(compute)
    answered = time.perf_counter()
    port = free_port()
    here = str(Path(__file__).resolve().parent.parent)
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.invoke_load", "serve", str(port)], env=_env(), cwd=here
    )
    store = Store.open(db_url, migrate_schema=False)
    try:
        _until(lambda: _answers(f"http://127.0.0.1:{port}/invocations"), 30, "the model server answering")
        # The copies are ready on their nodes (the fake runtime's model servers, threads of the server
        # process); point them at the model server of a process of its own, as a node whose container
        # moved would report, so that what is timed is the server's path and not the fake's threads.
        with store.begin() as tx:
            for c in made.copies:
                assert c.node is not None
                at = datetime.now(UTC)
                address = f"127.0.0.1:{port}"
                tx.replica_states.put(
                    ReplicaState(
                        copy_allocation_id("bench-model", c.index), c.node, "ready", at, address=address
                    )
                )
        status, _, body = compute.endpoints.invoke("timed", "bench-model", b"{}")
        if status != 200 or body != ANSWER:
            raise RuntimeError(f"invoke did not reach the bench's model server: {status} {body[:200]!r}")
        host, our_port = base.removeprefix("http://").split(":")
        spec = {
            "clients": CLIENTS,
            "warmup_per_client": 5,
            "per_client_per_round": 5,
            "rounds": rounds,
            "alone": 200,
            "targets": {
                "direct": {"host": "127.0.0.1", "port": port, "path": "/invocations", "headers": {}},
                "ours": {
                    "host": host,
                    "port": int(our_port),
                    "path": "/v1/endpoints/timed/invoke",
                    "headers": {"Authorization": f"Bearer {token}", COMPONENT_HEADER: "bench-model"},
                },
            },
        }
        loaded = subprocess.run(
            [sys.executable, "-m", "bench.invoke_load", "load", json.dumps(spec)],
            check=False,
            env=_env(),
            cwd=here,
            capture_output=True,
            text=True,
            timeout=GIVE_UP_S,
        )
        out = json.loads(loaded.stdout.strip().splitlines()[-1]) if loaded.stdout.strip() else {}
        if loaded.returncode != 0 or "error" in out:
            raise RuntimeError(f"the load generator failed: {out.get('error')} {loaded.stderr[-2000:]}")
    except Exception:
        log = Path(db_url.removeprefix("sqlite:///")).with_name("server.log")
        sys.stderr.write(log.read_text(encoding="utf-8", errors="replace")[-3000:])
        raise
    finally:
        store.close()
        server.terminate()
        server.wait(10)
    direct, ours = out["loaded"]["direct"], out["loaded"]["ours"]
    alone_direct, alone_ours = out["alone"]["direct"], out["alone"]["ours"]
    return {
        "invoke_requests": len(ours),
        "direct_requests": len(direct),
        "invoke_clients": CLIENTS,
        "measured_s": round(out["measured_s"], 2),
        "direct_p50_ms": round(_p(direct, 50), 3),
        "direct_p99_ms": round(_p(direct, 99), 3),
        "invoke_p50_ms": round(_p(ours, 50), 3),
        "invoke_p99_ms": round(_p(ours, 99), 3),
        "invoke_overhead_p50_ms": round(_p(ours, 50) - _p(direct, 50), 3),
        "invoke_overhead_p99_ms": round(_p(ours, 99) - _p(direct, 99), 3),
        "one_client_overhead_p50_ms": round(_p(alone_ours, 50) - _p(alone_direct, 50), 3),
        "one_client_overhead_p99_ms": round(_p(alone_ours, 99) - _p(alone_direct, 99), 3),
        "placed_to_ready_s": round(ready - placed, 3),
        "placed_to_first_invoke_s": round(answered - placed, 3),
        "create_s": round(placed - started, 3),
    }


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.post(url, content=b"{}", trust_env=False).status_code == 200
    except httpx.TransportError:
        return False


def run(relayout_instances: int, rounds: int = 10) -> dict[str, Any]:
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
        invoked = invoke_bench(compute, base, token, f"sqlite:///{Path(tmp) / 'bc.db'}", rounds)
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
        **invoked,
    }


def main() -> None:
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="relayout 2 instances (under a minute)")
    parser.add_argument("--relayout-instances", type=int, default=None)
    args = parser.parse_args()
    instances = args.relayout_instances or (2 if args.quick else 4)
    speed = machine_speed_s()
    result = run(instances, 4 if args.quick else 10)
    machine = {
        "cpus": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 2),
        "machine_speed_s": round(speed, 4),
    }
    print(json.dumps({**result, **machine}))  # the run's details
    # The last line: the keys the benchmark's issues name, nothing else (the details are above).
    keys = ("in_service_s", "relayout_s", "invoke_p50_ms", "invoke_p99_ms", "invoke_overhead_p99_ms")
    print(json.dumps({k: result[k] for k in (*keys, "placed_to_ready_s")}))


if __name__ == "__main__":
    main()
