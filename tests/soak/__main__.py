"""`python -m tests.soak` (`make soak`): the soak at the length the `SOAK_*` variables say, on the
PostgreSQL server of $BC_TEST_POSTGRES_URL (default 127.0.0.1:5432), in a database of its own. The
last line is the JSON summary; the exit status is 1 when any of the three counts is not 0. The
server's and each node's log are kept under $SOAK_WORK when it is set (else in a temporary
directory, removed at the end)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from tests.conftest import DEFAULT_PG_URL, admin_connection
from tests.soak import soak


def main() -> int:
    settings = soak.Settings.from_env(seconds=600.0, settle=120.0)
    url = os.environ.get("BC_TEST_POSTGRES_URL", DEFAULT_PG_URL)
    admin_connection(url).close()  # the database the run's own is created from, made if missing
    kept = os.environ.get("SOAK_WORK", "").strip()
    with tempfile.TemporaryDirectory(prefix="bc-soak-") as scratch:
        work = Path(kept) if kept else Path(scratch)
        summary = soak.run(url, work, settings, lambda line: print(line, flush=True))
    print(json.dumps(summary), flush=True)
    return 1 if any(summary[name] for name in soak.ASSERTED) else 0


if __name__ == "__main__":
    sys.exit(main())
