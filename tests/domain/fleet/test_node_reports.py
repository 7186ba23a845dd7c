"""The pure rules of node identities: signed bytes, freshness, replay, join tokens, binding, waits."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest

from better_compute.domain.fleet.bindings import binding_of
from better_compute.domain.fleet.join_tokens import JOIN_TOKEN_TTL, JoinToken, check_join_token, token_ttl
from better_compute.domain.fleet.node_reports import (
    check_fresh,
    check_same_node,
    check_sequence,
    parse_signed,
    signed_bytes,
)
from better_compute.domain.gate.node_spec import MAX_WAIT, check_wait, next_generation
from better_compute.domain.kernel.errors import InvalidInput, Unauthenticated
from tests.builders import T0


def reason(error: pytest.ExceptionInfo[Unauthenticated]) -> str:
    return str(error.value.details["reason"])


def test_the_signed_bytes_are_the_seven_lines() -> None:
    assert signed_bytes("post", "/v1/nodes/n/reports", "n", 1700000000, 3, b"") == (
        b"bc-node-v1\nPOST\n/v1/nodes/n/reports\nn\n1700000000\n3\n"
        b"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def test_headers_missing_or_malformed_are_unsigned() -> None:
    good = {
        "BC-Node": "n",
        "BC-Timestamp": "1",
        "BC-Sequence": "2",
        "BC-Signature": base64.b64encode(b"s").decode(),
    }
    signed = parse_signed(good, "GET", "/x", b"")
    assert (signed.node, signed.timestamp, signed.sequence, signed.signature) == ("n", 1, 2, b"s")
    for broken in ({"BC-Node": None}, {"BC-Sequence": "-1"}, {"BC-Timestamp": "1e3"}, {"BC-Signature": "@@"}):
        with pytest.raises(Unauthenticated) as e:
            parse_signed({**good, **broken}, "GET", "/x", b"")
        assert reason(e) == "unsigned"


def test_freshness_is_five_minutes_either_way() -> None:
    now = int(T0.timestamp())
    check_fresh(now - 300, T0)
    check_fresh(now + 300, T0)
    for off in (-301, 301):
        with pytest.raises(Unauthenticated) as e:
            check_fresh(now + off, T0)
        assert reason(e) == "stale"


def test_a_sequence_must_grow_and_a_node_speaks_for_itself() -> None:
    check_sequence(5, 4)
    for stale in (4, 3):
        with pytest.raises(Unauthenticated) as e:
            check_sequence(stale, 4)
        assert reason(e) == "replayed"
    with pytest.raises(Unauthenticated) as e:
        check_same_node("a", "b")
    assert reason(e) == "other_node"


def test_join_tokens_expire_and_are_spent() -> None:
    token = JoinToken("h", "n", T0, T0 + JOIN_TOKEN_TTL)
    assert token.usable(T0) and not token.usable(T0 + JOIN_TOKEN_TTL)
    assert not JoinToken("h", "n", T0, T0 + JOIN_TOKEN_TTL, used_at=T0).usable(T0)
    assert token_ttl(None) == timedelta(hours=1)
    with pytest.raises(InvalidInput):
        token_ttl(10)
    with pytest.raises(Unauthenticated) as e:
        check_join_token("bc_notajointoken1234")
    assert reason(e) == "malformed"


def test_a_reservation_binding_is_the_state_most_in_need_of_attention() -> None:
    assert binding_of({}, set()) == "pending"
    assert binding_of({}, {"a"}) == "pending"
    assert binding_of({"a": "bound"}, {"a", "b"}) == "pending"
    assert binding_of({"a": "bound", "b": "bound"}, {"a", "b"}) == "bound"
    assert binding_of({"a": "bound", "b": "device-missing"}, {"a", "b"}) == "device-missing"
    assert binding_of({"a": "refused", "b": "device-missing"}, {"a", "b"}) == "refused"
    assert binding_of({"a": "released"}, set()) == "released"
    assert binding_of({"a": "released"}, {"b"}) == "pending"


def test_waits_and_generations() -> None:
    assert check_wait(None) == timedelta(0) and check_wait(60) == MAX_WAIT
    with pytest.raises(InvalidInput):
        check_wait(61)
    assert next_generation(3, "d", "d") is None and next_generation(3, None, "d") == 4
