"""Selectors: Kubernetes label-selector semantics over typed atom attributes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.selectors import (
    EVERYTHING,
    MAX_EXPRESSIONS,
    MAX_VALUE_LENGTH,
    MAX_VALUES,
    MatchExpression,
    Selector,
    matches,
    parse_selector,
)

MIG = {"gpuProduct": "NVIDIA H100 80GB HBM3", "migProfile": "3g.40gb", "giId": 1, "ciId": 0, "numaNode": 0}
SLOT = {"sharing": "mps", "slot": 3, "slots": 4, "vramGiB": 80, "mpsUnits": 25, "healthy": True}


def sel(*exprs: dict[str, Any]) -> Selector:
    return parse_selector({"matchExpressions": list(exprs)})


def test_empty_selectors_match_everything() -> None:
    assert parse_selector(None) == EVERYTHING
    assert parse_selector({}) == EVERYTHING
    assert parse_selector({"matchExpressions": []}) == EVERYTHING
    assert matches(EVERYTHING, {}) and matches(EVERYTHING, MIG)


def test_in() -> None:
    assert matches(sel({"key": "migProfile", "op": "In", "values": ["1g.10gb", "3g.40gb"]}), MIG)
    assert not matches(sel({"key": "migProfile", "op": "In", "values": ["1g.10gb"]}), MIG)
    assert not matches(sel({"key": "absent", "op": "In", "values": ["x"]}), MIG)


def test_in_compares_as_strings() -> None:
    assert matches(sel({"key": "giId", "op": "In", "values": ["1"]}), MIG)
    assert matches(sel({"key": "giId", "op": "In", "values": [1]}), MIG)
    assert not matches(sel({"key": "giId", "op": "In", "values": ["01"]}), MIG)
    assert matches(sel({"key": "healthy", "op": "In", "values": ["true"]}), SLOT)
    assert matches(sel({"key": "healthy", "op": "In", "values": [True]}), SLOT)
    assert not matches(sel({"key": "healthy", "op": "In", "values": ["True"]}), SLOT)


def test_not_in() -> None:
    assert matches(sel({"key": "migProfile", "op": "NotIn", "values": ["1g.10gb"]}), MIG)
    assert not matches(sel({"key": "migProfile", "op": "NotIn", "values": ["3g.40gb"]}), MIG)
    assert matches(sel({"key": "absent", "op": "NotIn", "values": ["x"]}), MIG)
    assert not matches(sel({"key": "giId", "op": "NotIn", "values": ["1"]}), MIG)


def test_exists_and_does_not_exist() -> None:
    assert matches(sel({"key": "mpsUnits", "op": "Exists"}), SLOT)
    assert not matches(sel({"key": "mpsUnits", "op": "Exists"}), MIG)
    assert matches(sel({"key": "mpsUnits", "op": "DoesNotExist"}), MIG)
    assert not matches(sel({"key": "mpsUnits", "op": "DoesNotExist", "values": []}), SLOT)


def test_gt_and_lt() -> None:
    assert matches(sel({"key": "vramGiB", "op": "Gt", "values": ["40"]}), SLOT)
    assert not matches(sel({"key": "vramGiB", "op": "Gt", "values": ["80"]}), SLOT)
    assert matches(sel({"key": "vramGiB", "op": "Lt", "values": [81]}), SLOT)
    assert not matches(sel({"key": "vramGiB", "op": "Lt", "values": ["80"]}), SLOT)
    assert matches(sel({"key": "giId", "op": "Gt", "values": ["-1"]}), MIG)
    assert not matches(sel({"key": "absent", "op": "Gt", "values": ["0"]}), SLOT)


def test_gt_and_lt_need_an_integer_attribute() -> None:
    assert not matches(sel({"key": "migProfile", "op": "Gt", "values": ["0"]}), MIG)
    assert not matches(sel({"key": "healthy", "op": "Gt", "values": ["0"]}), SLOT)
    assert matches(sel({"key": "n", "op": "Gt", "values": ["4"]}), {"n": "5"})
    assert not matches(sel({"key": "n", "op": "Lt", "values": ["4"]}), {"n": 3.5})


def test_expressions_all_hold() -> None:
    both = sel(
        {"key": "migProfile", "op": "In", "values": ["3g.40gb"]},
        {"key": "giId", "op": "Gt", "values": ["1"]},
    )
    assert not matches(both, MIG)
    assert matches(both, {**MIG, "giId": 2})


def test_match_labels_and_operator_spelling() -> None:
    s = parse_selector({"matchLabels": {"migProfile": "3g.40gb"}})
    assert s == Selector((MatchExpression("migProfile", "In", ("3g.40gb",)),))
    assert parse_selector({"matchExpressions": [{"key": "a", "operator": "Exists"}]}) == Selector(
        (MatchExpression("a", "Exists"),)
    )


@pytest.mark.parametrize(
    ("raw", "field", "text"),
    [
        pytest.param([], "selector", "must be an object", id="a selector that is a list"),
        pytest.param(
            {"matchExpression": []},
            "selector.matchExpression",
            "unknown field",
            id="a misspelt matchExpressions",
        ),
        pytest.param(
            {"matchExpressions": "x"},
            "selector.matchExpressions",
            "must be a list",
            id="expressions as a string",
        ),
        pytest.param(
            {"matchExpressions": ["x"]},
            "selector.matchExpressions[0]",
            "must be an object",
            id="an expression that is a string",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "Equals", "values": ["x"]}]},
            "selector.matchExpressions[0].op",
            "unknown operator 'Equals'",
            id="an operator that does not exist",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a"}]},
            "selector.matchExpressions[0].op",
            "unknown operator None",
            id="an expression without an operator",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "", "op": "Exists"}]},
            "selector.matchExpressions[0].key",
            "attribute name",
            id="an empty key",
        ),
        pytest.param(
            {"matchExpressions": [{"key": 3, "op": "Exists"}]},
            "selector.matchExpressions[0].key",
            "attribute name",
            id="a key that is a number",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "In", "values": []}]},
            "selector.matchExpressions[0].values",
            "In needs at least one value",
            id="In without values",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "NotIn"}]},
            "selector.matchExpressions[0].values",
            "NotIn needs at least one value",
            id="NotIn without values",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "Exists", "values": ["x"]}]},
            "selector.matchExpressions[0].values",
            "Exists takes no values",
            id="Exists with values",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "DoesNotExist", "values": ["x"]}]},
            "selector.matchExpressions[0].values",
            "DoesNotExist takes no values",
            id="DoesNotExist with values",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "Gt", "values": []}]},
            "selector.matchExpressions[0].values",
            "exactly one integer",
            id="Gt without a value",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "Lt", "values": ["1", "2"]}]},
            "selector.matchExpressions[0].values",
            "exactly one integer",
            id="Lt with two values",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "Gt", "values": ["x"]}]},
            "selector.matchExpressions[0].values",
            "integer, not 'x'",
            id="Gt with a value that is no integer",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "Lt", "values": ["1.5"]}]},
            "selector.matchExpressions[0].values",
            "integer",
            id="Lt with a fraction",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "In", "values": "x"}]},
            "selector.matchExpressions[0].values",
            "must be a list",
            id="values as a string",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "In", "values": [None]}]},
            "selector.matchExpressions[0].values[0]",
            "string, number or boolean",
            id="a null value",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "op": "In", "values": ["x"], "value": 1}]},
            "selector.matchExpressions[0].value",
            "unknown field",
            id="a misspelt values field",
        ),
        pytest.param(
            {"matchLabels": ["a"]}, "selector.matchLabels", "must be an object", id="matchLabels as a list"
        ),
    ],
)
def test_bad_selectors_name_the_field(raw: Any, field: str, text: str) -> None:
    with pytest.raises(InvalidInput, match=text) as err:
        parse_selector(raw)
    assert err.value.details["field"] == field


def test_field_prefix_is_the_callers() -> None:
    with pytest.raises(InvalidInput, match=r"^devices\[2\]\.selector\.matchExpressions\[0\]\.op"):
        parse_selector({"matchExpressions": [{"key": "a", "op": "Nope"}]}, "devices[2].selector")


@given(st.integers(-1000, 1000), st.integers(-1000, 1000))
def test_gt_lt_agree_with_integer_order(actual: int, bound: int) -> None:
    attrs = {"n": actual}
    assert matches(sel({"key": "n", "op": "Gt", "values": [str(bound)]}), attrs) == (actual > bound)
    assert matches(sel({"key": "n", "op": "Lt", "values": [str(bound)]}), attrs) == (actual < bound)


@given(
    st.one_of(st.integers(), st.text(max_size=8), st.booleans()), st.lists(st.text(max_size=8), min_size=1)
)
def test_not_in_is_the_negation_of_in_for_a_present_key(value: int | str | bool, values: list[str]) -> None:
    attrs = {"k": value}
    inn = matches(sel({"key": "k", "op": "In", "values": values}), attrs)
    notin = matches(sel({"key": "k", "op": "NotIn", "values": values}), attrs)
    assert inn != notin


def _in(values: list[Any], key: str = "migProfile") -> dict[str, Any]:
    return {"key": key, "op": "In", "values": values}


def test_unbounded_selectors_at_most_32_expressions() -> None:
    assert len(sel(*[_in(["x"])] * MAX_EXPRESSIONS).match_expressions) == 32
    with pytest.raises(InvalidInput) as err:
        sel(*[_in(["x"])] * (MAX_EXPRESSIONS + 1))
    assert err.value.message == (
        "selector.matchExpressions holds 33 expressions; a selector holds at most 32"
        " (matchExpressions and matchLabels together)"
    )
    assert err.value.details == {"field": "selector.matchExpressions", "max": 32}
    # matchLabels count too, and nothing is read past the limit (the items here are not even valid).
    with pytest.raises(InvalidInput, match="holds 33 expressions; a selector holds at most 32"):
        parse_selector({"matchLabels": {"a": "1"}, "matchExpressions": ["not an expression"] * 32})


def test_unbounded_selectors_at_most_256_values_per_expression() -> None:
    assert len(sel(_in([str(i) for i in range(MAX_VALUES)])).match_expressions[0].values) == 256
    with pytest.raises(InvalidInput) as err:
        sel({"key": "migProfile", "op": "NotIn", "values": [None] * 1_000_000})
    assert err.value.message == (
        "selector.matchExpressions[0].values holds 1000000 values; an expression holds at most 256"
    )
    assert err.value.details == {"field": "selector.matchExpressions[0].values", "max": 256}


def test_unbounded_selectors_values_at_most_256_characters() -> None:
    assert sel(_in(["v" * MAX_VALUE_LENGTH])).match_expressions[0].values == ("v" * 256,)
    for value in ["v" * 257, "v" * 10_000_000, 10**300]:
        with pytest.raises(InvalidInput) as err:
            sel(_in(["ok", value]))
        assert err.value.message.startswith("selector.matchExpressions[0].values[1] is ")
        assert err.value.message.endswith(" characters long; a selector value is at most 256")
        assert err.value.details == {"field": "selector.matchExpressions[0].values[1]", "max": 256}
    with pytest.raises(InvalidInput, match=r"^selector.matchLabels.a is 257 characters long; .* at most 256"):
        parse_selector({"matchLabels": {"a": "v" * 257}})


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(float("nan"), id="not a number"),
        pytest.param(float("inf"), id="infinity"),
        pytest.param(float("-inf"), id="minus infinity"),
    ],
)
def test_500_on_non_finite_selector_values(value: float) -> None:
    """NaN reached the request's fingerprint, which no JSON document can hold: a 500."""
    with pytest.raises(InvalidInput, match=r"values\[0\] must be a finite number, not (nan|inf|-inf)"):
        sel(_in([value]))


class _NoScan(tuple[str, ...]):
    """A values tuple that fails the test when a match scans it."""

    def __contains__(self, item: object) -> bool:
        raise AssertionError("a match scanned the values one by one")


def test_unbounded_selectors_in_and_not_in_match_in_constant_time() -> None:
    values = _NoScan(str(i) for i in range(MAX_VALUES))
    assert MatchExpression("giId", "In", values).matches({"giId": 7})
    assert not MatchExpression("giId", "NotIn", values).matches({"giId": 7})
    assert MatchExpression("giId", "NotIn", values).matches({"giId": 700})
    # The set is derived: equality, hashing and repr (the booking index's cache key) see the values only.
    a, b = MatchExpression("k", "In", ("x", "y")), MatchExpression("k", "In", ("x", "y"))
    assert a == b and hash(a) == hash(b)
    assert repr(a) == "MatchExpression(key='k', op='In', values=('x', 'y'))"
    assert MatchExpression("k", "In", ("y", "x")) != a  # order is the request's, kept as sent


def test_gt_and_lt_read_their_bound_once() -> None:
    expr = MatchExpression("n", "Gt", ("-9223372036854775808",))
    assert expr.matches({"n": 0}) and not expr.matches({"n": -(2**63)})
    assert not MatchExpression("n", "Lt", ("x",)).matches({"n": 0})  # never made by parse_selector
