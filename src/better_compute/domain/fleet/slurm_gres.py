"""One node's atoms as Slurm generic resources (GRES): its `gres.conf` lines and `slurm.conf` node line.

A Slurm cluster's nodes still run `bcd`, which cuts the GPUs; Slurm must then be told exactly the
atoms the ledger books, or its jobs and our bookings would name different things. The mapping
(docs/slurm.md "Atoms as GRES", after SchedMD's gres.conf(5) of Slurm 22.05):

- a whole GPU is one `gpu` of type `<model>` (`slurm_type` of the catalog model id, else of the
  product NVML reports) with `File=/dev/nvidia<index>`;
- a MIG instance is one `gpu` of type `<profile>` (`3g.40gb`) with `MultipleFiles=` naming the
  parent GPU's device file and the device files of its GPU instance's and compute instance's
  access capabilities (`/dev/nvidia-caps/nvidia-cap<minor>`), since Slurm must hand all three to
  a job for it to open the instance;
- a time-slice or MPS GPU gives its slots as `shard`s (`Count=<slots>` on the GPU's device file),
  and the GPU itself stays a `gpu` line as well: Slurm attaches shards to a configured `gpu`.

Every line names the node and `AutoDetect=off` is said first, so Slurm's NVML detection never adds
or renames what is listed here. The GPU's device file is `/dev/nvidia<index>`: the node reports the
NVML index, which is the device minor on nodes whose driver numbers GPUs in PCI order (the usual
case; docs/slurm.md says so). Capability minors are the driver's fixed table
(`/proc/driver/nvidia-caps/mig-minors`: `config 1`, `monitor 2`, then for each of 32 GPU minors,
each of 15 GPU instances: its access capability, then those of its 8 compute instances), so they
are computed here, not read from the node.

What Slurm cannot be told exactly is refused (`InvalidState`, naming the GPU and why): a GPU whose
MIG mode change waits for its reset, ids beyond the driver's table, and atoms that contradict their
GPU (a MIG instance on a GPU out of MIG mode, slots of two counts on one GPU, two GPUs at one index).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from better_compute.domain.fleet.atoms import Atom, derive_node_atoms
from better_compute.domain.fleet.inventory import NodeReport
from better_compute.domain.fleet.pools import PoolSharing
from better_compute.domain.fleet.records import Gpu
from better_compute.domain.kernel.errors import InvalidState

MAX_GPUS, MAX_GIS, MAX_CIS = 32, 15, 8
"""The driver's mig-minors table covers GPU minors 0-31, GPU instance ids 0-14 and compute
instance ids 0-7 (NVIDIA MIG user guide, "Device Nodes and Capabilities")."""

_FIRST_MINOR = 3
"""`config` is minor 1 and `monitor` minor 2; the first GPU instance capability is 3."""

_SAFE_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
"""A Slurm NodeName as a host name: anything else (`=`, `,`, `[`, `#`, a space) Slurm parses as
syntax."""

_UNSAFE_TYPE = re.compile(r"[^a-z0-9_.]+")


def slurm_type(name: str) -> str:
    """A GRES type name Slurm parses as one word: lower case, each run of characters other than
    letters, digits, `_` and `.` made one `_` (`H100-80GB` -> `h100_80gb`, `1g.10gb+me` ->
    `1g.10gb_me`), with no `_` at either end."""
    return _UNSAFE_TYPE.sub("_", name.lower()).strip("_")


def gi_cap_minor(gpu_minor: int, gi_id: int) -> int:
    """The minor of `/dev/nvidia-caps/nvidia-cap<minor>` for GPU instance `gi_id`'s access capability."""
    return _FIRST_MINOR + (gpu_minor * MAX_GIS + gi_id) * (1 + MAX_CIS)


def ci_cap_minor(gpu_minor: int, gi_id: int, ci_id: int) -> int:
    """The minor of compute instance `ci_id`'s (of GPU instance `gi_id`) access capability."""
    return gi_cap_minor(gpu_minor, gi_id) + 1 + ci_id


def _gpu_file(index: int) -> str:
    return f"/dev/nvidia{index}"


def _cap_file(minor: int) -> str:
    return f"/dev/nvidia-caps/nvidia-cap{minor}"


@dataclass(frozen=True, slots=True)
class SlurmGres:
    """What Slurm is told of one node: `gres_conf`, its gres.conf lines (newline-ended), and
    `node_line`, its `slurm.conf` `NodeName=... Gres=...` line."""

    gres_conf: str
    node_line: str


def _refuse(node: str, gpu: Gpu | None, why: str) -> InvalidState:
    where = f"node {node}" if gpu is None else f"GPU {gpu.index} ({gpu.id}) of node {node}"
    details: dict[str, object] = {"node": node, "reason": "not_expressible"}
    if gpu is not None:
        details["gpu"] = gpu.id
    return InvalidState(f"{where} cannot be given to Slurm: {why}", details)


def _int_attr(atom: Atom, key: str) -> int | None:
    value = atom.attributes.get(key)
    return value if type(value) is int else None


def _gpu_lines(node: str, gpu: Gpu, atoms: list[Atom]) -> list[tuple[str, str, int, str | None]]:
    """(gres.conf line, node-line name, count, atom) for each resource of one GPU; the atom is the
    one a `gpu` line stands for (None for a `shard` line, or a whole GPU the node reports no atom of)."""
    if gpu.mig_mode_current != gpu.mig_mode_pending:
        raise _refuse(node, gpu, "its MIG mode change waits for a reset")
    if not 0 <= gpu.index < MAX_GPUS:
        raise _refuse(node, gpu, f"its index is outside 0-{MAX_GPUS - 1}, which the driver can number")
    model = slurm_type(gpu.model or gpu.product)
    if not model:
        raise _refuse(node, gpu, f"its product {gpu.product!r} gives no type name")
    prefix = f"NodeName={node} Name=gpu"
    mig = [a for a in atoms if a.cls == "gpu.mig"]
    slots = [a for a in atoms if a.cls == "gpu.slot"]
    if mig and not gpu.mig_mode_current:
        raise _refuse(node, gpu, "it has MIG instances but is not in MIG mode")
    if mig and slots:
        raise _refuse(node, gpu, "it has both MIG instances and shared slots")
    if gpu.mig_mode_current:
        lines: list[tuple[str, str, int, str | None]] = []
        seen: set[tuple[int, int]] = set()
        for atom in sorted(mig, key=lambda a: (_int_attr(a, "giId") or 0, _int_attr(a, "ciId") or 0)):
            gi, ci, profile = (
                _int_attr(atom, "giId"),
                _int_attr(atom, "ciId"),
                atom.attributes.get("migProfile"),
            )
            if gi is None or ci is None or not isinstance(profile, str):
                raise _refuse(
                    node, gpu, f"MIG atom {atom.id} names no profile, GPU instance or compute instance"
                )
            if not (0 <= gi < MAX_GIS and 0 <= ci < MAX_CIS):
                raise _refuse(node, gpu, f"MIG instance {gi}.{ci} is outside the driver's capability table")
            if (gi, ci) in seen:
                raise _refuse(node, gpu, f"two atoms are MIG instance {gi}.{ci}")
            seen.add((gi, ci))
            kind = slurm_type(profile)
            files = ",".join(
                [
                    _gpu_file(gpu.index),
                    _cap_file(gi_cap_minor(gpu.index, gi)),
                    _cap_file(ci_cap_minor(gpu.index, gi, ci)),
                ]
            )
            lines.append((f"{prefix} Type={kind} MultipleFiles={files}", f"gpu:{kind}", 1, atom.id))
        return lines
    whole = next((a.id for a in atoms if a.cls == "gpu"), None)
    lines = [(f"{prefix} Type={model} File={_gpu_file(gpu.index)}", f"gpu:{model}", 1, whole)]
    if slots:
        counts = {_int_attr(a, "slots") for a in slots}
        numbers = sorted(n for n in (_int_attr(a, "slot") for a in slots) if n is not None)
        if len(counts) != 1 or None in counts:
            raise _refuse(node, gpu, "its slots do not agree on how many there are")
        count = counts.pop()
        assert count is not None
        if numbers != list(range(count)):
            raise _refuse(node, gpu, f"its slots are not 0-{count - 1}, one each")
        lines.append(
            (f"NodeName={node} Name=shard Count={count} File={_gpu_file(gpu.index)}", "shard", count, None)
        )
    return lines


def node_gres(node: str, gpus: Iterable[Gpu], atoms: Iterable[Atom]) -> SlurmGres:
    """The gres.conf lines and slurm.conf node line of `node` from its GPU records and atoms (those
    no longer reported, `present` False, are left out: Slurm must not hand out what is gone)."""
    if not _SAFE_NODE.match(node):
        raise _refuse(node, None, "Slurm node names are host names (letters, digits, '.', '_', '-')")
    present = sorted((g for g in gpus if g.present and g.node_id == node), key=lambda g: (g.index, g.id))
    by_gpu: dict[str, list[Atom]] = {g.id: [] for g in present}
    for atom in atoms:
        if not atom.present:
            continue
        if atom.node != node or atom.gpu_id not in by_gpu:
            raise _refuse(node, None, f"atom {atom.id} is of no GPU the node reports")
        by_gpu[atom.gpu_id].append(atom)
    indexes = [g.index for g in present]
    if len(set(indexes)) != len(indexes):
        raise _refuse(node, None, "two of its GPUs report the same index")
    conf = [
        f"# {node}: generated by better-compute from its atoms; Slurm's NVML detection is off",
        f"NodeName={node} AutoDetect=off",
    ]
    totals: dict[str, int] = {}
    for gpu in present:
        for line, name, count, _ in _gpu_lines(node, gpu, by_gpu[gpu.id]):
            conf.append(line)
            totals[name] = totals.get(name, 0) + count
    gres = ",".join(f"{name}:{count}" for name, count in totals.items())
    node_line = f"NodeName={node} Gres={gres}" if gres else f"NodeName={node}"
    return SlurmGres(gres_conf="\n".join(conf) + "\n", node_line=node_line)


_REPORTED = datetime(1970, 1, 1, tzinfo=UTC)
"""A GPU record made from a report on the node has no time of its own; the lines do not use it."""


def report_gres(
    report: NodeReport,
    sharing: PoolSharing | None,
    model_of_product: Callable[[str], str | None],
) -> SlurmGres:
    """`node_gres` of a node's own report, as `bcd` makes it on the node (`--slurm-gres-conf`): its
    atoms derived as the server derives them (`derive_node_atoms`, with the node's sharing), so the
    lines it writes are the ones `nodes gres` prints for it."""
    atoms = derive_node_atoms(report, lambda _gpu: sharing, model_of_product)
    gpus = [Gpu.reported(gpu, report.node, model_of_product(gpu.product), _REPORTED) for gpu in report.gpus]
    return node_gres(report.node, gpus, [atom for found in atoms.values() for atom in found])


def accounting_tres(node_line: str) -> str:
    """The `AccountingStorageTRES` value that lets `sacct` count a node line's GRES: `gres/gpu` (every
    GPU, whatever its type), `gres/gpu:<type>` for each type (hours per type), `gres/shard` when it has
    shards. Slurm 22.05 records none of them unless listed (docs/slurm.md#accounting)."""
    gres = node_line.partition(" Gres=")[2]
    names = ["gres/gpu"]
    for item in gres.split(","):
        name, _, rest = item.partition(":")
        if name == "gpu" and ":" in rest:
            names.append(f"gres/gpu:{rest.rpartition(':')[0]}")
        elif name == "shard" and "gres/shard" not in names:
            names.append("gres/shard")
    return ",".join(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class GresSlot:
    """The `index`-th `gpu` GRES of a node, of Slurm type `type`: the atom it stands for (None when
    the line is a whole GPU the ledger has no atom of, as a time-sliced GPU whose slots are booked)."""

    index: int
    type: str
    atom_id: str | None


def gres_slots(node: str, gpus: Iterable[Gpu], atoms: Iterable[Atom]) -> tuple[GresSlot, ...]:
    """A node's `gpu` GRES in the order `node_gres` writes them, which is the order Slurm numbers
    them (a job's `GRES=gpu:<type>:1(IDX:k)` holds the k-th): index k is the atom of the k-th line.
    Refused as `node_gres` refuses."""
    present = sorted((g for g in gpus if g.present and g.node_id == node), key=lambda g: (g.index, g.id))
    by_gpu: dict[str, list[Atom]] = {g.id: [] for g in present}
    for atom in atoms:
        if atom.present and atom.node == node and atom.gpu_id in by_gpu:
            by_gpu[atom.gpu_id].append(atom)
    slots: list[GresSlot] = []
    for gpu in present:
        for _, name, _, atom_id in _gpu_lines(node, gpu, by_gpu[gpu.id]):
            if name.startswith("gpu:"):
                slots.append(GresSlot(len(slots), name.removeprefix("gpu:"), atom_id))
    return tuple(slots)
