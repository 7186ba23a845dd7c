"""The sizing advisor: which partitions and whole GPUs hold a model at a given context and load.

A partition sized by the weights alone loads the model and then fails under load, or silently serves
a much shorter context, so memory is counted as three terms and each is shown:

    weights  = parameters × bytes per parameter
    KV cache = 2 × layers × kv_heads × head_dim × bytes × context × concurrent sequences
    overhead = the runtime's CUDA context and serving process (1.5 GiB unless told)

Every MIG profile (plain ones; `+me`/`-me`/`+gfx` variants hold the same memory) and every whole
GPU in the catalog is then listed if it fits, with its headroom, the longest context (at the asked
concurrency) and the most sequences (at the asked context) it would serve, and, given an instance
price, the cost per unit: the instance price over the units it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from better_compute.domain.catalog import GpuModel, all_models, get_model
from better_compute.domain.catalog.layouts import fit_count
from better_compute.domain.kernel.errors import InvalidInput, NotFound

__all__ = [
    "DTYPE_BYTES",
    "PRESETS",
    "Advice",
    "Fit",
    "MemoryNeed",
    "ModelSpec",
    "Price",
    "advise",
    "dtype_bytes",
    "memory_needed",
    "preset",
]

GIB = float(1 << 30)
DEFAULT_OVERHEAD_GIB = 1.5

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}


def dtype_bytes(dtype: str) -> float:
    key = dtype.strip().lower()
    if key not in DTYPE_BYTES:
        raise InvalidInput(
            f"unknown dtype {dtype!r} (known: {', '.join(DTYPE_BYTES)})",
            {"dtype": dtype, "known": list(DTYPE_BYTES)},
        )
    return DTYPE_BYTES[key]


@dataclass(frozen=True)
class ModelSpec:
    """The architecture numbers memory depends on; ``max_context`` caps the context the advisor offers."""

    name: str
    params_b: float
    layers: int
    kv_heads: int
    head_dim: int
    max_context: int | None = None

    def __post_init__(self) -> None:
        if not self.params_b > 0:
            raise InvalidInput("a model needs a positive parameter count (in billions)", {"model": self.name})
        for field, value in (
            ("layers", self.layers),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
        ):
            if value < 1:
                raise InvalidInput(f"{field} must be at least 1", {"model": self.name, "field": field})


PRESETS: dict[str, ModelSpec] = {
    spec.name.lower(): spec
    for spec in (
        # Grouped-query attention: 8 KV heads of 128 for every Llama 3.1 size.
        ModelSpec("Llama-3.1-8B", 8.03, 32, 8, 128, 131072),
        ModelSpec("Llama-3.1-70B", 70.6, 80, 8, 128, 131072),
        ModelSpec("Mistral-7B", 7.25, 32, 8, 128, 32768),
        ModelSpec("Qwen2.5-14B", 14.7, 48, 8, 128, 131072),
        # An encoder: it keeps no cache between requests, but attention over the input costs the same.
        ModelSpec("bge-large-en-v1.5", 0.335, 24, 16, 64, 512),
    )
}


def preset(name: str) -> ModelSpec:
    found = PRESETS.get(name.strip().lower())
    if found is None:
        known = ", ".join(spec.name for spec in PRESETS.values())
        raise NotFound(f"unknown model preset {name!r} (presets: {known})", {"model": name})
    return found


def adjusted(
    base: ModelSpec,
    *,
    params_b: float | None = None,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
) -> ModelSpec:
    """A preset with some of its numbers replaced, named after what is computed: advice for 70B
    weights labelled `Llama-3.1-8B` would be read as advice for the 8B model. Unchanged, the preset
    keeps its name; changed, the name says which preset and which numbers, e.g.
    `Llama-3.1-8B with params 70B`."""
    changes = [
        (label, new)
        for label, new, old in (
            ("params", params_b, base.params_b),
            ("layers", layers, base.layers),
            ("kv-heads", kv_heads, base.kv_heads),
            ("head-dim", head_dim, base.head_dim),
        )
        if new is not None and new != old
    ]
    if not changes:
        return base
    said = ", ".join(
        f"{label} {value:g}B" if label == "params" else f"{label} {value:g}" for label, value in changes
    )
    return ModelSpec(
        f"{base.name} with {said}",
        params_b if params_b is not None else base.params_b,
        layers if layers is not None else base.layers,
        kv_heads if kv_heads is not None else base.kv_heads,
        head_dim if head_dim is not None else base.head_dim,
        base.max_context,
    )


@dataclass(frozen=True)
class MemoryNeed:
    """Memory one serving process needs, by term, in GiB (2^30 bytes)."""

    weights_gib: float
    kv_cache_gib: float
    overhead_gib: float
    kv_bytes_per_token: float
    """KV-cache bytes for one token of one sequence: what each extra token of context costs."""

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.kv_cache_gib + self.overhead_gib


def memory_needed(
    spec: ModelSpec,
    dtype: str,
    context: int,
    concurrency: int,
    overhead_gib: float = DEFAULT_OVERHEAD_GIB,
    kv_dtype: str | None = None,
) -> MemoryNeed:
    """Weights + KV cache + overhead. The KV cache takes ``kv_dtype``, by default the weights' dtype,
    except int4 weights, whose runtimes keep the cache in fp16."""
    if context < 1 or concurrency < 1:
        raise InvalidInput("context and concurrency must be at least 1", {})
    if overhead_gib < 0:
        raise InvalidInput("overhead cannot be negative", {})
    weight_bytes = dtype_bytes(dtype)
    cache_dtype = kv_dtype or ("fp16" if dtype.strip().lower() == "int4" else dtype)
    per_token = 2.0 * spec.layers * spec.kv_heads * spec.head_dim * dtype_bytes(cache_dtype)
    return MemoryNeed(
        weights_gib=spec.params_b * 1e9 * weight_bytes / GIB,
        kv_cache_gib=per_token * context * concurrency / GIB,
        overhead_gib=overhead_gib,
        kv_bytes_per_token=per_token,
    )


@dataclass(frozen=True)
class Price:
    """The hourly price of an instance that carries ``gpus`` GPUs of ``model``."""

    model: str
    usd_per_hour: float
    gpus: int = 1

    def __post_init__(self) -> None:
        if self.usd_per_hour < 0 or self.gpus < 1:
            raise InvalidInput("a price needs a non-negative amount and at least one GPU", {})


@dataclass(frozen=True)
class Fit:
    """One place the model fits: a MIG profile (``profile`` set) or a whole GPU (``profile`` None)."""

    gpu: str
    profile: str | None
    capacity_gib: float
    headroom_gib: float
    max_context: int
    """Longest context the memory holds at the asked concurrency (capped at the model's own limit)."""
    max_concurrency: int
    """Most sequences the memory holds at the asked context."""
    units_per_gpu: int
    cost_per_unit_hour: float | None = None


@dataclass(frozen=True)
class Advice:
    spec: ModelSpec
    dtype: str
    context: int
    concurrency: int
    need: MemoryNeed
    fits: tuple[Fit, ...]


def _fit(
    gpu: GpuModel,
    profile: str | None,
    capacity: float,
    units: int,
    need: MemoryNeed,
    spec: ModelSpec,
    context: int,
    concurrency: int,
    prices: Mapping[str, Price],
) -> Fit | None:
    headroom = capacity - need.total_gib
    if headroom < 0:
        return None
    cache_room = (capacity - need.weights_gib - need.overhead_gib) * GIB
    longest = int(cache_room // (need.kv_bytes_per_token * concurrency))
    if spec.max_context is not None:
        longest = min(longest, spec.max_context)
    most = int(cache_room // (need.kv_bytes_per_token * context))
    price = prices.get(gpu.id)
    cost = price.usd_per_hour / (price.gpus * units) if price is not None else None
    return Fit(gpu.id, profile, capacity, headroom, longest, most, units, cost)


def advise(
    spec: ModelSpec,
    dtype: str,
    context: int,
    concurrency: int,
    *,
    overhead_gib: float = DEFAULT_OVERHEAD_GIB,
    kv_dtype: str | None = None,
    gpu: GpuModel | str | None = None,
    prices: Sequence[Price] = (),
) -> Advice:
    """Every catalog partition and whole GPU that holds the model, smallest first.

    ``gpu`` limits the list to one model. A MIG profile's units per GPU are the instances of it that
    fit on one GPU (3g.40gb: 2 on an H100), so an 8-GPU instance at $63.296/h costs $3.956 per
    3g.40gb-hour.
    """
    need = memory_needed(spec, dtype, context, concurrency, overhead_gib, kv_dtype)
    by_model = {get_model(p.model).id: p for p in prices}
    models = (get_model(gpu),) if gpu is not None else all_models()
    fits: list[Fit] = []
    for model in models:
        for profile in model.profiles:
            if profile.attribute:
                continue
            found = _fit(
                model,
                profile.name,
                profile.memory_gib,
                fit_count(model, profile),
                need,
                spec,
                context,
                concurrency,
                by_model,
            )
            if found is not None:
                fits.append(found)
        # A whole GPU holds what the board exposes (an L4 sold as 24 GB shows 22.49 GiB), as a MIG
        # profile holds what NVML reports for it: never the data sheet's round figure.
        usable = model.usable_gib or model.memory_gib
        whole = _fit(model, None, usable, 1, need, spec, context, concurrency, by_model)
        if whole is not None:
            fits.append(whole)
    fits.sort(key=lambda f: (f.capacity_gib, f.gpu, f.profile or ""))
    return Advice(spec, dtype.strip().lower(), context, concurrency, need, tuple(fits))
