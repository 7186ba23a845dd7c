"""`advise --endpoint`: the layout and instance count that serve several models at the lowest price
(docs/endpoints.md#sizing-an-endpoint-advise---endpoint; seed 003: every partition type is a GPU option with
its cost per unit)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.catalog import get_model
from better_compute.domain.catalog.sizing import ModelSpec, Price, memory_needed
from better_compute.domain.endpoints.commands import parse_endpoint
from better_compute.domain.endpoints.endpoint_sizing import (
    MAX_MODELS,
    MAX_PLAN_INSTANCES,
    EndpointPlan,
    ServedModel,
    SizedModel,
    advise_endpoint,
    maximal_layouts,
    parse_served_models,
)
from better_compute.domain.endpoints.endpoints import check_variant_layout
from better_compute.domain.kernel.errors import InvalidInput, NotFound

P4D = Price("A100-40GB", 25.251286, 8)
P5 = Price("H100-80GB", 63.296, 8)
"""The seed's on-demand prices (US West, Oregon)."""


def served(name: str, model: str = "Llama-3.1-8B", **fields: Any) -> dict[str, Any]:
    return {"name": name, "model": model, "context": 8000, **fields}


def test_every_partition_type_is_a_gpu_option_with_the_seeds_cost_per_unit() -> None:
    models = parse_served_models({"models": [served("summarizer")]})
    advice = advise_endpoint(models, prices=[P4D, P5])
    options = {(f.gpu, f.profile): f.cost_per_unit_hour for f in advice.models[0].options}
    # A p5.48xlarge holds sixteen 3g.40gb partitions, a p4d.24xlarge eight whole A100s.
    assert options[("H100-80GB", "3g.40gb")] == pytest.approx(63.296 / 16)
    assert options[("A100-40GB", None)] == pytest.approx(25.251286 / 8)
    # An 8B model in FP16 serves 8,000 tokens comfortably on a 40 GB partition, and not on 10 GB.
    assert ("H100-80GB", "1g.10gb") not in options


def test_one_layout_splits_every_gpu_so_a_model_needing_40gb_takes_whole_a100s_and_the_cheapest_wins() -> (
    None
):
    models = parse_served_models(
        {
            "models": [
                served("summarizer", copies=2),
                served("embedder", "bge-large-en-v1.5", context=512, concurrency=8, copies=4),
                served("chat", "Qwen2.5-14B", context=4000, concurrency=4),
            ]
        }
    )
    advice = advise_endpoint(models, prices=[P4D, P5])
    a100, h100 = advice.plans
    assert (a100.gpu, a100.partition_types, a100.instance_count) == ("A100-40GB", ("mig-7g.40gb",), 1)
    assert h100.gpu == "H100-80GB" and h100.instance_count == 1
    assert {c.name: c.partition_type for c in h100.components} == {
        "summarizer": "mig-1g.20gb",
        "embedder": "mig-1g.10gb",
        "chat": "mig-3g.40gb",
    }
    assert a100.price_per_hour == pytest.approx(25.251286)
    assert h100.price_per_hour == pytest.approx(63.296)


def test_copies_beyond_one_instance_add_instances_and_stay_on_one_type() -> None:
    models = parse_served_models({"models": [served("summarizer", copies=40)]})
    (plan,) = advise_endpoint(models, prices=[P5]).plans
    # 40 copies of a 17.4 GiB model: an H100 holds four 20 GB partitions (1g.20gb), so a p5 holds 32
    # and two instances hold 40, every copy on the one type.
    (component,) = plan.components
    assert component.copies == 40
    per_instance = plan.partition_types.count(component.partition_type) * plan.gpus_per_instance
    assert plan.instance_count == math.ceil(40 / per_instance)


def test_a_model_no_partition_holds_leaves_the_gpu_unservable_naming_it() -> None:
    models = parse_served_models({"models": [served("big", "Llama-3.1-70B")]})
    advice = advise_endpoint(models, gpu="H100-80GB")
    assert advice.plans == ()
    (unservable,) = advice.unservable
    assert unservable.gpu == "H100-80GB" and "holds big" in unservable.reason


def test_more_copies_than_one_variant_can_hold_is_said() -> None:
    # 31.8 GiB a copy takes a whole A100 40GB: 8 an instance, so 1,000 copies need 125 instances.
    models = parse_served_models(
        {"models": [served("chat", "Qwen2.5-14B", context=4000, concurrency=4, copies=1000)]}
    )
    (unservable,) = advise_endpoint(models, gpu="A100-40GB").unservable
    assert f"more than {MAX_PLAN_INSTANCES} instances" in unservable.reason


def test_unpriced_gpu_models_are_ranked_by_the_gpus_they_take() -> None:
    models = parse_served_models({"models": [served("summarizer", copies=2)]})
    advice = advise_endpoint(models)
    assert [p.gpus for p in advice.plans] == sorted(p.gpus for p in advice.plans)
    assert all(p.price_per_hour is None and p.gpus_per_instance == 8 for p in advice.plans)


def test_the_rtx_pro_6000_maximal_layouts_are_the_seeds_four_splits() -> None:
    assert set(maximal_layouts("RTX-PRO-6000")) == {
        (("1g.24gb", 4),),
        (("1g.24gb", 2), ("2g.48gb", 1)),
        (("2g.48gb", 2),),
        (("4g.96gb", 1),),
    }


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"models": []}, "models"),
        ({"models": [served(f"m{k}") for k in range(MAX_MODELS + 1)]}, "models"),
        ({"models": [served("a"), served("a")]}, "models[1].name"),
        ({"models": [served("a", copies=0)]}, "models[0].copies"),
        ({"models": [served("a", context=0)]}, "models[0].context"),
        ({"models": [served("a", gpu="H100")]}, "models[0].gpu"),
        ({"models": [{"name": "a", "paramsB": 8, "context": 10}]}, "models[0].model"),
        ({"models": [served("a", paramsB=-1)]}, "models[0].paramsB"),
        ({"models": [served("a")], "prices": {}}, "models"),
        ({"models": [{1: 2, "context": 3}]}, "models[0]"),
        ({"models": [served("a b.c")]}, "models[0].name"),
    ],
)
def test_a_malformed_models_file_is_refused_naming_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_served_models(raw)
    assert refused.value.details["field"] == field


def test_an_unknown_preset_or_dtype_is_refused() -> None:
    with pytest.raises(NotFound):
        parse_served_models({"models": [served("a", "nope")]})
    with pytest.raises(InvalidInput):
        parse_served_models({"models": [served("a", dtype="fp7")]})


def _brute_force_instances(plan_gpu: str, sized: list[SizedModel], gpus: int) -> int | None:
    """The fewest instances over every maximal layout and every assignment of models to types."""
    model = get_model(plan_gpu)
    best: int | None = None
    for counts in maximal_layouts(plan_gpu):
        names = [n for n, _ in counts]
        options = [[n for n in names if model.profile(n).memory_gib >= s.need.total_gib] for s in sized]
        for choice in itertools.product(*options):
            demand: dict[str, int] = {}
            for s, n in zip(sized, choice, strict=True):
                demand[n] = demand.get(n, 0) + s.model.copies
            need = max(math.ceil(d / (gpus * dict(counts)[n])) for n, d in demand.items())
            best = need if best is None else min(best, need)
    return best if best is not None and best <= MAX_PLAN_INSTANCES else None


@given(
    st.lists(
        st.tuples(st.floats(0.3, 30.0), st.integers(256, 16384), st.integers(1, 24)),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["A100-40GB", "H100-80GB", "RTX-PRO-6000", "A30-24GB"]),
)
def test_the_plan_takes_the_fewest_instances_and_is_an_endpoint_the_gpu_accepts(
    raw: list[tuple[float, int, int]], gpu: str
) -> None:
    models = [
        ServedModel(f"m{k}", ModelSpec(f"m{k}", params, 32, 8, 128), "fp16", context, 1, copies)
        for k, (params, context, copies) in enumerate(raw)
    ]
    advice = advise_endpoint(models, gpu=gpu)
    sized = [SizedModel(m, memory_needed(m.spec, m.dtype, m.context, m.concurrency), ()) for m in models]
    fewest = _brute_force_instances(gpu, sized, 8)
    if fewest is None:
        assert advice.plans == ()
        return
    (plan,) = advice.plans
    assert plan.instance_count == fewest
    _check_plan_is_real(plan, models)


def _check_plan_is_real(plan: EndpointPlan, models: list[ServedModel]) -> None:
    raw = {
        "name": "sized",
        "tenantId": "t",
        "variants": [
            {
                "name": "AllTraffic",
                "poolId": "p",
                "instanceCount": plan.instance_count,
                "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": list(plan.partition_types)}],
            }
        ],
    }
    check_variant_layout(parse_endpoint(raw).variants[0], plan.gpu)
    gpu = get_model(plan.gpu)
    taken: dict[str, int] = {}
    for model, placed in zip(models, plan.components, strict=True):
        need = memory_needed(model.spec, model.dtype, model.context, model.concurrency).total_gib
        assert gpu.profile(placed.partition_type).memory_gib >= need
        taken[placed.partition_type] = taken.get(placed.partition_type, 0) + placed.copies
    for kind, copies in taken.items():
        assert copies <= plan.partition_types.count(kind) * plan.gpus_per_instance * plan.instance_count
