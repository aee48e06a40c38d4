"""Samples compared: a word-level diff of two texts, and samples grouped by prompt and step.

Pure functions over (step, prompt, text) triples: the samples screen and `cockpit sample
--compare` draw what these return.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

_TOKENS = re.compile(r"\s+|\S+")


@dataclass(frozen=True)
class Span:
    """A stretch of a text, and whether it differs from the text it is compared with."""

    text: str
    changed: bool


def continuation(prompt: str, text: str) -> str:
    """What the model wrote after the prompt (a sample's text starts with its prompt)."""
    return text[len(prompt) :] if prompt and text.startswith(prompt) else text


def word_diff(old: str | None, new: str) -> list[Span]:
    """`new` cut into spans, each marked changed where its words are not in `old` at that
    place (inserted or replaced); whitespace between two changed words is changed too, other
    whitespace never is. With no `old` (nothing to compare with) nothing is changed."""
    if old is None:
        return [Span(new, False)] if new else []
    a, b = _TOKENS.findall(old), _TOKENS.findall(new)
    marks = [False] * len(b)
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            for j in range(j1, j2):
                marks[j] = not b[j].isspace()
    for j in range(1, len(b) - 1):  # a changed phrase reads as one highlight
        if b[j].isspace() and marks[j - 1] and marks[j + 1]:
            marks[j] = True
    spans: list[Span] = []
    for token, changed in zip(b, marks, strict=True):
        if spans and spans[-1].changed == changed:
            spans[-1] = Span(spans[-1].text + token, changed)
        else:
            spans.append(Span(token, changed))
    return spans


def changed_words(spans: Sequence[Span]) -> int:
    """How many words the spans mark changed."""
    return sum(len(s.text.split()) for s in spans if s.changed)


def by_prompt(samples: Iterable[tuple[int, str, str]]) -> dict[str, list[tuple[int, str]]]:
    """Each prompt (in the order first sampled) with its (step, text) in step order; a step
    sampled twice for one prompt (a resumed run samples its checkpoint's step again) keeps the
    later text."""
    grouped: dict[str, dict[int, str]] = {}
    for step, prompt, text in samples:
        grouped.setdefault(prompt, {})[step] = text
    return {prompt: sorted(steps.items()) for prompt, steps in grouped.items()}


def side_by_side(
    runs: Sequence[dict[str, list[tuple[int, str]]]], prompt: str
) -> list[tuple[int, list[str | None]]]:
    """The steps any run sampled `prompt` at, in order, each with every run's text at that
    step (None where that run has none)."""
    texts = [dict(run.get(prompt, [])) for run in runs]
    steps = sorted(set().union(*(t.keys() for t in texts))) if texts else []
    return [(step, [t.get(step) for t in texts]) for step in steps]


def all_prompts(runs: Sequence[dict[str, list[tuple[int, str]]]]) -> list[str]:
    """Every prompt of any run: the first run's in its order, then the others' new ones."""
    seen: dict[str, None] = {}
    for run in runs:
        seen.update(dict.fromkeys(run))
    return list(seen)
