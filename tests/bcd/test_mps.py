"""The MPS control daemon as `bcd-mps.service`: rendered for the node's MPS GPUs, driven through a
runner, and a slot's client env at its booked share."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from better_compute.bcd import mps


class Recorder:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str]) -> None:
        self.calls.append(list(argv))


def test_the_unit_runs_the_control_daemon_for_its_gpus_with_its_pipe_and_logs(tmp_path: Path) -> None:
    paths = mps.MpsPaths.under(Path("/run/bcd/mps"))
    text = mps.unit_text(["GPU-b", "GPU-a"], paths)
    assert "ExecStart=/usr/bin/nvidia-cuda-mps-control -d\n" in text
    assert "Environment=CUDA_VISIBLE_DEVICES=GPU-b,GPU-a\n" in text
    assert "Environment=CUDA_MPS_PIPE_DIRECTORY=/run/bcd/mps/pipe\n" in text
    assert "Environment=CUDA_MPS_LOG_DIRECTORY=/run/bcd/mps/log\n" in text
    assert "ExecStop=/bin/sh -c 'echo quit | /usr/bin/nvidia-cuda-mps-control'\n" in text
    with pytest.raises(ValueError, match="at least one GPU"):
        mps.unit_text([], paths)


def test_a_slot_client_gets_the_daemons_pipe_and_its_share_of_the_sms() -> None:
    paths = mps.MpsPaths.under(Path("/run/bcd/mps"))
    assert mps.client_env(paths, 33) == {
        "CUDA_MPS_PIPE_DIRECTORY": "/run/bcd/mps/pipe",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "33",
    }
    with pytest.raises(ValueError, match="mpsUnits must be 1 to 100"):
        mps.client_env(paths, 0)


def test_the_unit_is_started_once_restarted_on_change_and_stopped_when_no_gpu_needs_it(
    tmp_path: Path,
) -> None:
    runner = Recorder()
    unit = mps.MpsUnit(tmp_path / "systemd", mps.MpsPaths.under(tmp_path / "mps"), runner)
    assert unit.converge(["GPU-a"]) is True
    assert runner.calls == [
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", "bcd-mps.service"],
        ["systemctl", "restart", "bcd-mps.service"],
    ]
    runner.calls.clear()
    assert unit.converge(["GPU-a"]) is False and runner.calls == []
    assert (
        unit.converge(["GPU-a", "GPU-b"]) is True
        and ["systemctl", "restart", "bcd-mps.service"] in runner.calls
    )
    runner.calls.clear()
    assert unit.converge([]) is True
    assert runner.calls == [
        ["systemctl", "disable", "--now", "bcd-mps.service"],
        ["systemctl", "daemon-reload"],
    ]
    assert not unit.path.exists()
    assert unit.converge([]) is False


def test_a_failing_systemctl_says_what_failed() -> None:
    with pytest.raises(RuntimeError, match="false failed"):
        mps.SystemdRunner().run(["false"])
