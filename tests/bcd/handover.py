"""What the CDI tests share: a simulated node's GPUs, the spec that assigns their atoms, and the
edits written for an allocation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from better_compute.bcd import cdi
from better_compute.bcd.fake import FakeNode
from better_compute.bcd.gpu import Gpu, GpuInstance
from better_compute.bcd.inventory import mig_instances
from better_compute.domain.fleet.atoms import atom_id_for, mig_atom_key
from better_compute.wire.nodes import NodeSpecPublic
from tests.builders import fleet_spec


def mig_node() -> FakeNode:
    """Two H100s cut `all-1g.10gb` (seven instances each, GPU minors 0 and 1)."""
    return FakeNode.from_fleet(fleet_spec(nodes=2, mode="mig", layout="all-1g.10gb"), "n-1")


def whole_node() -> FakeNode:
    return FakeNode.from_fleet(fleet_spec(nodes=1, mode="exclusive"), "n")


def mps_node(replicas: int = 4) -> FakeNode:
    return FakeNode.from_fleet(fleet_spec(nodes=1, mode="mps", replicas=replicas), "n")


def mig_atom(gpu: Gpu, gi: GpuInstance) -> str:
    """The atom id the server gives the MIG instance `gi` of `gpu`."""
    return atom_id_for(gpu.uuid, mig_atom_key(mig_instances(gi)[0]))


def whole_atom(gpu: Gpu) -> str:
    return atom_id_for(gpu.uuid, "gpu")


def slot_atom(gpu: Gpu, slot: int) -> str:
    return atom_id_for(gpu.uuid, f"slot:{slot}")


def assignment(allocation: str, *atoms: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return {"allocationId": allocation, "atoms": list(atoms), "env": env or {}}


def node_spec(fake: FakeNode, mode: str, *assignments: dict[str, Any], replicas: int = 1) -> NodeSpecPublic:
    return NodeSpecPublic.model_validate(
        {
            "node": fake.name,
            "generation": 1,
            "gpus": [{"uuid": g.uuid, "migLayout": None} for g in fake.list_gpus()],
            "sharing": {"mode": mode, "replicas": replicas},
            "assignments": list(assignments),
        }
    )


def written(cdi_root: Path, allocation: str) -> dict[str, Any]:
    """The spec file written for `allocation`."""
    spec: dict[str, Any] = json.loads(cdi.spec_path(cdi_root, allocation).read_text(encoding="utf-8"))
    return spec


def edits(cdi_root: Path, allocation: str) -> dict[str, Any]:
    """The `containerEdits` of the allocation's one device."""
    (device,) = written(cdi_root, allocation)["devices"]
    assert device["name"] == allocation
    found: dict[str, Any] = device["containerEdits"]
    return found


def env_of(found: dict[str, Any]) -> dict[str, str]:
    return dict(e.split("=", 1) for e in found.get("env", []))


def node_paths(found: dict[str, Any]) -> list[str]:
    return [n["path"] for n in found.get("deviceNodes", [])]


def mounted(found: dict[str, Any]) -> dict[str, str]:
    """{container path: host path} of the edits' mounts."""
    return {m["containerPath"]: m["hostPath"] for m in found.get("mounts", [])}
