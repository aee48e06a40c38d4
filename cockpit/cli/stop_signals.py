"""SIGINT, SIGTERM and SIGHUP: each stops the run at its next step boundary with a checkpoint,
recording the signal's name as the reason."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from engine.events import RunState

SIGNAL_REASONS = {"SIGINT": "SIGINT (ctrl+c)", "SIGTERM": "SIGTERM", "SIGHUP": "SIGHUP"}


def signal_reason(signum: int) -> str:
    """The reason a stop by this signal records in the run's final state."""
    name = signal.Signals(signum).name
    return SIGNAL_REASONS.get(name, name)


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP, caught from the start of `cockpit train`: each asks the run to stop
    at its next step boundary, checkpointing, with the signal's name as the reason. A SIGTERM or
    SIGHUP before the run exists is kept for it; a ctrl+c then (or a second one) aborts at once
    (KeyboardInterrupt: exit status 130, no run directory made)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.trainer: Any = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None:
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def restore(self, only: tuple[int, ...] | None = None) -> None:
        """Put back the handlers there were before (all, or `only` these signals)."""
        for sig in list(self._previous):
            if only is None or sig in only:
                signal.signal(sig, self._previous.pop(sig))

    def attach(self, trainer: Any) -> None:
        """From now on signals stop `trainer`; one already received stops it now, unsaved, as
        its line said (nothing was trained when it came)."""
        self.trainer = trainer
        if self.received:
            trainer.stop(checkpoint=False, reason=signal_reason(self.received[0]))

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT and (self.received or self.trainer is None):
            raise KeyboardInterrupt  # a second ctrl+c, or one before the run exists: out now
        self.received.append(signum)
        name = signal.Signals(signum).name
        trainer = self.trainer
        if trainer is not None and trainer.state in RunState.ENDED:
            # torchrun's SIGTERM after a rank died and this one failed: nothing is left to save
            print(f"{name}: the run has already ended ({trainer.state}); nothing to save", file=sys.stderr)
            return
        nothing_trained = trainer is None or trainer.step == 0
        if nothing_trained:
            what = "stopping before the first step (nothing trained yet: no checkpoint)"
        elif getattr(getattr(trainer, "world", None), "distributed", False):
            # a checkpoint of every rank's state needs every rank: a promise only if they are
            # all there (a rank that died is why torchrun sends this); the next line says
            what = "stopping; every rank saves a checkpoint if all are still there"
        else:
            what = "saving a checkpoint and stopping"
        print(f"{name}: {what} (ctrl+c again to abort)", file=sys.stderr)
        if trainer is not None:
            # Unsaved when nothing was trained as the signal came, as the line says: a first
            # step already under way still ends, and saving it made the line untrue.
            trainer.stop(checkpoint=not nothing_trained, reason=signal_reason(signum))


def exit_when_ended(trainer: Any, grace_s: float, timeout_s: float = 300.0) -> None:
    """Wait for the run to end (its checkpoint written), then end the process after `grace_s`."""
    deadline = time.monotonic() + timeout_s
    while trainer is not None and trainer.state not in RunState.ENDED:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    time.sleep(grace_s)
    os._exit(0)
