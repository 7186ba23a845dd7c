"""`serve` on a host that refuses the address family of `--host` (no IPv6, or a unit's
`RestrictAddressFamilies=`): one line saying so, not a traceback."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.entrypoints.cli import app


def test_a_refused_address_family_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def refused(*_: object, **__: object) -> socket.socket:
        # What the kernel answers socket(2) for a family it (or a seccomp filter) does not allow.
        raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")

    monkeypatch.setenv("BC_DATABASE_URL", f"sqlite:///{tmp_path / 'bc.db'}")
    monkeypatch.setattr(socket, "socket", refused)
    result = CliRunner().invoke(app, ["serve", "--host", "127.0.0.1", "--port", "8123"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: cannot listen on 127.0.0.1:8123: Address family not supported by protocol;"
        " pass another --host\n"
    )
    assert not (tmp_path / "bc.db").exists()
