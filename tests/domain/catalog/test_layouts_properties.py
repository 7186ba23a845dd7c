"""Properties every accepted placement has, whatever the model and layout."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from better_compute.domain.catalog import GpuModel, mig_models
from better_compute.domain.catalog.layouts import (
    InstancePlacement,
    Layout,
    format_layout,
    is_valid,
    parse_layout,
    validate,
)
from better_compute.domain.kernel.errors import InvalidInput

MODELS = mig_models()

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def model_and_layout(draw: st.DrawFn) -> tuple[GpuModel, Layout]:
    model = draw(st.sampled_from(MODELS))
    chosen = draw(st.lists(st.sampled_from(model.profiles), min_size=1, max_size=4, unique=True))
    counts = [(p.name, draw(st.integers(1, p.max_instances + 1))) for p in chosen]
    return model, Layout.mixed(counts)


def _check_placement(model: GpuModel, layout: Layout, placement: InstancePlacement) -> None:
    wanted = {model.profile(name).name: count for name, count in layout.counts}
    assert dict(placement.counts) == wanted
    used = 0
    compute = memory = 0
    engines: dict[str, int] = {}
    for instance in placement.instances:
        profile = model.profile(instance.profile)
        assert instance.size == profile.size
        assert instance.start in profile.starts
        assert instance.start >= 0 and instance.start + instance.size <= model.placement_units
        mask = ((1 << instance.size) - 1) << instance.start
        assert not used & mask, "two instances overlap on the placement axis"
        used |= mask
        compute += profile.compute_slices
        memory += profile.memory_slices
        for engine, count in profile.engines:
            engines[engine] = engines.get(engine, 0) + count
    assert compute <= model.compute_slices
    assert memory <= model.memory_slices
    for engine, count in engines.items():
        assert count <= model.engine_total(engine)
    for name, count in wanted.items():
        assert count <= model.profile(name).max_instances


@PROPERTY_SETTINGS
@given(model_and_layout())
def test_accepted_placements_are_in_bounds_and_disjoint(case: tuple[GpuModel, Layout]) -> None:
    model, layout = case
    try:
        placement = validate(layout, model)
    except InvalidInput as exc:
        assert exc.details["reason"] in {
            "too_many_instances",
            "compute_slices_exceeded",
            "memory_slices_exceeded",
            "media_engines_exceeded",
            "no_start_position",
        }
        assert exc.details["profile"] in {model.profile(n).name for n, _ in layout.counts}
        return
    _check_placement(model, layout, placement)


@PROPERTY_SETTINGS
@given(st.data())
def test_nothing_fits_beside_a_layout_using_every_compute_slice(data: st.DataObject) -> None:
    model = data.draw(st.sampled_from(MODELS))
    # Fill greedily in a drawn order until no profile fits any more.
    order = data.draw(st.permutations(model.profiles))
    counts: list[tuple[str, int]] = []
    progress = True
    while progress:
        progress = False
        for profile in order:
            grown = [*counts, (profile.name, 1)]
            if is_valid(Layout.mixed(grown), model):
                counts = grown
                progress = True
                break
    layout = Layout.mixed(counts)
    placement = validate(layout, model)
    _check_placement(model, layout, placement)
    used = sum(model.profile(i.profile).compute_slices for i in placement.instances)
    if used == model.compute_slices:
        extra = data.draw(st.sampled_from(model.profiles))
        assert not is_valid(Layout.mixed([*counts, (extra.name, 1)]), model)


def test_every_full_compute_layout_refuses_one_more() -> None:
    # The deterministic companion of the property above: all 1g instances use every compute slice.
    for model in MODELS:
        plain = min((p for p in model.profiles if not p.attribute), key=lambda p: (p.compute_slices, p.size))
        full = Layout.mixed([(plain.name, model.compute_slices)])
        if not is_valid(full, model):
            continue
        for extra in model.profiles:
            assert not is_valid(Layout.mixed([*full.counts, (extra.name, 1)]), model), (model.id, extra.name)


profile_names = st.builds(
    lambda g, gb, attr: f"{g}g.{gb}gb{attr}",
    st.integers(1, 8),
    st.integers(1, 200),
    st.sampled_from(["", "+me", "+me.all", "-me", "+gfx"]),
)


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.just(Layout.disabled()),
        profile_names.map(Layout.all_of),
        st.lists(st.tuples(profile_names, st.integers(1, 9)), min_size=1, max_size=6).map(Layout.mixed),
    )
)
def test_parse_of_format_is_identity(layout: Layout) -> None:
    assert parse_layout(format_layout(layout)) == layout
    assert format_layout(parse_layout(format_layout(layout))) == format_layout(layout)
