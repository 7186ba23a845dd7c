"""`python -m better_compute.entrypoints.openapi`: print the API's OpenAPI document as stable JSON.

The document is the app's own (the app `entrypoints/server.py` builds, `.openapi()`), rendered with
sorted keys and a two-space indent so that it can be committed and compared byte for byte (`make
openapi` writes `openapi.json`). Building it touches no real database: the app only keeps its store,
so it gets one on a throwaway SQLite file that is never migrated or queried.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from better_compute.entrypoints.server import build_app, build_services
from better_compute.settings import Settings
from better_compute.storage.store import Store


def document() -> dict[str, Any]:
    """The OpenAPI document of the HTTP API, as a JSON object."""
    with tempfile.TemporaryDirectory(prefix="bc-openapi-") as scratch:
        store = Store.open(f"sqlite:///{Path(scratch) / 'unused.db'}", migrate_schema=False)
        try:
            return build_app(build_services(store), Settings()).openapi()
        finally:
            store.close()


def render(doc: dict[str, Any] | None = None) -> str:
    """The document as sorted, indented JSON ending in a newline: the content of `openapi.json`."""
    return json.dumps(document() if doc is None else doc, indent=2, sort_keys=True) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
