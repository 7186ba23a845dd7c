"""Replay in virtual time (docs/replay.md): how long `replay.run` takes over 1,000 requests.

A fleet of `--nodes` nodes of 8 H100s in one exclusive pool shared by four tenants, and `--requests`
requests over a week (seeded): three in four are workloads (1 to 8 replicas of 1, 2, 4 or 8
devices, priority `batch` (preemptible), `standard` or `prod`, living 1 to 48 hours, a third of them
scaled once), one in four are reservations of 1 to 8 GPUs for 1 to 24 hours. The replay runs them
through the server's own use cases on a throwaway SQLite store (`service.ops.replay.run`), once
with today's policy set and once with a floor of 16 devices for one tenant, as `--against` does.

The last line is JSON with `requests`, `replay_s` (the first run, the throwaway store and fleet
load included), `replay_cpu_s` (its CPU time: what a shared machine does not inflate), `against_s`,
`gpu_hours_granted`, `preemptions` and `requests_per_s`.

    python bench/policy_replay.py            # 1,000 requests, 32 nodes (256 GPUs)
    python bench/policy_replay.py --quick    # 100 requests, 8 nodes, under a minute
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.ops.replay import check_window, parse_demand, parse_policy_set
from better_compute.domain.tenancy.records import Quota
from better_compute.entrypoints.replay import scratch
from better_compute.service.ops import replay

T0 = datetime(2026, 11, 23, tzinfo=UTC)
TENANTS = ("acme", "globex", "initech", "umbrella")
CLASSES = [{"name": "batch", "priority": 1, "preemptible": True}, {"name": "prod", "priority": 100}]


def fleet(nodes: int) -> dict[str, Any]:
    return {
        "tenants": [{"id": t} for t in TENANTS],
        "deviceClasses": [
            {
                "name": "h100",
                "class": "gpu",
                "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
            }
        ],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [{"name": "n", "replicas": nodes, "gpus": {"model": "H100-80GB", "count": 8}}],
            }
        ],
        "pools": [
            {
                "name": "p1",
                "cluster": "c1",
                "mode": "exclusive",
                "owner": "acme",
                "nodes": [f"n-{i + 1}" for i in range(nodes)],
            }
        ],
    }


def demand(count: int, rng: random.Random) -> dict[str, Any]:
    week = 7 * 24 * 60
    asks: list[dict[str, Any]] = []
    for i in range(count):
        start = T0 + timedelta(minutes=rng.randrange(week))
        tenant = rng.choice(TENANTS)
        hours = rng.randint(1, 48)
        if rng.random() < 0.75:
            ask: dict[str, Any] = {
                "kind": "workload",
                "at": start.isoformat(),
                "tenant": tenant,
                "name": f"w{i}",
                "shape": {"deviceClass": "h100", "deviceCount": rng.choice((1, 1, 2, 4, 8))},
                "replicas": rng.randint(1, 8),
                "priorityClass": rng.choice(("batch", "batch", "standard", "prod")),
                "until": (start + timedelta(hours=hours)).isoformat(),
            }
            if rng.random() < 1 / 3:
                ask["scale"] = [
                    {"at": (start + timedelta(hours=hours / 2)).isoformat(), "replicas": rng.randint(0, 8)}
                ]
        else:
            ask = {
                "kind": "reservation",
                "at": start.isoformat(),
                "tenant": tenant,
                "pool": "p1",
                "devices": [{"class": "gpu", "count": rng.randint(1, 8)}],
                "end": (start + timedelta(hours=rng.randint(1, 24))).isoformat(),
            }
        asks.append(ask)
    return {"requests": asks}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.nodes = 100, 8
    rng = random.Random(args.seed)
    spec = parse_fleet(fleet(args.nodes))
    asked = parse_demand(demand(args.requests, rng))
    window = check_window(T0, T0 + timedelta(days=8))
    grants = tuple(Quota(t, "p1", "gpu", 8 * args.nodes, T0) for t in TENANTS if t != "acme")
    base = replay.Today(pool_quotas=grants)
    today = parse_policy_set({"priorityClasses": CLASSES})
    floor = parse_policy_set(
        {
            "priorityClasses": CLASSES,
            "quotas": [
                {
                    "tenantId": "globex",
                    "deviceClass": "h100",
                    "scope": "cluster",
                    "clusterId": "c1",
                    "guaranteedDevices": 8 * args.nodes,
                    "floorDevices": 16,
                }
            ],
        }
    )
    began, cpu = time.perf_counter(), time.process_time()
    first = replay.run(scratch, spec, base, today, asked, window)
    replay_s, cpu_s = time.perf_counter() - began, time.process_time() - cpu
    began = time.perf_counter()
    replay.run(scratch, spec, base, floor, asked, window, name="against")
    against_s = time.perf_counter() - began
    print(
        json.dumps(
            {
                "requests": args.requests,
                "nodes": args.nodes,
                "replay_s": round(replay_s, 2),
                "replay_cpu_s": round(cpu_s, 2),
                "against_s": round(against_s, 2),
                "gpu_hours_granted": first.overall.gpu_hours_granted,
                "preemptions": first.overall.preemptions,
                "requests_per_s": round(args.requests / replay_s, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
