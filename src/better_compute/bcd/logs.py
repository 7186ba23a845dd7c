"""bcd's structured log: one JSON object per line on stderr, so journald and log shippers take each
line as one record with fields to filter on (`event`, `node`, `allocation`…), no parsing of prose."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO


class Log:
    """Writes `{"ts", "level", "event", ...fields}` lines; `ts` is Unix seconds (float)."""

    def __init__(self, stream: TextIO | None = None, **context: Any) -> None:
        self.stream = stream
        self.context = context

    def _write(self, level: str, event: str, fields: dict[str, Any]) -> None:
        record = {"ts": round(time.time(), 3), "level": level, "event": event, **self.context, **fields}
        out = self.stream if self.stream is not None else sys.stderr
        out.write(json.dumps(record, default=str, sort_keys=False) + "\n")
        out.flush()

    def info(self, event: str, **fields: Any) -> None:
        self._write("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._write("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._write("error", event, fields)
