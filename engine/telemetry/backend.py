"""What every telemetry backend shares: the interface the poller reads through, the error a
backend raises when it cannot work on this machine, and how an error is shortened for a reading.
"""

from __future__ import annotations

from typing import Protocol

from engine.events import Telemetry


class TelemetryUnavailable(RuntimeError):
    """A backend cannot work on this machine; the message says why."""


class TelemetryBackend(Protocol):
    name: str

    def read(self) -> Telemetry: ...

    def close(self) -> None: ...


def short_error(exc: BaseException, limit: int = 160) -> str:
    """The error's text (its type's name when it has none), cut to `limit` characters."""
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
