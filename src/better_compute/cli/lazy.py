"""Top-level commands imported when they run, not when the CLI starts.

Every call of the console script pays for what it imports before it does anything, and the command
modules import the wire models (pydantic), the tables (rich) and the domain rules they need. Importing all
of them for `better-compute gpus --json` or `better-compute --help` cost 0.35 s of CPU a call, so the root
group knows each top-level command only by name, the module that defines it and its one-line summary
(`Lazy`), and:

- running a command (or its `--help`) imports that one module, which registers the command on the Typer
  app as it always has (`@app.command` / `app.add_typer`), and builds the click command from that
  registration, exactly as Typer would have;
- the root's `--help` lists the summaries without importing anything (`tests/cli/test_startup_imports.py`
  checks the listing matches the commands' own help, so a summary that drifts fails there);
- commands registered eagerly (the composition root's `serve`, `migrate`, ..., and `admin`) keep their
  place among the others: `order` is the root's listing order.

typer itself builds a pydantic adapter for a parameter whose value is absent (`_process_value`); it
no longer does, so `--help` and `gpus --json` start without pydantic.

A command module is written as before; adding a top-level command means adding one `Lazy` entry in
`cli/app.py` (a command that is registered but has no entry fails `test_startup_imports.py`). The eager
groups are built when the CLI starts, so a lazy module must not add sub-commands to them (`admin`): such
a command would be missing until its module happened to be imported.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from typer._click.core import Command, Context
from typer._coercion import PassThroughRuntimeParam
from typer.core import TyperCommand, _TyperParameter
from typer.main import get_command_from_info, get_command_name, get_group_from_info

from better_compute.cli.errors import CliGroup


class Lazy:
    """A top-level command's summary (the first paragraph of its help, as the root's listing shows it)
    and the modules, under `better_compute.cli`, that register it (a group may take commands from
    several: `nodes show` lives in `node_show_cmd`)."""

    __slots__ = ("modules", "summary")

    def __init__(self, summary: str, *modules: str) -> None:
        self.summary = summary
        self.modules = modules


class LazyGroup(CliGroup):
    """The root group: `CliGroup`'s error handling, with its top-level commands imported on use.

    `source` is the Typer app the command modules register on, `lazy` the commands it can import and
    `order` the listing order of all top-level names (eager and lazy). They are set by `lazy_group`.
    """

    source: Callable[[], typer.Typer]
    lazy: Mapping[str, Lazy]
    order: Sequence[str]
    _listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        known = list(dict.fromkeys([*self.commands, *self.lazy]))
        ranked = [name for name in self.order if name in known]
        return ranked + [name for name in known if name not in ranked]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        found = self.commands.get(cmd_name)
        if (found is not None and not isinstance(found, _Unloaded)) or cmd_name not in self.lazy:
            return found
        if self._listing:
            return TyperCommand(name=cmd_name, help=self.lazy[cmd_name].summary)
        command = self.load(cmd_name)
        self.commands[cmd_name] = command
        return command

    def load(self, name: str) -> Command:
        """Import the module that defines `name` and build its click command from its registration."""
        for module in self.lazy[name].modules:
            importlib.import_module(f"better_compute.cli.{module}")
        app = self.source()
        for group in app.registered_groups:
            if group.name == name:
                return get_group_from_info(
                    group,
                    pretty_exceptions_short=app.pretty_exceptions_short,
                    suggest_commands=app.suggest_commands,
                    rich_markup_mode=app.rich_markup_mode,
                )
        for command in app.registered_commands:
            if command.callback and (command.name or get_command_name(command.callback.__name__)) == name:
                return get_command_from_info(
                    command,
                    pretty_exceptions_short=app.pretty_exceptions_short,
                    rich_markup_mode=app.rich_markup_mode,
                )
        raise LookupError(f"{', '.join(self.lazy[name].modules)} register no command {name!r}")

    def resolve_command(self, ctx: Context, args: list[str]) -> tuple[str | None, Command | None, list[str]]:
        with self._names_for_suggestions():
            return super().resolve_command(ctx, args)

    @contextmanager
    def _names_for_suggestions(self) -> Iterator[None]:
        """Typer suggests a close command name from `self.commands` when one is mistyped; while a
        name is resolved, the lazy names are there too (as summaries, nothing imported)."""
        missing = [name for name in self.lazy if name not in self.commands]
        for name in missing:
            self.commands[name] = _Unloaded(name=name, help=self.lazy[name].summary)
        try:
            yield
        finally:
            for name in missing:
                if isinstance(self.commands.get(name), _Unloaded):
                    del self.commands[name]

    def format_help(self, ctx: Context, formatter: Any) -> None:
        """The listing shows each lazy command's summary; nothing is imported to print it."""
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def shell_complete(self, ctx: Context, incomplete: str) -> list[Any]:
        """Completing a top-level name offers the summaries, as the listing does."""
        self._listing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self._listing = False


class _Unloaded(TyperCommand):
    """A lazy command's name while a mistyped name is matched; never run."""


def lazy_group(
    source: Callable[[], typer.Typer], lazy: Mapping[str, Lazy], order: Sequence[str]
) -> type[LazyGroup]:
    """The root group class for `typer.Typer(cls=...)`: `source` returns the app (not yet made when
    the class is), `lazy` and `order` as in `LazyGroup`."""
    return type("RootGroup", (LazyGroup,), {"source": staticmethod(source), "lazy": lazy, "order": order})


def _process_value(self: _TyperParameter, ctx: Context, value: Any) -> Any:
    """typer builds a parameter's pydantic TypeAdapter before it looks at the value, even an absent
    one (None), which its coercion hands back untouched (`()` for a multi-value parameter). Every call
    has such parameters (`--help`, `--install-completion`), so each call imported pydantic, about a
    tenth of a second, for nothing. An absent value is coerced by typer's own adapter-free coercion,
    which answers exactly that; everything after it (a required check, the callback) is typer's. So
    is an enum member that is the parameter's own default (`-o` left out: `Output.TABLE`), which
    coercion would hand back as it is."""
    untouched = value is None or (isinstance(value, enum.Enum) and value is self.default)
    if not untouched or self._runtime_param is not None:
        return _typer_process_value(self, ctx, value)
    descriptor = self.type_descriptor
    self._runtime_param = PassThroughRuntimeParam(
        parameter_info=descriptor.parameter_info, annotation=descriptor.annotation
    )
    try:
        return _typer_process_value(self, ctx, value)
    finally:
        self._runtime_param = None


_typer_process_value = _TyperParameter.process_value
_TyperParameter.process_value = _process_value  # type: ignore[method-assign]
