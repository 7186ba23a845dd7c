"""Reading a request's JSON body, the one way every route reads it: UTF-8 JSON, each key once.

Python's `json.loads` is lenient where a caller's mistake then goes unnoticed: given bytes it also
takes UTF-16 and UTF-32 (guessing from the first bytes), and of two equal keys in one object it keeps
the last (`{"poolId": "a", "poolId": "b"}` books in `b`; whoever wrote it may have meant `a`, and a
check that read the first would disagree with the use that read the last). JSON exchanged between
systems is UTF-8 (RFC 8259, 8.1) and names each key once (RFC 8259, 4: otherwise "the behavior of
software that receives such an object is unpredictable"), so the API refuses the rest with
INVALID_INPUT saying what is wrong:

- a body that is not UTF-8 (`body: not UTF-8: ...`; UTF-16 and UTF-32 without a byte order mark
  decode as UTF-8 with NUL bytes, which JSON never holds raw), or that starts with a byte order mark;
- a body that is not JSON (as FastAPI words it: `[position]: JSON decode error`);
- an object that names a key twice, at any depth (`body: duplicate key "poolId" ...`);
- nesting deeper than the parser follows.

Which bodies are JSON is decided as FastAPI decides it (`is_json`): another content type is handed on
as bytes, and its model refuses them. A `Content-Encoding` other than `identity` never reaches this
far: `api.limits` answers it 415.
"""

from __future__ import annotations

import json
from typing import Any, Final

from fastapi.exceptions import RequestValidationError

NO_BODY: Final = object()
"""What `json_body` reads from a request without a body (a JSON `null` is a body: None)."""

_BOM = "\ufeff"


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members as a dict, refusing a key named twice."""
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return found


def is_json(content_type: str | None) -> bool:
    """Whether FastAPI decodes a body of this `Content-Type` as JSON: `application/json` or
    `application/<anything>+json`, parameters aside, as `email.message` parses the header (one `/`,
    else it is `text/plain`); no header at all is not JSON either (FastAPI's strict content type)."""
    if not content_type:
        return False
    media = content_type.partition(";")[0].strip().lower()
    if media.count("/") != 1:
        return False
    kind, _, subtype = media.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


def _refused(message: str) -> RequestValidationError:
    return RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": message, "input": {}}])


def decode_json(raw: bytes) -> Any:
    """`raw` as UTF-8 JSON whose objects name each key once (INVALID_INPUT otherwise: see the module)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refused(
            f"not UTF-8: byte 0x{raw[exc.start]:02x} at position {exc.start} does not begin a UTF-8"
            " character; send JSON in UTF-8"
        ) from None
    if "\x00" in text:
        # Valid UTF-8, but JSON never holds a raw NUL: these are UTF-16 or UTF-32 code units.
        raise _refused("not UTF-8: it holds NUL bytes, as UTF-16 and UTF-32 do; send JSON in UTF-8")
    if text.startswith(_BOM):
        raise _refused("starts with a byte order mark (U+FEFF); send UTF-8 JSON without one")
    try:
        return json.loads(text, object_pairs_hook=_unique)
    except json.JSONDecodeError as exc:
        # Worded as FastAPI words it for every route that has not read its body itself.
        raise RequestValidationError(
            [
                {
                    "type": "json_invalid",
                    "loc": ("body", exc.pos),
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": exc.msg},
                }
            ]
        ) from None
    except _DuplicateKey as exc:
        raise _refused(
            f"duplicate key {json.dumps(exc.key)} in a JSON object; each key may appear once"
        ) from None
    except RecursionError:
        raise _refused("nested deeper than the server reads; JSON bodies are a few levels deep") from None


def json_body(content_type: str | None, raw: bytes) -> Any:
    """The body as a route's JSON body parameter reads it: decoded (`decode_json`) when its content
    type is JSON, the raw bytes otherwise (which then fail validation), NO_BODY when there is none."""
    if not raw:
        return NO_BODY
    if not is_json(content_type):
        return raw
    return decode_json(raw)


__all__ = ["NO_BODY", "decode_json", "is_json", "json_body"]
