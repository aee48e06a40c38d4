"""A slow corpus preparation for tests of the preparation phase (engine, headless, app): patched
over `engine.train.setup.prepare`, it reports DataProgress as the streaming prepare does, honours
`should_stop` (raising PreparationStopped), then hands over to the real prepare."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import engine.data.preparation
from engine.data.errors import PreparationStopped
from engine.events import DataProgress


def slow_prepare(chunks: int, delay_s: float = 0.02, total: int = 1_000_000) -> Any:
    """A preparation that takes `chunks` x `delay_s`, says so in DataProgress events and stops
    when asked (raising PreparationStopped, as the streaming prepare does)."""
    real = engine.data.preparation.prepare

    def fake(
        cfg: Any,
        data_path: str | None = None,
        cache_dir: Path | None = None,
        download: bool = True,
        progress: Any = None,
        should_stop: Any = None,
    ) -> Any:
        assert progress is not None and should_stop is not None, "build() passes both"
        t0 = time.monotonic()

        def event(done: int, final: bool = False) -> DataProgress:
            return DataProgress(
                source="fake corpus",
                tokenizer=cfg.tokenizer,
                bytes_read=done * total // chunks,
                bytes_total=total,
                documents=done,
                skipped=0,
                tokens=done * 1000,
                elapsed_s=time.monotonic() - t0,
                done=final,
            )

        for i in range(chunks):
            if should_stop():
                raise PreparationStopped("asked to stop")
            progress(event(i))
            time.sleep(delay_s)
        data = real(cfg, data_path=data_path)
        progress(event(chunks, final=True))
        return data

    return fake
