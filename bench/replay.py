"""How well our admission packs a production GPU-sharing trace, against the FGD paper's baselines.

Alibaba's `cluster-trace-gpu-v2023` (Weng et al., "Beware of Fragmentation", USENIX ATC '23) lists
8,152 tasks asking for whole GPUs or a share of one, and 1,213 GPU nodes. The tasks arrive in the
file's order and never leave (the paper's "workload inflation"); a task the fleet refuses is dropped
and the next one comes. The GPU allocation ratio (GPU capacity the placed tasks asked for, over the
fleet's GPU capacity) is printed at the first refusal and when the tasks that have arrived ask for
90%, 95% and 100% of the trace's GPU demand (CPU-only tasks are skipped: they take no GPU).

Four policies replay the same trace, each on a fresh fleet:

- ours: what we ship. The fleet is one time-slice pool, each GPU split into `--replicas` slots
  (`domain.ops.traces.slot_atoms`); each task is its device lines (`slot_requests`: a share as the
  slots that give it, a whole GPU as all of one GPU's slots, each line `same_gpu`), and the choice is
  `domain.ledger.choose`'s, over the shortlist the service gives it (`choose.shortlist`), exactly as
  `service.ledger.reservations` decides a reservation, with the pool's recorded request
  distribution in the snapshot (here the trace's own, as FGD has it), which breaks rule 2's ties
  between GPUs by the fragmentation gradient (`--plain` adds `ours-plain`, the choice without it).
  A task of several GPUs that our rules would spread over nodes counts as refused (a trace task
  lives on one node) and is not kept;
- fgd: Fragmentation Gradient Descent as the paper defines it: the node and GPU(s) where the node's
  expected fragmentation (`domain.placement.fragmentation`, over the trace's task distribution,
  each shape with the GPU models its `gpu_spec` allows) grows least; equal nodes are drawn at random
  (as kube-scheduler breaks ties);
- bestfit: the node with the least free GPU capacity that fits, and on it the fullest GPU that fits;
- randomfit: a random node that fits, a random GPU on it that fits.

Baselines live here only, on milli-GPUs; ours runs on atoms, so a share that slots do not give
exactly is rounded up to whole slots: `--replicas` chooses the slot size. The default is the
coarsest slot that gives every share in the trace exactly (10 milli, 100 slots a GPU, for openb);
`--replicas 20` is the pools' default (50 milli a slot) and shows what rounding costs.

    python bench/replay.py --trace openb_pod_list_default.csv   # node list beside it
    python bench/replay.py --trace PODS.csv --nodes NODES.csv [--replicas 20]
    python bench/replay.py                 # a synthetic trace of the same size (bench/tracegen.py)
    python bench/replay.py --quick         # a synthetic trace of 300 nodes, under a minute

The last line is JSON: `allocation_ratio` (ours), `fgd_allocation_ratio`, `bestfit_allocation_ratio`,
`random_allocation_ratio`, all at 100% of the trace's demand, and `replay_s` (the whole run: reading
the trace and the four replays); each policy's marks, refusals and final fragmentation are under
`policies`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tracegen import write_trace
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.kernel.selectors import Selector
from better_compute.domain.ledger import choose
from better_compute.domain.ledger.admission import DeviceRequest
from better_compute.domain.ops.traces import (
    MAX_REPLICAS,
    TraceNode,
    TraceTask,
    model_selector,
    parse_nodes,
    parse_pods,
    slot_atoms,
    slot_requests,
)
from better_compute.domain.placement.fragmentation import (
    WHOLE,
    TaskShape,
    fragmentation_share,
    node_fragmentation,
)

MARKS = (0.9, 0.95, 1.0)
DEFAULT_NODES = "openb_node_list_gpu_node.csv"
SEED = 1

Demand = list[tuple[TaskShape, float]]


class Policy(Protocol):
    name: str

    def place(self, task: TraceTask) -> bool: ...

    def free_milli(self) -> list[list[int]]: ...


def task_distribution(tasks: Sequence[TraceTask]) -> Demand:
    """The trace's GPU task shapes weighted by how many tasks have each (the paper's popularity)."""
    counts = Counter(t.shape for t in tasks if t.shape is not None)
    return [
        (shape, float(n)) for shape, n in sorted(counts.items(), key=lambda kv: (kv[0].gpus, kv[0].milli))
    ]


def _fits(free: Sequence[int], shape: TaskShape) -> bool:
    if shape.gpus:
        return sum(1 for f in free if f >= WHOLE) >= shape.gpus
    return max(free, default=0) >= shape.milli


class _MilliFleet:
    """The baselines' fleet: each node's model and each GPU's free milli-GPUs."""

    def __init__(self, nodes: Sequence[TraceNode]) -> None:
        self.models = [n.model for n in nodes]
        self.free = [[WHOLE] * n.gpus for n in nodes]
        self._eligible: dict[tuple[str, ...], list[int]] = {}

    def eligible(self, task: TraceTask) -> list[int]:
        spec = task.gpu_spec
        if spec not in self._eligible:
            self._eligible[spec] = [i for i, m in enumerate(self.models) if not spec or m in spec]
        return self._eligible[spec]

    def take(self, node: int, gpus: Sequence[int], shape: TaskShape) -> None:
        for g in gpus:
            self.free[node][g] -= WHOLE if shape.gpus else shape.milli

    def free_milli(self) -> list[list[int]]:
        return [list(f) for f in self.free]


class RandomFit(_MilliFleet):
    name = "random"

    def __init__(self, nodes: Sequence[TraceNode], seed: int = SEED) -> None:
        super().__init__(nodes)
        self.rng = random.Random(seed)

    def place(self, task: TraceTask) -> bool:
        shape = task.shape
        assert shape is not None
        fitting = [i for i in self.eligible(task) if _fits(self.free[i], shape)]
        if not fitting:
            return False
        node = self.rng.choice(fitting)
        free = self.free[node]
        if shape.gpus:
            gpus = self.rng.sample([g for g, f in enumerate(free) if f >= WHOLE], shape.gpus)
        else:
            gpus = [self.rng.choice([g for g, f in enumerate(free) if f >= shape.milli])]
        self.take(node, gpus, shape)
        return True


class BestFit(_MilliFleet):
    name = "bestfit"

    def place(self, task: TraceTask) -> bool:
        shape = task.shape
        assert shape is not None
        best: tuple[int, int] | None = None
        for i in self.eligible(task):
            free = self.free[i]
            if _fits(free, shape) and (best is None or sum(free) < best[0]):
                best = (sum(free), i)
        if best is None:
            return False
        node = best[1]
        free = self.free[node]
        if shape.gpus:
            gpus = [g for g, f in enumerate(free) if f >= WHOLE][: shape.gpus]
        else:
            gpus = [min((f, g) for g, f in enumerate(free) if f >= shape.milli)[1]]
        self.take(node, gpus, shape)
        return True


class Fgd(_MilliFleet):
    """FGD: each task goes where its node's expected fragmentation grows least (Weng et al., sec. 4).

    Nodes in the same state (model and sorted free capacities) are one candidate, so a replay
    computes each state's gradient once per task rather than once per node."""

    name = "fgd"

    def __init__(self, nodes: Sequence[TraceNode], demand: Demand, seed: int = SEED) -> None:
        super().__init__(nodes)
        self.demand = demand
        self.rng = random.Random(seed)
        self._frag: dict[tuple[str, tuple[int, ...]], float] = {}
        self.states: dict[tuple[str, tuple[int, ...]], set[int]] = {}
        for i in range(len(self.free)):
            self.states.setdefault(self._key(i), set()).add(i)

    def _key(self, node: int) -> tuple[str, tuple[int, ...]]:
        return (self.models[node], tuple(sorted(self.free[node])))

    def fragmentation(self, model: str, free: tuple[int, ...]) -> float:
        value = self._frag.get((model, free))
        if value is None:
            value = self._frag[(model, free)] = node_fragmentation(free, self.demand, model)
        return value

    def place(self, task: TraceTask) -> bool:
        shape = task.shape
        assert shape is not None
        best = math.inf
        ties: list[tuple[tuple[str, tuple[int, ...]], int]] = []
        for key, members in self.states.items():
            model, free = key
            if (task.gpu_spec and model not in task.gpu_spec) or not members or not _fits(free, shape):
                continue
            before = self.fragmentation(model, free)
            for g in _options(free, shape):
                after = list(free)
                if shape.gpus:
                    for k in range(shape.gpus):
                        after[g + k] -= WHOLE
                else:
                    after[g] -= shape.milli
                delta = self.fragmentation(model, tuple(sorted(after))) - before
                if delta < best - 1e-9:
                    best, ties = delta, [(key, g)]
                elif delta <= best + 1e-9:
                    ties.append((key, g))
        if not ties:
            return False
        # A random node among the best: a state's weight is how many nodes are in it.
        weights = [len(self.states[key]) for key, _ in ties]
        key, g = self.rng.choices(ties, weights)[0]
        node = self.rng.choice(sorted(self.states[key]))
        value = key[1][g]
        on_node = self.free[node]
        if shape.gpus:
            gpus = [i for i, f in enumerate(on_node) if f >= WHOLE][: shape.gpus]
        else:
            gpus = [next(i for i, f in enumerate(on_node) if f == value)]
        self.states[key].discard(node)
        if not self.states[key]:
            del self.states[key]
        self.take(node, gpus, shape)
        self.states.setdefault(self._key(node), set()).add(node)
        return True


def _options(free: tuple[int, ...], shape: TaskShape) -> list[int]:
    """Where on a node (free capacities sorted) a task could go, one per distinct outcome: for a
    share, the first GPU of each free capacity that holds it; for whole GPUs, the first wholly
    free ones (any k wholly free GPUs leave the same node)."""
    if shape.gpus:
        return [free.index(WHOLE)]
    seen: set[int] = set()
    out = []
    for g, f in enumerate(free):
        if f >= shape.milli and f not in seen:
            seen.add(f)
            out.append(g)
    return out


@dataclass
class Ours:
    """Our admission: `choose.shortlist` and `choose.choose` over a snapshot of the trace's fleet as
    one time-slice pool, as the service decides a reservation."""

    nodes: Sequence[TraceNode]
    replicas: int
    demand: Demand | None
    """The pool's recorded request distribution, given to the choice; None: choose without it."""
    name: str = "ours"
    spread: int = 0
    slots_taken: int = 0
    busy_atoms: set[str] = field(default_factory=set)
    busy_by_gpu: Counter[str] = field(default_factory=Counter)
    """Busy slots of the GPUs partly used; a full GPU is in `full` instead."""
    full: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.by_gpu: dict[str, list[Atom]] = {}
        for atom in slot_atoms(self.nodes, self.replicas):
            self.by_gpu.setdefault(atom.gpu_id, []).append(atom)
        self.model_of = {g: n.model for n in self.nodes for g in n.gpu_ids}
        self.free_by_gpu = dict.fromkeys(self.by_gpu, self.replicas)
        self._matching: dict[Selector, dict[str, list[Atom]]] = {}
        self._requests: dict[tuple[int, int, tuple[str, ...]], list[DeviceRequest]] = {}
        self.node_of = {g: n for n in self.nodes for g in n.gpu_ids}
        self.fragmentation = None if self.demand is None else self.growth

    def growth(self, node_name: str, gpu: str, before: int, after: int) -> float:
        """The snapshot's fragmentation gradient: the pool's request distribution over every GPU
        of the node, the choice's GPU going from `before` to `after` milli-GPUs free."""
        assert self.demand is not None
        node = self.node_of[gpu]
        free = [self.free_by_gpu[g] * WHOLE // self.replicas for g in node.gpu_ids]
        i = node.gpu_ids.index(gpu)
        free[i] = before
        was = node_fragmentation(free, self.demand, node.model)
        free[i] = after
        return node_fragmentation(free, self.demand, node.model) - was

    def matching_by_gpu(self, task: TraceTask) -> dict[str, list[Atom]]:
        """The pool's atoms that match the task's model constraint, by GPU in the pool's order. A
        GPU with no free atom is dropped: it adds nothing to a shortlist, so the choice is the same
        as over the whole pool, at a fraction of the cost."""
        selector = model_selector(task)
        found = self._matching.get(selector)
        if found is None:
            found = self._matching[selector] = {
                g: atoms
                for g, atoms in self.by_gpu.items()
                if not task.gpu_spec or self.model_of[g] in task.gpu_spec
            }
        return found

    def requests(self, task: TraceTask) -> list[DeviceRequest]:
        key = (task.num_gpu, task.gpu_milli, task.gpu_spec)
        found = self._requests.get(key)
        if found is None:
            found = self._requests[key] = slot_requests(task, self.replicas)
        return found

    def place(self, task: TraceTask) -> bool:
        requests = self.requests(task)
        matching = self.matching_by_gpu(task)
        total = sum(r.count for r in requests)
        shortlisted: dict[str, Atom] = {}
        for request in requests:
            for atom in choose.shortlist(
                request,
                matching,
                self.busy_atoms,
                self.busy_by_gpu,
                count=total,
                free_by_gpu=self.free_by_gpu,
            ):
                shortlisted[atom.id] = atom
        decision = choose.choose(
            requests, list(shortlisted.values()), self.busy_by_gpu, fragmentation=self.fragmentation
        )
        if isinstance(decision, choose.NoFit):
            return False
        atoms = [shortlisted[a] for a in decision.atom_ids]
        if len({a.node for a in atoms}) > 1:
            self.spread += 1
            return False
        for atom in atoms:
            self.busy_atoms.add(atom.id)
            self.busy_by_gpu[atom.gpu_id] += 1
            self.free_by_gpu[atom.gpu_id] -= 1
            if self.busy_by_gpu[atom.gpu_id] == self.replicas:
                # A full GPU adds nothing to a shortlist or a choice: dropped from what they read.
                del self.busy_by_gpu[atom.gpu_id]
                self.full.add(atom.gpu_id)
                for found in self._matching.values():
                    found.pop(atom.gpu_id, None)
        self.slots_taken += len(atoms)
        return True

    def free_milli(self) -> list[list[int]]:
        return [[round(self.free_by_gpu[g] * WHOLE / self.replicas) for g in n.gpu_ids] for n in self.nodes]


@dataclass
class Run:
    policy: str
    marks: dict[str, float | None]
    first_refusal: float | None
    refused: int
    placed: int
    fragmentation: float
    seconds: float
    extra: dict[str, float | int] = field(default_factory=dict)


def replay(
    policy: Policy, tasks: Sequence[TraceTask], capacity: int, demand: Demand, models: Sequence[str]
) -> Run:
    """Tasks arrive in order and never leave; the allocation ratio is read at the first refusal and
    at each mark of the trace's GPU demand."""
    started = time.perf_counter()
    gpu_tasks = [t for t in tasks if t.shape is not None]
    total = sum(t.gpu_demand_milli for t in gpu_tasks)
    allocated = arrived = refused = placed = 0
    first: float | None = None
    marks: dict[str, float | None] = {f"{int(m * 100)}%": None for m in MARKS}
    for task in gpu_tasks:
        arrived += task.gpu_demand_milli
        if policy.place(task):
            allocated += task.gpu_demand_milli
            placed += 1
        else:
            refused += 1
            if first is None:
                first = allocated / capacity
        for m in MARKS:
            label = f"{int(m * 100)}%"
            if marks[label] is None and arrived >= m * total:
                marks[label] = allocated / capacity
    seconds = time.perf_counter() - started
    frag = fragmentation_share(policy.free_milli(), demand, models)
    return Run(policy.name, marks, first, refused, placed, frag, seconds)


def inflate(tasks: Sequence[TraceTask], demand_milli: float) -> list[TraceTask]:
    """The trace's tasks again and again, in order, until they ask for `demand_milli` (the paper's
    workload inflation, without its random resampling)."""
    out: list[TraceTask] = []
    asked = 0
    if not any(t.gpu_demand_milli for t in tasks):
        return list(tasks)
    while asked < demand_milli:
        for task in tasks:
            out.append(task)
            asked += task.gpu_demand_milli
            if asked >= demand_milli:
                break
    return out


def exact_replicas(tasks: Sequence[TraceTask]) -> int:
    """The fewest slots per GPU whose slot size gives every share of the trace exactly."""
    step = WHOLE
    for task in tasks:
        if task.shape is not None and not task.shape.gpus:
            step = math.gcd(step, task.shape.milli)
    return min(MAX_REPLICAS, WHOLE // step)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trace", type=Path, help="an openb_pod_list_*.csv; none: a synthetic trace")
    parser.add_argument(
        "--nodes", type=Path, help=f"the node list (default: {DEFAULT_NODES} beside the pod list)"
    )
    parser.add_argument("--replicas", type=int, help="slots per GPU for ours (default: exact for the trace)")
    parser.add_argument("--quick", action="store_true", help="a synthetic trace of 300 nodes; under a minute")
    parser.add_argument("--seed", type=int, default=SEED, help="random-fit's and FGD's tie-breaking draws")
    parser.add_argument(
        "--plain",
        action="store_true",
        help="also replay ours without the request distribution (`ours-plain`)",
    )
    parser.add_argument(
        "--inflate",
        type=float,
        help="repeat the trace's tasks in order until they ask for this many times the fleet's GPUs (1.3)",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if args.trace is None:
            pods, node_list = write_trace(Path(tmp), nodes=300 if args.quick else 1213)
            print(f"synthetic trace: {pods}", file=sys.stderr)
        else:
            pods = args.trace
            node_list = args.nodes or args.trace.with_name(DEFAULT_NODES)
            for path in (pods, node_list):
                if not path.is_file():
                    parser.error(f"{path}: no such file")
        with pods.open(newline="") as f:
            tasks = parse_pods(f, pods.name)
        with node_list.open(newline="") as f:
            nodes = [n for n in parse_nodes(f, node_list.name) if n.gpus]
    replicas = args.replicas or exact_replicas(tasks)
    capacity = sum(n.gpus for n in nodes) * WHOLE
    if args.inflate:
        tasks = inflate(tasks, args.inflate * capacity)
    demand = task_distribution(tasks)
    ours = Ours(nodes, replicas, demand)
    policies: list[Policy] = [
        ours,
        Fgd(nodes, demand, args.seed),
        BestFit(nodes),
        RandomFit(nodes, args.seed),
    ]
    if args.plain:
        policies.append(Ours(nodes, replicas, None, name="ours-plain"))
    models = [n.model for n in nodes]
    runs = [replay(p, tasks, capacity, demand, models) for p in policies]
    runs[0].extra = {
        "replicas": replicas,
        "spread_refused": ours.spread,
        "slot_ratio": ours.slots_taken / replicas * WHOLE / capacity,
    }
    replay_s = time.perf_counter() - started
    gpu_tasks = sum(1 for t in tasks if t.shape is not None)
    gpus_asked = sum(t.gpu_demand_milli for t in tasks) / WHOLE
    print(
        f"{len(tasks)} tasks ({gpu_tasks} ask for GPUs, {gpus_asked:.1f} GPUs in all),"
        f" {len(nodes)} GPU nodes ({capacity // WHOLE} GPUs); ours on {replicas} slots a GPU",
        file=sys.stderr,
    )
    head = ("first refusal", "90%", "95%", "100%", "refused", "frag", "s")
    print(f"{'policy':10} " + " ".join(f"{h:>{max(6, len(h))}}" for h in head), file=sys.stderr)
    for run in runs:
        cells = [_pct(run.first_refusal), *(_pct(v) for v in run.marks.values())]
        print(
            f"{run.policy:10} {cells[0]:>13} {cells[1]:>6} {cells[2]:>6} {cells[3]:>6} {run.refused:>7}"
            f" {run.fragmentation:>6.3f} {run.seconds:>6.1f}",
            file=sys.stderr,
        )
    by_name = {r.policy: r for r in runs}
    details = {
        "trace": "synthetic" if args.trace is None else pods.name,
        "policies": {
            r.policy: {
                "first_refusal": _round(r.first_refusal),
                **{f"at_{k}": _round(v) for k, v in r.marks.items()},
                "refused": r.refused,
                "placed": r.placed,
                "fragmentation": round(r.fragmentation, 4),
                "seconds": round(r.seconds, 2),
                **r.extra,
            }
            for r in runs
        },
    }
    print(json.dumps(details))  # each policy's marks, on the line before the summary
    print(
        json.dumps(
            {
                "allocation_ratio": _round(by_name["ours"].marks["100%"]),
                "fgd_allocation_ratio": _round(by_name["fgd"].marks["100%"]),
                "bestfit_allocation_ratio": _round(by_name["bestfit"].marks["100%"]),
                "random_allocation_ratio": _round(by_name["random"].marks["100%"]),
                "replay_s": round(replay_s, 2),
            }
        )
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


if __name__ == "__main__":
    main()
