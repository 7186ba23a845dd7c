"""What the container of one allocation gets, as a CDI `containerEdits`: exactly its atoms.

A CDI runtime (podman, containerd, CRI-O) applies the edits of the devices a container asks for and
nothing else, so the edits carry everything, in the shape `nvidia-ctk cdi generate` gives a device:

- **device nodes**: `/dev/nvidia<minor>` of each GPU the allocation uses (a whole GPU, a slot of one,
  or the GPU a MIG instance is on); for a MIG instance, the access capabilities of its GPU instance
  and of its compute instance, `/dev/nvidia-caps/nvidia-cap<N>` with N from the node's mig-minors
  (without them CUDA sees no MIG device; with another instance's, it would see that one); and the
  driver's `/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools`. Each names its host node
  under the node root (`hostPath`), its type and numbers left to the runtime where the node has it;
- **the driver**: its libraries and binaries as read-only mounts, or the common edits of the node's
  nvidia-ctk spec where it has one (`bcd.node_tree.NodeView.driver`);
- **an MPS slot**: the MPS daemon's pipe directory, mounted where `CUDA_MPS_PIPE_DIRECTORY` names it,
  and its shared-memory directory as the container's `/dev/shm` (as NVIDIA's device plugin mounts
  them), with `bcd.mps.client_env`;
- **the environment**: `NVIDIA_VISIBLE_DEVICES=void`, so an NVIDIA runtime hook that still runs adds
  no device of its own (what nvidia-ctk's specs set); the devices' `GPU-…`/`MIG-…` uuids in
  `BC_DEVICE_UUIDS`, for the workload to read; and the assignment's own variables.

The uuids go in a variable of our own, not `CUDA_VISIBLE_DEVICES`: the container has the device
nodes of its atoms only, so CUDA's own enumeration there is already exactly them, and a
`CUDA_VISIBLE_DEVICES` of ours would be a second word on it that launchers (torchrun, Ray, Slurm)
rewrite and that an MPS client reads relative to its server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from better_compute.bcd.mps import MpsPaths
from better_compute.bcd.node_tree import CONTROL_NODES, NodeView, Unresolvable, cap_node, ci_cap, gi_cap

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
VOID = "void"
UUIDS = "BC_DEVICE_UUIDS"
"""The variable that names the container's devices (`GPU-…` or `MIG-…` uuids, comma-separated)."""
SHM = "/dev/shm"
SHARED = ("rw", "nosuid", "nodev", "rbind", "rprivate")
"""Mount options of the MPS directories the client shares with its daemon."""


class Atom(Protocol):
    """One device an allocation is handed (`bcd.devices.Device`)."""

    @property
    def gpu_uuid(self) -> str: ...
    @property
    def uuid(self) -> str: ...
    @property
    def minor(self) -> int | None: ...
    @property
    def gi_id(self) -> int | None: ...
    @property
    def ci_id(self) -> int | None: ...


def device_nodes(atoms: Sequence[Atom], node: NodeView) -> list[dict[str, Any]]:
    """The device nodes of `atoms`, each once, in a stable order: the GPUs' nodes, their MIG
    capabilities, then the driver's control nodes. `Unresolvable` when the node cannot name one."""
    gpus: dict[int, dict[str, Any]] = {}
    caps: dict[int, dict[str, Any]] = {}
    for atom in atoms:
        if atom.minor is None:
            raise Unresolvable(
                f"GPU {atom.gpu_uuid} has no device minor (NVML gave none): no /dev/nvidia<minor>"
            )
        path = f"/dev/nvidia{atom.minor}"
        gpus.setdefault(atom.minor, node.device_node(path, "nvidia", atom.minor))
        if atom.gi_id is not None:
            if atom.ci_id is None:
                raise Unresolvable(f"MIG device {atom.uuid} has no compute instance id")
            for cap in (gi_cap(atom.minor, atom.gi_id), ci_cap(atom.minor, atom.gi_id, atom.ci_id)):
                minor = node.cap_minor(cap)
                caps.setdefault(minor, node.device_node(cap_node(minor), "nvidia-caps", minor))
    control = [node.device_node(path, driver, minor) for path, driver, minor in CONTROL_NODES]
    return [*(gpus[m] for m in sorted(gpus)), *(caps[m] for m in sorted(caps)), *control]


def mps_mounts(paths: MpsPaths) -> list[dict[str, Any]]:
    """An MPS client's mounts: the pipe directory where its `CUDA_MPS_PIPE_DIRECTORY` names it, and
    the daemon's shared memory as its `/dev/shm` (CUDA's MPS client and server share buffers there).
    These are `bcd`'s own directories, named as they are, not under the node root. Both are shared
    by every slot of the node: whoever has them can command the daemon and read the other clients'
    shared memory, so the node's MPS clients are one trust domain (docs/bcd.md, MPS)."""
    pipe = str(paths.pipe_directory)
    return [
        {"hostPath": pipe, "containerPath": pipe, "options": list(SHARED)},
        {"hostPath": str(paths.shm_directory), "containerPath": SHM, "options": list(SHARED)},
    ]


def container_edits(
    atoms: Sequence[Atom],
    node: NodeView,
    env: Mapping[str, str],
    mps: MpsPaths | None = None,
) -> dict[str, Any]:
    """The `containerEdits` of an allocation handed `atoms`, with `env` (the assignment's and, for an
    MPS slot, the client's) and, with `mps`, the MPS client's mounts. `Unresolvable` when the node
    cannot name a device node or has no driver files to give."""
    nodes = device_nodes(atoms, node)
    driver = node.driver()
    variables = dict(e.split("=", 1) for e in driver.env)
    variables.update(env)
    variables[VISIBLE_DEVICES] = VOID
    variables[UUIDS] = ",".join(sorted({a.uuid for a in atoms}))
    mounts = [*driver.mounts, *(mps_mounts(mps) if mps is not None else [])]
    edits: dict[str, Any] = {
        "env": [f"{k}={v}" for k, v in sorted(variables.items())],
        "deviceNodes": nodes,
        "mounts": mounts,
    }
    if driver.hooks:
        edits["hooks"] = list(driver.hooks)
    return edits
