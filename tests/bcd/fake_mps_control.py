"""A fake `nvidia-cuda-mps-control`, written from NVIDIA's documentation of it (the MPS docs' "Legacy MPS
v2 Interface" and "Appendix: Environment Variables", and the tool's man page), not from bcd's code.

Run as `python fake_mps_control.py [-d]` (tests put a `nvidia-cuda-mps-control` wrapper on PATH):

- `-d` starts "the daemon": there is no process, its state is a file in `CUDA_MPS_PIPE_DIRECTORY`
  (default `/tmp/nvidia-mps`) beside the `nvidia-cuda-mps-control.pid` the docs say the daemon writes
  there. A second `-d` on the same pipe directory fails. The daemon's environment sets its starting
  defaults: `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` and `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` ("at the MPS
  control daemon level"; the latter a comma list of `<ordinal or uuid>=<N>M|G`). Each command is
  logged to `control.log` in `CUDA_MPS_LOG_DIRECTORY` ("user commands issued and their result").
- With no argument it is the front-end: it reads commands from stdin, one a line, until EOF. As the
  man page says, "if an invalid command is issued and rejected, an error message will be printed to
  stdout", and the exit status is zero when the daemon was reached: a rejected command does NOT fail
  the front-end. It exits non-zero only when no daemon runs on that pipe directory.

Commands modelled: `set_default_active_thread_percentage <percentage>` (echoes the value, as the tool
does: `10.0`), `get_default_active_thread_percentage`, `set_default_device_pinned_mem_limit <dev>
<value>`, `get_default_device_pinned_mem_limit <dev>`, `get_server_list` (no server: no client ever
connects to a fake), `quit` (the daemon ends and its settings are lost). `<dev>` is "a device UUID
string or an integer ordinal", not validated against the devices and never translated between the
two: a get answers what was set under that very identifier. A value is "an integer followed by a
qualifier, either G or M".

Where the documentation is silent the fake is stricter than the tool can be (a stricter fake can
only fail a test that the tool would pass, never the reverse): it refuses a percentage that is not
more than 0 and at most 100, a limit of 0, a device id that is neither an ordinal nor a `GPU-`/`MIG-`
uuid, a malformed daemon environment (the daemon then does not start), and any other command. Its
error text is its own (`Error: ...`); for a device with no limit it prints `0` (undocumented).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

PID_FILE = "nvidia-cuda-mps-control.pid"
STATE_FILE = ".fake-mps-control.json"
_DEVICE = re.compile(r"\d+|(?:GPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f-]*")
_LIMIT = re.compile(r"([1-9][0-9]*)([MG])")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


class Refused(Exception):
    """The command (or the daemon's environment) is malformed."""


def percentage(text: str) -> float:
    if not _NUMBER.fullmatch(text) or not 0 < float(text) <= 100:
        raise Refused(f"invalid active thread percentage {text!r}: a number more than 0 and at most 100")
    return float(text)


def device(text: str) -> str:
    if not _DEVICE.fullmatch(text):
        raise Refused(f"invalid device {text!r}: a device UUID or an integer ordinal")
    return text


def limit(text: str) -> str:
    if not _LIMIT.fullmatch(text):
        raise Refused(f"invalid pinned memory limit {text!r}: an integer followed by G or M")
    return text


def pipe_directory() -> Path:
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")


def log_directory() -> Path:
    return Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY") or "/var/log/nvidia-mps")


def daemon_defaults() -> dict[str, object]:
    """The starting defaults from the daemon's environment."""
    limits: dict[str, str] = {}
    given = os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "")
    for entry in filter(None, given.split(",")):
        dev, sep, value = entry.partition("=")
        if not sep:
            raise Refused(f"invalid CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry {entry!r}: <device>=<limit>")
        limits[device(dev)] = limit(value)
    pct = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    return {"percentage": percentage(pct) if pct is not None else 100.0, "limits": limits}


def save(state: dict[str, object]) -> None:
    path = pipe_directory() / STATE_FILE
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(state), encoding="utf-8")
    partial.replace(path)


def log(line: str) -> None:
    with (log_directory() / "control.log").open("a", encoding="utf-8") as out:
        out.write(line + "\n")


def start() -> int:
    pipe = pipe_directory()
    if not pipe.is_dir() or not log_directory().is_dir():
        print(f"Error: {pipe} or {log_directory()} is not a directory", file=sys.stderr)
        return 1
    if (pipe / STATE_FILE).exists():
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    try:
        state = daemon_defaults()
    except Refused as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    save(state)
    (pipe / PID_FILE).write_text(f"{os.getpid()}\n", encoding="utf-8")
    log("Starting control daemon")
    return 0


def command(state: dict[str, object], words: list[str]) -> str | None:
    """Carry out one command; what it prints (None: nothing). `Refused` when it is malformed."""
    limits = state["limits"]
    assert isinstance(limits, dict)
    match words:
        case ["set_default_active_thread_percentage", value]:
            state["percentage"] = percentage(value)
            return f"{state['percentage']:.1f}"
        case ["get_default_active_thread_percentage"]:
            return f"{state['percentage']:.1f}"
        case ["set_default_device_pinned_mem_limit", dev, value]:
            limits[device(dev)] = limit(value)
            return None
        case ["get_default_device_pinned_mem_limit", dev]:
            return str(limits.get(device(dev), "0"))
        case ["get_server_list"]:
            return None
        case _:
            raise Refused(f"unrecognized command {' '.join(words)!r}")


def front_end() -> int:
    pipe = pipe_directory()
    if not (pipe / STATE_FILE).exists():
        print(f"Cannot find MPS control daemon process (pipe directory {pipe})", file=sys.stderr)
        return 1
    state = json.loads((pipe / STATE_FILE).read_text(encoding="utf-8"))
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        log(f"Cmd:{' '.join(words)}")
        if words == ["quit"]:
            (pipe / STATE_FILE).unlink()
            (pipe / PID_FILE).unlink(missing_ok=True)
            log("Exit")
            return 0
        try:
            printed = command(state, words)
        except Refused as exc:
            print(f"Error: {exc}")
            continue
        save(state)
        if printed is not None:
            print(printed)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["-d"]:
        return start()
    if not argv:
        return front_end()
    print("usage: nvidia-cuda-mps-control [-d]  (this fake has no -f, -v or -S)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
