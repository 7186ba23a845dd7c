"""Builders for test data: extend these rather than hand-building reports in tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from better_compute.bcd.fake import FakeNode
from better_compute.domain.fleet import parse_fleet
from better_compute.domain.inventory import GpuReport, MigInstance

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
