"""Tables that fit the terminal without cutting what people copy.

Rich shrinks every column of a table wider than the terminal, and a shrunk id ends in `…`: the one
thing a user copies from `reservations list` into the next command is then useless. So a table is
laid out here first, kubectl-style: id columns are never wrapped, cut or dropped; other columns drop,
least useful first, until the rest fits, and columns of free text may wrap. `-o wide` keeps every
column and lets the table run past the terminal's edge.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

_GAP = 2
"""Columns are separated by one space of padding on each side (`pad_edge=False` keeps the edges)."""

_WRAPPED_MIN = 8
"""The narrowest a wrapping column is counted at when deciding what fits."""


class Output(StrEnum):
    """`-o`: `table` fits the terminal, `wide` shows every column, `json` is the API's answer (as
    `--json`, which stays as its alias)."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"


OutputOption = Annotated[
    Output,
    typer.Option(
        "--output",
        "-o",
        help="table: fit the terminal (ids always whole); wide: every column; json: the API's JSON.",
    ),
]


def json_wanted(as_json: bool, output: Output) -> bool:
    """Whether a command prints JSON: `--json` and `-o json` are one choice spelled two ways."""
    return as_json or output is Output.JSON


@dataclass(frozen=True)
class Column:
    """A column of a fitted table. `drop` orders what goes when the table is too wide (the highest
    first); 0 means never: ids, shown whole. `wrap` lets free text wrap instead of being dropped."""

    header: str
    drop: int = 0
    wrap: bool = False


def _width(text: str) -> int:
    return max((len(line) for line in text.split("\n")), default=0)


_TOKEN = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}(?::\d{2})?Z|\S+")
"""What a wrapping column never breaks: a word, or a time as `times.when` prints it (its one space
inside is not a place to wrap)."""


def _word(text: str) -> int:
    return max((len(word) for word in _TOKEN.findall(text)), default=0)


def fit(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int, *, wide: bool = False
) -> tuple[Table, list[str], int]:
    """The table of `rows` under `columns` for a terminal `width` columns wide, the headers left
    out, and the width to print it at (wider than the terminal only with `wide`)."""
    natural = [max([_width(c.header), *(_width(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    # A wrapping column wraps between words, never inside one: it is at least its longest word wide,
    # so an id or a time in free text is never folded mid-token.
    longest = [max([_word(c.header), *(_word(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    need = [
        max(min(n, _WRAPPED_MIN), w) if c.wrap else n
        for c, n, w in zip(columns, natural, longest, strict=True)
    ]
    kept = list(range(len(columns)))

    def total(indices: list[int]) -> int:
        return sum(need[i] for i in indices) + _GAP * max(len(indices) - 1, 0)

    if not wide:
        for i in sorted((i for i in kept if columns[i].drop), key=lambda i: -columns[i].drop):
            if total(kept) <= width:
                break
            kept.remove(i)
    table = Table(box=None, pad_edge=False, show_edge=False)
    for i in kept:
        column = columns[i]
        if column.wrap:
            table.add_column(column.header, overflow="fold", min_width=need[i])
        else:
            table.add_column(column.header, no_wrap=True, min_width=natural[i])
    for row in rows:
        table.add_row(*(row[i] for i in kept))
    dropped = [columns[i].header for i in range(len(columns)) if i not in kept]
    # With every droppable column gone, ids alone may still be wider than the terminal: the table
    # then runs past its edge rather than cut one.
    at = (
        max(width, sum(natural[i] for i in kept) + _GAP * max(len(kept) - 1, 0))
        if wide
        else max(width, total(kept))
    )
    return table, dropped, at


def print_fitted(
    console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]], output: Output
) -> None:
    """Print a fitted table on `console`, and which columns `-o wide` would add."""
    table, dropped, at = fit(columns, rows, console.width, wide=output is Output.WIDE)
    if at > console.width:
        # the same Console class as `console`: the CLI's handles a closed pipe (cli/output.py)
        type(console)(width=at, highlight=False, soft_wrap=False, file=console.file).print(table)
    else:
        console.print(table)
    if dropped:
        console.print(f"(-o wide adds: {', '.join(dropped)})", markup=False, style="dim")


def sentence(label: str) -> str:
    """A detail view's label as a heading is written: `next free` -> `Next free`, `id` -> `ID`."""
    words = ["ID" if w == "id" else w for w in label.split(" ")]
    text = " ".join(words)
    return text[:1].upper() + text[1:]


def print_details(console: Console, rows: Sequence[tuple[str, str]]) -> None:
    """A detail view: one `Label  value` line per row, labels in English and aligned. A value is
    printed whole on its line (the terminal, not rich, wraps a long one), so an id or a time is
    never cut or given an ellipsis at any width, and a pipe gets exactly the text."""
    pad = max((len(name) for name, _ in rows), default=0) + _GAP
    for name, value in rows:
        lines = value.split("\n") or [""]
        console.print(name.ljust(pad) + lines[0], markup=False, highlight=False, soft_wrap=True)
        for more in lines[1:]:
            console.print(" " * pad + more, markup=False, highlight=False, soft_wrap=True)
