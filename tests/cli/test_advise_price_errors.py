"""Defect 2 of issue 11: `advise --price` with a bad model or a zero or negative price is one
`error: ...` line and exit status 2, never a traceback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from better_compute.entrypoints.cli import app

ADVISE = ["advise", "--model", "Llama-3.1-8B", "--context", "8000"]


@pytest.mark.parametrize(
    ("price", "why"),
    [
        ("NOPE=3", "unknown GPU model 'NOPE'; `better-compute gpus` lists the models"),
        ("H100-80GB=0", "the price must be a positive number of USD per hour, not '0'"),
        ("H100-80GB=-1", "the price must be a positive number of USD per hour, not '-1'"),
        ("H100-80GB=nan", "the price must be a positive number of USD per hour, not 'nan'"),
        ("H100-80GB=3/0", "an instance carries at least one GPU, not '0'"),
        ("H100-80GB=abc", "expected MODEL=USD or MODEL=USD/GPUS, e.g. H100-80GB=63.296/8"),
        ("H100-80GB", "expected MODEL=USD or MODEL=USD/GPUS, e.g. H100-80GB=63.296/8"),
    ],
)
def test_a_bad_price_is_one_line(price: str, why: str) -> None:
    result = CliRunner().invoke(app, [*ADVISE, "--price", price])

    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"error: --price {price!r}: {why}\n"


def test_a_good_price_is_used() -> None:
    result = CliRunner().invoke(app, [*ADVISE, "--price", "H100-80GB=63.296/8", "--gpu", "H100-80GB"])

    assert result.exit_code == 0, result.output
    assert "7.9120" in result.stdout  # 63.296 USD / 8 GPUs, per whole GPU and hour
