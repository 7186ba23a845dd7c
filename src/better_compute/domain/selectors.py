"""Selectors narrow a device request to the atoms whose attributes match, with Kubernetes semantics.

Users already know Kubernetes label selectors, so the operators and their meaning are the same:
`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`, every expression must hold (AND), and an empty
selector matches every atom. Atom attributes are typed (`giId` is an int, a flag is a bool) while
selector values are strings, so values are compared in one canonical string form: `giId In ["1"]`
matches the int 1, and booleans read as `true` / `false`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from better_compute.domain.errors import InvalidInput

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
OPERATORS: tuple[Operator, ...] = get_args(Operator)
AttrValue = str | int | float | bool

_INTEGER = re.compile(r"[+-]?\d{1,19}")
"""Integers for Gt and Lt, as Kubernetes takes them: 64-bit, so never more than 19 digits (which also
keeps clear of Python's limit on converting long digit strings)."""
_INT64 = range(-(2**63), 2**63)
_KEY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._/-]{0,252}[A-Za-z0-9])?")


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
    """One condition on one attribute; `values` are canonical strings."""

    key: str
    op: Operator
    values: tuple[str, ...] = ()

    def matches(self, attributes: Mapping[str, AttrValue]) -> bool:
        present = self.key in attributes
        if self.op == "Exists":
            return present
        if self.op == "DoesNotExist":
            return not present
        if self.op == "In":
            return present and canonical(attributes[self.key]) in self.values
        if self.op == "NotIn":
            return not present or canonical(attributes[self.key]) not in self.values
        if not present:
            return False
        actual = _as_integer(attributes[self.key])
        if actual is None:
            return False
        bound = int(self.values[0])
        return actual > bound if self.op == "Gt" else actual < bound


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
    expressions: list[MatchExpression] = []
    labels = raw.get("matchLabels")
    if labels is not None:
        if not isinstance(labels, Mapping):
            raise InvalidInput(f"{field}.matchLabels must be an object", {"field": f"{field}.matchLabels"})
        for key, value in labels.items():
            where = f"{field}.matchLabels.{key}"
            expressions.append(MatchExpression(_parse_key(key, where), "In", (_parse_value(value, where),)))
    exprs = raw.get("matchExpressions")
    if exprs is not None:
        if isinstance(exprs, str | bytes) or not isinstance(exprs, Sequence):
            raise InvalidInput(
                f"{field}.matchExpressions must be a list", {"field": f"{field}.matchExpressions"}
            )
        for i, item in enumerate(exprs):
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


def _parse_key(raw: object, field: str) -> str:
    if not isinstance(raw, str) or not _KEY.fullmatch(raw):
        raise InvalidInput(
            f"{field} must be an attribute name such as migProfile, not {raw!r}", {"field": field}
        )
    return raw


def _parse_value(raw: object, field: str) -> str:
    if isinstance(raw, str | bool | int | float):
        return canonical(raw)
    raise InvalidInput(f"{field} must be a string, number or boolean, not {raw!r}", {"field": field})
