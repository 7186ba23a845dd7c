"""Sizing an endpoint: the partition layout and instance count that serve a set of models at the
lowest price (`better-compute advise --endpoint`; docs/endpoints.md#sizing-an-endpoint-advise---endpoint;
seed 003).

Each model is sized as the single-model advisor sizes it (weights + KV cache + overhead, see
`domain.catalog.sizing`), and every partition type that holds it is a GPU option in its own right, with its
cost per unit: the instance's hourly price over the units of that type it holds (a p5.48xlarge at
$63.296/h holds sixteen 3g.40gb partitions: $3.956 each).

An endpoint splits every accelerator the same way, so a plan is one GPU's layout, an instance
count, and for each model (a component) the one partition type its copies take. For each GPU model
every maximal layout (one no partition can be added to: a smaller one holds nothing more at the same
price) is tried; for a layout the fewest instances that hold every model's copies are found, each
component on a single type (its type is fixed for life, so copies are not split across types), then
the plans are ranked by the hourly price (or, unpriced, by the GPUs they take), then by the memory
the copies take, then by the name of the layout. Within a layout, the search tries each model's
smallest type first, so the copies tend to the smallest partitions that serve them; the instance
count is the fewest there is, the memory is not always the least.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from better_compute.domain.catalog import GpuModel, MigProfile, get_model, mig_models
from better_compute.domain.catalog.layouts import Layout, is_valid
from better_compute.domain.catalog.sizing import (
    DEFAULT_OVERHEAD_GIB,
    Fit,
    MemoryNeed,
    ModelSpec,
    Price,
    adjusted,
    advise,
    memory_needed,
    preset,
)
from better_compute.domain.endpoints.endpoints import check_endpoint_name
from better_compute.domain.kernel.errors import InvalidInput

__all__ = [
    "DEFAULT_INSTANCE_GPUS",
    "MAX_MODELS",
    "EndpointAdvice",
    "EndpointPlan",
    "ModelPlacement",
    "ServedModel",
    "SizedModel",
    "Unservable",
    "advise_endpoint",
    "maximal_layouts",
    "parse_served_models",
]

MAX_MODELS = 16
"""Models one `advise --endpoint` file may list."""
MAX_COPIES = 1_000
"""Copies one model may ask for (as a component may)."""
MAX_CONTEXT = 10_000_000
MAX_CONCURRENCY = 100_000
MAX_PLAN_INSTANCES = 64
"""The most instances a plan may take: what one endpoint variant may hold."""
TOO_MANY = "the models need more than"
DEFAULT_INSTANCE_GPUS = 8
"""GPUs per instance for a GPU model with no price (a P4d or P5 carries eight)."""

_MODEL_FIELDS = frozenset(
    {
        "name",
        "model",
        "paramsB",
        "layers",
        "kvHeads",
        "headDim",
        "dtype",
        "kvDtype",
        "context",
        "concurrency",
        "copies",
        "overheadGiB",
    }
)


@dataclass(frozen=True)
class ServedModel:
    """One model to serve: what it is, at what context and load, and how many copies."""

    name: str
    spec: ModelSpec
    dtype: str
    context: int
    concurrency: int
    copies: int
    kv_dtype: str | None = None
    overhead_gib: float = DEFAULT_OVERHEAD_GIB


def _int(raw: Any, field: str, low: int, high: int, default: int | None = None) -> int:
    if raw is None and default is not None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        raise InvalidInput(f"{field} must be a whole number from {low} to {high}", {"field": field})
    return raw


def _positive(raw: Any, field: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw <= 0:
        raise InvalidInput(f"{field} must be a positive number", {"field": field})
    return float(raw)


def _served(raw: Any, index: int) -> ServedModel:
    where = f"models[{index}]"
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where} must be a mapping", {"field": where})
    if not all(isinstance(k, str) for k in raw):
        raise InvalidInput(f"{where}: every field name must be text", {"field": where})
    unknown = sorted(set(raw) - _MODEL_FIELDS)
    if unknown:
        raise InvalidInput(
            f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(_MODEL_FIELDS))})",
            {"field": f"{where}.{unknown[0]}"},
        )
    params_b = _positive(raw["paramsB"], f"{where}.paramsB") if "paramsB" in raw else None
    layers = _int(raw["layers"], f"{where}.layers", 1, 4096) if "layers" in raw else None
    kv_heads = _int(raw["kvHeads"], f"{where}.kvHeads", 1, 4096) if "kvHeads" in raw else None
    head_dim = _int(raw["headDim"], f"{where}.headDim", 1, 65536) if "headDim" in raw else None
    model = raw.get("model")
    if model is not None:
        if not isinstance(model, str):
            raise InvalidInput(f"{where}.model must be a preset's name", {"field": f"{where}.model"})
        spec = adjusted(preset(model), params_b=params_b, layers=layers, kv_heads=kv_heads, head_dim=head_dim)
    elif params_b is not None and layers is not None and kv_heads is not None and head_dim is not None:
        spec = ModelSpec(f"{params_b:g}B", params_b, layers, kv_heads, head_dim)
    else:
        raise InvalidInput(
            f"{where} needs model (a preset), or paramsB with layers, kvHeads and headDim",
            {"field": f"{where}.model"},
        )
    # A model becomes a component, so its name is a component's name.
    name = check_endpoint_name(raw.get("name", f"model-{index}"), f"{where}.name")
    dtype = raw.get("dtype", "fp16")
    kv_dtype = raw.get("kvDtype")
    for field, value in (("dtype", dtype), ("kvDtype", kv_dtype)):
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"{where}.{field} must be a dtype's name", {"field": f"{where}.{field}"})
    overhead = raw.get("overheadGiB", DEFAULT_OVERHEAD_GIB)
    if isinstance(overhead, bool) or not isinstance(overhead, int | float) or not 0 <= overhead <= 1024:
        raise InvalidInput(f"{where}.overheadGiB must be from 0 to 1024", {"field": f"{where}.overheadGiB"})
    served = ServedModel(
        name=name,
        spec=spec,
        dtype=dtype,
        context=_int(raw.get("context"), f"{where}.context", 1, MAX_CONTEXT),
        concurrency=_int(raw.get("concurrency"), f"{where}.concurrency", 1, MAX_CONCURRENCY, default=1),
        copies=_int(raw.get("copies"), f"{where}.copies", 1, MAX_COPIES, default=1),
        kv_dtype=kv_dtype,
        overhead_gib=float(overhead),
    )
    memory_needed(served.spec, dtype, served.context, served.concurrency, served.overhead_gib, kv_dtype)
    return served


def parse_served_models(raw: Any) -> tuple[ServedModel, ...]:
    """The `models` of an `advise --endpoint` file, each refused naming its field when malformed."""
    if not isinstance(raw, Mapping) or set(raw) - {"models"}:
        raise InvalidInput("an endpoint sizing file is a mapping with one key, models", {"field": "models"})
    models = raw.get("models")
    if not isinstance(models, list) or not 1 <= len(models) <= MAX_MODELS:
        raise InvalidInput(f"models must list 1 to {MAX_MODELS} models", {"field": "models"})
    served = tuple(_served(m, k) for k, m in enumerate(models))
    seen: set[str] = set()
    for k, m in enumerate(served):
        if m.name in seen:
            raise InvalidInput(
                f"models[{k}].name {m.name!r} is given twice: each model becomes a component of its own",
                {"field": f"models[{k}].name"},
            )
        seen.add(m.name)
    return served


@dataclass(frozen=True)
class SizedModel:
    """A model's memory need and every partition type (and whole GPU) that holds it."""

    model: ServedModel
    need: MemoryNeed
    options: tuple[Fit, ...]


@dataclass(frozen=True)
class ModelPlacement:
    """Where a plan puts one model: its partition type and copies, and the headroom each keeps."""

    name: str
    model: str
    partition_type: str
    copies: int
    headroom_gib: float


@dataclass(frozen=True)
class EndpointPlan:
    """One GPU model's cheapest endpoint for the models: a layout, instances, each model's type."""

    gpu: str
    gpus_per_instance: int
    partition_types: tuple[str, ...]
    """One accelerator's split, `mig-` names, largest first: the variant's acceleratorPartitionTypes."""
    instance_count: int
    price_per_instance_hour: float | None
    components: tuple[ModelPlacement, ...]
    spare: tuple[tuple[str, int], ...]
    """Partitions of each type the plan leaves free, for more copies later."""

    @property
    def gpus(self) -> int:
        return self.instance_count * self.gpus_per_instance

    @property
    def price_per_hour(self) -> float | None:
        price = self.price_per_instance_hour
        return None if price is None else price * self.instance_count


@dataclass(frozen=True)
class Unservable:
    """A GPU model no plan fits on, and why (a model no partition holds, or too many instances)."""

    gpu: str
    reason: str


@dataclass(frozen=True)
class EndpointAdvice:
    models: tuple[SizedModel, ...]
    plans: tuple[EndpointPlan, ...]
    """The best plan of each GPU model, the cheapest first; `plans[0]` is the proposal."""
    unservable: tuple[Unservable, ...]


def _plain(gpu: GpuModel) -> tuple[MigProfile, ...]:
    return tuple(p for p in gpu.profiles if not p.attribute)


def _layouts_from(
    gpu: GpuModel,
    profiles: Sequence[MigProfile],
    start: int,
    counts: dict[str, int],
    compute: int,
    memory: int,
) -> Iterator[dict[str, int]]:
    """Every multiset of `profiles[start:]` added to `counts` within the GPU's slices."""
    yield dict(counts)
    for k in range(start, len(profiles)):
        p = profiles[k]
        if compute + p.compute_slices > gpu.compute_slices or memory + p.memory_slices > gpu.memory_slices:
            continue
        counts[p.name] = counts.get(p.name, 0) + 1
        yield from _layouts_from(
            gpu, profiles, k, counts, compute + p.compute_slices, memory + p.memory_slices
        )
        counts[p.name] -= 1
        if counts[p.name] == 0:
            del counts[p.name]


@lru_cache(maxsize=64)
def maximal_layouts(model_id: str) -> tuple[tuple[tuple[str, int], ...], ...]:
    """The valid layouts of one GPU model that no plain profile can be added to, as profile counts:
    the only ones worth buying, since a smaller layout offers nothing more at the same price."""
    gpu = get_model(model_id)
    profiles = _plain(gpu)
    valid = [
        counts
        for counts in _layouts_from(gpu, profiles, 0, {}, 0, 0)
        if counts and is_valid(Layout.mixed(counts), gpu)
    ]
    keys = {tuple(sorted(c.items())) for c in valid}

    def grows(counts: dict[str, int]) -> bool:
        for p in profiles:
            bigger = dict(counts)
            bigger[p.name] = bigger.get(p.name, 0) + 1
            if tuple(sorted(bigger.items())) in keys:
                return True
        return False

    return tuple(sorted(tuple(sorted(c.items())) for c in valid if not grows(c)))


def _assign(needs: Sequence[tuple[int, Sequence[int]]], capacities: list[int]) -> list[int] | None:
    """A type index for each (copies, eligible type indexes) within `capacities`, or None.

    Depth-first, the largest demands first and each one's smallest type first (so the first answer
    found takes the smallest partitions that hold each model); failed states are remembered."""
    order = sorted(range(len(needs)), key=lambda k: -needs[k][0])
    chosen = [0] * len(needs)
    failed: set[tuple[int, tuple[int, ...]]] = set()

    def place(depth: int) -> bool:
        if depth == len(order):
            return True
        state = (depth, tuple(capacities))
        if state in failed:
            return False
        copies, eligible = needs[order[depth]]
        for t in eligible:
            if capacities[t] >= copies:
                capacities[t] -= copies
                chosen[order[depth]] = t
                if place(depth + 1):
                    return True
                capacities[t] += copies
        failed.add(state)
        return False

    return chosen if place(0) else None


def _plan(
    gpu: GpuModel,
    counts: tuple[tuple[str, int], ...],
    sized: Sequence[SizedModel],
    gpus_per_instance: int,
    price: float | None,
) -> EndpointPlan | str:
    """The fewest instances of one layout that hold every model, or why none do."""
    types = sorted(counts, key=lambda c: (gpu.profile(c[0]).memory_gib, gpu.profile(c[0]).compute_slices))
    memory = [gpu.profile(name).memory_gib for name, _ in types]
    needs: list[tuple[int, list[int]]] = []
    for s in sized:
        eligible = [k for k, gib in enumerate(memory) if gib >= s.need.total_gib]
        if not eligible:
            return f"no partition of this layout holds {s.model.name}"
        needs.append((s.model.copies, eligible))
    per_instance = [gpus_per_instance * n for _, n in types]
    # Hall's bound: the copies that need at least the k-th type fit in the partitions from it up.
    lower = 1
    for k in range(len(types)):
        demand = sum(c for c, e in needs if e[0] >= k)
        supply = sum(per_instance[k:])
        lower = max(lower, math.ceil(demand / supply))
    for instances in range(lower, MAX_PLAN_INSTANCES + 1):
        capacities = [instances * n for n in per_instance]
        chosen = _assign(needs, capacities)
        if chosen is None:
            continue
        used = [0] * len(types)
        placements = []
        for s, t in zip(sized, chosen, strict=True):
            used[t] += s.model.copies
            placements.append(
                ModelPlacement(
                    s.model.name,
                    s.model.spec.name,
                    f"mig-{types[t][0]}",
                    s.model.copies,
                    round(memory[t] - s.need.total_gib, 3),
                )
            )
        ordered = sorted(types, key=lambda c: (-gpu.profile(c[0]).memory_gib, c[0]))
        return EndpointPlan(
            gpu=gpu.id,
            gpus_per_instance=gpus_per_instance,
            partition_types=tuple(f"mig-{name}" for name, n in ordered for _ in range(n)),
            instance_count=instances,
            price_per_instance_hour=price,
            components=tuple(placements),
            spare=tuple(
                (f"mig-{name}", instances * per_instance[k] - used[k])
                for k, (name, _) in enumerate(types)
                if instances * per_instance[k] > used[k]
            ),
        )
    return f"{TOO_MANY} {MAX_PLAN_INSTANCES} instances, the most one variant takes"


def _memory_taken(gpu: GpuModel, plan: EndpointPlan) -> float:
    return sum(gpu.profile(c.partition_type).memory_gib * c.copies for c in plan.components)


def advise_endpoint(
    models: Sequence[ServedModel],
    *,
    gpu: GpuModel | str | None = None,
    prices: Sequence[Price] = (),
) -> EndpointAdvice:
    """The cheapest layout and instance count for each GPU model considered, cheapest first.

    The models considered: `gpu` alone when given; else the priced ones when prices are given (only
    those can be compared on price); else every MIG-capable model, ranked by the GPUs they take. A
    priced model's instance carries the price's GPUs; an unpriced one, `DEFAULT_INSTANCE_GPUS`."""
    by_model = {get_model(p.model).id: p for p in prices}
    if gpu is not None:
        considered: tuple[GpuModel, ...] = (get_model(gpu),)
    elif by_model:
        considered = tuple(get_model(m) for m in sorted(by_model))
    else:
        considered = mig_models()
    sized = tuple(
        SizedModel(
            m,
            memory_needed(m.spec, m.dtype, m.context, m.concurrency, m.overhead_gib, m.kv_dtype),
            tuple(
                f
                for g in considered
                for f in advise(
                    m.spec,
                    m.dtype,
                    m.context,
                    m.concurrency,
                    overhead_gib=m.overhead_gib,
                    kv_dtype=m.kv_dtype,
                    gpu=g,
                    prices=prices,
                ).fits
            ),
        )
        for m in models
    )
    plans: list[EndpointPlan] = []
    unservable: list[Unservable] = []
    for g in considered:
        if not g.mig_capable:
            unservable.append(Unservable(g.id, f"{g.id} does not support MIG: it cannot be partitioned"))
            continue
        price = by_model.get(g.id)
        per_instance = price.gpus if price is not None else DEFAULT_INSTANCE_GPUS
        best: EndpointPlan | None = None
        why = ""
        for counts in maximal_layouts(g.id):
            found = _plan(g, counts, sized, per_instance, price.usd_per_hour if price else None)
            if isinstance(found, str):
                # A layout that holds every model but needs too many instances says more than one
                # lacking a partition for some model.
                why = found if not why or found.startswith(TOO_MANY) else why
                continue
            key = (found.instance_count, _memory_taken(g, found), found.partition_types)
            if best is None or key < (best.instance_count, _memory_taken(g, best), best.partition_types):
                best = found
        if best is None:
            short = [s.model.name for s in sized if not any(f.gpu == g.id and f.profile for f in s.options)]
            reason = f"no partition of {g.id} holds {', '.join(short)}" if short else why
            unservable.append(Unservable(g.id, reason))
        else:
            plans.append(best)
    plans.sort(
        key=lambda p: (
            p.price_per_hour if p.price_per_hour is not None else math.inf,
            p.gpus,
            p.gpu,
        )
    )
    return EndpointAdvice(sized, tuple(plans), tuple(unservable))
