"""Machine telemetry on a poller thread: the best backend (NVML, else psutil) read every second.

The poller runs beside the training loop, never inside it: NVML calls can block when a device
misbehaves. Each poll becomes one `Telemetry` event handed to a callback.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from engine.events import Telemetry
from engine.telemetry.backend import TelemetryBackend, TelemetryUnavailable, short_error
from engine.telemetry.host import PsutilBackend
from engine.telemetry.nvml import NvmlBackend

log = logging.getLogger(__name__)


def select_backend(
    prefer: str = "auto", *, nvml: Any = None, psutil_module: Any = None
) -> TelemetryBackend:
    """The best backend for this machine.

    "auto" tries NVML and falls back to psutil (the psutil readings carry the reason NVML was
    skipped); "nvml" raises TelemetryUnavailable instead of falling back; "psutil" forces psutil.
    """
    if prefer == "psutil":
        return PsutilBackend(psutil_module)
    if prefer not in ("auto", "nvml"):
        raise ValueError(f"unknown telemetry backend {prefer!r}: use auto, nvml or psutil")
    try:
        return NvmlBackend(nvml, psutil_module)
    except TelemetryUnavailable as exc:
        if prefer == "nvml":
            raise
        log.info("GPU telemetry unavailable, using psutil: %s", exc)
        return PsutilBackend(psutil_module, reason=str(exc))


POLL_INTERVAL_S = 1.0  # a run's readings: the device panel's pace


class TelemetryPoller:
    """Reads a backend every `interval_s` on a daemon thread and hands each reading to `emit`.

    A failing read becomes one Telemetry(source="unavailable", reason=...) event, then the poller
    keeps trying and resumes normal readings when the backend answers again. A failing `emit` is
    logged and ignored: telemetry must never take the process down.
    """

    def __init__(
        self,
        emit: Callable[[Telemetry], None],
        backend: TelemetryBackend | None = None,
        interval_s: float = 1.0,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self._emit = emit
        self.backend: TelemetryBackend = backend if backend is not None else select_backend()
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._backend_closed = False
        self._failing = False
        self._emit_failures = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        with self._lock:
            if self._stop.is_set():
                raise RuntimeError("a stopped TelemetryPoller cannot be restarted")
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="telemetry-poller", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop polling and release the backend. Idempotent; safe from any thread."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            # Bounded: a read stuck in the driver must not hang the caller (the UI). The thread
            # is a daemon and closes the backend itself once the read returns.
            thread.join(timeout_s)
        if thread is None or not thread.is_alive():
            self._close_backend()

    def __enter__(self) -> TelemetryPoller:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def poll_once(self) -> Telemetry | None:
        """One read-and-emit cycle; returns what was emitted (None when nothing was)."""
        try:
            reading = self.backend.read()
        except Exception as exc:  # the thread's boundary: a driver's error becomes a reading
            if self._failing:
                return None  # already reported; stay quiet until it recovers
            self._failing = True
            log.warning("telemetry read failed (%s): %s", self.backend.name, exc)
            reading = Telemetry(
                source="unavailable", reason=f"{self.backend.name}: {short_error(exc)}"
            )
        else:
            self._failing = False
        self._safe_emit(reading)
        return reading

    def _run(self) -> None:
        try:
            # Read at once so the panel fills without waiting a whole interval.
            while not self._stop.is_set():
                self.poll_once()
                if self._stop.wait(self.interval_s):
                    break
        finally:
            self._close_backend()

    def _safe_emit(self, reading: Telemetry) -> None:
        if self._stop.is_set():
            return  # stopped during the read: the run may have recorded its final state
        try:
            self._emit(reading)
        except Exception:  # the thread's boundary: the callback is the run's, its failure not ours
            self._emit_failures += 1
            # Log the first one with its traceback; repeating it every second helps nobody.
            if self._emit_failures == 1:
                log.exception("telemetry emit callback failed")

    def _close_backend(self) -> None:
        with self._lock:
            if self._backend_closed:
                return
            self._backend_closed = True
        self.backend.close()  # a backend's close swallows its own driver's errors


def start_telemetry(
    emit: Callable[[Telemetry], None], warn: Callable[[str], None]
) -> TelemetryPoller | None:
    """A started poller on the best backend, or None after `warn` says why there is none
    (telemetry must never stop training)."""
    try:
        poller = TelemetryPoller(emit, backend=select_backend(), interval_s=POLL_INTERVAL_S)
        poller.start()
    except RuntimeError as e:  # TelemetryUnavailable, or no thread to be had
        warn(f"telemetry unavailable: {e}")
        return None
    return poller
