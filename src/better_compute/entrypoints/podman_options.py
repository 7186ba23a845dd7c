"""The `--podman` option `bcd run` and `serve --fleet` share: how podman is run on this host."""

from __future__ import annotations

from typing import Annotated

import typer

PodmanOption = Annotated[
    str,
    typer.Option(
        "--podman", help="The podman command, split as a shell would (e.g. 'podman --runtime runc')."
    ),
]
