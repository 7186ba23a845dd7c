"""The wall clock, as the use cases get it: a function the composition root injects.

Use cases take `now` as a value; whoever calls them (a route, a reconciler, a command) reads it from
the one `Clock` it was built with, so a test fixes time by passing a function, not by patching one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

Clock = Callable[[], datetime]
"""The time now, timezone-aware (UTC)."""

__all__ = ["Clock"]
