"""The settings' default values, as plain numbers and strings.

They live apart from `settings.py` so that `better-compute --help` and `serve --help` can show them
without importing pydantic-settings: every CLI call pays for what the console script imports at
start-up (issue 11, defect 15). `settings.py` re-exports them.
"""

from __future__ import annotations

DEFAULT_DATABASE_URL = "sqlite:///better-compute.db"
"""A SQLite file in the working directory: `make run` needs no database server."""

DEFAULT_MAX_BODY_BYTES = 1_048_576
"""1 MiB: hundreds of times the largest request body the API takes."""

DEFAULT_TIMEOUT_REQUEST = 30.0
"""Seconds a client may pause while sending a request: long enough for any real network."""

DEFAULT_TIMEOUT_KEEP_ALIVE = 5
"""Seconds, uvicorn's own default: time for a client's next request on the same connection, and
short enough that idle connections do not pile up."""
