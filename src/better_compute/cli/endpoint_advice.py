"""How `advise --endpoint` shows its answer: the proposed endpoint, each GPU model's best plan, and
every partition type that holds each model as a GPU option with its cost per unit.

`--json` gives the proposal's `variant` in the very shape `endpoints create` takes, and its
`components` in the shape `components create` takes once `endpointName` and `variantName` are
filled in, so a script can pass them on.
"""

from __future__ import annotations

from typing import Any

from better_compute.cli.output import print_json, stdout
from better_compute.cli.tables import Column, Output, print_fitted
from better_compute.domain.catalog.sizing import Fit
from better_compute.domain.endpoints.endpoint_sizing import EndpointAdvice, EndpointPlan

__all__ = ["fit_json", "show_endpoint_advice"]


def fit_json(f: Fit) -> dict[str, Any]:
    """One place a model fits, as `advise --json` prints it."""
    return {
        "gpu": f.gpu,
        "profile": f.profile,
        "capacityGiB": f.capacity_gib,
        "headroomGiB": round(f.headroom_gib, 3),
        "maxContext": f.max_context,
        "maxConcurrency": f.max_concurrency,
        "unitsPerGpu": f.units_per_gpu,
        "costPerUnitHour": round(f.cost_per_unit_hour, 6) if f.cost_per_unit_hour is not None else None,
    }


def _money(value: float | None) -> str:
    return "" if value is None else f"{value:,.2f}"


def plan_json(plan: EndpointPlan) -> dict[str, Any]:
    variant: dict[str, Any] = {
        "instanceCount": plan.instance_count,
        "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": list(plan.partition_types)}],
    }
    if plan.price_per_instance_hour is not None:
        variant["pricePerInstanceHour"] = plan.price_per_instance_hour
    price = plan.price_per_hour
    return {
        "gpu": plan.gpu,
        "gpusPerInstance": plan.gpus_per_instance,
        "instanceCount": plan.instance_count,
        "gpus": plan.gpus,
        "pricePerInstanceHour": plan.price_per_instance_hour,
        "pricePerHour": round(price, 6) if price is not None else None,
        "variant": variant,
        "components": [
            {
                "name": c.name,
                "model": c.model,
                "partitionType": c.partition_type,
                "devicesRequired": 1,
                "copies": c.copies,
            }
            for c in plan.components
        ],
        "headroomGiB": {c.name: c.headroom_gib for c in plan.components},
        "spare": dict(plan.spare),
    }


def advice_json(advice: EndpointAdvice) -> dict[str, Any]:
    return {
        "proposal": plan_json(advice.plans[0]) if advice.plans else None,
        "plans": [plan_json(p) for p in advice.plans],
        "unservable": [{"gpu": u.gpu, "reason": u.reason} for u in advice.unservable],
        "models": [
            {
                "name": s.model.name,
                "model": s.model.spec.name,
                "dtype": s.model.dtype,
                "context": s.model.context,
                "concurrency": s.model.concurrency,
                "copies": s.model.copies,
                "memory": {
                    "weightsGiB": round(s.need.weights_gib, 3),
                    "kvCacheGiB": round(s.need.kv_cache_gib, 3),
                    "overheadGiB": round(s.need.overhead_gib, 3),
                    "totalGiB": round(s.need.total_gib, 3),
                },
                "options": [fit_json(f) for f in s.options],
            }
            for s in advice.models
        ],
    }


def _plan_row(p: EndpointPlan) -> list[str]:
    return [p.gpu, str(p.instance_count), str(p.gpus), _money(p.price_per_hour), ", ".join(p.partition_types)]


PLAN_COLUMNS = [
    Column("gpu"),
    Column("instances"),
    Column("GPUs", drop=3),
    Column("$/h", drop=1),
    Column("layout (each GPU)", wrap=True),
]
OPTION_COLUMNS = [
    Column("gpu"),
    Column("partition"),
    Column("GiB", drop=2),
    Column("headroom", drop=3),
    Column("$/unit-h", drop=1),
]


def show_endpoint_advice(advice: EndpointAdvice, *, top: int | None, output: Output, as_json: bool) -> None:
    """Print the advice; `top` limits each model's options to its smallest fits (None: all)."""
    if as_json:
        print_json(advice_json(advice))
        return
    console = stdout()
    for s in advice.models:
        need = s.need
        console.print(
            f"{s.model.name}: {s.model.spec.name} in {s.model.dtype}, {s.model.context} tokens ×"
            f" {s.model.concurrency} sequences, {s.model.copies} cop{'y' if s.model.copies == 1 else 'ies'},"
            f" needs {need.total_gib:.2f} GiB a copy",
            markup=False,
        )
    if not advice.plans:
        console.print("no endpoint serves these models:", markup=False)
        for u in advice.unservable:
            console.print(f"  {u.gpu}: {u.reason}", markup=False)
        return
    best = advice.plans[0]
    price = f" at ${_money(best.price_per_hour)}/h" if best.price_per_hour is not None else ""
    console.print(
        f"\nproposed: {best.instance_count} × {best.gpu} instance"
        f"{'' if best.instance_count == 1 else 's'} ({best.gpus_per_instance} GPUs each){price};"
        f" every GPU split {', '.join(best.partition_types)}",
        markup=False,
    )
    print_fitted(
        console,
        [Column("component"), Column("partition"), Column("copies"), Column("headroom GiB", drop=1)],
        [[c.name, c.partition_type, str(c.copies), f"{c.headroom_gib:.2f}"] for c in best.components],
        output,
    )
    if best.spare:
        console.print("free for more copies: " + ", ".join(f"{n} × {t}" for t, n in best.spare), markup=False)
    if best.price_per_hour is None:
        console.print("(give --price MODEL=USD/GPUS to compare GPU models by price)", markup=False)
    console.print("\neach GPU model's best plan, cheapest first", markup=False)
    print_fitted(
        console,
        PLAN_COLUMNS,
        [_plan_row(p) for p in advice.plans],
        output,
    )
    for u in advice.unservable:
        console.print(f"  {u.gpu}: {u.reason}", markup=False)
    for s in advice.models:
        shown = s.options if top is None else s.options[:top]
        console.print(f"\n{s.model.name}: partition types that hold it (GPU options)", markup=False)
        print_fitted(
            console,
            OPTION_COLUMNS,
            [
                [
                    f.gpu,
                    f"mig-{f.profile}" if f.profile else "whole GPU",
                    f"{f.capacity_gib:g}",
                    f"{f.headroom_gib:.2f}",
                    f"{f.cost_per_unit_hour:.4f}" if f.cost_per_unit_hour is not None else "",
                ]
                for f in shown
            ],
            output,
        )
        if len(shown) < len(s.options):
            console.print(f"{len(s.options) - len(shown)} more: --all", markup=False)
