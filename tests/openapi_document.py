"""The app's OpenAPI document, built once per test process.

`better_compute.entrypoints.openapi.document()` builds the app and its document: seconds under
coverage. The modules that only read the document (the snapshot, links, refusals, the fuzzers'
schema, the limits it publishes) take it from here; each caller gets a copy of its own, so none
sees another's changes. The test that the document is stable from one build to the next builds it
again itself (tests/api/test_openapi_snapshot.py)."""

from __future__ import annotations

import copy
import functools
from typing import Any

from better_compute.entrypoints import openapi


@functools.cache
def _built() -> dict[str, Any]:
    return openapi.document()


def document() -> dict[str, Any]:
    """A copy of the document `python -m better_compute.entrypoints.openapi` prints."""
    return copy.deepcopy(_built())
