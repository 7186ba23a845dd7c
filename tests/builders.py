"""Builders for test data: extend these rather than hand-building reports in tests."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from better_compute.bcd.fake import FakeNode
from better_compute.domain.fleet import parse_fleet
from better_compute.domain.inventory import GpuReport, MigInstance
from better_compute.entrypoints.ids import RandomIds

if TYPE_CHECKING:
    from fastapi import FastAPI

    from better_compute.service.ids import Ids

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


def small_fleet(
    nodes: int = 2, layout: str = "all-1g.10gb", mode: str = "mig", replicas: int = 4
) -> dict[str, object]:
    """A one-cluster fleet file (as parsed YAML) with one pool over `nodes` nodes."""
    policy: dict[str, object] = {"migLayout": layout} if mode == "mig" else {}
    if mode in ("timeslice", "mps"):
        policy = {"replicas": replicas}
    model = "H100-80GB" if mode in ("mig", "exclusive") else "L40S-48GB"
    return {
        "tenants": [{"id": "platform"}, {"id": "acme"}],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [{"name": "n", "replicas": nodes, "gpus": {"model": model, "count": 2}}],
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


__all__ = ["T0", "FakeNode", "at", "fleet_spec", "h100", "mig", "small_fleet"]


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
    """`service.ids.Ids` that counts, kind by kind (`rsv-000001`, `rsv-000002`, `cred-000001`, ...),
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


def ids() -> Ids:
    """Production ids, for tests that do not care which they get (they never collide)."""
    return RandomIds()


_IDS = ids()


def admin_token(store: object, now: datetime = T0) -> str:
    """A fresh fleet-admin bearer token in `store` (another one if some exist)."""
    from better_compute.service import credentials

    issued = credentials.bootstrap_admin(store, now, new_id=_IDS.credential, force=True)  # type: ignore[arg-type]
    return str(issued["token"])


def tenant_token(store: object, tenant_id: str, now: datetime = T0) -> str:
    """A fresh bearer token for `tenant_id`, which must exist in `store`."""
    from better_compute.domain.credentials import Principal
    from better_compute.service import credentials

    admin = Principal(tenant_id=None, is_admin=True, credential_id="test-admin")
    issued = credentials.create(store, admin, tenant_id, None, now, new_id=_IDS.credential)  # type: ignore[arg-type]
    return str(issued["token"])


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
