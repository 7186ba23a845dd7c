"""What `workloads exec` and `endpoints exec` print, and the status they exit with (docs/cli.md#exit-codes).

A command run in a container answers as a command run here would: its stdout on stdout and its
stderr on stderr, exactly as it wrote them, and its exit code as the CLI's. A refusal before it ran
(NOT_FOUND, UNAVAILABLE, a bad argument, no server) keeps the CLI's exit classes (1, 2, 3); with
`--json` the whole answer is printed, its `exitCode` in it, and the status is still the command's.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from better_compute.cli.output import print_json, stderr

if TYPE_CHECKING:
    from better_compute.wire.container_exec import ExecPublic

ExecTimeoutOption = Annotated[
    int | None,
    typer.Option(
        "--timeout",
        min=1,
        max=60,
        metavar="SECONDS",
        help="How long the command may run before it is killed (default 10).",
        show_default=False,
    ),
]
ExecCommandArgument = Annotated[
    list[str],
    typer.Argument(
        metavar="CMD",
        help="The command and its arguments, after `--` (argv, not a shell line; 1 to 64 of them).",
        show_default=False,
    ),
]

EXIT_STATUS_MAX = 255


def finish_exec(answer: ExecPublic, as_json: bool) -> None:
    """Print what the command wrote (or with `--json` the whole answer) and exit with its exit
    code (an exit code outside 0-255, as a signal's, is told as 255 would be by a shell: 255)."""
    if as_json:
        print_json(answer.model_dump(mode="json", by_alias=True))
    else:
        sys.stdout.write(answer.stdout)
        sys.stdout.flush()
        sys.stderr.write(answer.stderr)
        if answer.truncated:
            stderr().print("note: the output was cut at 1 MiB (stdout and stderr each)", markup=False)
        if answer.timed_out:
            stderr().print(
                f"error: the command in {answer.allocation_id} on node {answer.node} ran past its timeout"
                " (--timeout, at most 60 s): its exec was stopped, but the command may still be running"
                " in the container",
                markup=False,
            )
    code = answer.exit_code
    raise typer.Exit(code if 0 <= code <= EXIT_STATUS_MAX else EXIT_STATUS_MAX)
