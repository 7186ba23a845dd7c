"""MIG layouts: the grammar users write and the validator that finds where every instance goes.

A layout is accepted only when an actual placement exists: each instance needs a start its profile
allows on the model's placement axis, and no two instances may overlap there. Slice sums are checked
first because they give the clearest reason, but they are never enough on their own (the axis is 8
units on A100/H100, 4 on A30, 12 on RTX PRO 6000). The node creates instances with explicit
placements, so the placement returned here is the one that will exist. There is no fallback to a
whole GPU: a layout that does not fit is an error naming the profile and the reason.

Grammar::

    all-disabled                       MIG off
    all-<profile>                      as many <profile> instances as fit (needs the model)
    mixed:<n>x<profile>+<profile>+…    explicit counts; n defaults to 1
    ["mig-4g.20gb", "mig-2g.10gb"]     the endpoint form: one partition type per instance
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from better_compute.domain.catalog import (
    GpuModel,
    MigProfile,
    driver_at_least,
    find_model,
    get_model,
    is_profile_name,
    normalize_profile_name,
    parse_driver_version,
    profile_name_key,
)
from better_compute.domain.kernel.errors import InvalidInput, LayoutRefused, UnknownProfile

__all__ = [
    "REASONS",
    "InstancePlacement",
    "Layout",
    "PlacedInstance",
    "clear_caches",
    "enables_mig",
    "fit_count",
    "format_layout",
    "format_partition_types",
    "is_valid",
    "layout_from_partition_types",
    "parse_layout",
    "partition_types",
    "placement_of",
    "validate",
]

LayoutKind = Literal["disabled", "all", "mixed"]

REASONS: dict[str, str] = {
    "unknown_profile": "the GPU model does not offer this profile",
    "too_many_instances": "more instances than the profile allows on one GPU",
    "compute_slices_exceeded": "the instances need more compute slices than the GPU has",
    "memory_slices_exceeded": "the instances need more memory slices than the GPU has",
    "media_engines_exceeded": "the instances need more media engines than the GPU has",
    "no_start_position": "no start position is left for the instance",
    "driver_too_old": "the driver is too old for the profile or combination",
}
"""Stable reason codes carried in ``details['reason']`` of a refusal."""

_GRAMMAR = "all-disabled, all-<profile>, mixed:<n>x<profile>+… or a list of mig-<profile> partition types"


def _bad_layout(text: str, why: str) -> InvalidInput:
    return InvalidInput(f"layout {text!r} is not valid: {why} (expected {_GRAMMAR})", {"layout": text})


def _profile_or_error(name: str, text: str) -> str:
    normalized = normalize_profile_name(name)
    if not is_profile_name(normalized):
        raise _bad_layout(text, f"{name!r} is not a profile name such as 3g.40gb or 1g.10gb+me")
    return normalized


def _canonical_counts(items: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    merged: dict[str, int] = {}
    for name, count in items:
        merged[name] = merged.get(name, 0) + count
    return tuple(sorted(merged.items(), key=lambda item: profile_name_key(item[0])))


@dataclass(frozen=True)
class Layout:
    """How one GPU is split. Mixed counts are kept canonical (largest first, merged) on construction,
    so two spellings of the same split compare equal and format the same."""

    kind: LayoutKind
    profile: str | None = None
    counts: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.kind == "disabled":
            if self.profile is not None or self.counts:
                raise InvalidInput("all-disabled takes no profiles", {})
        elif self.kind == "all":
            if self.profile is None or self.counts:
                raise InvalidInput("all-<profile> takes exactly one profile", {})
            object.__setattr__(self, "profile", _profile_or_error(self.profile, f"all-{self.profile}"))
        elif self.kind == "mixed":
            if self.profile is not None or not self.counts:
                raise InvalidInput("a mixed layout needs at least one instance", {})
            for name, count in self.counts:
                if not isinstance(count, int) or count < 1:
                    raise InvalidInput(
                        f"instance count {count!r} for {name} must be a positive integer",
                        {"profile": name},
                    )
            normalized = [(_profile_or_error(n, f"mixed:{n}"), c) for n, c in self.counts]
            object.__setattr__(self, "counts", _canonical_counts(normalized))
        else:
            raise InvalidInput(f"unknown layout kind {self.kind!r}", {})

    @classmethod
    def disabled(cls) -> Layout:
        return cls("disabled")

    @classmethod
    def all_of(cls, profile: str) -> Layout:
        return cls("all", profile=profile)

    @classmethod
    def mixed(cls, counts: Mapping[str, int] | Iterable[tuple[str, int]]) -> Layout:
        items = tuple(counts.items()) if isinstance(counts, Mapping) else tuple(counts)
        return cls("mixed", counts=items)

    @property
    def mig_enabled(self) -> bool:
        return self.kind != "disabled"

    def __str__(self) -> str:
        return format_layout(self)


def format_layout(layout: Layout) -> str:
    """The canonical string: largest profile first, counts merged, `1x` omitted."""
    if layout.kind == "disabled":
        return "all-disabled"
    if layout.kind == "all":
        return f"all-{layout.profile}"
    parts = [name if count == 1 else f"{count}x{name}" for name, count in layout.counts]
    return "mixed:" + "+".join(parts)


def _parse_mixed(body: str, text: str) -> Layout:
    compact = "".join(body.split())
    if not compact:
        raise _bad_layout(text, "mixed: lists no instances")
    # `+` both separates items and starts an attribute (`1g.10gb+me`), so a token that does not start
    # with a digit belongs to the item before it.
    items: list[str] = []
    for token in compact.split("+"):
        if not token:
            raise _bad_layout(text, "empty item between '+' signs")
        if token[0].isdigit() or not items:
            items.append(token)
        else:
            items[-1] += "+" + token
    counts: list[tuple[str, int]] = []
    for item in items:
        head, sep, rest = item.partition("x")
        if sep and head.isdigit() and rest and rest[0].isdigit():
            count, name = int(head), rest
            if count < 1:
                raise _bad_layout(text, f"count {head} in {item!r} must be at least 1")
        else:
            count, name = 1, item
        counts.append((_profile_or_error(name, text), count))
    return Layout.mixed(counts)


def layout_from_partition_types(types: Iterable[str]) -> Layout:
    """The endpoint form (one `mig-<profile>` entry per instance) as a layout."""
    names = list(types)
    text = json.dumps(names)
    if not names:
        raise _bad_layout(text, "the list of partition types is empty")
    counts: list[tuple[str, int]] = []
    for entry in names:
        if not isinstance(entry, str):
            raise _bad_layout(text, f"{entry!r} is not a partition type string")
        counts.append((_profile_or_error(entry, text), 1))
    return Layout.mixed(counts)


def parse_layout(text: str) -> Layout:
    """Read any of the four forms; formatting the result gives the canonical spelling."""
    raw = text.strip()
    lowered = raw.lower()
    if lowered.startswith("["):
        try:
            entries = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _bad_layout(text, f"the partition-type list is not JSON ({exc.msg})") from exc
        if not isinstance(entries, list):
            raise _bad_layout(text, "the partition-type form must be a JSON list")
        return layout_from_partition_types(entries)
    if lowered == "all-disabled":
        return Layout.disabled()
    if lowered.startswith("all-"):
        return Layout.all_of(_profile_or_error(lowered.removeprefix("all-"), text))
    if lowered.startswith("mixed:"):
        return _parse_mixed(lowered.removeprefix("mixed:"), text)
    raise _bad_layout(text, "unknown form")


@dataclass(frozen=True)
class PlacedInstance:
    """One GPU instance to create: its profile and its interval on the model's placement axis."""

    profile: str
    start: int
    size: int


@dataclass(frozen=True)
class InstancePlacement:
    """A layout that fits, with the instances in the order the node creates them (largest first).

    Named after NVML's GPU-instance placement (``nvmlDeviceCreateGpuInstanceWithPlacement``): where
    each instance starts on the model's placement axis and how much of it it takes. Plain "placement"
    means placement across clusters (docs/glossary.md), so this one always says "instance".
    """

    model: str
    layout: Layout
    instances: tuple[PlacedInstance, ...]

    @property
    def mig_enabled(self) -> bool:
        return self.layout.mig_enabled

    @property
    def counts(self) -> tuple[tuple[str, int], ...]:
        """Instances per profile, under the catalog's profile names, largest first."""
        return _canonical_counts((i.profile, 1) for i in self.instances)

    @property
    def expanded(self) -> Layout:
        """The layout with `all-<profile>` resolved to a count and aliases to catalog names."""
        return Layout.mixed(self.counts) if self.instances else Layout.disabled()


def _creation_key(profile: MigProfile) -> tuple[int, int, int, str]:
    return (-profile.compute_slices, -profile.memory_slices, -profile.size, profile.name)


def _refuse(gpu: GpuModel, layout: Layout, profile: str, reason: str, why: str) -> LayoutRefused:
    return LayoutRefused(
        f"layout {format_layout(layout)} is refused on {gpu.id}: {profile}: {why}",
        {"profile": profile, "reason": reason, "model": gpu.id, "layout": format_layout(layout)},
    )


def _driver_label(version: str) -> str:
    return f"R{version}" if "." not in version else version


def _check_driver(gpu: GpuModel, layout: Layout, profiles: Sequence[MigProfile], driver: str) -> None:
    if gpu.min_driver is not None and not driver_at_least(driver, gpu.min_driver):
        raise _refuse(
            gpu,
            layout,
            profiles[0].name,
            "driver_too_old",
            f"MIG on {gpu.id} needs driver {_driver_label(gpu.min_driver)} or newer, not {driver}",
        )
    for profile in profiles:
        if profile.min_driver is not None and not driver_at_least(driver, profile.min_driver):
            raise _refuse(
                gpu,
                layout,
                profile.name,
                "driver_too_old",
                f"needs driver {_driver_label(profile.min_driver)} or newer, not {driver}",
            )
    present = {p.name for p in profiles}
    for rule in gpu.driver_rules:
        if set(rule.together) <= present and not driver_at_least(driver, rule.min_driver):
            together = " and ".join(rule.together)
            raise _refuse(
                gpu,
                layout,
                rule.together[-1],
                "driver_too_old",
                f"{together} together need driver {_driver_label(rule.min_driver)} or newer, not {driver}",
            )


def _slice_refusal(gpu: GpuModel, instances: Sequence[MigProfile]) -> tuple[str, str, str] | None:
    """The first (profile, reason, explanation) that counting alone refuses, in creation order."""
    wanted: dict[str, int] = {}
    for profile in instances:
        wanted[profile.name] = wanted.get(profile.name, 0) + 1
    for profile in instances:
        if wanted[profile.name] > profile.max_instances:
            return (
                profile.name,
                "too_many_instances",
                f"{wanted[profile.name]} instances asked, {gpu.id} allows at most {profile.max_instances}",
            )
    compute = memory = 0
    engines: dict[str, int] = {}
    for profile in instances:
        compute += profile.compute_slices
        memory += profile.memory_slices
        if compute > gpu.compute_slices:
            return (
                profile.name,
                "compute_slices_exceeded",
                f"compute slices exceeded ({compute} of {gpu.compute_slices})",
            )
        if memory > gpu.memory_slices:
            return (
                profile.name,
                "memory_slices_exceeded",
                f"memory slices exceeded ({memory} of {gpu.memory_slices})",
            )
        for engine, count in profile.engines:
            engines[engine] = engines.get(engine, 0) + count
            if engines[engine] > gpu.engine_total(engine):
                return (
                    profile.name,
                    "media_engines_exceeded",
                    f"media engines exceeded ({engines[engine]} {engine} of {gpu.engine_total(engine)})",
                )
    return None


def _search(gpu: GpuModel, names: tuple[str, ...]) -> tuple[int, ...] | None:
    """Starts for ``names`` (in creation order) with no overlap on the axis, or None.

    Backtracking over allowed starts, largest instance first. Identical instances take increasing
    starts, which removes the permutations of interchangeable instances from the search.
    """
    profiles = [gpu.profile(n) for n in names]
    options = [[(s, ((1 << p.size) - 1) << s) for s in p.starts] for p in profiles]
    chosen: list[int] = [0] * len(profiles)
    picked: list[int] = [-1] * len(profiles)

    def place(index: int, used: int) -> bool:
        if index == len(profiles):
            return True
        first = 0
        if index > 0 and names[index] == names[index - 1]:
            first = picked[index - 1] + 1
        for option in range(first, len(options[index])):
            start, mask = options[index][option]
            if used & mask:
                continue
            chosen[index] = start
            picked[index] = option
            if place(index + 1, used | mask):
                return True
        return False

    return tuple(chosen) if place(0, 0) else None


@lru_cache(maxsize=16384)
def _search_catalog(model_id: str, names: tuple[str, ...]) -> tuple[int, ...] | None:
    """The search for a catalog model, cached per model and multiset: the same handful of layouts is
    validated over and over (every pool update, every node spec)."""
    return _search(get_model(model_id), names)


def _place(gpu: GpuModel, names: tuple[str, ...]) -> tuple[int, ...] | None:
    if find_model(gpu.id) is gpu:
        return _search_catalog(gpu.id, names)
    return _search(gpu, names)


def _profile_on(gpu: GpuModel, layout: Layout, name: str) -> MigProfile:
    try:
        return gpu.profile(name)
    except UnknownProfile as exc:
        raise UnknownProfile(
            f"layout {format_layout(layout)} is refused on {gpu.id}: {exc.message}",
            {**exc.details, "layout": format_layout(layout)},
        ) from exc


def _resolve(gpu: GpuModel, layout: Layout) -> list[MigProfile]:
    """Instances in creation order; every profile is checked against the model before anything else."""
    if layout.kind == "all":
        assert layout.profile is not None
        profile = _profile_on(gpu, layout, layout.profile)
        return [profile] * fit_count(gpu, profile)
    resolved = [(_profile_on(gpu, layout, name), count) for name, count in layout.counts]
    instances = [profile for profile, count in resolved for _ in range(count)]
    return sorted(instances, key=_creation_key)


def validate(layout: Layout | str, model: GpuModel | str, driver: str | None = None) -> InstancePlacement:
    """The placement of ``layout`` on ``model``, or a refusal naming the profile and the reason.

    ``driver`` (e.g. `470.256.02`, `R525`) enables the driver checks; without it a current driver is
    assumed. Refusals are `UnknownProfile` or `LayoutRefused`, both INVALID_INPUT, with
    ``details = {profile, reason, model, layout}`` (reason codes in REASONS).
    """
    parsed = parse_layout(layout) if isinstance(layout, str) else layout
    gpu = get_model(model)
    if driver is not None:
        parse_driver_version(driver)
    if parsed.kind == "disabled":
        return InstancePlacement(gpu.id, parsed, ())
    instances = _resolve(gpu, parsed)
    if driver is not None:
        _check_driver(gpu, parsed, instances, driver)
    refusal = _slice_refusal(gpu, instances)
    if refusal is not None:
        raise _refuse(gpu, parsed, *refusal)
    names = tuple(p.name for p in instances)
    starts = _place(gpu, names)
    if starts is None:
        # Name the first instance, in creation order, for which no start is left.
        culprit = next(
            (names[k - 1] for k in range(1, len(names) + 1) if _place(gpu, names[:k]) is None),
            names[-1],
        )
        raise _refuse(
            gpu,
            parsed,
            culprit,
            "no_start_position",
            f"no start position left on the {gpu.placement_units}-unit placement axis",
        )
    placed = tuple(PlacedInstance(p.name, s, p.size) for p, s in zip(instances, starts, strict=True))
    return InstancePlacement(gpu.id, parsed, placed)


@lru_cache(maxsize=1024)
def placement_of(layout: str, model_id: str) -> InstancePlacement:
    """`validate(layout, model_id)` with no driver check, remembered: a node's GPUs are held to
    their layout on every report it sends (`mig_plan.converged`). A refusal is raised again each
    time, never remembered."""
    return validate(layout, model_id)


@lru_cache(maxsize=1024)
def enables_mig(layout: str) -> bool:
    """Whether `layout` turns MIG on (remembered, as `placement_of`)."""
    return parse_layout(layout).mig_enabled


def is_valid(layout: Layout | str, model: GpuModel | str, driver: str | None = None) -> bool:
    try:
        validate(layout, model, driver)
    except (LayoutRefused, UnknownProfile):
        return False
    return True


def _count_that_fits(gpu: GpuModel, profile: MigProfile) -> int:
    for count in range(profile.max_instances, 0, -1):
        instances = [profile] * count
        if _slice_refusal(gpu, instances) is None and _place(gpu, (profile.name,) * count) is not None:
            return count
    return 0


@lru_cache(maxsize=1024)
def _count_that_fits_catalog(model_id: str, profile_name: str) -> int:
    gpu = get_model(model_id)
    return _count_that_fits(gpu, gpu.profile(profile_name))


def fit_count(model: GpuModel | str, profile: MigProfile | str) -> int:
    """How many instances of one profile fit on one GPU: what `all-<profile>` expands to."""
    gpu = get_model(model)
    resolved = profile if isinstance(profile, MigProfile) else gpu.profile(profile)
    if find_model(gpu.id) is gpu:
        return _count_that_fits_catalog(gpu.id, resolved.name)
    return _count_that_fits(gpu, resolved)


def partition_types(layout: Layout | str, model: GpuModel | str | None = None) -> tuple[str, ...]:
    """The endpoint form: one `mig-<profile>` per instance, largest first.

    `all-<profile>` needs ``model`` to know how many instances it means; with a model the placement is
    validated and its profile names are used.
    """
    parsed = parse_layout(layout) if isinstance(layout, str) else layout
    if model is not None:
        return tuple(f"mig-{i.profile}" for i in validate(parsed, model).instances)
    if parsed.kind == "all":
        raise InvalidInput(
            f"{format_layout(parsed)} needs a GPU model to list its partitions",
            {"layout": format_layout(parsed)},
        )
    return tuple(f"mig-{name}" for name, count in parsed.counts for _ in range(count))


def format_partition_types(layout: Layout | str, model: GpuModel | str | None = None) -> str:
    return json.dumps(list(partition_types(layout, model)))


def clear_caches() -> None:
    """Forget memoised searches, so a benchmark can time a validation nobody has asked for before."""
    _search_catalog.cache_clear()
    _count_that_fits_catalog.cache_clear()
    placement_of.cache_clear()
    enables_mig.cache_clear()
