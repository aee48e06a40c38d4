"""When a frame showing something reached the terminal: the "drawn" end of key-to-drawn.

Under Textual's headless driver every screen update is computed, then dropped. `FrameWatch`
wraps the app's display call: once armed, the first update painted while its condition holds
whose terminal bytes contain its text is the one that drew it. Only armed frames are encoded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class FrameWatch:
    """Times the frame that first shows `text` while `condition()` holds (see the module)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._display = app._display  # Textual's: hands the update to the driver
        app._display = self._on_display
        self._want: tuple[Callable[[], bool], str] | None = None
        self.drawn = threading.Event()
        self.drawn_perf = 0.0  # time.perf_counter() when that frame was handed to the driver
        self.drawn_wall = 0.0  # time.time() then: comparable with an event's timestamp

    def arm(self, condition: Callable[[], bool], text: str) -> None:
        """Watch for the next frame that shows `text` while `condition()` holds."""
        self.drawn.clear()
        self._want = (condition, text)

    def _on_display(self, screen: Any, update: Any) -> None:
        self._display(screen, update)
        want = self._want
        if want is None or update is None or not hasattr(update, "render_segments"):
            return
        if self.app._batch_count:
            return  # inside batch_update: Textual drops it, the batch's end paints it
        condition, text = want
        if condition() and text in update.render_segments(self.app.console):
            self.drawn_perf, self.drawn_wall = time.perf_counter(), time.time()
            self._want = None
            self.drawn.set()
