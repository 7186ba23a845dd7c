"""Reading a fleet file (YAML) into a `FleetSpec`.

It lives with the node daemon because `bcd inventory --nvml fake` reads a node's GPUs from one, and
`bcd` may not import server code; the server's fleet loader reads its files through it too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ops.fleet import FleetSpec, parse_fleet


def read_fleet(path: str | Path) -> FleetSpec:
    """The fleet file at `path`, validated; `InvalidInput` naming the file when it cannot be read."""
    try:
        raw: Any = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"cannot read fleet file {path}: {exc}") from exc
    return parse_fleet(raw)
