"""Alibaba's GPU-sharing trace (`cluster-trace-gpu-v2023`, the "openb" pod and node lists) read into
our terms: tasks become device requests, nodes become GPUs split into time-slice slots.

The trace (github.com/alibaba/clusterdata, `cluster-trace-gpu-v2023/csv`) is the workload of
Weng et al., "Beware of Fragmentation" (USENIX ATC '23). Its terms allow research and study only, so
it is never shipped: callers read the file and hand its lines in; parsing here is pure.

Columns, as the dataset's README names them:

- pods (`openb_pod_list_*.csv`): `name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos,
  pod_phase, creation_time, deletion_time, scheduled_time`. Some files (the `multigpu*` ones) stop
  after `gpu_milli`; the columns after it are optional. `num_gpu` is 0..8; `gpu_milli` is the share
  of one GPU when `num_gpu` is 1 (1000: the whole GPU); `gpu_spec` is empty or GPU models joined by
  `|` (`V100M16|V100M32`).
- nodes (`openb_node_list_gpu_node.csv`): `sn, cpu_milli, memory_mib, gpu, model`; `model` is a GPU
  model (G1, G2, G3 are undisclosed codes; T4, P100, V100M16, V100M32, A10 are NVIDIA's).

The mapping (docs/traces.md):

- `num_gpu` whole GPUs: in a time-slice pool of `replicas` slots per GPU, a whole GPU is all of one
  GPU's slots, so k GPUs are k device lines of `replicas` `gpu.slot` atoms, each line `same_gpu`;
- a `gpu_milli` share: the fewest slots that give it, `ceil(milli * replicas / 1000)`, on one GPU
  (`same_gpu`), or the cheapest MIG instance of a MIG-capable model that gives it (`mig_profile_for`);
- `gpu_spec`: a selector `gpuModel In [models]`, what a device class selecting those models holds;
- the trace's GPU models: generic models by name, the node's `gpuModel` attribute (none is a MIG
  catalog model; the MIG mapping names the catalog model that stands in for every GPU, and leaves
  `gpu_spec` out, since no GPU is of a trace model any more).

CPU and memory are read but not mapped: our atoms are GPU pieces; a host's CPU is not booked.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from better_compute.domain.catalog import GpuModel, MigProfile
from better_compute.domain.fleet.atoms import Atom, AttrValue
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.selectors import EVERYTHING, Selector, parse_selector
from better_compute.domain.ledger.admission import DeviceRequest
from better_compute.domain.placement.fragmentation import WHOLE, TaskShape

POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
POD_REQUIRED = POD_COLUMNS[:5]
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")

MAX_TRACE_ROWS = 1_000_000
"""Rows one trace file may hold: the openb lists hold 8,152 pods and 1,523 nodes; a million is room
for a larger trace and a bound on what a mistaken file costs."""
MAX_NODE_GPUS = 64
"""GPUs one trace node may have (the openb nodes have 1 to 8)."""
MAX_TASK_GPUS = 64
"""Whole GPUs one trace task may ask for (the openb tasks ask for 0 to 8)."""
DEFAULT_REPLICAS = 20
"""Slots per GPU when a share is mapped to time-slice slots: 50 milli a slot."""
MAX_REPLICAS = 1000
"""At most one slot per milli-GPU: a finer slot could not be told apart in the trace."""


@dataclass(frozen=True)
class TraceTask:
    """One row of a pod list."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    qos: str = ""
    pod_phase: str = ""
    creation_time: int | None = None
    deletion_time: int | None = None
    scheduled_time: int | None = None

    @property
    def shape(self) -> TaskShape | None:
        """What it asks of the GPUs (and of which models, its `gpu_spec`); None for a task that asks
        for none (CPU only)."""
        if self.num_gpu == 0:
            return None
        if self.num_gpu == 1 and self.gpu_milli < WHOLE:
            return TaskShape(milli=self.gpu_milli, models=self.gpu_spec)
        return TaskShape(gpus=self.num_gpu, models=self.gpu_spec)

    @property
    def gpu_demand_milli(self) -> int:
        """The GPU capacity it asks for, in milli-GPUs."""
        shape = self.shape
        return 0 if shape is None else shape.demand_milli


@dataclass(frozen=True)
class TraceNode:
    """One row of a node list: `gpus` GPUs of `model` (no GPUs: model is empty)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str
    gpu_ids: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not self.gpu_ids:
            object.__setattr__(self, "gpu_ids", tuple(f"{self.name}/gpu{i}" for i in range(self.gpus)))


def parse_pods(lines: Iterable[str], source: str = "pod list") -> list[TraceTask]:
    """The tasks of a pod list, in the file's order (the order they arrive in a replay)."""
    tasks: list[TraceTask] = []
    for line, row in _rows(lines, source, POD_REQUIRED):
        where = f"{source} line {line}"
        num_gpu = _int(row, "num_gpu", where, 0, MAX_TASK_GPUS)
        gpu_milli = _int(row, "gpu_milli", where, 0, WHOLE)
        if num_gpu == 0 and gpu_milli:
            raise InvalidInput(f"{where}: gpu_milli {gpu_milli} with num_gpu 0", {"line": line})
        if num_gpu > 1 and gpu_milli != WHOLE:
            raise InvalidInput(
                f"{where}: a share of one GPU (gpu_milli {gpu_milli}) with num_gpu {num_gpu};"
                f" a share is asked with num_gpu 1",
                {"line": line},
            )
        if num_gpu == 1 and gpu_milli == 0:
            raise InvalidInput(f"{where}: num_gpu 1 with gpu_milli 0", {"line": line})
        spec = (row.get("gpu_spec") or "").strip()
        tasks.append(
            TraceTask(
                name=_text(row, "name", where),
                cpu_milli=_int(row, "cpu_milli", where, 0, 2**40),
                memory_mib=_int(row, "memory_mib", where, 0, 2**40),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_spec=tuple(m.strip() for m in spec.split("|") if m.strip())
                if spec not in ("", "nan")
                else (),
                qos=(row.get("qos") or "").strip(),
                pod_phase=(row.get("pod_phase") or "").strip(),
                creation_time=_opt_int(row, "creation_time", where),
                deletion_time=_opt_int(row, "deletion_time", where),
                scheduled_time=_opt_int(row, "scheduled_time", where),
            )
        )
    return tasks


def parse_nodes(lines: Iterable[str], source: str = "node list") -> list[TraceNode]:
    """The nodes of a node list, in the file's order (the fleet's stable order)."""
    nodes: list[TraceNode] = []
    names: set[str] = set()
    for line, row in _rows(lines, source, NODE_COLUMNS):
        where = f"{source} line {line}"
        name = _text(row, "sn", where)
        if name in names:
            raise InvalidInput(f"{where}: node {name} is listed twice", {"line": line})
        names.add(name)
        gpus = _int(row, "gpu", where, 0, MAX_NODE_GPUS)
        model = (row.get("model") or "").strip()
        if gpus and model in ("", "nan"):
            raise InvalidInput(f"{where}: node {name} has {gpus} GPUs and no model", {"line": line})
        nodes.append(
            TraceNode(
                name=name,
                cpu_milli=_int(row, "cpu_milli", where, 0, 2**40),
                memory_mib=_int(row, "memory_mib", where, 0, 2**40),
                gpus=gpus,
                model=model if gpus else "",
            )
        )
    return nodes


def model_selector(task: TraceTask) -> Selector:
    """The device-class constraint of a task's `gpu_spec`: `gpuModel In [...]`, or everything."""
    if not task.gpu_spec:
        return EVERYTHING
    return parse_selector(
        {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": list(task.gpu_spec)}]},
        "gpu_spec",
    )


def slots_for(milli: int, replicas: int = DEFAULT_REPLICAS) -> int:
    """The fewest of `replicas` slots per GPU that give `milli` thousandths of one GPU."""
    _check_replicas(replicas)
    return max(1, math.ceil(milli * replicas / WHOLE))


def slot_requests(task: TraceTask, replicas: int = DEFAULT_REPLICAS) -> list[DeviceRequest]:
    """A task as device lines of a time-slice pool with `replicas` slots per GPU; none for a task
    that asks for no GPU. Each line's slots land on one GPU (`same_gpu`)."""
    shape = task.shape
    if shape is None:
        return []
    selector = model_selector(task)
    if shape.gpus:
        line = DeviceRequest("gpu.slot", _checked(replicas), selector=selector, same_gpu=True)
        return [line] * shape.gpus
    return [DeviceRequest("gpu.slot", slots_for(shape.milli, replicas), selector=selector, same_gpu=True)]


def mig_profile_for(milli: int, model: GpuModel) -> MigProfile:
    """The cheapest MIG instance of `model` that gives `milli` thousandths of one GPU: the fewest
    compute slices whose share of the GPU's is at least `milli` (fewest memory slices next), among
    plain profiles (no `+me` variants, which are the same size with media engines)."""
    if not model.mig_capable or not model.profiles:
        raise InvalidInput(f"{model.id} does not support MIG", {"model": model.id})
    plain = [p for p in model.profiles if not p.attribute]
    fits = [p for p in plain if p.compute_slices * WHOLE >= milli * model.compute_slices]
    return min(fits, key=lambda p: (p.compute_slices, p.memory_slices, p.name))


def mig_requests(task: TraceTask, model: GpuModel) -> list[DeviceRequest]:
    """A task as device lines of a MIG pool of `model`: a share as the cheapest instance that gives
    it, k whole GPUs as k instances of the whole-GPU profile, each line a selector `migProfile In
    [profile]`. The task's `gpu_spec` is left out: it names the trace's models, and under this
    mapping every GPU is a `model` (a `gpuModel In [T4]` line could never be served)."""
    shape = task.shape
    if shape is None:
        return []
    milli = WHOLE if shape.gpus else shape.milli
    profile = mig_profile_for(milli, model).name
    selector = parse_selector(
        {"matchExpressions": [{"key": "migProfile", "op": "In", "values": [profile]}]}, "migProfile"
    )
    return [DeviceRequest("gpu.mig", shape.gpus or 1, selector=selector)]


def slot_atoms(
    nodes: Sequence[TraceNode], replicas: int = DEFAULT_REPLICAS, pool_id: str = "trace"
) -> list[Atom]:
    """The fleet of a node list as one time-slice pool: each GPU split into `replicas` slots, with
    the trace's model as the GPU's `gpuModel`. Nodes without GPUs add nothing."""
    _check_replicas(replicas)
    atoms: list[Atom] = []
    for node in nodes:
        attributes: dict[str, AttrValue] = {"gpuModel": node.model, "sharing": "timeslice", "slots": replicas}
        for gpu_id in node.gpu_ids:
            atoms.extend(
                Atom(
                    id=f"{gpu_id}/slot:{i}",
                    gpu_id=gpu_id,
                    node=node.name,
                    cls="gpu.slot",
                    key=f"slot:{i}",
                    bookable=True,
                    partition_pending=False,
                    pool_id=pool_id,
                    numa_node=None,
                    nvlink_domain=None,
                    attributes=attributes,
                )
                for i in range(replicas)
            )
    return atoms


def _check_replicas(replicas: int) -> None:
    if not 1 <= replicas <= MAX_REPLICAS:
        raise InvalidInput(
            f"replicas must be from 1 to {MAX_REPLICAS} slots per GPU, not {replicas}",
            {"field": "replicas", "max": MAX_REPLICAS},
        )


def _checked(replicas: int) -> int:
    _check_replicas(replicas)
    return replicas


def _rows(lines: Iterable[str], source: str, required: Sequence[str]) -> Iterable[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(iter(lines))
    header = reader.fieldnames or []
    missing = [c for c in required if c not in header]
    if missing:
        raise InvalidInput(
            f"{source}: the header lacks {', '.join(missing)} (it has {', '.join(header) or 'nothing'})",
            {"missing": missing},
        )
    for count, row in enumerate(reader, start=1):
        if count > MAX_TRACE_ROWS:
            raise InvalidInput(f"{source}: more than {MAX_TRACE_ROWS} rows", {"max": MAX_TRACE_ROWS})
        yield reader.line_num, row


def _text(row: dict[str, str], column: str, where: str) -> str:
    value = (row.get(column) or "").strip()
    if not value:
        raise InvalidInput(f"{where}: {column} is empty", {"column": column})
    return value


def _int(row: dict[str, str], column: str, where: str, low: int, high: int) -> int:
    raw = (row.get(column) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
        if not number.is_integer():
            raise InvalidInput(
                f"{where}: {column} must be a whole number, not {raw!r}", {"column": column}
            ) from None
        value = int(number)
    if not low <= value <= high:
        raise InvalidInput(f"{where}: {column} must be from {low} to {high}, not {value}", {"column": column})
    return value


def _opt_int(row: dict[str, str], column: str, where: str) -> int | None:
    raw = (row.get(column) or "").strip()
    if raw in ("", "nan"):
        return None
    return _int(row, column, where, 0, 2**62)
