"""Loading a fleet file: register what it names, simulate its nodes, ingest their reports."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from better_compute.bcd.fake import FakeNode
from better_compute.domain.errors import InvalidInput
from better_compute.domain.fleet import FleetSpec, parse_fleet
from better_compute.service import fleet, inventory
from better_compute.service.ports import StorePort


def read_fleet(path: str | Path) -> FleetSpec:
    try:
        raw: Any = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"cannot read fleet file {path}: {exc}") from exc
    return parse_fleet(raw)


def simulated_nodes(spec: FleetSpec) -> list[FakeNode]:
    nodes = []
    for node in spec.nodes:
        fake = FakeNode.build(
            node.name, node.gpu_model, node.gpu_count, numa_nodes=node.numa_nodes, nvlink=node.nvlink
        )
        fake.apply_layout(spec.layout_of_node(node))
        nodes.append(fake)
    return nodes


def load_fleet(store: StorePort, spec: FleetSpec, now: datetime, *, batch: int = 200) -> int:
    """Register the fleet and ingest one simulated report per node; returns the number of nodes."""
    fleet.register_fleet(store, spec, now)
    fakes = simulated_nodes(spec)
    for i in range(0, len(fakes), batch):
        inventory.ingest(store, [f.report() for f in fakes[i : i + batch]], now)
    store.analyze()
    return len(fakes)
