"""The LR dialog's parser: what is accepted, and the messages for what is not."""

from __future__ import annotations

import pytest

from cockpit.screens import parse_lr_input


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
    op, value = parse_lr_input(text, current_lr=1e-3)
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
        parse_lr_input(text, current_lr=1e-3)


def test_a_factor_may_not_push_the_lr_above_the_maximum() -> None:
    with pytest.raises(ValueError, match="maximum is 10"):
        parse_lr_input("x50", current_lr=0.5)
    assert parse_lr_input("x50", current_lr=None) == ("scale", 50.0)
