"""The object a write names: its path's id, which a body may repeat but never contradict.

The method table sends every field of a call in the body, the path's id included (wire/methods.py), so
a body's `id` is allowed and may be left out. Where it is given and names another object than the path,
the request is ambiguous: a route that went by the path would change one object while its caller meant
another. Such a request is refused with INVALID_INPUT rather than guessed at.
"""

from __future__ import annotations

from better_compute.domain.kernel.errors import InvalidInput


def path_id(path: str, body: str | None, field: str = "id") -> str:
    """The id a write applies to: `path`, once the body's `field` (when given) agrees with it."""
    if body is not None and body != path:
        raise InvalidInput(
            f"{field}: the body names {body!r} but the path names {path!r}; leave {field} out of the"
            " body or send the path's",
            {"field": field, "path": path, "body": body},
        )
    return path


__all__ = ["path_id"]
