"""Read models of the fleet: clusters, nodes, GPUs and atoms, as the API lists them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from better_compute.wire.common import WireAnswer


class ClusterPublic(WireAnswer):
    id: str
    name: str
    region: str
    residency: list[str]
    phase: str
    created_at: datetime


class NodePublic(WireAnswer):
    id: str
    name: str
    cluster_id: str
    pool_id: str | None = None
    cordoned: bool
    spec_generation: int
    observed_generation: int
    last_report_at: datetime | None = None


class MigModePublic(WireAnswer):
    current: bool
    pending: bool


class MigInstancePublic(WireAnswer):
    profile: str
    gi_id: int
    ci_id: int
    placement_start: int
    placement_size: int
    uuid: str


class GpuPublic(WireAnswer):
    id: str
    uuid: str
    node: str
    index: int
    product: str
    model: str | None = None
    memory_mib: int = Field(alias="memoryMiB")
    numa_node: int | None = None
    nvlink_peers: list[str]
    healthy: bool
    present: bool
    mig_mode: MigModePublic
    mig_instances: list[MigInstancePublic]


class AtomPublic(WireAnswer):
    id: str
    cls: str = Field(alias="class")
    gpu_id: str
    node: str
    pool_id: str | None = None
    bookable: bool
    partition_pending: bool
    present: bool
    attributes: dict[str, Any]


class Health(WireAnswer):
    status: str
    database: str
    version: str
