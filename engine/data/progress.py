"""What prepare() tells while it works: DataProgress events at a bounded rate, and the polling
of its caller's should_stop."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from engine.data.errors import PreparationStopped
from engine.data.reader import ReadCounts
from engine.events import DataProgress

PROGRESS_INTERVAL_S = 0.25
STOP_POLL_S = 0.05


class StopPoll:
    """should_stop, asked at most every STOP_POLL_S (it is called between every two pieces)."""

    def __init__(self, should_stop: Callable[[], bool] | None):
        self._should_stop, self._next = should_stop, 0.0

    def check(self) -> None:
        if self._should_stop is None:
            return
        now = time.monotonic()
        if now >= self._next:
            self._next = now + STOP_POLL_S
            if self._should_stop():
                raise PreparationStopped()


class Reporter:
    """DataProgress events at most every PROGRESS_INTERVAL_S, and the last one always."""

    def __init__(self, progress: Callable[[DataProgress], None] | None, source: str, total_bytes: int, tok: str):
        self._progress, self._tokenizer = progress, tok
        self._source, self.total = source, total_bytes
        self._start = time.monotonic()
        self._next = self._start + PROGRESS_INTERVAL_S
        self.note = ""

    def emit(self, counts: ReadCounts, tokens: int, force: bool = False) -> None:
        if self._progress is None:
            return
        now = time.monotonic()
        if not force and now < self._next:
            return
        self._next = now + PROGRESS_INTERVAL_S
        self._progress(self._event(counts.bytes_read, counts, tokens, done=False, reused=False))

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def finish(self, meta: dict[str, Any], reused: bool) -> None:
        if self._progress is None:
            return
        counts = ReadCounts(documents=meta.get("documents", 0), skipped=meta.get("skipped", 0))
        size = meta.get("source_bytes", self.total)
        self._progress(self._event(size, counts, meta["total_tokens"], done=True, reused=reused))

    def _event(
        self, read: int, counts: ReadCounts, tokens: int, done: bool, reused: bool
    ) -> DataProgress:
        return DataProgress(
            source=self._source,
            tokenizer=self._tokenizer,
            bytes_read=read,
            bytes_total=self.total,
            documents=counts.documents,
            skipped=counts.skipped,
            tokens=tokens,
            elapsed_s=self.elapsed(),
            done=done,
            reused=reused,
            note=self.note,
        )
