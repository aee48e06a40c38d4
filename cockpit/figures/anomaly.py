"""The anomaly banner: what the alert line says about a NaN or a loss spike the run stopped at.

Pure functions of the engine's message and the state the run is in, so that the wording (which
must offer only what works in that state) is testable without an app.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.figures.numbers import fmt_loss
from engine.events import RunState

ANOMALY_CODES = ("nan", "spike")  # the faults the engine pauses (or rolls back) on
# Where the engine's own advice starts in an anomaly message: the app gives its own, from the
# state the run is in (the engine's cannot know whether a checkpoint exists for r).
_ENGINE_ADVICE = re.compile(
    r":\s*paused\b|;\s*rolling back\b|;\s*no checkpoint\b|;\s*\d+ rollbacks?\b|;\s*stopping\b"
)
_LOSS_IN_MESSAGE = re.compile(r"\(loss ([^)\s]+)\)|spike at step [\d,]+: ([^\s,;]+)")
# The engine says what to do in words; the app names its keys for it. Matched as the engine
# words them, for a run of any version over the socket: one not matched reads as words.
_KEYED_ADVICE = (
    (
        "roll back to the last checkpoint with half the LR, or lower the LR",
        "press r to roll back to the last checkpoint with half the LR, or l to lower the LR",
    ),
    ("paused; lower the LR, then resume", "paused; l lowers the LR, then space resumes"),
    (
        "no checkpoint to roll back to yet: lower the LR and resume",
        "no checkpoint to roll back to yet: lower the LR (l) and resume",
    ),
    ("(a checkpoint or resume command retries now)", "(c retries now)"),
)


def with_keys(message: str) -> str:
    """An engine message with the app's keys for the advice it gives."""
    for words, keyed in _KEYED_ADVICE:
        message = message.replace(words, keyed)
    return message



@dataclass(frozen=True)
class Anomaly:
    """A NaN or a loss spike the engine reported (an Alert with code nan or spike)."""

    code: str
    fault: str  # what went wrong, in the engine's words, without its advice
    message: str  # the engine's whole message
    loss: float | None  # the loss of the faulty step, when the message gives it
    step: int = 0  # the run's newest step when it was reported: a step past it trained on

    @classmethod
    def from_message(cls, code: str, message: str, step: int = 0) -> Anomaly:
        return cls(code, fault_of(message), message, loss_in(message), step)


def fault_of(message: str) -> str:
    """The fault part of an engine anomaly message ("non-finite gradient at step 226 (loss
    906); the update was not applied"), without the advice that follows it."""
    return _ENGINE_ADVICE.split(message, maxsplit=1)[0].strip() or message


def loss_in(message: str) -> float | None:
    """The loss an anomaly message quotes: (loss 906), or the loss of a spike."""
    found = _LOSS_IN_MESSAGE.search(message)
    if found is None:
        return None
    try:
        return float(found.group(1) or found.group(2))
    except ValueError:
        return None


def last_finite(values: Sequence[float]) -> float | None:
    """The last finite number of a sequence (the loss before a NaN), or None."""
    for value in reversed(values):
        if math.isfinite(value):
            return float(value)
    return None


def damage_note(anomaly: Anomaly, vocab_size: int, losses: Sequence[float]) -> str:
    """Say so when the loss was already far above a fresh model's (ln of the vocabulary);
    `losses` are the run's losses so far (the last finite one stands in when the message
    quotes none)."""
    loss = anomaly.loss if anomaly.loss is not None else last_finite(losses)
    if vocab_size < 2 or loss is None:
        return ""
    fresh = math.log(vocab_size)
    if math.isfinite(loss) and loss <= 2 * fresh:
        return ""
    if anomaly.loss is not None:  # the fault quotes it already
        return f"the weights may be damaged (a fresh model's loss is {fresh:.2f})"
    return (
        f"the loss was already {fmt_loss(loss)} (a fresh model's: {fresh:.2f}): "
        "the weights may be damaged"
    )


def anomaly_banner(
    anomaly: Anomaly,
    state: str,
    checkpoint_path: str | None,
    vocab_size: int,
    losses: Sequence[float],
) -> str:
    """The fault in the engine's words, whether the weights may be damaged, and what works
    from `state` (r only with a checkpoint to go back to)."""
    if state in RunState.ENDED:
        return f"✗ {anomaly.message}"
    parts = [f"✗ {anomaly.fault}"]
    damage = damage_note(anomaly, vocab_size, losses)
    if damage:
        parts.append(damage)
    if state == RunState.PAUSED:
        # short: at 80 columns the banner has three lines for all of this
        resume = "l: lower the LR, then space: resume"
        if checkpoint_path is None:
            fresh = "p: start afresh"
            parts.append("paused, no checkpoint yet")
            parts += [fresh, f"{resume} on these weights"] if damage else [resume, fresh]
        else:
            back = f"r: back to {os.path.basename(checkpoint_path)}, LR halved"
            parts.append("paused")
            parts += [back, resume] if damage else [resume, back]
    return " · ".join(parts)
