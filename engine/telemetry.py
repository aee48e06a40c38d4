"""Machine telemetry: GPU readings through NVML, host readings through psutil, on a poller thread.

The poller runs beside the training loop, never inside it: NVML calls take a few milliseconds
each and can block when a device misbehaves, so nothing in the hot loop may wait on them. Each
poll becomes one `Telemetry` event handed to a callback (usually `EventQueue.put`).

Backends:
- `NvmlBackend`: every visible GPU (utilisation, memory, this process's share, temperature,
  power, SM clock, throttle reasons) plus the host stats, source "nvml".
- `PsutilBackend`: host stats only (CPU overall and per core, RAM, this process's RSS), source
  "psutil". The fallback on machines without an NVIDIA driver.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from engine.device import process_gpu_memory
from engine.events import DeviceReading, Telemetry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ThrottleReason:
    """One throttle ("clocks event") reason: the one table the engine emits from and the
    cockpit draws from, so the two cannot disagree on names."""

    name: str  # the short name in DeviceReading.throttle
    label: str  # how the cockpit shows it
    warning: bool  # True: it slows training against the user's will; False: informational
    nvml_suffix: str  # pynvml constant suffix (nvmlClocksEventReason<suffix>)
    bit: int  # bit value from nvml.h: the fallback when the module lacks the constant


# In display order, most important first. The bit values are a stable part of the NVML ABI.
# Idle, application clocks, display clocks and sync boost are settings or rest, not slowdowns.
THROTTLE_REASONS: tuple[ThrottleReason, ...] = (
    ThrottleReason("power", "power cap", True, "SwPowerCap", 0x4),
    ThrottleReason("sw_thermal", "thermal (sw)", True, "SwThermalSlowdown", 0x20),
    ThrottleReason("hw_thermal", "thermal (hw)", True, "HwThermalSlowdown", 0x40),
    ThrottleReason("hw_slowdown", "hw slowdown", True, "HwSlowdown", 0x8),
    ThrottleReason("hw_power_brake", "power brake", True, "HwPowerBrakeSlowdown", 0x80),
    ThrottleReason("board_limit", "board limit", True, "BoardLimit", 0x200),
    ThrottleReason("reliability", "reliability", True, "Reliability", 0x400),
    ThrottleReason("sync_boost", "sync boost", False, "SyncBoost", 0x10),
    ThrottleReason("app_clocks", "app clocks", False, "ApplicationsClocksSetting", 0x2),
    ThrottleReason("display_clocks", "display clocks", False, "DisplayClockSetting", 0x100),
    ThrottleReason("idle", "idle", False, "GpuIdle", 0x1),
)
THROTTLE_BY_NAME: dict[str, ThrottleReason] = {r.name: r for r in THROTTLE_REASONS}

# NVML errors that mean the device or driver is gone, not that one query is unsupported: these
# must fail the whole reading so the poller reports "unavailable" instead of a reading of Nones.
_FATAL_NVML_ERRORS = (
    "NVMLError_GpuIsLost",
    "NVMLError_Uninitialized",
    "NVMLError_DriverNotLoaded",
    "NVMLError_LibraryNotFound",
)

# Newer drivers call throttle reasons "clocks event reasons"; older ones only have the old name.
_THROTTLE_FUNCTIONS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)


class TelemetryUnavailable(RuntimeError):
    """A backend cannot work on this machine; the message says why."""


class TelemetryBackend(Protocol):
    name: str

    def read(self) -> Telemetry: ...

    def close(self) -> None: ...


def throttle_names(mask: int, nvml: Any = None) -> tuple[str, ...]:
    """Turn a clocks-event-reason bitmask into short names, most important first."""
    names = []
    for reason in THROTTLE_REASONS:
        bit = _reason_bit(nvml, reason.nvml_suffix, reason.bit)
        if bit and mask & bit:
            names.append(reason.name)
    return tuple(names)


def _reason_bit(nvml: Any, suffix: str, default: int) -> int:
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        value = getattr(nvml, prefix + suffix, None)
        if isinstance(value, int):
            return value
    return default


def _short_error(exc: BaseException, limit: int = 160) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class PsutilBackend:
    """Host stats: CPU overall and per core, RAM, and this process's resident memory.

    `reason` is copied into every reading; `select_backend` uses it to say why there is no GPU
    data, so the cockpit can show that instead of an empty panel.
    """

    name = "psutil"
    # psutil's non-blocking cpu_percent compares against the previous call; closer than this to
    # the previous call the figure is noise, so it is reported as unknown instead.
    _MIN_CPU_SAMPLE_S = 0.05

    def __init__(self, psutil_module: Any = None, reason: str = "") -> None:
        if psutil_module is None:
            try:
                import psutil as psutil_module
            except ImportError as exc:  # a declared dependency, but keep the cockpit alive
                raise TelemetryUnavailable(f"psutil not importable: {exc}") from exc
        self._psutil = psutil_module
        self._reason = reason
        self._process = psutil_module.Process(os.getpid())
        # Prime the baselines so the first real read measures the time since construction.
        self._psutil.cpu_percent(interval=None)
        self._psutil.cpu_percent(interval=None, percpu=True)
        self._last_cpu_sample = time.monotonic()

    def read(self) -> Telemetry:
        cpu, per_core = self._read_cpu()
        ram_used, ram_total = self._read_ram()
        return Telemetry(
            source="psutil",
            cpu_percent=cpu,
            cpu_per_core=per_core,
            ram_used=ram_used,
            ram_total=ram_total,
            process_rss=self._read_rss(),
            reason=self._reason,
        )

    def close(self) -> None:
        pass  # nothing held

    def _read_cpu(self) -> tuple[float | None, tuple[float, ...]]:
        now = time.monotonic()
        if now - self._last_cpu_sample < self._MIN_CPU_SAMPLE_S:
            return None, ()
        self._last_cpu_sample = now
        try:
            cpu = float(self._psutil.cpu_percent(interval=None))
            per_core = tuple(float(c) for c in self._psutil.cpu_percent(interval=None, percpu=True))
        except Exception:  # host stats are best effort; never fail the GPU reading for them
            log.debug("cpu_percent failed", exc_info=True)
            return None, ()
        return cpu, per_core

    def _read_ram(self) -> tuple[int | None, int | None]:
        try:
            vm = self._psutil.virtual_memory()
        except Exception:
            log.debug("virtual_memory failed", exc_info=True)
            return None, None
        # total - available, not vm.used: "used" excludes reclaimable caches differently on each
        # platform, while available is what a new allocation can actually get.
        return int(vm.total - vm.available), int(vm.total)

    def _read_rss(self) -> int | None:
        try:
            return int(self._process.memory_info().rss)
        except Exception:
            log.debug("memory_info failed", exc_info=True)
            return None


class NvmlBackend:
    """Every visible NVIDIA GPU through NVML, plus the host stats from psutil.

    `nvml` is the pynvml module or anything with the same function names (tests pass a fake).
    Optional queries a device does not support (temperature on some boards, utilisation on MIG
    slices, power on laptops...) read as None or () for that field only.
    """

    name = "nvml"

    def __init__(self, nvml: Any = None, psutil_module: Any = None) -> None:
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as exc:
                raise TelemetryUnavailable(f"pynvml not importable: {exc}") from exc
        self._nvml = nvml
        self._closed = False
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise TelemetryUnavailable(f"NVML init failed: {_short_error(exc)}") from exc
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if count == 0:
                raise TelemetryUnavailable("NVML found no GPU")
            # Handles and names do not change while the process lives; fetch them once.
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._names = [_decode(nvml.nvmlDeviceGetName(h)) for h in self._handles]
        except TelemetryUnavailable:
            self.close()
            raise
        except Exception as exc:
            self.close()
            raise TelemetryUnavailable(f"NVML device query failed: {_short_error(exc)}") from exc
        self._nvml_error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        self._fatal = tuple(
            cls
            for cls in (getattr(nvml, n, None) for n in _FATAL_NVML_ERRORS)
            if isinstance(cls, type)
        )
        self._temp_sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        self._clock_sm = getattr(nvml, "NVML_CLOCK_SM", 1)
        self._host = PsutilBackend(psutil_module)
        self._pid = os.getpid()

    @property
    def device_count(self) -> int:
        return len(self._handles)

    def read(self) -> Telemetry:
        gpus = tuple(self._read_device(i, h) for i, h in enumerate(self._handles))
        return dataclasses.replace(self._host.read(), source="nvml", gpus=gpus, reason="")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # already torn down or the driver went away: nothing left to release
            log.debug("nvmlShutdown failed", exc_info=True)

    def _read_device(self, index: int, handle: Any) -> DeviceReading:
        nv = self._nvml
        # Memory is the one query every NVML device supports; if it fails the device is in
        # trouble, so let the error fail the reading.
        mem = nv.nvmlDeviceGetMemoryInfo(handle)
        util = self._optional(nv.nvmlDeviceGetUtilizationRates, handle)
        temp = self._optional(nv.nvmlDeviceGetTemperature, handle, self._temp_sensor)
        power_mw = self._optional(nv.nvmlDeviceGetPowerUsage, handle)
        limit_mw = self._optional(nv.nvmlDeviceGetEnforcedPowerLimit, handle)
        clock = self._optional(nv.nvmlDeviceGetClockInfo, handle, self._clock_sm)
        return DeviceReading(
            index=index,
            name=self._names[index],
            util_percent=_num(getattr(util, "gpu", None)),
            mem_util_percent=_num(getattr(util, "memory", None)),
            mem_used=_int(mem.used),
            mem_total=_int(mem.total),
            process_mem=self._optional(process_gpu_memory, nv, handle, self._pid),
            temperature_c=_num(temp),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            sm_clock_mhz=_num(clock),
            throttle=self._throttle(handle),
        )

    def _optional(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call an NVML query; None when this device cannot answer it, raise when it is gone."""
        try:
            return fn(*args)
        except self._fatal:
            raise
        except self._nvml_error:
            return None

    def _throttle(self, handle: Any) -> tuple[str, ...]:
        for fn_name in _THROTTLE_FUNCTIONS:
            fn = getattr(self._nvml, fn_name, None)
            if fn is None:
                continue
            # An old driver lacks the new symbol (NVMLError_FunctionNotFound): try the next.
            mask = self._optional(fn, handle)
            if mask is not None:
                return throttle_names(int(mask), self._nvml)
        return ()


def _decode(name: Any) -> str:
    # pynvml returns str in recent releases and bytes in older ones.
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


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
        except Exception as exc:  # NVML error mid-run, GPU fell off the bus, ...
            if self._failing:
                return None  # already reported; stay quiet until it recovers
            self._failing = True
            log.warning("telemetry read failed (%s): %s", self.backend.name, exc)
            reading = Telemetry(
                source="unavailable", reason=f"{self.backend.name}: {_short_error(exc)}"
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
        try:
            self._emit(reading)
        except Exception:
            self._emit_failures += 1
            # Log the first one with its traceback; repeating it every second helps nobody.
            if self._emit_failures == 1:
                log.exception("telemetry emit callback failed")

    def _close_backend(self) -> None:
        with self._lock:
            if self._backend_closed:
                return
            self._backend_closed = True
        try:
            self.backend.close()
        except Exception:
            log.debug("telemetry backend close failed", exc_info=True)


def start_telemetry(
    emit: Callable[[Telemetry], None], warn: Callable[[str], None]
) -> TelemetryPoller | None:
    """A started poller on the best backend, or None after `warn` says why there is none
    (telemetry must never stop training)."""
    try:
        poller = TelemetryPoller(emit, backend=select_backend(), interval_s=1.0)
        poller.start()
    except Exception as e:
        warn(f"telemetry unavailable: {e}")
        return None
    return poller
