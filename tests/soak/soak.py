"""The PostgreSQL soak: the node edge keeps the ledger's promises with real processes under chaos.

What runs, each a process of its own:
- `better-compute serve` on a PostgreSQL database of the run's own (its MIG layout gate reconciler
  runs in it), over a fleet registered without simulation: one mig pool `p1` of `nodes` H100 nodes
  of two GPUs each, owned by `platform`, with `acme` a second tenant;
- one `bcd run --nvml fake` per node, joined with its own key. The fake GPUs' MIG state is kept in
  the daemon's state directory, so it outlives a killed `bcd` as a real GPU's does;
- placers booking through the HTTP API whole GPUs (`gpu`) and MIG instances (`gpu.mig`), for now and
  for windows that start later, ending some at once (release, or cancel before the start);
- a flipper changing the pool's `migLayout` through `pools.update` (PATCH /v1/pools/p1), MIG-off
  (`all-disabled`) among the layouts;
- a churner creating tenants (quota, a credential of their own), booking as them, then ending their
  reservations (cancel or release, as the API asks) and deleting them;
- the chaos loop (in the runner, which owns the `bcd` processes): SIGKILL a node's `bcd` and start it
  again. Some restarts are reboots: the node's GPUs lose their MIG instances, as on a reboot, and
  come up MIG-off (an H100 loses MIG mode on reboot) or partitioned at a layout other than the pool's
  (a provisioning step that applied an older one), as a re-imaged node does. Nothing else is forged:
  every report the server reads is one a `bcd` made from its GPUs. A `bcd` that exits by itself is
  started again 2 s later, as systemd does (deploy/bcd.service), and counted as a crash.

The pool starts MIG-off (`first_layout`), so whole GPUs are booked from the start. Once the load
stops, every killed `bcd` is started again and the nodes are let settle: polled until every node has
observed the spec it was last given and no `bcd` says a GPU is not at its layout, a few polls in a
row (`settle` says how; bounded by `Settings.settle`: a node that does not settle is reported, not
waited out). A layout change the gate holds back for a booking that ends later is
not waited for. Then one snapshot of the ledger is counted by SQL (`COUNTS`):
- `overlaps`: pairs of live bookings of one atom whose windows meet (PostgreSQL's exclusion
  constraint should make this 0 whatever else goes wrong);
- `parentChildOverlaps`: pairs of tenants' live bookings, one on a GPU's `gpu` parent atom and one
  on a `gpu.mig`/`gpu.slot` atom of the same GPU, whose windows meet: the GPU held whole and in
  parts at once. The gate's partition holds (`partition:<gpuId>:<start>`, no tenant) book the whole
  family by design (docs/concepts.md#the-atom-rule) and are left out;
- `stranded`: tenants' live bookings not yet ended on an atom that is not present, not bookable, or
  in a pool other than its reservation's;
- `partitionHoldOverlaps` (reported, not one of the three): tenants' live bookings on a GPU whose
  windows meet a live partition hold of that GPU (docs/concepts.md#the-atom-rule: while it holds, nothing new
  lands on the GPU).

`run` returns the counts and the work done as one dict; the test and `python -m tests.soak` print it
as one JSON object on the last line.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing.pool import Pool
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml

from better_compute.bcd.fake import KEPT_STATE
from better_compute.bcd.joining import join
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.tenancy import credentials
from better_compute.storage.store import Store
from tests.builders import ids, small_fleet
from tests.conftest import own_database
from tests.e2e.conftest import clean_env, command, free_port

POOL = "p1"
TENANTS = ("platform", "acme")
LAYOUTS = ("all-1g.10gb", "mixed:3g.40gb+2x2g.20gb", "all-2g.20gb", "mixed:4g.40gb+3x1g.10gb", "all-3g.40gb")
"""The MIG layouts the pool flips between (and MIG off, `all-disabled`, now and then)."""
GPUS_PER_NODE = 2
READY_TIMEOUT = 60.0
RESTART_SEC = 2.0
"""`RestartSec` of deploy/bcd.service."""
STOP_TIMEOUT = 15.0
EXAMPLES = 5
"""Rows of each violation printed (before the summary) so a failure can be read."""


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


@dataclass(frozen=True)
class Settings:
    """How long and how hard; `from_env` reads each from `SOAK_<NAME>` (the Makefile's `soak`)."""

    seconds: float = 30.0
    """Seconds of load and chaos."""
    nodes: int = 4
    placers: int = 2
    pace: float = 0.05
    """Seconds a placer waits between two requests."""
    flip_pause: float = 4.0
    """Seconds between two layout changes."""
    chaos_pause: float = 2.0
    """Mean seconds between two `bcd` kills."""
    reboot_share: float = 0.5
    """Of the restarts, the share that are reboots (GPUs come up MIG-off or at another layout)."""
    settle: float = 20.0
    """The most seconds to wait for the system to settle after the load."""
    seed: int = 35
    first_layout: str = "all-disabled"
    """The pool's layout at the start (and its nodes'): MIG off, so whole GPUs are booked from the
    start and the first change to a MIG layout goes through the gate under them."""

    @classmethod
    def from_env(cls, **defaults: Any) -> Settings:
        base = cls(**defaults)
        return cls(
            seconds=_number("SOAK_SECONDS", base.seconds),
            nodes=int(_number("SOAK_NODES", base.nodes)),
            placers=int(_number("SOAK_PLACERS", base.placers)),
            pace=_number("SOAK_PACE", base.pace),
            flip_pause=_number("SOAK_FLIP_PAUSE", base.flip_pause),
            chaos_pause=_number("SOAK_CHAOS_PAUSE", base.chaos_pause),
            reboot_share=_number("SOAK_REBOOT_SHARE", base.reboot_share),
            settle=_number("SOAK_SETTLE", base.settle),
            seed=int(_number("SOAK_SEED", base.seed)),
            first_layout=os.environ.get("SOAK_FIRST_LAYOUT", "").strip() or base.first_layout,
        )


def _now() -> datetime:
    return datetime.now(UTC)


def _outcome(r: httpx.Response) -> str:
    """`ok`, or `refused:<code>` for an error body, or `http-<status>` for anything else."""
    if r.status_code < 300:
        return "ok"
    try:
        code = r.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return f"http-{r.status_code}"
    return f"http-{r.status_code}:{code}" if r.status_code >= 500 else f"refused:{code}"


def _client(base: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60.0)


def _booking(rng: random.Random, tenant: str | None) -> tuple[str, dict[str, Any]]:
    """A reservation body: a whole GPU or MIG instances, now or for a window that starts later;
    its kind is `<class>-<now|later>`."""
    whole = rng.random() < 0.4
    cls = "gpu" if whole else "gpu.mig"
    body: dict[str, Any] = {
        "poolId": POOL,
        "devices": [{"class": cls, "count": 1 if whole else rng.choice((1, 1, 2))}],
        "duration": f"{rng.randint(4, 20)}s",
    }
    if tenant is not None:
        body["tenantId"] = tenant
    later = rng.random() < 0.5
    if later:  # most soon, some minutes ahead (still live, or not yet begun, when the counts are read)
        ahead = rng.uniform(2.0, 30.0) if rng.random() < 0.85 else rng.uniform(30.0, 90.0)
        body["start"] = (_now() + timedelta(seconds=ahead)).isoformat()
    return f"{cls}-{'later' if later else 'now'}", body


def _end(http: httpx.Client, reservation: dict[str, Any]) -> str:
    """End a reservation as the API asks: cancel one not started, release one started; `cancelled`,
    `released` or the refusal."""
    outcome = "none"
    for action in ("cancel", "release") if reservation["status"] == "scheduled" else ("release",):
        answer = http.post(f"/v1/reservations/{reservation['id']}/{action}")
        if answer.status_code < 300:
            return "cancelled" if action == "cancel" else "released"
        outcome = _outcome(answer)
    return outcome


def _book(http: httpx.Client, rng: random.Random, tenant: str | None, done: Counter[str]) -> None:
    """One reservation attempt; ends a quarter of those booked at once."""
    kind, body = _booking(rng, tenant)
    asked = time.monotonic()
    try:
        answer = http.post("/v1/reservations", json=body)
    except httpx.TransportError as exc:
        done[f"transport:{type(exc).__name__}"] += 1
        return
    done["ms:reservations.create"] += round((time.monotonic() - asked) * 1000)
    done["n:reservations.create"] += 1
    outcome = _outcome(answer)
    done[f"{kind}:{outcome}" if outcome == "ok" else outcome] += 1
    if outcome == "ok" and rng.random() < 0.25:
        try:
            done[f"end:{_end(http, answer.json())}"] += 1
        except httpx.TransportError as exc:
            done[f"transport:{type(exc).__name__}"] += 1


def _started(stop: str) -> None:
    """Say this worker is running (its imports done): `_load` starts the clock once all have."""
    Path(f"{stop}.started-{os.getpid()}").touch()


def placer(base: str, token: str, seed: int, pace: float, stop: str) -> Counter[str]:
    """Book as the fleet admin for `platform` and `acme` until the file `stop` exists."""
    _started(stop)
    rng = random.Random(seed)
    done: Counter[str] = Counter()
    with _client(base, token) as http:
        while not os.path.exists(stop):
            _book(http, rng, rng.choice(TENANTS), done)
            time.sleep(pace)
    return done


def _sleep_unless(stop: str, seconds: float) -> bool:
    """Sleep `seconds`, or less if the file `stop` appears; whether it has."""
    until = time.monotonic() + seconds
    while not os.path.exists(stop):
        if (left := until - time.monotonic()) <= 0:
            return False
        time.sleep(min(left, 0.5))
    return True


PATIENT = 150.0
"""Seconds the flipper leaves a change alone one time in four: longer than the farthest booking the
placers make reaches (90 s ahead, for 20 s), so the gate schedules, grants and applies it on every
node rather than a newer change replacing it."""


def flipper(base: str, token: str, seed: int, pause: float, stop: str) -> Counter[str]:
    """Change the pool's layout until `stop` exists, `pause` seconds apart (`PATIENT` one time in
    four); to MIG off one time in three."""
    _started(stop)
    rng = random.Random(seed)
    done: Counter[str] = Counter()
    wait = pause
    with _client(base, token) as http:
        while not _sleep_unless(stop, wait):
            wait = PATIENT if rng.random() < 0.25 else pause
            current = http.get(f"/v1/pools/{POOL}").json()["policy"].get("migLayout")
            choices = [x for x in LAYOUTS if x != current]
            layout = (
                "all-disabled" if current != "all-disabled" and rng.random() < 1 / 3 else rng.choice(choices)
            )
            asked = time.monotonic()
            answer = http.patch(f"/v1/pools/{POOL}", json={"id": POOL, "policy": {"migLayout": layout}})
            done["ms:pools.update"] += round((time.monotonic() - asked) * 1000)
            done["n:pools.update"] += 1
            outcome = _outcome(answer)
            done["flipped" if outcome == "ok" else f"flip:{outcome}"] += 1
            if outcome == "ok":
                done[f"to:{layout}"] += 1
    return done


def churner(base: str, token: str, seed: int, pace: float, stop: str) -> Counter[str]:
    """Tenants come and go until `stop` exists: each is created with quota and a credential, books a
    few reservations with it, ends them (cancel or release) and is deleted."""
    _started(stop)
    rng = random.Random(seed)
    done: Counter[str] = Counter()
    with _client(base, token) as admin:
        for n in range(1_000_000):
            if os.path.exists(stop):
                break
            tenant = f"soak-{seed}-{n}"
            made = admin.post("/v1/tenants", json={"id": tenant, "name": tenant})
            if made.status_code != 201:
                done[f"tenant-create:{_outcome(made)}"] += 1
                continue
            done["tenants-created"] += 1
            for cls in ("gpu", "gpu.mig"):
                quota = {"tenantId": tenant, "poolId": POOL, "class": cls, "limit": 64}
                done[f"quota:{_outcome(admin.put('/v1/quotas', json=quota))}"] += 1
            issued = admin.post("/v1/credentials", json={"tenantId": tenant, "name": "soak"})
            with _client(base, issued.json()["token"]) as own:
                for _ in range(rng.randint(2, 5)):
                    _book(own, rng, None, done)
                    time.sleep(pace)
                time.sleep(rng.uniform(0.5, 3.0))
            _delete_tenant(admin, tenant, done)
    return done


def _delete_tenant(admin: httpx.Client, tenant: str, done: Counter[str]) -> None:
    """End the tenant's reservations that are not over, then delete it (again while a reservation
    it holds was not over yet)."""
    for _ in range(5):
        listed = admin.get("/v1/reservations", params={"tenantId": tenant, "limit": 1000}).json()["items"]
        for r in listed:
            if r["status"] in ("scheduled", "active"):
                done[f"tenant-end:{_end(admin, r)}"] += 1
        gone = admin.delete(f"/v1/tenants/{tenant}")
        if gone.status_code < 300:
            done["tenants-deleted"] += 1
            return
        done[f"tenant-delete:{_outcome(gone)}"] += 1
    done["tenants-left"] += 1


# -- the nodes -------------------------------------------------------------------------------------


class Nodes:
    """Every node's `bcd run --nvml fake`, with its state directory (identity, queue, kept GPUs) and
    the fleet file it boots from: started, killed with SIGKILL, rebooted."""

    def __init__(self, base: str, work: Path, names: list[str], first_layout: str) -> None:
        self.base = base
        self.work = work
        self.names = names
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[str] = set()
        """Nodes whose `bcd` the chaos loop killed and has not started again."""
        self.exited: dict[str, float] = {}
        """When a `bcd` that exited by itself was first seen gone (monotonic)."""
        self.done: Counter[str] = Counter()
        for name in names:
            self._boot_file(name, first_layout)

    def state(self, name: str) -> Path:
        return self.work / "nodes" / name

    def _boot_file(self, name: str, layout: str) -> None:
        """The fleet file the node's fake GPUs come up from where no state was kept."""
        fleet = small_fleet(nodes=len(self.names), layout=layout, gpus=GPUS_PER_NODE)
        self.state(name).mkdir(parents=True, exist_ok=True)
        (self.state(name) / "boot.yaml").write_text(yaml.safe_dump(fleet), encoding="utf-8")

    def join(self, join_token: Callable[[str], str]) -> None:
        for name in self.names:
            join(self.base, join_token(name), name, self.state(name))

    def start(self, name: str) -> None:
        state = self.state(name)
        args = ["run", "--state-dir", str(state), "--nvml", "fake", "--fleet", str(state / "boot.yaml")]
        args += ["--cdi-root", str(state / "cdi"), "--wait", "5"]
        code = "from better_compute.entrypoints.bcd import main; main()"
        with (state / "bcd.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-c", code, *args], stdout=log, stderr=log, env=clean_env(self.work)
            )
        self.done["starts"] += 1

    def supervise(self) -> None:
        """What systemd does for `bcd.service` (`Restart=always`, `RestartSec=2`, deploy/): a `bcd`
        that exited by itself is counted as a crash and started again 2 s after it exited."""
        for name, proc in self.procs.items():
            if proc.poll() is None or name in self.killed:
                continue
            exited = self.exited.setdefault(name, time.monotonic())
            if time.monotonic() - exited >= RESTART_SEC:
                self.done["crashes"] += 1
                self.done[f"crash-exit:{proc.returncode}"] += 1
                del self.exited[name]
                self.start(name)

    def kill(self, name: str) -> None:
        """SIGKILL the node's `bcd` (one that had crashed already is left to `supervise`)."""
        proc = self.procs[name]
        if proc.poll() is None:
            self.killed.add(name)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT)
            self.done["kills"] += 1

    def restart(self, name: str) -> None:
        if name in self.killed:
            self.killed.discard(name)
            self.start(name)

    def reboot(self, name: str, layout: str) -> None:
        """The node rebooted while its `bcd` was down: the GPUs' instances are gone and they come up
        at `layout` (`all-disabled`: MIG mode lost, as an H100's is), the CDI specs with the tmpfs
        they lived on. The identity, queue and hand-over records on disk stay."""
        (self.state(name) / KEPT_STATE).unlink(missing_ok=True)
        shutil.rmtree(self.state(name) / "cdi", ignore_errors=True)
        self._boot_file(name, layout)
        self.done["reboots"] += 1
        self.done[f"reboot-to:{layout}"] += 1

    def mig_on(self, name: str) -> bool:
        """Whether any of the node's GPUs has MIG mode on now (as its kept state says)."""
        kept = self.state(name) / KEPT_STATE
        gpus = json.loads(kept.read_text(encoding="utf-8"))["gpus"] if kept.exists() else {}
        return any(g["migCurrent"] for g in gpus.values())

    def pause(self, seconds: float) -> None:
        """Sleep `seconds`, supervising meanwhile."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            self.supervise()
            time.sleep(min(left, 0.2))

    def chaos(
        self,
        rng: random.Random,
        until: float,
        mean_pause: float,
        reboot_share: float,
        pool: Callable[[], str],
    ) -> None:
        """Until `until` (monotonic): kill a node's `bcd` with SIGKILL, reboot the node now and then
        (a node with MIG on comes back MIG-off two times in three, as an H100 does; otherwise, and
        a MIG-off node always, partitioned at a layout other than the pool's), start it again a
        moment later."""
        while time.monotonic() < until:
            self.pause(rng.uniform(0.5, 1.5) * mean_pause)
            name = rng.choice(self.names)
            self.kill(name)
            if name in self.killed and rng.random() < reboot_share:
                others = [x for x in LAYOUTS if x != pool()]
                off = self.mig_on(name) and rng.random() < 2 / 3
                self.reboot(name, "all-disabled" if off else rng.choice(others))
            self.pause(rng.uniform(0.1, 1.0))
            self.restart(name)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT)

    def unconverged(self, since: float) -> list[str]:
        """The nodes whose `bcd` logged `host.unconverged` at or after `since` (Unix seconds)."""
        found = []
        for name in self.names:
            for line in (self.state(name) / "bcd.log").read_text(errors="replace").splitlines():
                if line.startswith("{") and '"host.unconverged"' in line and json.loads(line)["ts"] >= since:
                    found.append(name)
                    break
        return found

    def log_errors(self) -> Counter[str]:
        """The `bcd` logs' error lines by event, and the exceptions of their tracebacks by type."""
        found: Counter[str] = Counter()
        for name in self.names:
            for line in (self.state(name) / "bcd.log").read_text(errors="replace").splitlines():
                if line.startswith("{") and '"level": "error"' in line:
                    found[str(json.loads(line).get("event"))] += 1
                elif (raised := _RAISED.match(line)) is not None:
                    found[f"raised:{raised[1]}"] += 1
        return found


_RAISED = re.compile(r"^([A-Za-z_.]*(?:Error|Exception|Exit|Interrupt)): ")
"""The last line of a traceback: the exception's type, then its message."""


# -- the server ------------------------------------------------------------------------------------


def _prepare(url: str, nodes: int, layout: str) -> tuple[list[str], str]:
    """Migrate the database, register the fleet with no simulated reports (each node has GPUs once
    its own `bcd` reports them) and make the fleet-admin token, as `admin bootstrap` does. Returns
    the node names and the token."""
    spec = parse_fleet(small_fleet(nodes=nodes, layout=layout, gpus=GPUS_PER_NODE))
    store = Store.open(url)
    try:
        load_fleet(store, spec, _now(), simulate=False)
        token = credentials.bootstrap_admin(store, _now(), new_id=ids().credential).token
    finally:
        store.close()
    return [n.name for n in spec.nodes], token


@contextlib.contextmanager
def _serving(url: str, home: Path) -> Iterator[str]:
    """`better-compute serve` on the database until the block ends; yields its URL once ready."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["serve", "--database-url", url, "--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
    log = home / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command(*args), stdout=out, stderr=subprocess.STDOUT, env=clean_env(home), cwd=home
        )
    try:
        _wait(lambda: proc.poll() is not None or _ready(base), READY_TIMEOUT, "the server ready")
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}):\n{log.read_text(errors='replace')}")
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT)


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2.0).status_code == 200
    except httpx.TransportError:
        return False


def _wait(probe: Callable[[], bool], bound: float, what: str) -> None:
    deadline = time.monotonic() + bound
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {bound:.0f} s: {what}")
        time.sleep(0.2)


def _scalar(url: str, sql: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


UNSETTLED = "SELECT count(*) FROM nodes WHERE observed_generation <> spec_generation"
"""Nodes that have not observed (converged) the spec they were last given: 0 once settled. A
layout change the gate holds back for a booking that ends later is not waited for: it is as the
ledger says it should be (`layoutChangesWaiting` in the summary counts them)."""

WAITING = "SELECT count(*) FROM capacity_mig_layouts"


def settle(url: str, bound: float, nodes: Nodes, polls: int = 4) -> tuple[bool, float]:
    """Poll until nothing is unsettled `polls` times in a row, a second apart, or `bound` seconds
    pass (the nodes supervised meanwhile); returns whether it settled and the seconds taken.

    Unsettled: a node whose observed generation is behind its spec's, or one whose `bcd` logged
    `host.unconverged` since the last poll (it does so each pass while a GPU is not at the layout
    it is told). The log is read too because the server's record alone can say converged when it
    is not: a `bcd` started again on GPUs that came back otherwise finds the spec's generation
    unchanged, and the one observed before the restart still stands for it."""
    started = time.monotonic()
    calm = 0
    since = time.time()
    while time.monotonic() - started < bound:
        polled = time.time()
        quiet = _scalar(url, UNSETTLED) == 0 and not nodes.unconverged(since)
        since = polled
        calm = calm + 1 if quiet else 0
        if calm >= polls:
            return True, round(time.monotonic() - started, 1)
        nodes.pause(1.0)
    return False, round(time.monotonic() - started, 1)


# -- the counts ------------------------------------------------------------------------------------

_MEET = "tstzrange({a}.starts_at, {a}.ends_at, '[)') && tstzrange({b}.starts_at, {b}.ends_at, '[)')"
_TENANTS = "{b}.state = 'live' AND {b}.tenant_id IS NOT NULL AND {b}.allocation_id NOT LIKE 'partition:%'"

COUNTS: dict[str, str] = {
    "overlaps": f"""
        SELECT a.id, b.id, a.atom_id, a.allocation_id, b.allocation_id, a.starts_at, a.ends_at, b.starts_at, b.ends_at
        FROM bookings a JOIN bookings b ON b.atom_id = a.atom_id AND b.id > a.id
        WHERE a.state = 'live' AND b.state = 'live' AND {_MEET.format(a="a", b="b")}""",
    "parentChildOverlaps": f"""
        SELECT p.id, c.id, p.gpu_id, p.allocation_id, c.atom_id, c.allocation_id,
               p.starts_at, p.ends_at, c.starts_at, c.ends_at
        FROM bookings p JOIN bookings c ON c.gpu_id = p.gpu_id
        WHERE p.class = 'gpu' AND c.class IN ('gpu.mig', 'gpu.slot')
          AND {_TENANTS.format(b="p")} AND {_TENANTS.format(b="c")} AND {_MEET.format(a="p", b="c")}""",
    "stranded": f"""
        SELECT b.id, b.allocation_id, b.atom_id, b.class, a.present, a.bookable, a.partition_pending,
               a.pool_id, r.pool_id, b.starts_at, b.ends_at
        FROM bookings b JOIN atoms a ON a.id = b.atom_id LEFT JOIN reservations r ON r.id = b.allocation_id
        WHERE {_TENANTS.format(b="b")} AND (b.ends_at IS NULL OR b.ends_at > now())
          AND (NOT a.present OR NOT a.bookable OR a.pool_id IS DISTINCT FROM coalesce(r.pool_id, b.pool_id))""",
    "partitionHoldOverlaps": f"""
        WITH h AS (
            SELECT DISTINCT allocation_id, gpu_id, starts_at, ends_at FROM bookings
            WHERE state = 'live' AND allocation_id LIKE 'partition:%')
        SELECT h.allocation_id, t.id, t.atom_id, t.allocation_id, h.starts_at, h.ends_at, t.starts_at, t.ends_at
        FROM h JOIN bookings t ON t.gpu_id = h.gpu_id
        WHERE {_TENANTS.format(b="t")} AND {_MEET.format(a="h", b="t")}""",
}
"""Each count's rows, read in one snapshot (`counts`); the module says what each one means."""

ASSERTED = ("overlaps", "parentChildOverlaps", "stranded")


def counts(url: str, say: Callable[[str], None]) -> dict[str, int]:
    """Each of COUNTS, from one snapshot of the database; the first rows of each are said."""
    found: dict[str, int] = {}
    with psycopg.connect(url) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        for name, sql in COUNTS.items():
            rows = conn.execute(sql).fetchall()
            found[name] = len(rows)
            for row in rows[:EXAMPLES]:
                say(json.dumps({"example": name, "row": [str(v) for v in row]}))
    return found


def _events(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT type, count(*) FROM events WHERE type LIKE 'node.mig.%' OR type LIKE 'ledger.%'"
            " GROUP BY type ORDER BY type"
        ).fetchall()
    return {str(t): int(n) for t, n in rows}


# -- the run ---------------------------------------------------------------------------------------


def run(
    postgres_url: str, work: Path, settings: Settings, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """One soak on a database of its own under `postgres_url`, with scratch files under `work`;
    returns the counts and the work done."""
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # The workers are spawned first: their imports take seconds, meanwhile the server starts.
    workers = multiprocessing.get_context("spawn").Pool(settings.placers + 2, initializer=_imported)
    with workers, own_database(postgres_url, "bc_soak") as url:
        names, token = _prepare(url, settings.nodes, settings.first_layout)
        with _serving(url, work) as base, _client(base, token) as admin:
            for tenant in TENANTS:
                for cls in ("gpu", "gpu.mig"):
                    quota = {"tenantId": tenant, "poolId": POOL, "class": cls, "limit": 1000}
                    admin.put("/v1/quotas", json=quota).raise_for_status()
            nodes = Nodes(base, work, names, settings.first_layout)

            def join_token(node: str) -> str:
                answer = admin.post(f"/v1/nodes/{node}/join-tokens", json={"node": node})
                answer.raise_for_status()
                return str(answer.json()["token"])

            def pool_layout() -> str:
                return str(admin.get(f"/v1/pools/{POOL}").json()["policy"].get("migLayout"))

            try:
                nodes.join(join_token)
                for name in names:
                    nodes.start(name)
                reported = "SELECT count(*) FROM nodes WHERE last_report_at IS NOT NULL"
                _wait(
                    lambda: _scalar(url, reported) == len(names), READY_TIMEOUT, "every node's first report"
                )
                ready = time.monotonic()
                work_done = _load(workers, base, token, work, nodes, settings, pool_layout)
                loaded = time.monotonic()
                for name in list(nodes.killed):
                    nodes.restart(name)
                settled, settle_seconds = settle(url, settings.settle, nodes)
                counted_at = _now()
                found = counts(url, say)
                waiting = _scalar(url, WAITING)
                unconverged = nodes.unconverged(time.time() - 2.0)
                with psycopg.connect(url) as conn:
                    behind = conn.execute(
                        "SELECT id, observed_generation, spec_generation FROM nodes"
                        " WHERE observed_generation <> spec_generation ORDER BY id"
                    ).fetchall()
            finally:
                nodes.stop()
        server_log = (work / "server.log").read_text(errors="replace")
        summary: dict[str, Any] = {
            **found,
            "settled": settled,
            "countedAt": counted_at.isoformat(timespec="seconds"),
            "settleSeconds": settle_seconds,
            "nodesBehind": {str(n): f"observed {o} of {g}" for n, o, g in behind},
            "nodesUnconverged": unconverged,
            "layoutChangesWaiting": waiting,
            **work_done,
            "nodeStarts": nodes.done["starts"],
            "kills": nodes.done["kills"],
            "reboots": {
                k.removeprefix("reboot-to:"): v for k, v in nodes.done.items() if k.startswith("reboot-to:")
            },
            "bcdCrashes": nodes.done["crashes"],
            "bcdCrashExits": {
                k.removeprefix("crash-exit:"): v for k, v in nodes.done.items() if k.startswith("crash-exit:")
            },
            "bcdErrors": dict(nodes.log_errors()),
            "serverTracebacks": server_log.count("Traceback (most recent call last)"),
            "events": _events(url),
            "startSeconds": round(ready - started, 1),
            "loadSeconds": round(loaded - ready, 1),
            "seconds": round(time.monotonic() - started, 1),
            "settings": asdict(settings),
        }
    return summary


def _imported() -> None:
    """A worker's initializer: unpickling it imports this module (and the product) in the worker."""


def _load(
    workers: Pool,
    base: str,
    token: str,
    work: Path,
    nodes: Nodes,
    settings: Settings,
    pool_layout: Callable[[], str],
) -> dict[str, Any]:
    """The placers, the flipper and the churner in the `workers` processes and the chaos loop here,
    for `settings.seconds`; returns what they did."""
    stop = work / "stop"
    for old in (stop, *work.glob("stop.started-*")):
        old.unlink(missing_ok=True)
    seed = settings.seed
    placing = [
        workers.apply_async(placer, (base, token, seed * 100 + n, settings.pace, str(stop)))
        for n in range(settings.placers)
    ]
    flipping = workers.apply_async(flipper, (base, token, seed, settings.flip_pause, str(stop)))
    churning = workers.apply_async(churner, (base, token, seed, settings.pace, str(stop)))
    try:
        # Spawning and importing takes the workers seconds on a busy machine: the load's time
        # counts from when they all run.
        _wait(
            lambda: len(list(work.glob("stop.started-*"))) == settings.placers + 2,
            READY_TIMEOUT,
            "the workers",
        )
        nodes.chaos(
            random.Random(seed),
            time.monotonic() + settings.seconds,
            settings.chaos_pause,
            settings.reboot_share,
            pool_layout,
        )
    finally:
        stop.touch()
    booked: Counter[str] = sum((p.get(timeout=300) for p in placing), Counter())
    flips = flipping.get(timeout=300)
    tenants = churning.get(timeout=300)
    every = booked + tenants
    made = {
        k.removesuffix(":ok"): v for k, v in every.items() if k.endswith(":ok") and not k.startswith("quota")
    }
    return {
        "reservationsMade": sum(made.values()),
        "reservationsByKind": made,
        "reservationsRefused": {k: v for k, v in every.items() if k.startswith("refused:")},
        "reservationsEnded": {k: v for k, v in every.items() if "end:" in k},
        "layoutFlips": flips["flipped"],
        "layoutsFlippedTo": {k.removeprefix("to:"): v for k, v in flips.items() if k.startswith("to:")},
        "flipsRefused": {k: v for k, v in flips.items() if k.startswith("flip:")},
        "tenantsCreated": tenants["tenants-created"],
        "tenantsDeleted": tenants["tenants-deleted"],
        "tenantsLeft": tenants["tenants-left"],
        "meanMs": {
            op: round((every + flips)[f"ms:{op}"] / n)
            for op in ("reservations.create", "pools.update")
            if (n := (every + flips)[f"n:{op}"])
        },
        "serverErrors": {
            k: v for k, v in (every + flips).items() if k.startswith(("http-", "transport:")) or "http-" in k
        },
    }
