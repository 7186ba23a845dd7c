"""The MIG layout gate on a big pool: how long it takes to schedule every node, and what it costs
the reservations made while it runs.

A mig pool of H100s (8 GPUs a node, `all-1g.10gb`: 7 atoms a GPU) is loaded through the real fleet
path into a fresh database, and 30% of its GPUs (chosen at random) are booked with 1 to 7 of their
instances each, by one tenant, ending 1 to 8 hours ahead (written straight into the ledger, as the
booking statements write them). The clock is fixed: no node reaches its scheduled time during the
run, so a node with bookings stays `scheduled`; an idle one is scheduled now and granted on the next
pass.

Then, in the same run:

- a reservation workload (one `gpu.mig` atom for 10 minutes from now, through the use case
  `reservations.create` with a booking index of its own, as a server admits them) is timed for
  `--reservations` reservations before the change: reservations/s before;
- the reservations made before are cancelled (released at their start), so that the ledger is the
  same for both (admission's work grows with the bookings a tenant holds over the window);
- `pools.update` sets the pool's layout to `mixed:3g.40gb+2x2g.20gb`, which gates every node, and a
  reconciler in a process of its own (as `serve` runs it: `entrypoints.reconciler_process`;
  `--in-thread` runs it in a thread of this process instead) drives `Reconciler.tick()` pass after
  pass, `INTERVAL` apart, until every node's gate is `scheduled` or `granted`: `schedule_all_s` is
  the wall time from the update to there, and the passes it took are reported (`ticks`);
- meanwhile the same number of reservations is made again, while those passes go on (every node
  stays gated, and each pass steps every node it leases): reservations/s during the gate, and how
  many of them were answered before the last node was scheduled (`while_scheduling`).

`ratio_during_gate` = reservations/s during / before (goal: at least 0.8). Reservations the gate
refuses (all of an idle node's atoms are held from now once it is scheduled) are counted apart.

The reconciler runs at `serve`'s duty for the database (`server_duty`: 0.25 of its time stepping
nodes on PostgreSQL, 0.1 on SQLite, whose one writer lock each step holds; `--duty` to try another)
and leases `--batch` nodes at most per pass (default: `serve`'s, 200). A node scheduled
for later is not leased, so passes go on to the nodes that have something to do.

    python bench/gate.py            # 1,000 nodes x 8 GPUs, 300 reservations before and during
    python bench/gate.py --quick    # 100 nodes, 200 reservations each, under a minute
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleetgen import PG_URL, load, machine_speed_s, percentile, postgres_database, sqlite_database
from bench.reservations import ADMIN
from better_compute.domain.gate import mig_gate as rules
from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.kernel.timewin import Window
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.fleet import pools
from better_compute.service.gate.mig_gate import BATCH, INTERVAL, Reconciler, server_duty
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.tenancy import quotas
from better_compute.storage.store import Store

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
NEW_LAYOUT = "mixed:3g.40gb+2x2g.20gb"
TENANT = "acme"
BOOKED_SHARE = 0.3


def book_share(store: Store, share: float, seed: int) -> dict[str, int]:
    """Book `share` of the pool's GPUs: 1 to 7 instances each, ending 1 to 8 hours from `NOW`."""
    rng = random.Random(seed)
    with store.read() as tx:
        atoms = tx.atoms.of_pool("mig")
    by_gpu: dict[str, list[str]] = {}
    node_of: dict[str, str] = {}
    for atom in atoms:
        if not atom.bookable or atom.cls != "gpu.mig":
            continue
        by_gpu.setdefault(atom.gpu_id, []).append(atom.id)
        node_of[atom.gpu_id] = atom.node
    chosen = rng.sample(sorted(by_gpu), round(share * len(by_gpu)))
    booked = 0
    with store.begin() as tx:
        for n, gpu_id in enumerate(chosen):
            instances = rng.sample(sorted(by_gpu[gpu_id]), rng.randint(1, len(by_gpu[gpu_id])))
            ends = NOW + timedelta(hours=1) + timedelta(seconds=rng.randrange(7 * 3600))
            tx.ledger.book(instances, Window(NOW, ends), f"bench-held-{n}", TENANT, NOW)
            booked += len(instances)
    return {
        "gpus": len(by_gpu),
        "gpus_booked": len(chosen),
        "instances_booked": booked,
        "nodes_with_bookings": len({node_of[g] for g in chosen}),
    }


class Conflicts:
    """Telemetry that counts the bookings the ledger refused (an atom taken first), each retried."""

    def __init__(self) -> None:
        self.count = 0

    def ledger_conflict(self) -> None:
        self.count += 1


def workload(store: Store, index: BookingIndex, count: int, tag: str) -> dict[str, Any]:
    """`count` reservations of one `gpu.mig` atom for 10 minutes from now, one after another
    (each one's end time under `ends`); refusals are counted apart."""
    ids = RandomIds()
    made = refused = 0
    made_ids: list[str] = []
    first_refusal: str | None = None
    conflicts = Conflicts()
    latencies: list[float] = []
    ends: list[float] = []
    t0 = time.perf_counter()
    for n in range(count):
        raw = {
            "poolId": "mig",
            "tenantId": TENANT,
            "devices": [{"class": "gpu.mig", "count": 1}],
            "duration": "10m",
            "idempotencyKey": f"bench-{tag}-{n}",
        }
        t = time.perf_counter()
        try:
            view = reservations.create(store, index, ADMIN, raw, NOW, ids.reservation, telemetry=conflicts)
            made += 1
            made_ids.append(view.id)
        except DomainError as refusal:
            refused += 1
            first_refusal = first_refusal or f"{type(refusal).__name__}: {refusal}"
        ends.append(time.perf_counter())
        latencies.append((ends[-1] - t) * 1000)
    elapsed = time.perf_counter() - t0
    return {
        "reservations": made,
        "refused": refused,
        "seconds": round(elapsed, 3),
        "per_s": round((made + refused) / elapsed, 1) if elapsed else 0.0,
        "p50_ms": round(percentile(latencies, 0.5), 2) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99), 2) if latencies else None,
        "ledger_conflicts": conflicts.count,
        "ends": ends,
        "ids": made_ids,
        **({"first_refusal": first_refusal[:200]} if first_refusal else {}),
    }


def gate_states(store: Store) -> dict[str, int]:
    with store.read() as tx:
        rows = tx.mig_layouts.all_rows()
    counts = dict.fromkeys(rules.STATES, 0)
    for gate in rows:
        counts[gate.state] += 1
    return counts


def drive(reconciler: Reconciler, store: Store, stop: threading.Event, out: dict[str, Any]) -> None:
    """Pass after pass, `INTERVAL` apart, as `serve` runs it, until `stop` is set and no gate is
    pending any more (or three passes in a row moved none while some still are: stalled)."""
    t0 = time.perf_counter()
    ticks = idle = 0
    in_ticks = 0.0
    stalled = False
    try:
        while True:
            t = time.perf_counter()
            taken = reconciler.tick()
            ended = time.perf_counter()
            in_ticks += ended - t
            ticks += 1
            if "schedule_all_s" not in out and not stalled:
                if gate_states(store)[rules.PENDING] == 0:
                    out["schedule_all_s"] = ended - t0
                    out["scheduled_at"] = ended
                    out["ticks"] = ticks
                else:
                    moved = sum(isinstance(s, rules.Schedule | rules.Grant) for s in taken.values())
                    idle = 0 if moved else idle + 1
                    stalled = idle >= 3
            if stop.is_set() and ("schedule_all_s" in out or stalled):
                break
            stop.wait(INTERVAL)
    finally:
        out["passes"] = ticks
        out["in_passes_s"] = round(in_ticks, 3)
        out["stalled"] = stalled
        out["states"] = gate_states(store)


def fixed_now() -> datetime:
    return NOW


def drive_process(url: str, batch: int, duty: float, go: Any, stop: Any, results: Any) -> None:
    """`drive` in a process of its own, as `serve` runs its reconciler: it says when it is ready,
    drives from `go` until `stop`, and puts what it measured (`scheduled_at` on the machine's
    monotonic clock, which every process reads alike)."""
    try:
        store = Store.open(url, migrate_schema=False, pool_size=2)
        try:
            reconciler = Reconciler(store, fixed_now, "bench", batch=batch, duty=duty)
            results.put("ready")
            go.wait()
            out: dict[str, Any] = {}
            drive(reconciler, store, stop, out)
            results.put(out)
        finally:
            store.close()
    except Exception as exc:  # the parent waits on the queue: tell it, rather than leave it waiting
        results.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


def _gate_in_process(
    store: Store, index: BookingIndex, url: str, count: int, batch: int, duty: float
) -> tuple[dict[str, Any], float, dict[str, Any]]:
    """The change, with the reconciler in a process of its own (as `serve` runs it) and the
    reservations made meanwhile: what the reconciler measured, when the change began, and the
    reservations' figures."""
    spawn = multiprocessing.get_context("spawn")
    go, stop, results = spawn.Event(), spawn.Event(), spawn.Queue()
    child = spawn.Process(target=drive_process, args=(url, batch, duty, go, stop, results), daemon=True)
    child.start()
    try:
        ready = results.get(timeout=120)
        if ready != "ready":
            raise RuntimeError(f"the reconciler process did not start: {ready}")
        t1 = time.perf_counter()
        pools.update(store, ADMIN, "mig", policy={"migLayout": NEW_LAYOUT}, now=NOW)
        go.set()
        try:
            during = workload(store, index, count, "during")
        finally:
            stop.set()
        gate: dict[str, Any] = results.get(timeout=3600)
        if "error" in gate:
            raise RuntimeError(f"the reconciler process failed: {gate['error']}")
    finally:
        go.set()
        stop.set()
        child.join(60)
    return gate, t1, during


def _gate_in_thread(
    store: Store, index: BookingIndex, url: str, count: int, batch: int, duty: float
) -> tuple[dict[str, Any], float, dict[str, Any]]:
    """The same with the reconciler in a thread of this process (`--in-thread`)."""
    reconciler = Reconciler(store, fixed_now, "bench", batch=batch, duty=duty)
    stop = threading.Event()
    gate: dict[str, Any] = {}
    t1 = time.perf_counter()
    pools.update(store, ADMIN, "mig", policy={"migLayout": NEW_LAYOUT}, now=NOW)
    thread = threading.Thread(target=drive, args=(reconciler, store, stop, gate))
    thread.start()
    try:
        during = workload(store, index, count, "during")
    finally:
        stop.set()
        thread.join()
    return gate, t1, during


def run(
    url: str,
    nodes: int,
    gpus: int,
    count: int,
    batch: int,
    seed: int,
    duty: float | None = None,
    in_thread: bool = False,
) -> dict[str, Any]:
    store = Store.open(url)
    try:
        t0 = time.perf_counter()
        load(store, nodes, gpus, NOW)
        with store.begin() as tx:
            quotas.write_rows(tx, TENANT, "mig", {"gpu.mig": 10_000_000}, NOW)
        booked = book_share(store, BOOKED_SHARE, seed)
        store.analyze()  # as autovacuum would have, long before a pool held this many bookings
        setup_s = round(time.perf_counter() - t0, 1)
        index = BookingIndex()
        workload(store, index, max(20, count // 10), "warm")  # the index and caches loaded
        before = workload(store, index, count, "before")
        before.pop("ends")
        for made in before.pop("ids"):  # the same ledger for both: every booking adds to each one's work
            reservations.release(store, ADMIN, made, NOW)  # at their start: cancelled

        duty = duty or server_duty(store.dialect)
        if in_thread:
            gate, t1, during = _gate_in_thread(store, index, url, count, batch, duty)
        else:
            gate, t1, during = _gate_in_process(store, index, url, count, batch, duty)
        scheduled_at = gate.pop("scheduled_at", None)
        if scheduled_at is not None:
            gate["schedule_all_s"] = round(scheduled_at - t1, 3)
        else:  # stalled: some nodes were never reached
            gate["schedule_all_s"] = None
            gate["ticks"] = None
        ends = during.pop("ends")
        during.pop("ids")
        during["while_scheduling"] = sum(1 for e in ends if scheduled_at is None or e <= scheduled_at)
        return {
            "nodes": nodes,
            "gpus_per_node": gpus,
            **booked,
            "setup_s": setup_s,
            "batch": batch,
            "duty": duty,
            **gate,
            "before": before,
            "during": during,
        }
    finally:
        store.close()


@contextmanager
def database(url: str | None) -> Iterator[str]:
    if url is None:
        with tempfile.TemporaryDirectory() as tmp, sqlite_database(Path(tmp)) as made:
            yield made
    elif url.startswith("postgresql"):
        admin = url.replace("postgresql+psycopg://", "postgresql://")
        with postgres_database(admin) as made:
            yield made.replace("postgresql://", "postgresql+psycopg://", 1)
    else:
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="100 nodes; finishes in under a minute")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--reservations", type=int, default=None, help="before, and again during")
    parser.add_argument(
        "--batch", type=int, default=BATCH, help=f"nodes the reconciler leases a pass (default: {BATCH})"
    )
    parser.add_argument(
        "--database-url",
        default=None,
        help=f"PostgreSQL server to make a throwaway database on (e.g. {PG_URL}); default: SQLite",
    )
    parser.add_argument(
        "--duty", type=float, default=None, help="the reconciler's duty (default: serve's for the database)"
    )
    parser.add_argument(
        "--in-thread", action="store_true", help="the reconciler in a thread of this process, not its own"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    nodes = args.nodes or (100 if args.quick else 1000)
    count = args.reservations or (200 if args.quick else 300)
    with database(args.database_url) as url:
        result = run(url, nodes, args.gpus, count, args.batch, args.seed, args.duty, args.in_thread)
    result["database"] = url.partition(":")[0].partition("+")[0]
    result["before_per_s"] = result["before"]["per_s"]
    result["during_per_s"] = result["during"]["per_s"]
    result["ratio_during_gate"] = round(result["during_per_s"] / result["before_per_s"], 3)
    result["machine_loop_s"] = machine_speed_s()
    print(f"command: python bench/gate.py{' --quick' if args.quick else ''}", file=sys.stderr)
    print(json.dumps(result))
    print(json.dumps({key: result[key] for key in ("schedule_all_s", "ratio_during_gate")}))


if __name__ == "__main__":
    main()
