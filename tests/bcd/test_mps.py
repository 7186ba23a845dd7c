"""The MPS control daemon as `bcd-mps.service`: rendered for the node's MPS GPUs with each client's
limits, its commands run through a fake `nvidia-cuda-mps-control` built from NVIDIA's documentation
(so they are ones the tool accepts), driven through a runner, and a slot's client env at its share."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from better_compute.bcd import mps
from better_compute.domain.fleet.pools import MAX_REPLICAS, MIN_REPLICAS, mps_units

FAKE_CONTROL = Path(__file__).with_name("fake_mps_control.py")
GPU_A = "GPU-0b9f1c2e-4a3d-5e6f-8a7b-1c2d3e4f5a6b"
GPU_B = "GPU-7d8e9f0a-1b2c-5d3e-9f4a-5b6c7d8e9f0a"
H100 = 81559
"""An H100 80GB's memory as NVML reports it, in MiB."""


class Recorder:
    """systemctl's commands, recorded; a unit is active from its `start`/`restart` until its stop, or
    until the test says its daemon ended (`ended`)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.running: set[str] = set()

    def run(self, argv: Sequence[str]) -> None:
        self.calls.append(list(argv))
        if argv[1] in ("start", "restart"):
            self.running.add(argv[-1])
        elif argv[1] == "disable" and "--now" in argv:
            self.running.discard(argv[-1])

    def active(self, unit: str) -> bool:
        return unit in self.running


@pytest.fixture
def control(tmp_path: Path) -> Path:
    """`nvidia-cuda-mps-control` on a PATH of its own: the fake, run by this interpreter."""
    path = tmp_path / "bin" / "nvidia-cuda-mps-control"
    path.parent.mkdir()
    path.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_CONTROL))} "$@"\n')
    path.chmod(0o755)
    return path


def settings(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]


def unit_env(text: str, control: Path) -> dict[str, str]:
    """The environment systemd gives the unit's commands: its `Environment=` lines, on a PATH that
    finds the fake first."""
    env = {"PATH": f"{control.parent}:{os.environ['PATH']}"}
    for value in settings(text, "Environment"):
        for word in shlex.split(value):
            name, _, val = word.partition("=")
            env[name] = val
    return env


def run_unit(text: str, key: str, control: Path) -> list[str]:
    """Run the unit's `key=` command lines as systemd would (in order, each must exit 0, or the
    unit fails, unless the line starts with `-`); their standard outputs."""
    outputs = []
    for line in settings(text, key):
        prefix = line[: len(line) - len(line.lstrip("+-@:!"))]
        argv = shlex.split(line[len(prefix) :])
        done = subprocess.run(
            argv, env=unit_env(text, control), capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0 or "-" in prefix, (line, done.stdout, done.stderr)
        outputs.append(done.stdout)
    return outputs


def ask(text: str, control: Path, *commands: str) -> subprocess.CompletedProcess[str]:
    """Commands to the unit's daemon through the front-end, as an operator would pipe them."""
    return subprocess.run(
        [str(control)],
        input="".join(f"{c}\n" for c in commands),
        env=unit_env(text, control),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_each_clients_limits_are_a_replicas_share_of_the_sms_and_of_each_gpus_memory() -> None:
    assert mps.active_thread_percentage(3) == 33
    assert mps.pinned_memory_mib(H100, 4) == 20389
    assert [mps.active_thread_percentage(r) for r in range(MIN_REPLICAS, MAX_REPLICAS + 1)] == [
        mps_units(r) for r in range(MIN_REPLICAS, MAX_REPLICAS + 1)
    ], "the daemon's cap and a slot's mpsUnits are one share"
    assert mps.control_commands([mps.MpsGpu(GPU_A, H100)], 2) == [
        "set_default_active_thread_percentage 50",
        f"set_default_device_pinned_mem_limit {GPU_A} 40779M",
    ]
    with pytest.raises(ValueError, match="replicas must be 1 to 100"):
        mps.active_thread_percentage(0)
    with pytest.raises(ValueError, match="at least 1 MiB"):
        mps.pinned_memory_mib(0, 2)


def test_the_unit_runs_the_control_daemon_for_its_gpus_with_limits_pipe_logs_and_shared_memory() -> None:
    paths = mps.MpsPaths.under(Path("/var/lib/bcd/mps"))
    text = mps.unit_text([mps.MpsGpu(GPU_B, H100), mps.MpsGpu(GPU_A, H100)], 4, paths)
    assert "ExecStart=/usr/bin/nvidia-cuda-mps-control -d\n" in text
    assert f"Environment=CUDA_VISIBLE_DEVICES={GPU_B},{GPU_A}\n" in text
    assert "Environment=CUDA_MPS_PIPE_DIRECTORY=/var/lib/bcd/mps/pipe\n" in text
    assert "Environment=CUDA_MPS_LOG_DIRECTORY=/var/lib/bcd/mps/log\n" in text
    assert "Environment=CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\n" in text
    assert f"Environment=CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={GPU_B}=20389M,{GPU_A}=20389M\n" in text
    assert settings(text, "ExecStartPost") == [
        "/bin/sh -c 'echo set_default_active_thread_percentage 25 | /usr/bin/nvidia-cuda-mps-control'",
        f"/bin/sh -c 'echo set_default_device_pinned_mem_limit {GPU_B} 20389M | /usr/bin/nvidia-cuda-mps-control'",
        f"/bin/sh -c 'echo set_default_device_pinned_mem_limit {GPU_A} 20389M | /usr/bin/nvidia-cuda-mps-control'",
    ]
    assert "BindPaths=/var/lib/bcd/mps/shm:/dev/shm\n" in text
    assert settings(text, "ExecStartPre") == [
        "+/bin/mkdir -p -m 0755 /var/lib/bcd/mps/pipe /var/lib/bcd/mps/log /var/lib/bcd/mps/shm",
        "+/bin/sh -c 'mountpoint -q /var/lib/bcd/mps/shm || mount -t tmpfs -o "
        "mode=1777,nosuid,nodev,noexec bcd-mps-shm /var/lib/bcd/mps/shm'",
    ]
    assert "ExecStop=-/bin/sh -c 'echo quit | /usr/bin/nvidia-cuda-mps-control'\n" in text
    assert settings(text, "Restart") == ["always"] and settings(text, "RestartSec") == ["1"]
    assert "[Install]" not in text, "only bcd starts it, once the GPUs are in exclusive-process"
    with pytest.raises(ValueError, match="at least one GPU"):
        mps.unit_text([], 4, paths)


def test_what_a_unit_file_cannot_carry_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="cannot go into a systemd unit"):
        mps.unit_text([mps.MpsGpu(GPU_A, H100)], 2, mps.MpsPaths.under(Path("/var/lib/my bcd")))
    with pytest.raises(ValueError, match="cannot go into a systemd unit"):
        mps.unit_text([mps.MpsGpu(GPU_A, H100)], 2, mps.MpsPaths.under(Path("/var/lib/%n")))
    with pytest.raises(ValueError, match="not a GPU uuid"):
        mps.unit_text([mps.MpsGpu("GPU-x\nExecStartPre=/bin/evil", H100)], 2, mps.MpsPaths.under(Path("/x")))


def test_the_units_commands_are_accepted_by_the_control_tool_and_set_each_clients_defaults(
    tmp_path: Path, control: Path
) -> None:
    """The unit's start run as systemd runs it, against the fake built from NVIDIA's command set:
    the defaults are in force from the daemon's start (its environment), `ExecStartPost=` sets them
    through the documented commands without a rejection, and `quit` loses them."""
    unit = mps.MpsUnit(
        tmp_path / "systemd", mps.MpsPaths.under(tmp_path / "mps"), Recorder(), control=str(control)
    )
    unit.converge([mps.MpsGpu(GPU_A, H100), mps.MpsGpu(GPU_B, 46068)], 3)
    text = unit.path.read_text()
    run_unit(text, "ExecStart", control)
    before = ask(
        text, control, "get_default_active_thread_percentage", f"get_default_device_pinned_mem_limit {GPU_B}"
    )
    assert before.stdout.split() == ["33.0", "15356M"], "in force before ExecStartPost runs"
    outputs = run_unit(text, "ExecStartPost", control)
    assert len(outputs) == 3
    assert not any("Error" in out for out in outputs), outputs
    after = ask(
        text,
        control,
        "get_default_active_thread_percentage",
        f"get_default_device_pinned_mem_limit {GPU_A}",
        f"get_default_device_pinned_mem_limit {GPU_B}",
    )
    assert after.returncode == 0 and after.stdout.split() == ["33.0", f"{H100 // 3}M", "15356M"]
    assert "Cmd:set_default_device_pinned_mem_limit" in (tmp_path / "mps" / "log" / "control.log").read_text()
    run_unit(text, "ExecStop", control)
    assert ask(text, control, "get_default_active_thread_percentage").returncode != 0, "quit ends the daemon"


def test_a_daemon_told_quit_through_its_pipe_is_restarted_and_its_stop_does_not_fail_the_unit(
    tmp_path: Path, control: Path
) -> None:
    """Whoever reaches the pipe directory (every client does) can tell the daemon `quit`, with a
    front-end of their own. The daemon then ends cleanly (status 0), which `Restart=on-failure`
    leaves down; `always` restarts it. systemd runs `ExecStop=` after a daemon ended by itself too
    ("the stop operation is always performed ... even if the processes in the service terminated on
    their own", systemd.service(5)), and with no daemon left the front-end fails: that must not fail
    the unit, so the line is `-`."""
    unit = mps.MpsUnit(
        tmp_path / "systemd", mps.MpsPaths.under(tmp_path / "mps"), Recorder(), control=str(control)
    )
    unit.converge([mps.MpsGpu(GPU_A, H100)], 2)
    text = unit.path.read_text()
    run_unit(text, "ExecStart", control)
    run_unit(text, "ExecStartPost", control)
    tenant = ask(text, control, "quit")
    assert tenant.returncode == 0
    assert ask(text, control, "get_server_list").returncode != 0, "the daemon is gone"
    assert settings(text, "Restart") == ["always"]
    (stop,) = settings(text, "ExecStop")
    assert stop.startswith("-/bin/sh ")
    done = subprocess.run(
        shlex.split(stop[1:]),
        env=unit_env(text, control),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode != 0, "nothing to quit: without `-` the unit would fail"
    run_unit(text, "ExecStop", control)  # as systemd runs it: ignored
    run_unit(text, "ExecStart", control)  # systemd's restart
    assert ask(text, control, "get_default_active_thread_percentage").stdout.split() == ["50.0"]


def test_a_unit_found_inactive_is_started_again_by_the_next_pass(tmp_path: Path) -> None:
    """A daemon that ended and that systemd did not bring back (its start limit hit, or stopped by
    hand) is started again by `bcd`; a running one is only asked about."""
    runner = Recorder()
    unit = mps.MpsUnit(tmp_path / "systemd", mps.MpsPaths.under(tmp_path / "mps"), runner)
    a = mps.MpsGpu(GPU_A, H100)
    assert unit.converge([a], 2) is True and not unit.found_inactive
    runner.calls.clear()
    assert unit.converge([a], 2) is False and runner.calls == []
    runner.running.clear()  # `quit` through the pipe; systemd left it down
    assert unit.converge([a], 2) is True and unit.found_inactive
    assert runner.calls == [["systemctl", "start", "bcd-mps.service"]]
    assert unit.converge([a], 2) is False and not unit.found_inactive


def test_the_fake_control_tool_refuses_malformed_commands_as_the_documented_one_does(
    tmp_path: Path, control: Path
) -> None:
    """A rejected command prints an error on stdout and still exits 0 (the man page): only a query
    shows whether a command took, which is why the test above asks the daemon afterwards."""
    text = mps.unit_text([mps.MpsGpu(GPU_A, H100)], 2, mps.MpsPaths.under(tmp_path / "mps"), str(control))
    for directory in ("pipe", "log"):
        (tmp_path / "mps" / directory).mkdir(parents=True)
    assert ask(text, control, "get_server_list").returncode != 0, "no daemon yet"
    run_unit(text, "ExecStart", control)
    bad = ask(
        text,
        control,
        "set_default_active_thread_percentage 0",
        "set_default_active_thread_percentage 101",
        "set_default_active_thread_percentage half",
        f"set_default_device_pinned_mem_limit {GPU_A} 4096",
        f"set_default_device_pinned_mem_limit {GPU_A} 4096MB",
        "set_default_device_pinned_mem_limit gpu-a 4G",
        "set_default_pinned_mem_limit 0 4G",
        "get_default_active_thread_percentage",
        f"get_default_device_pinned_mem_limit {GPU_A}",
    )
    assert bad.returncode == 0
    lines = bad.stdout.splitlines()
    assert len([line for line in lines if line.startswith("Error: ")]) == 7
    assert lines[-2:] == ["50.0", f"{H100 // 2}M"], "nothing malformed took"
    ordinal = ask(
        text, control, "set_default_device_pinned_mem_limit 0 10G", "get_default_device_pinned_mem_limit 0"
    )
    assert ordinal.stdout.split() == ["10G"]
    assert ask(text, control, f"get_default_device_pinned_mem_limit {GPU_A}").stdout.split() == [
        f"{H100 // 2}M"
    ], "a uuid and an ordinal are never translated into each other"
    again = subprocess.run(
        [str(control), "-d"],
        env=unit_env(text, control),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert again.returncode != 0 and "already running" in again.stderr


def test_the_unit_is_one_systemd_accepts(tmp_path: Path, control: Path) -> None:
    """`systemd-analyze verify`: every key known, every command executable, `BindPaths=` well formed."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("systemd-analyze is missing (Debian's systemd package)")
        pytest.skip("systemd-analyze is not installed")
    unit = mps.MpsUnit(
        tmp_path / "systemd", mps.MpsPaths.under(tmp_path / "mps"), Recorder(), control=str(control)
    )
    unit.converge([mps.MpsGpu(GPU_A, H100)], 7)
    done = subprocess.run(
        [analyze, "verify", str(unit.path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr


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
    paths = mps.MpsPaths.under(tmp_path / "mps")
    unit = mps.MpsUnit(tmp_path / "systemd", paths, runner)
    a, b = mps.MpsGpu(GPU_A, H100), mps.MpsGpu(GPU_B, H100)
    assert unit.converge([a], 2) is True
    assert runner.calls == [
        ["systemctl", "daemon-reload"],
        ["systemctl", "disable", "bcd-mps.service"],
        ["systemctl", "restart", "bcd-mps.service"],
    ]
    assert {p.name: p.stat().st_mode & 0o7777 for p in (paths.pipe_directory, paths.log_directory)} == {
        "pipe": 0o755,
        "log": 0o755,
    }
    assert paths.shm_directory.is_dir()
    runner.calls.clear()
    assert unit.converge([a], 2) is False and runner.calls == []
    for change in ([a, b], 2), ([a, b], 3), ([a, mps.MpsGpu(GPU_B, 40000)], 3):
        runner.calls.clear()
        assert unit.converge(*change) is True, change
        assert runner.calls[-1] == ["systemctl", "restart", "bcd-mps.service"], change
    runner.calls.clear()
    assert unit.converge([a, mps.MpsGpu(GPU_B, 40000)], 3, restart=True) is True
    assert runner.calls == [["systemctl", "restart", "bcd-mps.service"]], "a GPU's mode was set again"
    runner.calls.clear()
    assert unit.converge([]) is True
    assert runner.calls == [
        ["systemctl", "disable", "--now", "bcd-mps.service"],
        ["systemctl", "daemon-reload"],
    ]
    assert not unit.path.exists()
    assert unit.converge([]) is False


def test_a_new_bcd_starts_the_written_unit_once_and_a_failed_restart_is_tried_again(tmp_path: Path) -> None:
    """After a reboot nothing else starts the daemon (it is not enabled): a new `bcd` starts it once
    (a no-op on a running one). A restart that failed is still owed on the next pass."""
    a = mps.MpsGpu(GPU_A, H100)
    mps.MpsUnit(tmp_path / "systemd", mps.MpsPaths.under(tmp_path / "mps"), Recorder()).converge([a], 2)
    runner = Recorder()
    again = mps.MpsUnit(tmp_path / "systemd", mps.MpsPaths.under(tmp_path / "mps"), runner)
    assert again.converge([a], 2) is True
    assert runner.calls == [["systemctl", "start", "bcd-mps.service"]]
    assert again.converge([a], 2) is False

    class FailingOnce(Recorder):
        def run(self, argv: Sequence[str]) -> None:
            super().run(argv)
            if argv[1] == "restart" and len(self.calls) < 4:
                raise mps.CommandFailed("systemctl restart bcd-mps.service failed: Job failed")

    failing = FailingOnce()
    unit = mps.MpsUnit(tmp_path / "systemd", mps.MpsPaths.under(tmp_path / "mps"), failing)
    with pytest.raises(mps.CommandFailed):
        unit.converge([a], 3)
    assert unit.converge([a], 3) is True
    assert failing.calls[-1] == ["systemctl", "restart", "bcd-mps.service"]


def test_a_failing_systemctl_says_what_failed() -> None:
    with pytest.raises(mps.CommandFailed, match="false failed"):
        mps.SystemdRunner().run(["false"])
