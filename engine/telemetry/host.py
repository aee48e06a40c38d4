"""Host telemetry through psutil: CPU overall and per core, RAM, this process's CPU and resident
memory.

`PsutilBackend` is the backend of machines without an NVIDIA driver (source "psutil") and the
host half of every NVML reading.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from engine.events import Telemetry
from engine.telemetry.backend import TelemetryUnavailable

log = logging.getLogger(__name__)


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
        # what psutil raises for a process it cannot see (NoSuchProcess, AccessDenied) or a
        # /proc it cannot read
        self._errors = (psutil_module.Error, OSError)
        self._reason = reason
        try:
            self._process = psutil_module.Process(os.getpid())
            # Prime the baselines so the first real read measures the time since construction.
            self._psutil.cpu_percent(interval=None)
            self._psutil.cpu_percent(interval=None, percpu=True)
            self._process.cpu_percent(interval=None)
        except self._errors as exc:
            raise TelemetryUnavailable(str(exc)) from exc
        self._last_cpu_sample = time.monotonic()

    def read(self) -> Telemetry:
        cpu, per_core, own = self._read_cpu()
        ram_used, ram_total = self._read_ram()
        return Telemetry(
            source="psutil",
            cpu_percent=cpu,
            cpu_per_core=per_core,
            ram_used=ram_used,
            ram_total=ram_total,
            process_rss=self._read_rss(),
            reason=self._reason,
            process_cpu_percent=own,
        )

    def close(self) -> None:
        pass  # nothing held

    def _read_cpu(self) -> tuple[float | None, tuple[float, ...], float | None]:
        """(the machine's CPU%, per core, this process's CPU% where 100 is one core)."""
        now = time.monotonic()
        if now - self._last_cpu_sample < self._MIN_CPU_SAMPLE_S:
            return None, (), None
        self._last_cpu_sample = now
        try:
            cpu = float(self._psutil.cpu_percent(interval=None))
            per_core = tuple(float(c) for c in self._psutil.cpu_percent(interval=None, percpu=True))
        except self._errors:  # host stats are best effort; never fail the GPU reading for them
            log.debug("cpu_percent failed", exc_info=True)
            return None, (), None
        try:
            own = float(self._process.cpu_percent(interval=None))
        except self._errors:
            log.debug("process cpu_percent failed", exc_info=True)
            own = None
        return cpu, per_core, own

    def _read_ram(self) -> tuple[int | None, int | None]:
        try:
            vm = self._psutil.virtual_memory()
        except self._errors:
            log.debug("virtual_memory failed", exc_info=True)
            return None, None
        # total - available, not vm.used: "used" excludes reclaimable caches differently on each
        # platform, while available is what a new allocation can actually get.
        return int(vm.total - vm.available), int(vm.total)

    def _read_rss(self) -> int | None:
        try:
            return int(self._process.memory_info().rss)
        except self._errors:
            log.debug("memory_info failed", exc_info=True)
            return None
