"""The errors of corpus preparation, shared by all its steps."""

from __future__ import annotations


class DataError(ValueError):
    """A problem with the data or the tokenizer; the message is meant for the user as is."""


class PreparationStopped(Exception):
    """prepare() was asked to stop (`should_stop`) before the corpus was ready: nothing is
    left that a later run would take for complete."""


def short_error(error: BaseException) -> str:
    """The first line of an exception's message, at most 120 characters."""
    lines = str(error).strip().splitlines()
    return lines[0][:120] if lines else type(error).__name__
