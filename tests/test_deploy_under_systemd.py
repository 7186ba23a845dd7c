"""The units of deploy/ under a real systemd: the hardened server serves, and the hardened bcd does
what a node needs of it.

systemd (this machine's own, 252 on Debian 12) boots as PID 1 of a privileged podman container whose
root is an overlay of this machine's root, so nothing it writes reaches the host. The server is
installed as docs/operations.md says (sysusers, the credential file, the unit as shipped, with
`--port` and `--workers` added to its ExecStart), run on SQLite in its state directory and on
PostgreSQL over TCP with worker processes; bcd's unit runs a probe of what bcd does as root (its
state and CDI directories, a unit written and driven through systemctl), then bcd itself on the fake
NVML backend, joined to that server.

Needs root, podman and runc; skipped without them, except under CI."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import site
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import SERIAL, own_database

pytestmark = SERIAL

ROOT = Path(__file__).resolve().parents[1]
INSIDE = "/opt/bc-test"
"""Where the repository and the installed packages are mounted in the container (read-only): not
under /root or /home, which the units hide (ProtectHome=yes)."""
HIDDEN = ("/root", "/home", "/run/user")
SERVER_URL_FILE = "/etc/better-compute/database-url"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(f"{reason}; CI must run the units under systemd", pytrace=False)
    pytest.skip(reason)


def _interpreter() -> tuple[str, list[str]]:
    """A Python of this one's version that the units can run (not under a hidden home), and the
    mount that brings it into the container, if any."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix)
    if not str(base).startswith(HIDDEN) and (base / "bin" / version).exists():
        return str(base / "bin" / version), ["-v", f"{base}:{base}:ro"]
    system = Path("/usr/bin") / version
    if not system.exists():
        _unavailable(f"no {version} outside a home directory for the units to run (only {base})")
    return str(system), []


@dataclass
class Machine:
    """A booted container: `run` runs a shell command in it as root."""

    name: str

    def run(self, script: str, *, check: bool = True, timeout: float = 120) -> str:
        done = subprocess.run(
            ["podman", "exec", self.name, "/bin/sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"`{script}` failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        return done.stdout

    def journal(self, unit: str) -> str:
        return self.run(f"journalctl -u {unit} --no-pager -o cat | tail -40", check=False)


@pytest.fixture(scope="module")
def machine() -> Iterator[Machine]:
    if os.geteuid() != 0:
        _unavailable("systemd in a container needs root (a privileged podman container)")
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} is not installed (Debian: apt-get install podman runc)")
    if not Path("/lib/systemd/systemd").exists():
        _unavailable("systemd is not installed")
    python, python_mount = _interpreter()
    packages = next(p for p in site.getsitepackages() if p.endswith("site-packages"))
    name = f"bc-units-{uuid.uuid4().hex[:8]}"
    boot = "mount --make-rshared / && exec /lib/systemd/systemd --unit=basic.target"
    command = [
        "podman", "run", "--runtime", "runc", "-d", "--name", name, "--privileged", "--network", "host",
        "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", "--systemd=false",
        "--tmpfs", "/run:notmpcopyup", "--tmpfs", "/run/lock:notmpcopyup", "--tmpfs", "/tmp:notmpcopyup",
        "-v", f"{ROOT}:{INSIDE}/repo:ro", "-v", f"{packages}:{INSIDE}/site:ro", *python_mount,
        "-e", "container=podman", "--rootfs", "/:O", "/bin/sh", "-c", boot,
    ]  # fmt: skip
    started = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if started.returncode != 0:
        _unavailable(f"podman cannot boot systemd here: {started.stderr.strip()}")
    box = Machine(name)
    try:
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            state = box.run("systemctl is-system-running || true", check=False).strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"systemd did not boot in the container: {state}")
        path = f"{INSIDE}/repo/src:{INSIDE}/site"
        for script, module in (("better-compute", "entrypoints.cli"), ("bcd", "entrypoints.bcd")):
            box.run(
                f"cat > /usr/local/bin/{script} <<'EOF'\n#!/bin/sh\nexport PYTHONPATH={path}\n"
                f'exec {python} -c "from better_compute.{module} import main; main()" "$@"\nEOF\n'
                f"chmod 755 /usr/local/bin/{script}"
            )
        # docs/operations.md, "Installing the server as a service", steps 1 and 3.
        box.run(
            f"install -D -m 0644 {INSIDE}/repo/deploy/sysusers.d/better-compute.conf"
            " /etc/sysusers.d/better-compute.conf && systemd-sysusers && install -d -m 0755 /etc/better-compute"
        )
        yield box
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, timeout=120, check=False)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def http(method: str, url: str, token: str | None = None, body: object = None) -> tuple[int, str]:
    request = urllib.request.Request(
        url, method=method, data=None if body is None else json.dumps(body).encode()
    )
    request.add_header("content-type", "application/json")
    if token:
        request.add_header("authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def start_server(box: Machine, url: str, *extra: str) -> int:
    """better-compute.service as shipped, with `extra` options added to its ExecStart, serving the
    database `url` given as the credential; its port, once ready."""
    port = free_port()
    box.run(f"umask 077; printf '%s\\n' {shlex.quote(url)} > {SERVER_URL_FILE}")
    unit = (ROOT / "deploy" / "better-compute.service").read_text(encoding="utf-8")
    added = " ".join(shlex.quote(a) for a in ("--port", str(port), *extra))
    unit = "\n".join(
        f"{line} {added}" if line.startswith("ExecStart=") else line for line in unit.splitlines()
    )
    box.run(
        f"cat > /etc/systemd/system/better-compute.service <<'EOF'\n{unit}\nEOF\n"
        "systemctl daemon-reload && systemctl restart better-compute"
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if http("GET", f"http://127.0.0.1:{port}/readyz")[0] == 200:
            return port
        if box.run("systemctl is-failed better-compute || true", check=False).strip() == "failed":
            break
        time.sleep(0.5)
    pytest.fail(f"the server did not get ready under its unit:\n{box.journal('better-compute')}")


def processes(box: Machine, user: str) -> list[tuple[int, str]]:
    listed = box.run(f"ps -u {user} -o pid=,args= || true", check=False)
    return [
        (int(pid), args) for pid, _, args in (line.strip().partition(" ") for line in listed.splitlines())
    ]


def status_of(box: Machine, pid: int) -> dict[str, str]:
    text = box.run(f"cat /proc/{pid}/status")
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def bootstrap(box: Machine) -> str:
    """`admin bootstrap` as docs/operations.md says: as the service user, with the same credential."""
    said = box.run(
        "systemd-run --quiet --pipe --wait -p User=better-compute"
        f" -p LoadCredential=database-url:{SERVER_URL_FILE}"
        " /usr/local/bin/better-compute admin bootstrap --force"
    )
    return said.strip().splitlines()[-1]


def assert_confined(box: Machine, url: str) -> list[tuple[int, str]]:
    """Every process of the server runs as better-compute, without capabilities, under seccomp, and
    without the database URL on its command line."""
    server = processes(box, "better-compute")
    assert server, box.journal("better-compute")
    assert not [args for _, args in server if url in args]
    main = int(box.run("systemctl show -p MainPID --value better-compute"))
    status = status_of(box, main)
    assert (status["CapEff"], status["CapBnd"]) == ("0000000000000000", "0000000000000000")
    assert (status["NoNewPrivs"], status["Seccomp"]) == ("1", "2")
    return server


def stop_cleanly(box: Machine, unit: str) -> None:
    box.run(f"systemctl stop {unit}")
    shown = box.run(f"systemctl show {unit} -p Result -p ExecMainStatus")
    assert shown.split() == ["Result=success", "ExecMainStatus=0"], box.journal(unit)


def test_the_server_serves_postgresql_over_tcp_with_workers_under_its_unit(
    machine: Machine, postgres_url: str
) -> None:
    with own_database(postgres_url, "bc_units") as url:
        port = start_server(machine, url, "--workers", "2")
        server = assert_confined(machine, url)
        workers = [args for _, args in server if "multiprocessing-fork" in args]
        assert len(workers) == 2, server
        assert [args for _, args in server if " reconcile " in args], server
        token = bootstrap(machine)
        for _ in range(4):  # answered by either worker
            listed = http("GET", f"http://127.0.0.1:{port}/v1/tenants", token)
            assert listed[0] == 200, listed
        stop_cleanly(machine, "better-compute")


PROBE = """#!/bin/sh
# What bcd does as root, tried under bcd.service's hardening.
set -e
touch /var/lib/bcd/probe /var/run/cdi/probe.json
printf '[Service]\\nType=oneshot\\nRemainAfterExit=yes\\nExecStart=/bin/true\\n[Install]\\nWantedBy=multi-user.target\\n' \\
  > /etc/systemd/system/bcd-probe.service
systemctl daemon-reload
systemctl enable --quiet bcd-probe.service
systemctl restart bcd-probe.service
echo "probe: $(systemctl is-active bcd-probe.service)"
systemctl disable --now --quiet bcd-probe.service
rm /etc/systemd/system/bcd-probe.service
systemctl daemon-reload
head -1 /proc/devices >/dev/null
if touch /etc/probe 2>/dev/null; then echo "/etc writable"; fi
if touch /sys/kernel/probe 2>/dev/null; then echo "/sys writable"; fi
grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status
"""


def test_the_server_on_sqlite_and_bcd_on_fake_nvml_run_under_their_units(machine: Machine) -> None:
    machine.run(
        f"cat > /usr/local/sbin/bcd-probe <<'EOF'\n{PROBE}EOF\nchmod 755 /usr/local/sbin/bcd-probe\n"
        f"cp {INSIDE}/repo/deploy/bcd.service /etc/systemd/system/bcd.service\n"
        "mkdir -p /etc/systemd/system/bcd.service.d\n"
        "printf '[Service]\\nExecStart=\\nExecStart=/usr/local/sbin/bcd-probe\\nRestart=no\\n'"
        " > /etc/systemd/system/bcd.service.d/test.conf\n"
        "systemctl daemon-reload && systemctl start bcd"
    )
    deadline = time.monotonic() + 60
    while machine.run("systemctl is-active bcd || true", check=False).strip() in ("active", "activating"):
        assert time.monotonic() < deadline, machine.journal("bcd")
        time.sleep(0.5)
    said = machine.journal("bcd")
    assert machine.run("systemctl show bcd -p Result").strip() == "Result=success", said
    assert "probe: active" in said
    assert "/etc writable" not in said and "/sys writable" not in said
    # CAP_SYS_ADMIN (21) and CAP_MKNOD (27), nothing else.
    assert "CapEff:\t0000000008200000" in said and "NoNewPrivs:\t1" in said and "Seccomp:\t2" in said

    # The server on SQLite in its state directory, which knows the fleet's nodes.
    url = "sqlite:////var/lib/better-compute/better-compute.db"
    fleet = f"{INSIDE}/repo/examples/demo-fleet.yaml"
    port = start_server(machine, url, "--fleet", fleet, "--no-simulate")
    assert_confined(machine, url)
    token = bootstrap(machine)
    created = http("POST", f"http://127.0.0.1:{port}/v1/tenants", token, {"id": "bc-test", "name": "test"})
    assert created[0] == 201, created
    owners = machine.run("stat -c '%U %a' /var/lib/better-compute /var/lib/better-compute/better-compute.db")
    assert owners.split() == ["better-compute", "700", "better-compute", "600"]

    # bcd itself, on the fake NVML backend, joined to that server.
    joined = http(
        "POST", f"http://127.0.0.1:{port}/v1/nodes/euw-h100-ts/join-tokens", token, {"node": "euw-h100-ts"}
    )
    assert joined[0] == 201, joined
    join_token = json.loads(joined[1])["token"]
    machine.run(
        f"bcd join --server http://127.0.0.1:{port} --token {join_token} --node euw-h100-ts"
        " --state-dir /var/lib/bcd\n"
        "printf '[Service]\\nExecStart=\\nExecStart=/usr/local/bin/bcd run --state-dir /var/lib/bcd"
        f" --cdi-root /var/run/cdi --nvml fake --fleet {fleet}\\n'"
        " > /etc/systemd/system/bcd.service.d/test.conf\n"
        "systemctl daemon-reload && systemctl restart bcd"
    )
    deadline = time.monotonic() + 60
    while '"event": "report.sent"' not in machine.journal("bcd"):
        assert time.monotonic() < deadline, machine.journal("bcd")
        assert machine.run("systemctl is-active bcd || true", check=False).strip() == "active", (
            machine.journal("bcd")
        )
        time.sleep(0.5)
    stop_cleanly(machine, "bcd")
    stop_cleanly(machine, "better-compute")
