"""The CLI's one place for what goes wrong outside a command's own refusals.

Every command runs inside `CliGroup.invoke`, so these hold for all of them at once:

- a usage error (click's: a missing option, a bad value) prints `error: message` and the help hint,
  exit status 2, in the same shape as a refusal (`output.fail`);
- a pydantic ValidationError that escapes a command (an option a wire model refuses) is told as
  `error: INVALID_INPUT: field: message`, exit status 2, never with pydantic's own rendering
  (`validation error for ...`, `input_value=`, `type=`);
- the reader closing the output pipe (`better-compute gpus | head -1`) ends the command quietly with
  status 0: the reader had what it wanted;
- boolean flags show no `<bool>` type in `--help`: they take no value.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import typer
from typer._click.core import Context  # typer carries its own click: typer.BadParameter's base
from typer._click.exceptions import UsageError
from typer.core import TyperGroup, TyperOption

from better_compute.cli.output import EXIT_USAGE, described_fault, plain_details, stderr


class CliGroup(TyperGroup):
    """The root command group: see the module docstring."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: Context | None = None, **extra: Any
    ) -> Context:
        """The root's own options are parsed here, before `invoke`: `better-compute --bogus`."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except UsageError as exc:
            _usage_error(exc)

    def invoke(self, ctx: Context) -> Any:
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a closed pipe is found here, not in the interpreter's last flush
            return result
        except UsageError as exc:
            _usage_error(exc)
        except BrokenPipeError:
            _quiet_stdout()
            raise typer.Exit(0) from None
        except Exception as exc:
            if not _is_validation_error(exc):
                raise
            _validation_error(exc)


def _usage_error(exc: UsageError) -> NoReturn:
    """`error: message` and where help is, exit status 2 (click's status for usage errors)."""
    # typer checks choices with pydantic, whose "Value error, " prefix means nothing to a reader
    text = f"error: {exc.format_message().replace('Value error, ', '')}"
    if exc.ctx is not None:
        text += f"\nTry '{exc.ctx.command_path} --help' for help."
    stderr().print(text, markup=False)
    raise typer.Exit(exc.exit_code)


def _is_validation_error(exc: Exception) -> bool:
    """pydantic's ValidationError, recognised without importing pydantic: a catalog command (and
    `--help`) starts without it, and an error of a class never imported cannot have been raised."""
    core = sys.modules.get("pydantic_core")
    return core is not None and isinstance(exc, core.ValidationError)


def _validation_error(exc: Any) -> NoReturn:
    """The faults in plain words: the first as the message, all of them when there are several."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    first = described_fault(errors[0]) if errors else str(exc)
    text = f"error: INVALID_INPUT: {first}"
    if len(errors) > 1:
        text += plain_details({"errors": errors})
    stderr().print(text, markup=False)
    raise typer.Exit(EXIT_USAGE)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's flush at exit does not fail again and print
    `Exception ignored ... BrokenPipeError` (Python's documented recipe for SIGPIPE)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test runner's buffer): nothing will be flushed to a pipe
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _flag_type_hidden(self: TyperOption, ctx: Context) -> str | None:
    """No type for a boolean flag in `--help`: `--json` takes no value, and a `<bool>` column
    suggests `--json true`. Typer renders every option's type through this one method."""
    if self.is_flag and self.metavar is None:
        return None
    return _display_type_rich(self, ctx)


_display_type_rich = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type_hidden  # type: ignore[method-assign]
