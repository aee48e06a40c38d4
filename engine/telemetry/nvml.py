"""GPU telemetry through NVML: every visible GPU (utilisation, memory, this process's share of
its memory and SMs, temperature, power, SM clock, throttle reasons) plus the host stats, source
"nvml"."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

from engine.events import DeviceReading, Telemetry
from engine.telemetry.backend import TelemetryUnavailable, short_error
from engine.telemetry.host import PsutilBackend
from engine.telemetry.throttle_reasons import throttle_names
from engine.train.device import process_gpu_memory

log = logging.getLogger(__name__)

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
        self._nvml_error: type[BaseException] = nvml.NVMLError
        try:
            nvml.nvmlInit()
        except (nvml.NVMLError, OSError) as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise TelemetryUnavailable(f"NVML init failed: {short_error(exc)}") from exc
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
        except (nvml.NVMLError, OSError) as exc:
            self.close()
            raise TelemetryUnavailable(f"NVML device query failed: {short_error(exc)}") from exc
        self._fatal = tuple(
            cls
            for cls in (getattr(nvml, n, None) for n in _FATAL_NVML_ERRORS)
            if isinstance(cls, type)
        )
        self._temp_sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        self._clock_sm = getattr(nvml, "NVML_CLOCK_SM", 1)
        self._host = PsutilBackend(psutil_module)
        self._pid = os.getpid()
        # per device, the newest process-utilisation sample already read (microseconds): each
        # reading averages the samples NVML took since the previous one
        self._util_seen = [0] * len(self._handles)
        not_found = getattr(nvml, "NVMLError_NotFound", None)
        self._not_found: tuple[type[BaseException], ...] = (
            (not_found,) if isinstance(not_found, type) else ()
        )

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
        except self._nvml_error:  # already torn down or the driver went away: nothing to release
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
        process_mem = self._optional(process_gpu_memory, nv, handle, self._pid)
        return DeviceReading(
            index=index,
            name=self._names[index],
            util_percent=_num(getattr(util, "gpu", None)),
            mem_util_percent=_num(getattr(util, "memory", None)),
            mem_used=_int(mem.used),
            mem_total=_int(mem.total),
            process_mem=process_mem,
            temperature_c=_num(temp),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            sm_clock_mhz=_num(clock),
            throttle=self._throttle(handle),
            process_util_percent=self._process_util(index, handle, process_mem),
        )

    def _process_util(self, index: int, handle: Any, process_mem: int | None) -> float | None:
        """This process's SM utilisation on the device: the mean of the samples NVML took of it
        since the previous reading (as nvitop's %SM). None where the device cannot tell or the
        process is not on it; 0 where it holds memory there but NVML sampled no kernel of it."""
        fn = getattr(self._nvml, "nvmlDeviceGetProcessUtilization", None)
        if fn is None:
            return None
        try:
            samples = fn(handle, self._util_seen[index]) or ()
        except self._not_found:  # no process sampled since the last reading
            samples = ()
        except self._fatal:
            raise
        except self._nvml_error:
            return None
        for s in samples:
            self._util_seen[index] = max(self._util_seen[index], int(s.timeStamp))
        mine = [float(s.smUtil) for s in samples if s.pid == self._pid]
        if mine:
            return sum(mine) / len(mine)
        return None if process_mem is None else 0.0

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
