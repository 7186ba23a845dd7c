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
    spec = parse_fleet(raw)
    if spec.generic_models:
        # A served fleet's nodes report through the API, which knows the catalog's models only: a
        # generic model would lose its name at their first report. Replay alone simulates them.
        names = ", ".join(m.id for m in spec.generic_models)
        raise InvalidInput(
            f"fleet file {path}: gpuModels ({names}) are for replay fleets only (docs/replay.md);"
            f" a served fleet's GPUs are catalog models",
            {"field": "gpuModels"},
        )
    return spec
