"""`better-compute partitions book|release` (admin): hold a GPU's whole family of atoms for a
maintenance window, as a MIG layout change does, and end it.

`book` exits 1 when the GPU is booked in the window (the answer's `status` is `conflict`): nothing
was booked, and the message says from when the whole family is free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import print_json, stderr, stdout
from better_compute.cli.times import parse_time, when

if TYPE_CHECKING:
    from better_compute.wire.partitions import PartitionBookingPublic

partitions_app = typer.Typer(
    help="Hold a GPU's whole family of atoms for maintenance (admin), and end the hold.",
    no_args_is_help=True,
)
app.add_typer(partitions_app, name="partitions")

OPTIONS = {
    "gpuId": "GPU",
    "start": "--start",
    "end": "--end",
    "duration": "--duration",
    "bookingId": "BOOKING",
}


@partitions_app.command("book")
def partitions_book(
    gpu: Annotated[str, typer.Argument(metavar="GPU", help="The GPU's uuid.")],
    start: Annotated[
        str | None, typer.Option("--start", help="ISO 8601 start time (default: now).", show_default=False)
    ] = None,
    end: Annotated[str | None, typer.Option("--end", help="ISO 8601 end time.", show_default=False)] = None,
    duration: Annotated[
        str | None,
        typer.Option("--duration", help="How long instead of --end, e.g. 4h, 2d.", show_default=False),
    ] = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Hold every atom of a GPU, its MIG instances or slots included, from --start to --end (or for
    --duration; at most 30 days): nothing new lands on the GPU meanwhile. Exits 1, booking nothing,
    when something of the GPU is booked in the window, saying from when the GPU is free."""
    if (end is None) == (duration is None):
        raise typer.BadParameter("give exactly one of --end and --duration", param_hint="--end/--duration")
    starts_at = parse_time(start, "--start")
    ends_at = parse_time(end, "--end")
    answer = call(
        server,
        token,
        as_json,
        lambda c: c.partitions.book(gpu, start=starts_at, end=ends_at, duration=duration),
        OPTIONS,
    )
    if as_json:
        print_json(answer.model_dump(mode="json", by_alias=True))
    elif answer.status == "booked":
        _show_booked(answer)
    if answer.status == "conflict":
        if not as_json:
            free = (
                "never (a booking of it never ends)" if answer.free_from is None else when(answer.free_from)
            )
            stderr().print(
                f"CONFLICT: GPU {gpu} is booked in that window; the whole GPU is free from {free}",
                markup=False,
            )
        raise typer.Exit(1)


@partitions_app.command("release")
def partitions_release(
    booking: Annotated[str, typer.Argument(metavar="BOOKING", help="The booking id `partitions book` gave.")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """End a partition booking now: the GPU takes new bookings again. Releasing one already over
    changes nothing."""
    answer = call(server, token, as_json, lambda c: c.partitions.release(booking), OPTIONS)
    if as_json:
        print_json(answer.model_dump(mode="json", by_alias=True))
        return
    stdout().print(
        f"released {answer.booking_id} (GPU {answer.gpu_id}): {answer.ended} atom bookings ended",
        markup=False,
    )


def _show_booked(answer: PartitionBookingPublic) -> None:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("booking", answer.booking_id or "-")
    grid.add_row("gpu", answer.gpu_id)
    grid.add_row("start", "-" if answer.start is None else when(answer.start))
    grid.add_row("end", "-" if answer.end is None else when(answer.end))
    grid.add_row("atoms", str(len(answer.atoms)))
    stdout().print(grid)
