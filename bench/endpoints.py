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

- `invoke_p50_ms`, `invoke_p99_ms`: `endpoints.invoke` through the server to a local model server
  (a small asyncio HTTP server in a process of its own, answering `POST /invocations` at once), from
  64 concurrent clients; `invoke_overhead_p99_ms` is that p99 minus the p99 of the same clients
  calling the model server directly, measured in the same run, alternately. Goal: under 5 ms.
- `placed_to_ready_s`: from `components.create` answering with its copies placed to the first
  `invoke` a copy answers. No runtime starts the copies' containers yet, so the bench writes each
  copy's `ReplicaState` (`ready`, the model server's address) into the database itself as soon as
  the create answers, as a node's report would: this times the report's arrival to routing, not a
  container's start.

    python bench/endpoints.py            # in_service_s for 2 instances, relayout_s for 4
    python bench/endpoints.py --quick    # the relayout of 2 instances, fewer invokes; under a minute
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
from bench.reservations import free_port
from better_compute.client import Compute
from better_compute.domain.endpoints.endpoints import copy_allocation_id
from better_compute.domain.fleet.replica_states import ReplicaState
from better_compute.storage.store import Store

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


CLIENTS = 64
ANSWER = b'{"generated_text": "ok"}'


def model_server(port: int) -> None:
    """A model server answering every request at once with `ANSWER` (HTTP/1.1, kept alive)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(ANSWER)}\r\n\r\n"
        try:
            while True:
                lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
                length = next(
                    (int(x.split(b":")[1]) for x in lines if x.lower().startswith(b"content-length:")), 0
                )
                await reader.readexactly(length)
                writer.write(head.encode() + ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


async def _load(url: str, headers: dict[str, str], total: int) -> list[float]:
    """`total` requests from `CLIENTS` concurrent clients (each one keeps its connection); each one's
    latency in ms."""
    import httpx

    times: list[float] = []

    async def client(n: int) -> None:
        async with httpx.AsyncClient(headers=headers, trust_env=False, timeout=30) as http:
            for _ in range(n):
                started = time.perf_counter()
                try:
                    answer = await http.post(url, content=b'{"inputs": "hi"}')
                except httpx.HTTPError as exc:
                    raise RuntimeError(f"{url}: {type(exc).__name__} {exc}") from exc
                times.append((time.perf_counter() - started) * 1000)
                if answer.status_code != 200 or answer.content != ANSWER:
                    raise RuntimeError(f"{url}: {answer.status_code} {answer.text[:200]}")

    await asyncio.gather(*(client(total // CLIENTS) for _ in range(CLIENTS)))
    return times


def _p(times: list[float], q: float) -> float:
    return statistics.quantiles(times, n=100, method="inclusive")[int(q) - 1]


def invoke_bench(compute: Compute, base: str, token: str, db_url: str, requests: int) -> dict[str, Any]:
    """Create a component of 2 copies on the first endpoint, point its copies at a local model server,
    and time `invoke` through the server against calling the model server directly."""
    port = free_port()
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r});"
    code += f" from bench.endpoints import model_server; model_server({port})"
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env())
    store = Store.open(db_url, migrate_schema=False)
    try:
        direct = f"http://127.0.0.1:{port}/invocations"
        _until(lambda: _answers(direct), 30, "the model server answering")
        started = time.perf_counter()
        made = compute.components.create(
            name="bench-model", endpoint_name="timed", model="m", partition_type="mig-2g.20gb", copies=2
        )
        with store.begin() as tx:
            for c in made.copies:
                if c.node is not None:
                    at = datetime.now(UTC)
                    state = ReplicaState(
                        copy_allocation_id("bench-model", c.index),
                        c.node,
                        "ready",
                        at,
                        address=f"127.0.0.1:{port}",
                    )
                    tx.replica_states.put(state)
        while compute.endpoints.invoke("timed", "bench-model", b"{}")[0] != 200:
            time.sleep(POLL_S)
        placed_to_ready = time.perf_counter() - started
        ours = f"{base}/v1/endpoints/timed/invoke"
        headers = {"Authorization": f"Bearer {token}", "X-Amzn-SageMaker-Inference-Component": "bench-model"}
        asyncio.run(_load(direct, {}, CLIENTS * 4))  # warm both paths' connections
        asyncio.run(_load(ours, headers, CLIENTS * 4))
        mine: list[float] = []
        theirs: list[float] = []
        for _ in range(2):  # alternately, so that a slow moment of the machine falls on both
            theirs += asyncio.run(_load(direct, {}, requests // 2))
            mine += asyncio.run(_load(ours, headers, requests // 2))
    except Exception:
        log = Path(db_url.removeprefix("sqlite:///")).with_name("server.log")
        sys.stderr.write(log.read_text(encoding="utf-8", errors="replace")[-3000:])
        raise
    finally:
        store.close()
        proc.terminate()
        proc.wait(10)
    return {
        "invoke_requests": len(mine),
        "invoke_clients": CLIENTS,
        "direct_p50_ms": round(_p(theirs, 50), 3),
        "direct_p99_ms": round(_p(theirs, 99), 3),
        "invoke_p50_ms": round(_p(mine, 50), 3),
        "invoke_p99_ms": round(_p(mine, 99), 3),
        "invoke_overhead_p99_ms": round(_p(mine, 99) - _p(theirs, 99), 3),
        "placed_to_ready_s": round(placed_to_ready, 3),
    }


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.post(url, content=b"{}", trust_env=False).status_code == 200
    except httpx.TransportError:
        return False


def run(relayout_instances: int, requests: int = 12_800) -> dict[str, Any]:
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
        invoked = invoke_bench(compute, base, token, f"sqlite:///{Path(tmp) / 'bc.db'}", requests)
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
    result = run(instances, 3_200 if args.quick else 12_800)
    print(json.dumps({**result, "machine_speed_s": round(speed, 4)}))  # the run's details
    keys = ("in_service_s", "relayout_s", "invoke_p50_ms", "invoke_p99_ms", "invoke_overhead_p99_ms")
    print(json.dumps({k: result[k] for k in (*keys, "placed_to_ready_s")}))


if __name__ == "__main__":
    main()
