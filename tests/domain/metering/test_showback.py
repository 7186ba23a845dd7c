"""`domain.metering.showback`: a component's line adds its copies' GPU-hours and cost; unpriced time leaves
the amount unknown rather than understated."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from better_compute.domain.metering.showback import CopyTotal, gpu_hour_price, showback

HOUR_US = 3_600_000_000


def test_a_line_adds_each_share_and_price_and_rounds_once() -> None:
    lines = showback(
        [
            CopyTotal("chat", "small", Fraction(2, 7), Decimal("12.625"), 3 * HOUR_US),
            CopyTotal("chat", "small", Fraction(1, 7), Decimal("12.625"), HOUR_US),
            CopyTotal("chat", "big", Fraction(3, 7), Decimal("12.625"), 2 * HOUR_US),
        ]
    )
    assert [(x.component, x.gpu_hours, str(x.amount)) for x in lines] == [
        ("big", Fraction(6, 7), "10.82"),
        ("small", Fraction(1), "12.63"),  # 7/7 GPU-hours at 12.625, rounded half up once
    ]


def test_time_on_an_unpriced_endpoint_leaves_the_amount_unknown() -> None:
    (line,) = showback(
        [
            CopyTotal("chat", "small", Fraction(1, 7), Decimal(1), HOUR_US),
            CopyTotal("chat", "small", Fraction(1, 7), None, HOUR_US),
        ]
    )
    assert line.gpu_hours == Fraction(2, 7) and line.amount is None


def test_the_price_per_gpu_hour_is_the_instance_price_over_its_gpus() -> None:
    assert gpu_hour_price(Decimal("63.296"), 8) == Decimal("7.912")
    assert gpu_hour_price(None, 8) is None
    assert gpu_hour_price(Decimal(1), 0) is None
