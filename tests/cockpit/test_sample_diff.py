"""Samples compared: the word diff and the grouping by prompt and step, on hand-computed cases,
and a run's samples read back from its metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

from cockpit.figures.sample_diff import (
    Span,
    all_prompts,
    by_prompt,
    changed_words,
    continuation,
    side_by_side,
    word_diff,
)
from engine.rundir import read_samples


def test_a_replaced_word_is_the_only_change() -> None:
    assert word_diff("the cat sat down", "the dog sat down") == [
        Span("the ", False),
        Span("dog", True),
        Span(" sat down", False),
    ]


def test_inserted_words_read_as_one_highlight() -> None:
    spans = word_diff("to be", "to be or not to be")
    assert spans == [Span("to be ", False), Span("or not to be", True)]
    assert changed_words(spans) == 4


def test_deleted_words_leave_nothing_marked() -> None:
    assert word_diff("a b c", "a c") == [Span("a c", False)]


def test_same_text_and_nothing_to_compare_with() -> None:
    assert word_diff("x  y\nz", "x  y\nz") == [Span("x  y\nz", False)]
    assert word_diff(None, "new text") == [Span("new text", False)]
    assert word_diff("old", "") == []


def test_whitespace_alone_changed_is_not_a_word() -> None:
    spans = word_diff("a b", "a\nb")
    assert "".join(s.text for s in spans) == "a\nb"
    assert changed_words(spans) == 0


def test_continuation_drops_the_prompt() -> None:
    assert continuation("def ", "def f():") == "f():"
    assert continuation("", "abc") == "abc"
    assert continuation("The ", "A text") == "A text"  # not starting with it: kept whole


def test_by_prompt_orders_steps_and_keeps_the_later_of_a_step() -> None:
    samples = [(200, "b", "b2"), (100, "a", "a1"), (100, "b", "b1"), (200, "a", "a2"),
               (200, "a", "a2 again")]  # fmt: skip
    assert by_prompt(samples) == {
        "b": [(100, "b1"), (200, "b2")],
        "a": [(100, "a1"), (200, "a2 again")],
    }


def test_side_by_side_aligns_steps_across_runs() -> None:
    one = by_prompt([(100, "p", "x1"), (200, "p", "x2")])
    two = by_prompt([(200, "p", "y2"), (300, "p", "y3"), (300, "q", "q3")])
    assert side_by_side([one, two], "p") == [
        (100, ["x1", None]),
        (200, ["x2", "y2"]),
        (300, [None, "y3"]),
    ]
    assert all_prompts([one, two]) == ["p", "q"]
    assert side_by_side([one, two], "r") == []


def test_read_samples_from_metrics(tmp_path: Path) -> None:
    lines = [
        {"kind": "run_started", "time": 1.0},
        {"kind": "sample", "time": 2.0, "step": 10, "prompt": "def ", "text": "def f"},
        {"kind": "step", "time": 3.0, "step": 11, "loss": 1.0},
        {"kind": "sample", "time": 4.0, "step": 20, "prompt": "\n", "text": "\nx"},
    ]
    body = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines)
    (tmp_path / "metrics.jsonl").write_text(body + '{"kind":"sample","time":5.0,"st')  # cut short
    assert read_samples(tmp_path) == [(10, "def ", "def f"), (20, "\n", "\nx")]
    assert read_samples(tmp_path / "missing") == []
