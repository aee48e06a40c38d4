"""The LR dialog's parser: what is accepted, and the messages for what is not."""

from __future__ import annotations

import pytest

from cockpit.screens.lr_dialog import lr_decision, parse_lr_input
from engine.optim.schedule import LrPlan


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3e-4", ("set", 3e-4)),
        ("0.0003", ("set", 3e-4)),
        ("  1E-3 ", ("set", 1e-3)),
        ("10", ("set", 10.0)),
        ("x2", ("scale", 2.0)),
        ("X2", ("scale", 2.0)),
        ("*2", ("scale", 2.0)),
        ("×1.5", ("scale", 1.5)),
        ("2x", ("scale", 2.0)),
        ("* 0.5", ("scale", 0.5)),
        ("/2", ("scale", 0.5)),
        ("/ 4", ("scale", 0.25)),
        ("x100", ("scale", 100.0)),
    ],
)
def test_accepted(text: str, expected: tuple[str, float]) -> None:
    op, value = parse_lr_input(text)
    assert op == expected[0]
    assert value == pytest.approx(expected[1])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "type an LR"),
        ("abc", "'abc' is not a number"),
        ("x", "is not a number"),
        ("1e-3e", "is not a number"),
        ("-1", "greater than 0"),
        ("0", "greater than 0"),
        ("x0", "greater than 0"),
        ("/0", "greater than 0"),
        ("x-2", "greater than 0"),
        ("nan", "finite"),
        ("inf", "finite"),
        ("-inf", "finite"),
        ("x nan", "finite"),
        ("11", "at most 10"),
        ("1e9", "too large"),
        ("1e400", "finite"),
        ("x1000", "between /100 and x100"),
        ("/1000", "between /100 and x100"),
    ],
)
def test_rejected_with_a_message(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_lr_input(text)


def test_a_factor_may_not_push_the_lr_above_the_maximum() -> None:
    after_warmup = LrPlan(step=100, scale=1.0, scheduled=0.5, settled_step=100, settled=0.5,
                          highest=0.5)  # fmt: skip
    with pytest.raises(ValueError, match="would take the LR to 25; the maximum is 10"):
        lr_decision("x50", after_warmup)
    assert lr_decision("x50", None) == ("scale", 50.0, None)  # no plan here: the engine decides


def test_a_factor_counts_from_what_warmup_leads_to() -> None:
    """At step 0 of a 20-step warmup to 1.0 the LR is 1/21: x20 would give 0.95 now and 20
    after warmup, so it is refused, naming the step where it would pass the maximum."""
    warming = LrPlan(step=0, scale=1.0, scheduled=1 / 21, settled_step=20, settled=1.0, highest=1.0)
    with pytest.raises(ValueError, match=r"^x20 would take the LR to 20 at step 20 \(after warmup\)"):
        lr_decision("x20", warming)


def test_a_negative_lr_and_a_negative_factor_are_refused_alike() -> None:
    messages = []
    for text in ("-1", "x-1", "/-1", "-1x"):
        with pytest.raises(ValueError) as refused:
            parse_lr_input(text)
        messages.append(str(refused.value))
    assert messages == [
        "'-1': an LR must be greater than 0",
        "'x-1': a factor must be greater than 0",
        "'/-1': a factor must be greater than 0",
        "'-1x': a factor must be greater than 0",
    ]


def test_a_trailing_x_on_an_lr_is_explained() -> None:
    """`1e-3x` reads as the factor x0.001 (a trailing x is a factor, like 2x): the message says
    so and how to type the LR instead."""
    with pytest.raises(ValueError) as refused:
        parse_lr_input("1e-3x")
    assert str(refused.value) == (
        "'1e-3x' is the factor ×0.001: a factor must be between /100 and x100; "
        "for the LR 0.001, type 1e-3 alone"
    )
