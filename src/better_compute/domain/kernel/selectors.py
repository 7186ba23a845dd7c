"""Selectors narrow a device request to the atoms whose attributes match, with Kubernetes semantics.

Users already know Kubernetes label selectors, so the operators and their meaning are the same:
`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`, every expression must hold (AND), and an empty
selector matches every atom. Atom attributes are typed (`giId` is an int, a flag is a bool) while
selector values are strings, so values are compared in one canonical string form: `giId In ["1"]`
matches the int 1, and booleans read as `true` / `false`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from better_compute.domain.kernel.errors import InvalidInput

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
OPERATORS: tuple[Operator, ...] = get_args(Operator)
AttrValue = str | int | float | bool

_INTEGER = re.compile(r"[+-]?\d{1,19}")
"""Integers for Gt and Lt, as Kubernetes takes them: 64-bit, so never more than 19 digits (which also
keeps clear of Python's limit on converting long digit strings)."""
_INT64 = range(-(2**63), 2**63)
_KEY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._/-]{0,252}[A-Za-z0-9])?")

MAX_EXPRESSIONS = 32
"""Expressions in one selector (`matchExpressions` and `matchLabels` together). A selector names a
few attributes (profile, model, NUMA node); every expression is evaluated against every candidate
atom, so a long list costs each choice without narrowing it any further."""

MAX_VALUES = 256
"""Values in one `In` or `NotIn` expression: more than any attribute has distinct values (MIG
profiles, models, node names of a pool), while a million-value list would be stored and echoed
with the reservation."""

MAX_VALUE_LENGTH = 256
"""Characters in one selector value: attribute values are names and numbers, far shorter."""


def canonical(value: AttrValue) -> str:
    """The string form in which attribute values and selector values meet."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _as_integer(value: AttrValue) -> int | None:
    """The attribute as an integer for Gt/Lt, or None when it is not one (booleans are not)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return int(value)
    return None


@dataclass(frozen=True)
class MatchExpression:
    """One condition on one attribute; `values` are canonical strings.

    Choosing runs a selector over every candidate atom of a pool (tens of thousands), so `In` and
    `NotIn` look a value up in a set, and `Gt`/`Lt` read their bound once. Both are derived from
    `values`, so they take no part in equality, hashing or repr (the booking index keys its cache
    by the repr).
    """

    key: str
    op: Operator
    values: tuple[str, ...] = ()
    _lookup: frozenset[str] = dataclasses.field(init=False, repr=False, compare=False, hash=False)
    _bound: int | None = dataclasses.field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lookup", frozenset(self.values))
        ordered = self.op in ("Gt", "Lt") and len(self.values) == 1 and _INTEGER.fullmatch(self.values[0])
        object.__setattr__(self, "_bound", int(self.values[0]) if ordered else None)

    def matches(self, attributes: Mapping[str, AttrValue]) -> bool:
        present = self.key in attributes
        if self.op == "Exists":
            return present
        if self.op == "DoesNotExist":
            return not present
        if self.op == "In":
            return present and canonical(attributes[self.key]) in self._lookup
        if self.op == "NotIn":
            return not present or canonical(attributes[self.key]) not in self._lookup
        if not present or self._bound is None:
            return False
        actual = _as_integer(attributes[self.key])
        if actual is None:
            return False
        return actual > self._bound if self.op == "Gt" else actual < self._bound


@dataclass(frozen=True)
class Selector:
    """All of `match_expressions` must hold; no expressions match everything."""

    match_expressions: tuple[MatchExpression, ...] = ()

    def matches(self, attributes: Mapping[str, AttrValue]) -> bool:
        return all(expr.matches(attributes) for expr in self.match_expressions)


EVERYTHING = Selector()


def matches(selector: Selector, attributes: Mapping[str, AttrValue]) -> bool:
    """Whether an atom with these attributes satisfies the selector."""
    return selector.matches(attributes)


def document(selector: Selector) -> dict[str, list[dict[str, object]]]:
    """The selector as `parse_selector` reads it (`{matchExpressions: [{key, op, values}]}`, values
    in their canonical strings, none for `Exists`/`DoesNotExist`): how it is stored and shown, so
    that parsing the document gives the same selector back."""
    return {
        "matchExpressions": [
            {"key": e.key, "op": e.op, **({"values": list(e.values)} if e.values else {})}
            for e in selector.match_expressions
        ]
    }


def parse_selector(raw: object, field: str = "selector") -> Selector:
    """A Selector from `{matchExpressions: [{key, op, values}], matchLabels: {key: value}}`.

    None or `{}` is the empty selector. `matchLabels` entries are `In` with one value, as in
    Kubernetes. Every refusal names the exact field (`selector.matchExpressions[1].op`) so a user
    can find the mistake in a long request.
    """
    if raw is None:
        return EVERYTHING
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{field} must be an object with matchExpressions", {"field": field})
    unknown = sorted(str(k) for k in raw if k not in ("matchExpressions", "matchLabels"))
    if unknown:
        raise InvalidInput(
            f"{field}.{unknown[0]}: unknown field; use matchExpressions or matchLabels",
            {"field": f"{field}.{unknown[0]}"},
        )
    labels = raw.get("matchLabels")
    if labels is not None and not isinstance(labels, Mapping):
        raise InvalidInput(f"{field}.matchLabels must be an object", {"field": f"{field}.matchLabels"})
    exprs = raw.get("matchExpressions")
    if exprs is not None and (isinstance(exprs, str | bytes) or not isinstance(exprs, Sequence)):
        raise InvalidInput(f"{field}.matchExpressions must be a list", {"field": f"{field}.matchExpressions"})
    total = len(labels or {}) + len(exprs or ())
    if total > MAX_EXPRESSIONS:  # counted before any is read
        where = f"{field}.matchExpressions" if exprs else f"{field}.matchLabels"
        raise InvalidInput(
            f"{where} holds {total} expressions; a selector holds at most {MAX_EXPRESSIONS}"
            " (matchExpressions and matchLabels together)",
            {"field": where, "max": MAX_EXPRESSIONS},
        )
    expressions: list[MatchExpression] = []
    for raw_key, value in (labels or {}).items():
        key = _parse_key(raw_key, f"{field}.matchLabels")
        expressions.append(MatchExpression(key, "In", (_parse_value(value, f"{field}.matchLabels.{key}"),)))
    for i, item in enumerate(exprs or ()):
        expressions.append(parse_expression(item, f"{field}.matchExpressions[{i}]"))
    return Selector(tuple(expressions))


def parse_expression(raw: object, field: str) -> MatchExpression:
    """One `{key, op, values}` expression, checked against its operator's rules."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{field} must be an object with key, op and values", {"field": field})
    unknown = sorted(str(k) for k in raw if k not in ("key", "op", "operator", "values"))
    if unknown:
        raise InvalidInput(
            f"{field}.{unknown[0]}: unknown field; use key, op and values", {"field": f"{field}.{unknown[0]}"}
        )
    key = _parse_key(raw.get("key"), f"{field}.key")
    op = raw.get("op", raw.get("operator"))
    if op not in OPERATORS:
        raise InvalidInput(
            f"{field}.op: unknown operator {op!r}; use one of {', '.join(OPERATORS)}",
            {"field": f"{field}.op", "value": op if isinstance(op, str | int | float | bool) else None},
        )
    raw_values = raw.get("values")
    if raw_values is None:
        raw_values = []
    if isinstance(raw_values, str | bytes) or not isinstance(raw_values, Sequence):
        raise InvalidInput(f"{field}.values must be a list", {"field": f"{field}.values"})
    if len(raw_values) > MAX_VALUES:  # counted before any is read
        raise InvalidInput(
            f"{field}.values holds {len(raw_values)} values; an expression holds at most {MAX_VALUES}",
            {"field": f"{field}.values", "max": MAX_VALUES},
        )
    values = tuple(_parse_value(v, f"{field}.values[{i}]") for i, v in enumerate(raw_values))
    where = {"field": f"{field}.values"}
    if op in ("In", "NotIn") and not values:
        raise InvalidInput(f"{field}.values: {op} needs at least one value", where)
    if op in ("Exists", "DoesNotExist") and values:
        raise InvalidInput(f"{field}.values: {op} takes no values", where)
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise InvalidInput(f"{field}.values: {op} takes exactly one integer value", where)
        if not re.fullmatch(r"[+-]?\d+", values[0]):
            raise InvalidInput(f"{field}.values: {op} takes an integer, not {values[0]!r}", where)
        if not _INTEGER.fullmatch(values[0]) or int(values[0]) not in _INT64:
            raise InvalidInput(f"{field}.values: {op} takes a 64-bit integer", where)
        values = (str(int(values[0])),)
    return MatchExpression(key, op, values)


def _shown(raw: object) -> str:
    """`raw` as a message repeats it: at most 64 characters of it, since it may be megabytes."""
    text = repr(raw)
    return text if len(text) <= 64 else f"{text[:64]}..."


def _parse_key(raw: object, field: str) -> str:
    if not isinstance(raw, str) or not _KEY.fullmatch(raw):
        raise InvalidInput(
            f"{field} must be an attribute name such as migProfile, not {_shown(raw)}", {"field": field}
        )
    return raw


def _parse_value(raw: object, field: str) -> str:
    if isinstance(raw, float) and not math.isfinite(raw):
        # NaN and the infinities match no attribute, and no JSON document can hold them.
        raise InvalidInput(f"{field} must be a finite number, not {raw!r}", {"field": field})
    if not isinstance(raw, str | bool | int | float):
        raise InvalidInput(
            f"{field} must be a string, number or boolean, not {_shown(raw)}", {"field": field}
        )
    text = canonical(raw)
    if len(text) > MAX_VALUE_LENGTH:
        raise InvalidInput(
            f"{field} is {len(text)} characters long; a selector value is at most {MAX_VALUE_LENGTH}",
            {"field": field, "max": MAX_VALUE_LENGTH},
        )
    return text
