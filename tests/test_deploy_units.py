"""The systemd units under deploy/ start commands that exist, keep secrets off command lines, are
hardened to the exposure their header says, and run as the user deploy/sysusers.d creates.

Each `ExecStart` names a console script of pyproject.toml, a subcommand it has, and only options that
subcommand takes, so renaming a flag breaks this test rather than a node's boot. The exposure is
systemd's own measure (`systemd-analyze security --offline=yes`, which reads a unit file and needs no
running systemd); these tests skip without systemd's tools, except under CI, whose Debian has them.
That the hardened server still serves is tests/test_deploy_under_systemd.py's business."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import typer

from better_compute.cli.app import app
from better_compute.entrypoints import (
    database,
    server_commands,  # noqa: F401  (registers serve)
)
from better_compute.entrypoints.bcd import bcd_app

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
SYSUSERS = DEPLOY / "sysusers.d" / "better-compute.conf"
APPS = {"better-compute": app, "bcd": bcd_app}
UNITS = ("better-compute.service", "bcd.service")

EXPOSURE_BOUND = {"better-compute.service": 3.0, "bcd.service": 2.4}
"""The most `systemd-analyze security` may say of each unit: the issue's 3.0 for the server; for
bcd, what it reaches with the GPU access it needs (deploy/bcd.service says why each exception)."""

SECRET_OPTIONS = ("--database-url", "--token", "--password", "--secret")
"""Options whose value is a secret: on a command line, `ps` shows it to every user of the host."""

EXEC_KEYS = ("ExecStart", "ExecStartPre", "ExecStartPost", "ExecReload", "ExecStop", "ExecStopPost")


class Unit:
    """A systemd unit file as systemd reads it: sections of `Key=value` lines, where a key may
    repeat (`SystemCallFilter=` twice adds to the first), comments start with `#` or `;`."""

    def __init__(self, text: str) -> None:
        self.sections: dict[str, list[tuple[str, str]]] = {}
        current: list[tuple[str, str]] | None = None
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("[") and line.endswith("]"):
                current = self.sections.setdefault(line[1:-1], [])
                continue
            key, equals, value = line.partition("=")
            assert current is not None and equals, f"line {number} is not Key=value in a section: {raw!r}"
            current.append((key.strip(), value.strip()))

    def all(self, section: str, key: str) -> list[str]:
        return [v for k, v in self.sections.get(section, []) if k == key]

    def get(self, section: str, key: str) -> str:
        """The key's one value (the last, as systemd keeps for a setting that does not add up)."""
        found = self.all(section, key)
        assert found, f"no {key}= in [{section}]"
        return found[-1]


def unit(name: str) -> Unit:
    return Unit((DEPLOY / name).read_text(encoding="utf-8"))


def options_of(script: str, subcommand: str) -> set[str]:
    group = typer.main.get_command(APPS[script])
    assert isinstance(group, typer.core.TyperGroup)
    command = group.commands.get(subcommand)
    assert command is not None, f"{script} has no command {subcommand}"
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


def systemd_tool(name: str) -> str:
    """The path of one of systemd's tools; a skip where there is none, a failure under CI."""
    path = shutil.which(name)
    if path is None:
        reason = f"{name} is not installed (Debian: apt-get install systemd)"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"{reason}; CI must check the units", pytrace=False)
        pytest.skip(reason)
    return path


def test_the_scripts_are_the_packages_console_scripts() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert set(APPS) <= set(pyproject["project"]["scripts"])


@pytest.mark.parametrize(
    ("name", "script", "subcommand"),
    [("bcd.service", "bcd", "run"), ("better-compute.service", "better-compute", "serve")],
)
def test_each_unit_starts_a_command_that_exists(name: str, script: str, subcommand: str) -> None:
    parsed = unit(name)
    assert {"Unit", "Service", "Install"} <= set(parsed.sections)
    assert parsed.get("Service", "Restart") == "always"
    assert parsed.get("Service", "KillSignal") == "SIGTERM"
    argv = shlex.split(parsed.get("Service", "ExecStart"))
    assert argv[0] == f"/usr/local/bin/{script}"
    assert argv[1] == subcommand
    known = options_of(script, subcommand)
    flags = [a for a in argv[2:] if a.startswith("-")]
    assert flags, parsed.get("Service", "ExecStart")
    for flag in flags:
        assert flag.split("=", 1)[0] in known, f"{name}: {script} {subcommand} has no {flag}"


def test_bcd_keeps_its_state_and_specs_where_it_says() -> None:
    parsed = unit("bcd.service")
    argv = shlex.split(parsed.get("Service", "ExecStart"))
    assert argv[argv.index("--state-dir") + 1] == "/var/lib/bcd"
    assert argv[argv.index("--cdi-root") + 1] == "/var/run/cdi"
    assert parsed.get("Service", "StateDirectory") == "bcd"
    # ProtectSystem=strict leaves writable only what is named: its state, the CDI specs, and the
    # directory bcd writes bcd-mps.service to (entrypoints/bcd.py).
    assert parsed.get("Service", "ProtectSystem") == "strict"
    assert parsed.get("Service", "RuntimeDirectory") == "cdi"
    assert parsed.all("Service", "ReadWritePaths") == ["/etc/systemd/system"]


def test_the_server_reads_its_database_url_from_a_credential() -> None:
    service = unit("better-compute.service")
    assert service.all("Service", "LoadCredential") == [
        f"{database.CREDENTIAL}:/etc/better-compute/database-url"
    ]
    assert service.get("Service", "User") == "better-compute"
    # The environment file is optional (`-`) and for settings other than the URL.
    assert service.get("Service", "EnvironmentFile") == "-/etc/better-compute/env"


@pytest.mark.parametrize("name", UNITS)
def test_no_unit_puts_a_secret_on_a_command_line(name: str) -> None:
    parsed = unit(name)
    for key in EXEC_KEYS:
        for line in parsed.all("Service", key):
            # systemd expands $VAR and ${VAR} into the argument list, where `ps` shows the value.
            assert "$" not in line, f"{name}: {key} expands a variable onto the command line: {line}"
            for argument in shlex.split(line):
                assert not argument.startswith(SECRET_OPTIONS), f"{name}: {key} passes a secret: {line}"
    for line in parsed.all("Service", "Environment"):
        assert "DATABASE_URL=" not in line and "TOKEN=" not in line, f"{name}: a secret in the unit: {line}"


@pytest.mark.parametrize("name", UNITS)
def test_each_unit_is_hardened_to_its_exposure_bound(name: str) -> None:
    analyze = systemd_tool("systemd-analyze")
    bound = EXPOSURE_BOUND[name]
    done = subprocess.run(
        [
            analyze,
            "security",
            "--offline=yes",
            "--no-pager",
            f"--threshold={round(bound * 10)}",
            DEPLOY / name,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", done.stdout)
    assert found, f"systemd-analyze said no exposure level:\n{done.stdout}{done.stderr}"
    level = float(found[1])
    assert level <= bound and done.returncode == 0, f"{name}: exposure {level} > {bound}:\n{done.stdout}"
    # The header says the level it reaches; a change to the hardening updates it.
    assert f"Hardened to an exposure of {level:.1f} " in (DEPLOY / name).read_text(encoding="utf-8")


def test_the_sysusers_file_creates_the_user_the_server_runs_as(tmp_path: Path) -> None:
    service = unit("better-compute.service")
    user, group = service.get("Service", "User"), service.get("Service", "Group")
    entries = [
        line.split()
        for line in SYSUSERS.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert [e[:2] for e in entries] == [["u", user]]
    assert entries[0][-1] == f"/var/lib/{service.get('Service', 'StateDirectory')}"  # its home
    sysusers = systemd_tool("systemd-sysusers")
    # --root: an empty root of our own, so nothing of this machine's is read or written.
    done = subprocess.run(
        [sysusers, "--dry-run", f"--root={tmp_path}", SYSUSERS],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert f"Creating group '{group}'" in said
    assert f"Creating user '{user}'" in said
    assert not (tmp_path / "etc" / "passwd").exists()  # a dry run
