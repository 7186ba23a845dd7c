"""`--capability` text (`memory>=20GiB,slices>=2,nvlink`) read into the API's capability object.

It reads the words only, into the same `{"memoryGiB": {"min": 20}, ...}` body the API takes: what a
number may be (above 0, at most 100,000 GiB, ...) is the server's rule, and its refusal names it. So
this module imports neither the wire models nor pydantic, and a help screen stays fast.
"""

from __future__ import annotations

import re

SYNTAX = "memory>=20GiB, slices>=2, nvlink (comma-separated)"
"""The forms a refusal shows."""

_TERM = re.compile(r"(?P<key>[A-Za-z_]+)\s*(?P<op>>=|=>|<=|=<|==|=|>|<)?\s*(?P<value>.*)")
_MEMORY = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[A-Za-z]*)")
_KEYS = {
    "memory": "memoryGiB",
    "memorygib": "memoryGiB",
    "slices": "computeSlices",
    "computeslices": "computeSlices",
    "nvlink": "nvlinkPeer",
    "nvlinkpeer": "nvlinkPeer",
}


def parse_capability(text: str) -> dict[str, object]:
    """The API's `capability` for `text`; ValueError with a message for a user otherwise.

    Each term is a minimum the device must give, so `>=` is the only comparison: `memory>20GiB`
    or `memory=20GiB` would promise a rule the server does not apply, and is refused.
    """
    capability: dict[str, object] = {}
    terms = [term.strip() for term in text.split(",")]
    if not any(terms):
        raise ValueError(f"give what each device must give, e.g. {SYNTAX}")
    for term in terms:
        if not term:
            raise ValueError(f"an empty term in {text!r}; the forms are {SYNTAX}")
        match = _TERM.fullmatch(term)
        key = _KEYS.get(match["key"].lower()) if match else None
        if match is None or key is None:
            raise ValueError(f"unknown term {term!r}; the forms are {SYNTAX}")
        if key in capability:
            raise ValueError(f"{match['key']} is given twice")
        capability[key] = _value(key, term, match["op"], match["value"].strip())
    return capability


def _value(key: str, term: str, op: str | None, value: str) -> object:
    if key == "nvlinkPeer":
        if op is not None or value:
            raise ValueError(f"{term!r}: nvlink takes no value (a device with NVLink peers)")
        return True
    if op not in (">=", "=>"):
        example = "memory>=20GiB" if key == "memoryGiB" else "slices>=2"
        raise ValueError(f"{term!r}: a capability is a minimum, written with >= ({example})")
    if key == "computeSlices":
        if not value.isdecimal() or not value.isascii():
            raise ValueError(f"{term!r}: compute slices are a whole number (slices>=2)")
        return {"min": int(value)}
    memory = _MEMORY.fullmatch(value)
    if memory is None:
        raise ValueError(f"{term!r}: memory is a number of GiB (memory>=20GiB)")
    if memory["unit"] and memory["unit"].lower() != "gib":
        raise ValueError(f"{term!r}: memory is in GiB (memory>=20GiB), not {memory['unit']}")
    number = memory["number"]
    return {"min": int(number) if number.isdecimal() else float(number)}
