"""The bounds of a command run in a container through a node's agent (`workloads exec`, `endpoints
exec`): its argv, its timeout, its output, and the answer the server reads back."""

from __future__ import annotations

import pytest

from better_compute.domain.fleet.node_agents import (
    EXEC_ARG_MAX,
    EXEC_ARGV_MAX,
    EXEC_OUTPUT_MAX,
    ExecResult,
    check_exec_command,
    check_exec_timeout,
    cut_output,
)
from better_compute.domain.kernel.errors import InvalidInput


def test_a_command_is_1_to_64_arguments_of_1_to_4096_characters_without_nul() -> None:
    assert check_exec_command(["busybox", "echo", "hi"]) == ("busybox", "echo", "hi")
    assert len(check_exec_command(["x"] * EXEC_ARGV_MAX)) == 64
    assert check_exec_command(["x" * EXEC_ARG_MAX]) == ("x" * 4096,)
    for bad in ([], ["x"] * 65, "echo hi", None, [1], [""], ["x" * 4097], ["a\x00b"], {"0": "x"}):
        with pytest.raises(InvalidInput):
            check_exec_command(bad)
    with pytest.raises(InvalidInput, match=r"command\[1\]"):
        check_exec_command(["echo", "bad\x00"])


def test_the_timeout_defaults_to_10_s_and_is_1_to_60() -> None:
    assert check_exec_timeout(None) == 10
    assert (check_exec_timeout(1), check_exec_timeout(60)) == (1, 60)
    for bad in (0, 61, -1, True):
        with pytest.raises(InvalidInput, match="1 to 60"):
            check_exec_timeout(bad)


def test_output_keeps_its_first_mebibyte_and_never_half_a_character() -> None:
    assert cut_output(b"hi\n") == ("hi\n", False)
    text, cut = cut_output(b"y" * (EXEC_OUTPUT_MAX + 10))
    assert cut and text == "y" * EXEC_OUTPUT_MAX
    # "é" is two bytes: cut between them, it is dropped rather than shown as a replacement character.
    assert cut_output("aé".encode(), 2) == ("a", True)
    assert cut_output("aéb".encode(), 3) == ("aé", True)


def test_an_agents_answer_is_read_back_only_when_it_is_one() -> None:
    result = ExecResult(3, "out", "err", truncated=True, timed_out=False)
    assert ExecResult.from_document(result.document()) == result
    for bad in (
        [],
        {"exitCode": "0", "stdout": "", "stderr": ""},
        {"exitCode": True, "stdout": "", "stderr": ""},
        {"exitCode": 0, "stdout": None, "stderr": ""},
        {"exitCode": 0, "stdout": "", "stderr": "", "timedOut": "no"},
        {"exitCode": 1 << 40, "stdout": "", "stderr": ""},
    ):
        with pytest.raises(InvalidInput):
            ExecResult.from_document(bad)


def test_an_agents_answer_holding_text_that_is_not_utf8_is_not_one() -> None:
    """JSON carries a lone surrogate (`"\\ud800"`) no answer can be written with: refused here, so
    the server answers the agent as unreachable (503) rather than failing to write it (500)."""
    for field in ("stdout", "stderr"):
        raw: dict[str, object] = {"exitCode": 0, "stdout": "", "stderr": ""}
        raw[field] = "ok \ud800"
        with pytest.raises(InvalidInput):
            ExecResult.from_document(raw)
    assert (
        ExecResult.from_document({"exitCode": 0, "stdout": "\U0001f600", "stderr": "é"}).stdout
        == "\U0001f600"
    )
