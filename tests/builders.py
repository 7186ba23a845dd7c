"""Builders for test data: extend these rather than hand-building reports in tests."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from better_compute.bcd.fake import FakeNode
from better_compute.domain.fleet.atoms import Atom, AttrValue
from better_compute.domain.fleet.inventory import GpuReport, MigInstance
from better_compute.domain.fleet.pools import SharingMode
from better_compute.domain.kernel.atom_classes import AtomClass
from better_compute.domain.kernel.selectors import parse_selector
from better_compute.domain.ledger.admission import DeviceRequest
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.ids import RandomIds

if TYPE_CHECKING:
    from fastapi import FastAPI

    from better_compute.service.kernel.ids import Ids
    from better_compute.service.kernel.ports import StorePort
    from better_compute.service.tx import Tx

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def at(hours: float) -> datetime:
    """A time `hours` after T0."""
    return T0 + timedelta(hours=hours)


def h100(uuid: str = "GPU-aaaa", **kw: object) -> GpuReport:
    base: dict[str, object] = {"uuid": uuid, "product": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}
    base.update(kw)
    return GpuReport(**base)  # type: ignore[arg-type]


def mig(profile: str, gi: int, start: int, size: int, uuid: str | None = None) -> MigInstance:
    return MigInstance(profile, gi, 0, start, size, uuid or f"MIG-{profile}-{gi}")


def _class_of(key: str) -> AtomClass:
    if key == "gpu":
        return "gpu"
    if key.startswith("mig:"):
        return "gpu.mig"
    if key.startswith("slot:"):
        return "gpu.slot"
    raise ValueError(f"an atom key is gpu, mig:<gi>.<ci> or slot:<n>, not {key!r}")


def atom(
    gpu_id: str = "g1",
    key: str = "gpu",
    *,
    node: str = "n1",
    pool_id: str | None = "p",
    numa_node: int | None = 0,
    nvlink_domain: str | None = None,
    bookable: bool = True,
    partition_pending: bool = False,
    attributes: Mapping[str, AttrValue] | None = None,
) -> Atom:
    """One atom of GPU `gpu_id`, with the id `<gpu_id>/<key>` and the class its key implies (`gpu`,
    `mig:<gi>.<ci>` or `slot:<n>`, as derivation names them): bookable, in pool `p` on node `n1`."""
    return Atom(
        id=f"{gpu_id}/{key}",
        gpu_id=gpu_id,
        node=node,
        cls=_class_of(key),
        key=key,
        bookable=bookable,
        partition_pending=partition_pending,
        pool_id=pool_id,
        numa_node=numa_node,
        nvlink_domain=nvlink_domain,
        attributes=dict(attributes or {}),
    )


def device_request(
    cls: AtomClass = "gpu",
    count: int = 1,
    *,
    sharing: SharingMode | None = None,
    **match: Sequence[str],
) -> DeviceRequest:
    """`count` atoms of `cls`; each keyword is an `In` expression of the selector (`migProfile=["3g.40gb"]`)."""
    expressions = [{"key": k, "op": "In", "values": list(v)} for k, v in match.items()]
    return DeviceRequest(
        cls=cls, count=count, sharing=sharing, selector=parse_selector({"matchExpressions": expressions})
    )


def small_fleet(
    nodes: int = 2,
    layout: str = "all-1g.10gb",
    mode: str = "mig",
    replicas: int = 4,
    model: str | None = None,
    gpus: int = 2,
    host: dict[str, int] | None = None,
) -> dict[str, object]:
    """A one-cluster fleet file (as parsed YAML) with one pool over `nodes` nodes of `gpus` GPUs of
    `model` (default: H100-80GB in mig and exclusive pools, L40S-48GB in shared ones), each host
    declaring `host` (`{cpuCores, memoryGiB}`) when given."""
    policy: dict[str, object] = {"migLayout": layout} if mode == "mig" else {}
    if mode in ("timeslice", "mps"):
        policy = {"replicas": replicas}
    model = model or ("H100-80GB" if mode in ("mig", "exclusive") else "L40S-48GB")
    return {
        "tenants": [{"id": "platform"}, {"id": "acme"}],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [
                    {
                        "name": "n",
                        "replicas": nodes,
                        "gpus": {"model": model, "count": gpus},
                        **({"host": host} if host else {}),
                    }
                ],
            }
        ],
        "pools": [
            {
                "name": "p1",
                "cluster": "c1",
                "mode": mode,
                "owner": "platform",
                "policy": policy,
                "nodes": [f"n-{i + 1}" if nodes > 1 else "n" for i in range(nodes)],
            }
        ],
    }


def fleet_spec(**kw: object):  # type: ignore[no-untyped-def]
    return parse_fleet(small_fleet(**kw))  # type: ignore[arg-type]


__all__ = ["T0", "FakeNode", "at", "atom", "device_request", "fleet_spec", "h100", "mig", "small_fleet"]


def bare_fleet() -> dict[str, object]:
    """Two clusters of unpooled nodes and three tenants, for tests that create pools themselves.

    c1: `h-1`, `h-2` (2x H100-80GB each) and `l` (2x L40S-48GB); c2: `x` (1x H100-80GB).
    """
    return {
        "tenants": [{"id": "platform"}, {"id": "acme"}, {"id": "beta"}],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [
                    {"name": "h", "replicas": 2, "gpus": {"model": "H100-80GB", "count": 2}},
                    {"name": "l", "gpus": {"model": "L40S-48GB", "count": 2}},
                ],
            },
            {
                "name": "c2",
                "region": "r2",
                "nodes": [{"name": "x", "gpus": {"model": "H100-80GB", "count": 1}}],
            },
        ],
    }


class CountingIds:
    """`service.kernel.ids.Ids` that counts, kind by kind (`rsv-000001`, `rsv-000002`, `cred-000001`, ...),
    so that a test can name the ids it will see. It keeps no two sources apart: one per store."""

    def __init__(self) -> None:
        self._counts: dict[str, itertools.count[int]] = {}
        self._lock = threading.Lock()

    def _next(self, kind: str) -> str:
        with self._lock:
            n = next(self._counts.setdefault(kind, itertools.count(1)))
        return f"{kind}-{n:06d}"

    def reservation(self) -> str:
        return self._next("rsv")

    def credential(self) -> str:
        return self._next("cred")

    def policy(self) -> str:
        return self._next("pol")

    def workload(self) -> str:
        return self._next("wkl")

    def deployment(self) -> str:
        return self._next("dep")

    def operation(self) -> str:
        return self._next("op")


def ids() -> Ids:
    """Production ids, for tests that do not care which they get (they never collide)."""
    return RandomIds()


_IDS = ids()


def admin_token(store: object, now: datetime = T0) -> str:
    """A fresh fleet-admin bearer token in `store` (another one if some exist)."""
    from better_compute.service.tenancy import credentials

    return credentials.bootstrap_admin(store, now, new_id=_IDS.credential, force=True).token  # type: ignore[arg-type]


def tenant_token(store: object, tenant_id: str, now: datetime = T0) -> str:
    """A fresh bearer token for `tenant_id`, which must exist in `store`."""
    from better_compute.domain.tenancy.credentials import Principal
    from better_compute.service.tenancy import credentials

    admin = Principal(tenant_id=None, is_admin=True, credential_id="test-admin")
    return credentials.create(store, admin, tenant_id, None, now, new_id=_IDS.credential).token  # type: ignore[arg-type]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def real_app(
    store: object, *, clock: Callable[[], datetime] = lambda: T0, ids: Ids | None = None, **settings: Any
) -> FastAPI:
    """The app over `store` as a server process has it, wired by the composition root
    (`entrypoints/server.py`), with a fixed clock (T0 unless given), `ids` (production ones unless
    given) and `settings` (`Settings` fields) in place of the environment's."""
    from better_compute.entrypoints.server import build_app, build_services
    from better_compute.settings import Settings

    services = build_services(store, clock=clock, ids=ids)  # type: ignore[arg-type]
    return build_app(services, Settings(**settings))


def api_client(store: object, now: datetime = T0, **kw: Any):  # type: ignore[no-untyped-def]
    """`real_app` over `store` at `now`, driven in-process (no sockets)."""
    import warnings

    with warnings.catch_warnings():
        # starlette warns on import when only httpx (not httpx2) is installed; the client works the same.
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    return TestClient(real_app(store, clock=lambda: now, **kw))


def stored_events(store: object, type_: str | None = None) -> list[dict[str, object]]:
    """The event log as stored (id order), optionally of one type: what tests assert events on."""
    from sqlalchemy import select

    from better_compute.storage.kernel.tables import events
    from better_compute.storage.store import Store

    assert isinstance(store, Store)
    stmt = select(events).order_by(events.c.id)
    if type_ is not None:
        stmt = stmt.where(events.c.type == type_)
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(stmt)]


def settle_gate(store: StorePort[Tx], now: datetime) -> dict[str, list[object]]:
    """Step every node's layout gate at `now` until each waits or is gone, as a reconciler's passes
    would (a pool's new `migLayout` or `replicas` takes effect through it); the steps, by node."""
    from better_compute.domain.gate import mig_gate as rules
    from better_compute.service.gate import mig_gate

    with store.read() as tx:
        nodes = sorted(g.node_id for g in tx.mig_layouts.all_rows())
    taken: dict[str, list[object]] = {}
    for node in nodes:
        while (step := mig_gate.step(store, node, now)) is not None and not isinstance(step, rules.Wait):
            taken.setdefault(node, []).append(step)
    return taken
