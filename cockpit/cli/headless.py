"""Headless progress: what `cockpit train --headless` prints while the run goes on."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable

from cockpit.figures.data_progress_text import progress_line
from cockpit.figures.durations import fmt_duration
from cockpit.figures.progress import ProgressTracker
from engine.config import describe
from engine.events import Event, RunState

# An error of these kinds before the run has started is a refusal (a corpus, config, run
# directory or checkpoint the run will not take), not a failed run: one line and exit 2.
REFUSAL_CODES = ("config", "data", "checkpoint")


class ProgressPrinter:
    """Headless progress: one step line, and one corpus preparation line, at most every
    `interval_s`; the preparation's final line, evals, checkpoints, samples, alerts and state
    changes always. A refusal before the run started is not printed but kept in `refusal`:
    the CLI says it as its other refusals are said. `clock` is injectable for tests."""

    def __init__(
        self,
        out: Callable[[str], None] = print,
        interval_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out
        self.interval_s = interval_s
        self.clock = clock
        self._last = -float("inf")
        self._last_data = -float("inf")
        self._max_steps = 0
        self._start_step = 0
        self._tokens_schedule: tuple[tuple[int, int], ...] = ()  # steps that grow (ETA)
        self._schedule_times = ProgressTracker()  # their ETA: each size's step time measured
        self._t0 = time.monotonic()
        self._closed = False
        self._last_error = ""
        self._started = False  # a RunStarted was seen: errors from now on are a run's failure
        self._held_error = ""  # an error before it: a refusal, if the run fails without starting
        self.refusal: str | None = None  # the one line the run was refused with (exit 2)

    def _say(self, line: str) -> None:
        """Print a line; a reader that went away (`| head`, a closed pipe) must not stop the
        run: the metrics file has every record, so printing just ends."""
        if self._closed:
            return
        try:
            self.out(line)
        except BrokenPipeError:
            self._closed = True
            with contextlib.suppress(OSError, ValueError):
                # interpreter shutdown flushes stdout again: point it at /dev/null first
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind == "run_started":
            self._started = True
            self._max_steps, self._start_step = event.max_steps, event.start_step
            self._tokens_schedule = tuple(event.tokens_schedule)
            self._t0 = time.monotonic()
            self._schedule_times.start(self._t0)
            self._schedule_times.tokens_schedule = self._tokens_schedule
            resumed = f", resumed from {event.resumed_from}" if event.resumed_from else ""
            self._say(
                f"{event.preset}: {event.n_params / 1e6:.2f}M parameters on {event.device} ({event.dtype}), "
                f"{event.tokenizer} vocab {event.vocab_size}, {event.train_tokens:,} train tokens; "
                f"run dir {event.run_dir}{resumed}"
            )
            port = event.config.get("log", {}).get("metrics_port", 0)
            if port:  # the token itself stays in its file: this output may be kept in a CI log
                self._say(
                    f"metrics: http://127.0.0.1:{port}/metrics for Prometheus, with the token in "
                    f"{event.run_dir}/metrics.token"
                )
            label = "resume" if event.resumed_from else "note"  # e.g. a batch split over ranks
            for note in event.notes:
                self._say(f"{label}: {note}")
        elif kind == "data_progress":
            now = self.clock()
            if now - self._last_data < self.interval_s and not event.done:
                return
            self._last_data = now
            self._say(progress_line(event))
        elif kind == "step":
            now = self.clock()
            self._schedule_times.add_step(now, event.step)
            if now - self._last < self.interval_s and event.step != self._max_steps:
                return
            self._last = now
            done, ahead = event.step - self._start_step, self._max_steps - event.step
            if self._tokens_schedule:  # a batch-size schedule's steps grow: their times, by size
                eta = self._schedule_times.eta(event.step, self._max_steps)
            else:
                eta = (now - self._t0) / done * ahead if done else 0.0
            eta_text = fmt_duration(eta) if eta is not None else "- (measuring)"
            self._say(
                f"step {event.step:>6}/{self._max_steps} | loss {event.loss:.4f} | lr {event.lr:.2e} | "
                f"{event.tokens_per_s:,.0f} tok/s | ETA {eta_text}"
            )
        elif kind == "eval":
            scope = "whole val split" if event.full_split else "estimate"
            # bits per byte: what compares with a run of another tokenizer (absent: not known)
            bpb = f" | val {event.val_bpb:.4f} bits/byte" if event.val_bpb is not None else ""
            self._say(
                f"eval   {event.step:>6} | train {event.train_loss:.4f} | val {event.val_loss:.4f} ({scope}){bpb} | train time {fmt_duration(event.train_time_s)}"
            )
        elif kind == "sample":
            text = (event.prompt + event.text).replace("\n", "⏎ ")
            self._say(f"sample {event.step:>6} | {text[:160]}")
        elif kind == "checkpoint":
            self._say(f"saved  {event.step:>6} | {event.path} ({event.reason})")
        elif kind == "alert":
            if event.level == "error":
                self._last_error = event.message
                if not self._started and event.code in REFUSAL_CODES:
                    self._held_error = event.message  # said once the run ends (a refusal)
                    return
            self._say(f"{event.level}: {event.message}")
        elif kind == "lr_changed":
            self._say(
                f"lr     {event.step:>6} | {event.old_lr:.2e} -> {event.new_lr:.2e} (x{event.scale:.3g} on the schedule)"
            )
        elif kind == "settings_changed":
            self._max_steps = event.max_steps or self._max_steps  # the step count and ETA
            who = f" (by {event.by})" if event.by and event.by != "app" else ""
            changes = {key: tuple(pair) for key, pair in event.changes.items()}
            self._say(f"set    {event.step:>6} | {describe(changes)}{who}")
        elif kind == "state" and event.state in RunState.ENDED:
            if self._held_error and event.state == RunState.FAILED and not self._started:
                self.refusal = self._held_error  # before training started: not "failed at step 0"
                return
            if self._held_error:
                self._say(f"error: {self._held_error}")
            # a failure's reason was usually just printed as its error alert: not twice
            reason = event.reason if event.reason != self._last_error else ""
            self._say(f"{event.state} at step {event.step}" + (f": {reason}" if reason else ""))


class RankErrorPrinter:
    """A rank other than 0 under torchrun prints nothing but its errors, each prefixed with its
    rank (rank 0 prints the progress and writes the metrics file)."""

    def __init__(self, rank: int, out: Callable[[str], None] | None = None) -> None:
        self.rank = rank
        self.out = out or (lambda line: print(line, file=sys.stderr, flush=True))

    def __call__(self, event: Event) -> None:
        if event.kind == "alert" and event.level == "error":
            self.out(f"[rank {self.rank}] error: {event.message}")
