"""`better-compute gpus`, `layouts validate|list|export|import` and `advise`.

These answer from the catalog alone, so they work without a server: the pure domain is the whole
answer. A refused layout or an unknown name exits with status 2 and the error.

What only one command needs (mig-parted's format, YAML, the endpoint advisor) is imported inside it:
`gpus` is the CLI's quickest answer, and each call pays for what the module imports at its top.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.table import Table

from better_compute.cli.app import app
from better_compute.cli.output import print_json, stderr, stdout
from better_compute.cli.tables import Column, Output, OutputOption, json_wanted, print_fitted
from better_compute.domain.catalog import GpuModel, MigProfile, all_models, get_model
from better_compute.domain.catalog.layouts import (
    InstancePlacement,
    format_layout,
    parse_layout,
    partition_types,
    validate,
)
from better_compute.domain.catalog.sizing import (
    DEFAULT_OVERHEAD_GIB,
    Advice,
    ModelSpec,
    Price,
    adjusted,
    advise,
    preset,
)
from better_compute.domain.kernel.errors import DomainError, InvalidInput

layouts_app = typer.Typer(help="Validate, list, export and import MIG layouts.", no_args_is_help=True)
app.add_typer(layouts_app, name="layouts")

REFUSED = 2
"""Exit status of a refused layout or an unknown name, apart from 1 (a server's refusal)."""
ADVISE_TOP = 10
"""How many fits `advise` shows without `--all`: the smallest that hold the model."""

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
GpuOption = Annotated[str, typer.Option("--gpu", help="GPU model id, e.g. H100-80GB (see `gpus`).")]


def _refuse(error: DomainError, *, as_json: bool = False, valid_key: bool = False) -> NoReturn:
    if as_json:
        body: dict[str, Any] = {"error": {"code": error.code, "message": error.message}}
        if error.details:
            body["error"]["details"] = error.details
        if valid_key:
            body = {"valid": False, **body}
        print_json(body)
    else:
        stderr().print(f"error: {error.code}: {error.message}", markup=False)
    raise typer.Exit(REFUSED)


def _profile_json(profile: MigProfile) -> dict[str, Any]:
    return {
        "name": profile.name,
        "profileId": profile.profile_id,
        "computeSlices": profile.compute_slices,
        "memorySlices": profile.memory_slices,
        "memoryGiB": profile.memory_gib,
        "maxInstances": profile.max_instances,
        "starts": list(profile.starts),
        "size": profile.size,
        "minDriver": profile.min_driver,
        "multiprocessors": profile.multiprocessors,
        "aliases": list(profile.aliases),
    }


def _model_json(model: GpuModel) -> dict[str, Any]:
    return {
        "id": model.id,
        "name": model.name,
        "memoryGiB": model.memory_gib,
        "migCapable": model.mig_capable,
        "products": list(model.products),
        "computeSlices": model.compute_slices,
        "memorySlices": model.memory_slices,
        "placementUnits": model.placement_units,
        "placementsConfirmed": model.placements_confirmed,
        "minDriver": model.min_driver,
        "profiles": [_profile_json(p) for p in model.profiles],
    }


def _number(value: float) -> str:
    return f"{value:g}"


_GPU_COLUMNS = (
    Column("model"),
    Column("GiB"),
    Column("MIG"),
    Column("compute/memory", drop=2),
    Column("axis", drop=1),
    Column("profiles", wrap=True),
)


@app.command("gpus")
def gpus(as_json: JsonFlag = False, output: OutputOption = Output.TABLE) -> None:
    """The GPU catalog: every model, its memory and, for MIG-capable ones, slices and profiles."""
    models = all_models()
    if json_wanted(as_json, output):
        print_json([_model_json(m) for m in models])
        return
    rows = []
    for m in models:
        slices = f"{m.compute_slices}/{m.memory_slices}" if m.mig_capable else "-"
        axis = str(m.placement_units) if m.mig_capable else "-"
        profiles = " ".join(p.name for p in m.profiles if not p.attribute) if m.mig_capable else "-"
        rows.append([m.id, _number(m.memory_gib), "yes" if m.mig_capable else "no", slices, axis, profiles])
    console = stdout()
    console.print("GPU catalog", markup=False)
    print_fitted(console, _GPU_COLUMNS, rows, output)


def diagram(placement: InstancePlacement, model: GpuModel) -> str:
    """The placement axis drawn to scale: one cell per unit, instances as bracketed spans."""
    units = model.placement_units
    if not placement.instances or units == 0:
        return "MIG disabled: the GPU is used whole"
    width = 5
    cells: list[str | None] = [None] * units
    for instance in placement.instances:
        span = width * instance.size
        label = instance.profile if len(instance.profile) <= span - 2 else instance.profile.split(".")[0]
        text = "[" + label[: span - 2].center(span - 2) + "]"
        for k in range(instance.size):
            cells[instance.start + k] = text[k * width : (k + 1) * width]
    ruler = "".join(str(u).ljust(width) for u in range(units))
    row = "".join(cell if cell is not None else "·" * width for cell in cells)
    return f"{ruler}\n{row}"


def _placement_usage(placement: InstancePlacement, model: GpuModel) -> str:
    compute = sum(model.profile(i.profile).compute_slices for i in placement.instances)
    memory = sum(model.profile(i.profile).memory_slices for i in placement.instances)
    return (
        f"compute slices {compute}/{model.compute_slices}, memory slices {memory}/{model.memory_slices}, "
        f"axis {sum(i.size for i in placement.instances)}/{model.placement_units} units"
    )


@layouts_app.command("validate")
def layouts_validate(
    layout: Annotated[
        str, typer.Argument(help="all-disabled | all-<profile> | mixed:<n>x<profile>+… | JSON list")
    ],
    gpu: GpuOption,
    driver: Annotated[
        str | None, typer.Option("--driver", help="Driver version to check against, e.g. 470.256.02 or R525.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Find where every instance of LAYOUT goes on a GPU model, or say why it cannot exist."""
    try:
        model = get_model(gpu)
        placement = validate(layout, model, driver)
    except DomainError as exc:
        _refuse(exc, as_json=as_json, valid_key=True)
    if as_json:
        print_json(
            {
                "valid": True,
                "model": model.id,
                "layout": format_layout(placement.layout),
                "expanded": format_layout(placement.expanded),
                "placement": [
                    {"profile": i.profile, "start": i.start, "size": i.size} for i in placement.instances
                ],
            }
        )
        return
    console = stdout()
    console.print(f"{format_layout(placement.layout)} is valid on {model.id}", markup=False)
    if not placement.instances:
        console.print("MIG disabled: the GPU is used whole", markup=False)
        return
    table = Table(title="placement (creation order)")
    for column in ("#", "profile", "profile id", "start", "size", "compute", "memory", "GiB"):
        table.add_column(column)
    for n, instance in enumerate(placement.instances, 1):
        p = model.profile(instance.profile)
        table.add_row(
            str(n),
            p.name,
            str(p.profile_id),
            str(instance.start),
            str(instance.size),
            str(p.compute_slices),
            str(p.memory_slices),
            _number(p.memory_gib),
        )
    console.print(table)
    console.print(_placement_usage(placement, model), markup=False)
    console.print(diagram(placement, model), markup=False)


@layouts_app.command("list")
def layouts_list(gpu: GpuOption, as_json: JsonFlag = False, output: OutputOption = Output.TABLE) -> None:
    """The MIG profiles of a GPU model: slices, memory, how many fit and where they may start."""
    as_json = json_wanted(as_json, output)
    try:
        model = get_model(gpu)
    except DomainError as exc:
        _refuse(exc, as_json=as_json)
    if as_json:
        print_json(
            {
                "model": model.id,
                "migCapable": model.mig_capable,
                "computeSlices": model.compute_slices,
                "memorySlices": model.memory_slices,
                "placementUnits": model.placement_units,
                "profiles": [_profile_json(p) for p in model.profiles],
            }
        )
        return
    console = stdout()
    if not model.mig_capable:
        console.print(f"{model.id} does not support MIG: it is used whole or shared in slots", markup=False)
        return
    console.print(
        f"{model.id}: {model.compute_slices} compute / {model.memory_slices} memory slices, "
        f"{model.placement_units}-unit placement axis",
        markup=False,
    )
    columns = [Column(c) for c in ("profile", "id", "compute", "memory", "GiB", "max", "starts", "size")]
    columns.append(Column("driver", drop=1))
    rows = [
        [
            p.name,
            str(p.profile_id),
            str(p.compute_slices),
            str(p.memory_slices),
            _number(p.memory_gib),
            str(p.max_instances),
            ",".join(map(str, p.starts)),
            str(p.size),
            f"R{p.min_driver}+" if p.min_driver else "",
        ]
        for p in model.profiles
    ]
    print_fitted(console, columns, rows, output)


@layouts_app.command("export")
def layouts_export(
    layout: Annotated[str, typer.Argument(help="The layout to export.")],
    gpu: GpuOption,
    output_format: Annotated[
        str, typer.Option("--format", help="mig-parted (a v1 config file) or partition-types (JSON list).")
    ] = "mig-parted",
    name: Annotated[str | None, typer.Option("--name", help="Config name in the mig-parted file.")] = None,
) -> None:
    """Write a validated layout as an NVIDIA mig-parted config (or as the endpoint's partition types)."""
    from better_compute.domain.catalog.migparted import default_config_name, export_layout

    try:
        parsed = parse_layout(layout)
        if output_format == "mig-parted":
            text = export_layout(parsed, gpu, name or default_config_name(parsed))
        elif output_format == "partition-types":
            print_json(list(partition_types(parsed, gpu)))
            return
        else:
            stderr().print(
                f"error: unknown format {output_format!r} (mig-parted, partition-types)", markup=False
            )
            raise typer.Exit(REFUSED)
    except DomainError as exc:
        _refuse(exc)
    typer.echo(text, nl=False)


@layouts_app.command("import")
def layouts_import(
    file: Annotated[Path, typer.Argument(help="A mig-parted config file.", exists=True, dir_okay=False)],
    config: Annotated[str, typer.Option("--config", help="Name of the config under mig-configs.")],
    gpu: GpuOption,
    driver: Annotated[str | None, typer.Option("--driver", help="Driver version to check against.")] = None,
    index: Annotated[
        int | None, typer.Option("--index", min=0, help="Only what the config gives this GPU index.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Read a named mig-parted config, validate it for a GPU model and print it as a layout string.

    A config that gives GPUs different layouts by index, or enables MIG with no instances
    (NVIDIA's `all-enabled`), prints one line per entry: the GPUs it names and what they get.
    `--index N` prints what GPU N gets."""
    from better_compute.domain.catalog.migparted import describe_layout, for_index, read_config

    try:
        found = read_config(file.read_text(encoding="utf-8"), config, gpu, driver)
        if index is not None:
            found = (for_index(found, index, config),)
    except DomainError as exc:
        _refuse(exc, as_json=as_json)
    single = found[0].layout if len(found) == 1 else None
    if as_json:
        print_json(
            {
                "config": config,
                "model": get_model(gpu).id,
                "layout": None if single is None else format_layout(single),
                "devices": [
                    {
                        "devices": item.devices if item.devices == "all" else list(item.devices),
                        "migEnabled": item.mig_enabled,
                        "layout": None if item.layout is None else format_layout(item.layout),
                    }
                    for item in found
                ],
            }
        )
    elif single is not None:
        typer.echo(format_layout(single))
    else:
        for item in found:
            where = "all GPUs" if item.devices == "all" else "GPU " + ",".join(map(str, item.devices))
            typer.echo(f"{where}: {describe_layout(item.layout)}")


PRICE_FORMAT = "expected MODEL=USD or MODEL=USD/GPUS, e.g. H100-80GB=63.296/8"


def _parse_price(text: str) -> Price:
    """`MODEL=USD[/GPUS]`; anything else stops the command with one line saying what is wrong (a bad
    argument: exit status 2). A price must be a positive, finite number of dollars: a free or negative
    instance would rank first in every table and mean nothing."""
    model, sep, rest = text.partition("=")
    amount_text, _, gpus_text = rest.partition("/")
    if not sep:
        _bad_price(text, PRICE_FORMAT)
    try:
        amount = float(amount_text)
        gpus = int(gpus_text) if gpus_text else 1
    except ValueError:
        _bad_price(text, PRICE_FORMAT)
    if not math.isfinite(amount) or amount <= 0:
        _bad_price(text, f"the price must be a positive number of USD per hour, not {amount_text!r}")
    if gpus < 1:
        _bad_price(text, f"an instance carries at least one GPU, not {gpus_text!r}")
    try:
        return Price(get_model(model).id, amount, gpus)
    except DomainError:
        _bad_price(text, f"unknown GPU model {model!r}; `better-compute gpus` lists the models")


def _bad_price(text: str, why: str) -> NoReturn:
    stderr().print(f"error: --price {text!r}: {why}", markup=False)
    raise typer.Exit(REFUSED)


def _spec(
    model: str | None, params: float | None, layers: int | None, kv_heads: int | None, head_dim: int | None
) -> ModelSpec:
    if model is not None:
        return adjusted(preset(model), params_b=params, layers=layers, kv_heads=kv_heads, head_dim=head_dim)
    if params is None or layers is None or kv_heads is None or head_dim is None:
        raise typer.BadParameter("give --model NAME, or --params with --layers, --kv-heads and --head-dim")
    return ModelSpec(f"{params:g}B", params, layers, kv_heads, head_dim)


def _advice_json(advice: Advice) -> dict[str, Any]:
    from better_compute.cli.endpoint_advice import fit_json

    need = advice.need
    return {
        "model": {
            "name": advice.spec.name,
            "paramsB": advice.spec.params_b,
            "layers": advice.spec.layers,
            "kvHeads": advice.spec.kv_heads,
            "headDim": advice.spec.head_dim,
        },
        "dtype": advice.dtype,
        "context": advice.context,
        "concurrency": advice.concurrency,
        "memory": {
            "weightsGiB": round(need.weights_gib, 3),
            "kvCacheGiB": round(need.kv_cache_gib, 3),
            "overheadGiB": round(need.overhead_gib, 3),
            "totalGiB": round(need.total_gib, 3),
            "kvBytesPerToken": need.kv_bytes_per_token,
        },
        "fits": [fit_json(f) for f in advice.fits],
    }


MAX_ENDPOINT_FILE = 1 << 20
"""Characters an `advise --endpoint` file may hold."""


def _advise_endpoint(
    path: Path, gpu: str | None, prices: list[Price], *, show_all: bool, output: Output, as_json: bool
) -> None:
    import yaml

    from better_compute.cli.endpoint_advice import show_endpoint_advice
    from better_compute.domain.endpoints.endpoint_sizing import advise_endpoint, parse_served_models

    try:
        if str(path) == "-":
            text = sys.stdin.read(MAX_ENDPOINT_FILE + 1)
        else:
            with path.open(encoding="utf-8") as f:  # never more than the limit, whatever the file
                text = f.read(MAX_ENDPOINT_FILE + 1)
    except (OSError, UnicodeDecodeError) as exc:
        stderr().print(f"error: --endpoint {path}: {exc}", markup=False)
        raise typer.Exit(REFUSED) from exc
    try:
        if len(text) > MAX_ENDPOINT_FILE:
            raise InvalidInput(f"the models file is over {MAX_ENDPOINT_FILE} characters", {"field": "models"})
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidInput(f"the models file is not YAML or JSON: {exc}", {"field": "models"}) from exc
        advice = advise_endpoint(parse_served_models(raw), gpu=gpu, prices=prices)
    except DomainError as exc:
        _refuse(exc, as_json=as_json)
    show_endpoint_advice(advice, top=None if show_all else ADVISE_TOP, output=output, as_json=as_json)


@app.command("advise")
def advise_cmd(
    context: Annotated[
        int | None, typer.Option("--context", help="Context length in tokens per sequence.", min=1)
    ] = None,
    endpoint: Annotated[
        Path | None,
        typer.Option(
            "--endpoint",
            help="A YAML or JSON file of models to serve on one endpoint (- reads stdin): propose the"
            " layout and instance count that serve them at the lowest price.",
        ),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="A preset, e.g. Llama-3.1-8B.")] = None,
    params: Annotated[float | None, typer.Option("--params", help="Parameters, in billions.")] = None,
    layers: Annotated[int | None, typer.Option("--layers", min=1)] = None,
    kv_heads: Annotated[int | None, typer.Option("--kv-heads", min=1)] = None,
    head_dim: Annotated[int | None, typer.Option("--head-dim", min=1)] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="fp32, fp16, bf16, fp8, int8 or int4.")] = "fp16",
    kv_dtype: Annotated[
        str | None, typer.Option("--kv-dtype", help="KV-cache dtype (default: --dtype).")
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Concurrent sequences.", min=1)] = 1,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Only this GPU model.")] = None,
    overhead: Annotated[
        float, typer.Option("--overhead", help="Runtime overhead, GiB.", min=0)
    ] = DEFAULT_OVERHEAD_GIB,
    price: Annotated[
        list[str] | None,
        typer.Option(
            "--price", help="Instance price, MODEL=USD or MODEL=USD/GPUS (GPUs per instance); repeatable."
        ),
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help=f"Every fit, not only the best {ADVISE_TOP}.")
    ] = False,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
) -> None:
    """Which MIG partitions and whole GPUs hold a model at a context length and concurrency; with
    `--endpoint`, the partition layout and instance count that serve several models at the lowest
    price."""
    as_json = json_wanted(as_json, output)
    prices = [_parse_price(p) for p in price or ()]
    if endpoint is not None:
        given = [
            flag
            for flag, value in (
                ("--context", context),
                ("--model", model),
                ("--params", params),
                ("--layers", layers),
                ("--kv-heads", kv_heads),
                ("--head-dim", head_dim),
                ("--kv-dtype", kv_dtype),
            )
            if value is not None
        ]
        if given:
            raise typer.BadParameter(
                f"{', '.join(given)}: with --endpoint, each model is described in the file"
            )
        _advise_endpoint(endpoint, gpu, prices, show_all=show_all, output=output, as_json=as_json)
        return
    if context is None:
        raise typer.BadParameter("give --context (tokens per sequence), or --endpoint FILE")
    try:
        spec = _spec(model, params, layers, kv_heads, head_dim)
        advice = advise(
            spec,
            dtype,
            context,
            concurrency,
            overhead_gib=overhead,
            kv_dtype=kv_dtype,
            gpu=gpu,
            prices=prices,
        )
    except DomainError as exc:
        _refuse(exc, as_json=as_json)
    if as_json:
        print_json(_advice_json(advice))
        return
    need = advice.need
    console = stdout()
    console.print(
        f"{spec.name} in {advice.dtype}, {context} tokens × {concurrency} sequences needs "
        f"{need.total_gib:.2f} GiB: weights {need.weights_gib:.2f} + KV cache {need.kv_cache_gib:.2f} "
        f"+ overhead {need.overhead_gib:.2f}",
        markup=False,
    )
    if not advice.fits:
        console.print("nothing in the catalog holds it on one GPU", markup=False)
        return
    # The best fits are the smallest that hold the model (the least memory left idle); the rest
    # follow with --all. The table fits the terminal without cutting a GPU model or a header.
    shown = advice.fits if show_all else advice.fits[:ADVISE_TOP]
    priced = any(f.cost_per_unit_hour is not None for f in advice.fits)
    columns = [
        Column("gpu"),
        Column("partition"),
        Column("GiB", drop=1),
        Column("headroom", drop=3),
        Column("max ctx", drop=4),
        Column("max seqs", drop=6),
        Column("per GPU", drop=5),
        *([Column("$/unit-h", drop=2)] if priced else []),
    ]
    rows = [
        [
            f.gpu,
            f.profile or "whole GPU",
            _number(f.capacity_gib),
            f"{f.headroom_gib:.2f}",
            str(f.max_context),
            str(f.max_concurrency),
            str(f.units_per_gpu),
            *([f"{f.cost_per_unit_hour:.4f}" if f.cost_per_unit_hour is not None else ""] if priced else []),
        ]
        for f in shown
    ]
    console.print("best fits (smallest first)", markup=False)
    print_fitted(console, columns, rows, output)
    if len(shown) < len(advice.fits):
        console.print(f"{len(advice.fits) - len(shown)} more: --all", markup=False)
