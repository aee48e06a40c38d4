"""Telemetry backends and poller, against a scripted fake NVML (this machine has no GPU)."""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from engine.events import Telemetry
from engine.telemetry.backend import TelemetryUnavailable
from engine.telemetry.host import PsutilBackend
from engine.telemetry.nvml import NvmlBackend
from engine.telemetry.poller import TelemetryPoller, select_backend
from engine.telemetry.throttle_reasons import throttle_names

GIB = 1024**3
MY_PID = os.getpid()


class FakeNvml:
    """The subset of pynvml the backend uses, with two scripted GPUs."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    nvmlClocksEventReasonGpuIdle = 0x1
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksEventReasonSwThermalSlowdown = 0x20
    nvmlClocksEventReasonHwThermalSlowdown = 0x40

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # pynvml spells it so
        pass

    class NVMLError_GpuIsLost(NVMLError):
        pass

    class NVMLError_FunctionNotFound(NVMLError):
        pass

    class NVMLError_NotFound(NVMLError):  # no process sample newer than the timestamp asked
        pass

    def __init__(self, count: int = 2, init_error: Exception | None = None) -> None:
        self.count = count
        self.init_error = init_error
        self.initialized = False
        self.shutdowns = 0
        self.unsupported: set[tuple[int, str]] = set()  # (gpu index, function name)
        self.lost = False
        self.processes = {
            0: [
                SimpleNamespace(pid=MY_PID, usedGpuMemory=3 * GIB),
                SimpleNamespace(pid=MY_PID + 100_000, usedGpuMemory=5 * GIB),
            ],
            1: [SimpleNamespace(pid=MY_PID + 100_001, usedGpuMemory=1 * GIB)],
        }
        # per GPU, NVML's process samples (pid, timeStamp in microseconds, smUtil)
        self.samples: dict[int, list[Any]] = {0: [], 1: []}
        self.util_asked: list[tuple[int, int]] = []  # (gpu, lastSeenTimeStamp) per call

    # -- lifecycle
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    # -- queries; the handle is the index
    def _check(self, h: int, fn: str) -> None:
        if self.lost:
            raise self.NVMLError_GpuIsLost("GPU is lost")
        if (h, fn) in self.unsupported:
            raise self.NVMLError_NotSupported("Not Supported")

    def nvmlDeviceGetName(self, h: int) -> Any:
        # GPU 0 as bytes like older pynvml releases, GPU 1 as str like newer ones.
        return b"NVIDIA H100 80GB HBM3" if h == 0 else "NVIDIA A100-SXM4-40GB"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        self._check(h, "util")
        return SimpleNamespace(gpu=[97, 12][h], memory=[41, 3][h])

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        self._check(h, "mem")
        total = [80 * GIB, 40 * GIB][h]
        used = [9 * GIB, 1 * GIB][h]
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        self._check(h, "procs")
        return self.processes[h]

    def nvmlDeviceGetProcessUtilization(self, h: int, last_seen: int) -> list[Any]:
        self._check(h, "putil")
        self.util_asked.append((h, last_seen))
        newer = [s for s in self.samples[h] if s.timeStamp > last_seen]
        if not newer:
            raise self.NVMLError_NotFound("Not Found")
        return newer

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        self._check(h, "temp")
        return [71, 38][h]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._check(h, "power")
        return [612_345, 55_000][h]  # milliwatts

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        self._check(h, "limit")
        return [700_000, 400_000][h]

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        self._check(h, "clock")
        return [1980, 210][h]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        self._check(h, "throttle")
        # GPU 0: power capped and thermally slowed; GPU 1: idle.
        return [0x4 | 0x20, 0x1][h]


@pytest.fixture
def nvml() -> FakeNvml:
    return FakeNvml()


def test_nvml_reads_both_gpus_with_units(nvml: FakeNvml) -> None:
    backend = NvmlBackend(nvml)
    t = backend.read()
    assert t.source == "nvml" and t.reason == ""
    assert [g.index for g in t.gpus] == [0, 1]
    g0, g1 = t.gpus
    assert g0.name == "NVIDIA H100 80GB HBM3" and g1.name == "NVIDIA A100-SXM4-40GB"
    assert (g0.util_percent, g0.mem_util_percent) == (97.0, 41.0)
    assert (g0.mem_used, g0.mem_total) == (9 * GIB, 80 * GIB)
    assert g0.temperature_c == 71.0
    assert g0.power_w == pytest.approx(612.345)
    assert g0.power_limit_w == pytest.approx(700.0)
    assert g0.sm_clock_mhz == 1980.0
    assert (g1.util_percent, g1.mem_total, g1.power_w) == (12.0, 40 * GIB, pytest.approx(55.0))
    # host stats ride along so the GPU panel can show them too
    assert t.ram_total and t.ram_total > 0
    assert t.process_rss and t.process_rss > 0
    backend.close()
    backend.close()  # idempotent
    assert nvml.shutdowns == 1


def test_process_memory_counts_only_our_pid(nvml: FakeNvml) -> None:
    nvml.processes[0].append(SimpleNamespace(pid=MY_PID, usedGpuMemory=GIB))
    g0, g1 = NvmlBackend(nvml).read().gpus
    assert g0.process_mem == 4 * GIB  # 3 + 1 of ours, the other 5 GiB belong to someone else
    assert g1.process_mem is None  # no entry of ours on GPU 1: unknown, not 0


def sample(pid: int, t_us: int, sm: int) -> Any:
    return SimpleNamespace(pid=pid, timeStamp=t_us, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)


def test_process_utilisation_is_our_pid_s_samples_since_the_last_reading(nvml: FakeNvml) -> None:
    """As nvitop's %SM: our own samples only, each reading averaging those taken since the
    previous one; 0 where we hold memory but ran nothing, unknown where we are not on it."""
    nvml.samples[0] = [
        sample(MY_PID, 10, 90),
        sample(MY_PID + 100_000, 11, 5),
        sample(MY_PID, 12, 70),
    ]
    backend = NvmlBackend(nvml)
    g0, g1 = backend.read().gpus
    assert g0.process_util_percent == 80.0  # (90 + 70) / 2, the other process's 5 not counted
    assert g1.process_util_percent is None  # none of our memory there: not our GPU
    nvml.samples[0].append(sample(MY_PID, 20, 40))
    g0, _ = backend.read().gpus
    assert g0.process_util_percent == 40.0  # only the sample taken since the last reading
    assert (0, 12) in nvml.util_asked  # asked from the newest sample seen, not from 0 again
    g0, _ = backend.read().gpus
    assert g0.process_util_percent == 0.0  # on the GPU (3 GiB) but no sample since: no kernel
    # one query per device per reading: on the poller's pace, never more
    assert [a for a in nvml.util_asked if a[0] == 0] == [(0, 0), (0, 12), (0, 20)]
    nvml.unsupported.add((0, "putil"))
    assert backend.read().gpus[0].process_util_percent is None  # the device cannot tell


def test_unsupported_query_yields_none_and_rest_is_filled(nvml: FakeNvml) -> None:
    nvml.unsupported |= {(0, "temp"), (1, "power"), (1, "procs"), (1, "throttle")}
    g0, g1 = NvmlBackend(nvml).read().gpus
    assert g0.temperature_c is None
    assert g0.power_w == pytest.approx(612.345) and g0.sm_clock_mhz == 1980.0
    assert g0.mem_used == 9 * GIB and g0.process_mem == 3 * GIB
    assert g1.power_w is None and g1.process_mem is None and g1.throttle == ()
    assert g1.temperature_c == 38.0 and g1.power_limit_w == pytest.approx(400.0)


def test_throttle_bitmask_to_names(nvml: FakeNvml) -> None:
    g0, g1 = NvmlBackend(nvml).read().gpus
    assert g0.throttle == ("power", "sw_thermal")
    assert g1.throttle == ("idle",)
    # works without the module's constants too (bit values from nvml.h)
    assert throttle_names(0x8 | 0x40 | 0x80 | 0x10) == (
        "hw_thermal",
        "hw_slowdown",
        "hw_power_brake",
        "sync_boost",
    )
    assert throttle_names(0) == ()


def test_throttle_falls_back_to_old_function_name(nvml: FakeNvml) -> None:
    def missing(h: int) -> int:
        raise FakeNvml.NVMLError_FunctionNotFound("Function Not Found")

    nvml.nvmlDeviceGetCurrentClocksEventReasons = missing  # type: ignore[method-assign]
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x40  # type: ignore[attr-defined]
    assert NvmlBackend(nvml).read().gpus[0].throttle == ("hw_thermal",)


def test_lost_gpu_fails_the_whole_reading(nvml: FakeNvml) -> None:
    backend = NvmlBackend(nvml)
    nvml.lost = True
    with pytest.raises(FakeNvml.NVMLError_GpuIsLost):
        backend.read()


def test_init_failure_raises_and_auto_falls_back_to_psutil() -> None:
    nvml = FakeNvml(init_error=FakeNvml.NVMLError("NVML Shared Library Not Found"))
    with pytest.raises(TelemetryUnavailable, match="Shared Library Not Found"):
        NvmlBackend(nvml)
    backend = select_backend("auto", nvml=nvml)
    assert backend.name == "psutil"
    t = backend.read()
    assert t.source == "psutil" and "Shared Library Not Found" in t.reason
    with pytest.raises(TelemetryUnavailable):
        select_backend("nvml", nvml=nvml)


def test_zero_devices_is_unavailable() -> None:
    nvml = FakeNvml(count=0)
    with pytest.raises(TelemetryUnavailable, match="no GPU"):
        NvmlBackend(nvml)
    assert nvml.shutdowns == 1  # init succeeded, so it was balanced by a shutdown
    assert select_backend(nvml=nvml).name == "psutil"


def test_select_backend_prefers_nvml_and_can_force_psutil(nvml: FakeNvml) -> None:
    assert isinstance(select_backend("psutil", nvml=nvml), PsutilBackend)
    assert not nvml.initialized  # forcing psutil never touches NVML
    assert select_backend("auto", nvml=nvml).name == "nvml"
    with pytest.raises(ValueError):
        select_backend("cuda")


def test_psutil_backend_plausible_numbers() -> None:
    backend = PsutilBackend()
    time.sleep(0.1)  # let the primed CPU baseline age past the noise floor
    t = backend.read()
    assert t.source == "psutil" and t.gpus == () and t.reason == ""
    assert t.ram_total is not None and t.ram_total > 0
    assert t.ram_used is not None and 0 < t.ram_used <= t.ram_total
    assert t.process_rss is not None and t.process_rss > 0
    assert t.cpu_percent is not None and 0.0 <= t.cpu_percent <= 100.0
    assert len(t.cpu_per_core) == (os.cpu_count() or len(t.cpu_per_core))
    assert all(0.0 <= c <= 100.0 for c in t.cpu_per_core)


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="pynvml not installed")
def test_select_backend_with_real_pynvml_works_here() -> None:
    backend = select_backend()
    try:
        t = backend.read()
        assert t.source == backend.name
        if backend.name == "psutil":  # no NVIDIA driver here: the real failure path was taken
            assert t.reason
        else:
            assert t.gpus
    finally:
        backend.close()


class ScriptedBackend:
    """Reads succeed or raise according to a script; the last entry repeats."""

    name = "nvml"

    def __init__(self, script: list[Exception | None]) -> None:
        self.script = script
        self.calls = 0
        self.closed = 0

    def read(self) -> Telemetry:
        step = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        if step is not None:
            raise step
        return Telemetry(source="nvml", cpu_percent=float(self.calls))

    def close(self) -> None:
        self.closed += 1


class Collector:
    def __init__(self) -> None:
        self.items: list[Telemetry] = []
        self.cond = threading.Condition()

    def __call__(self, t: Telemetry) -> None:
        with self.cond:
            self.items.append(t)
            self.cond.notify_all()

    def wait_for(self, n: int, timeout: float = 3.0) -> list[Telemetry]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.items) >= n, timeout), self.items
            return list(self.items)


def test_poller_emits_readings() -> None:
    backend = ScriptedBackend([None])
    sink = Collector()
    with TelemetryPoller(sink, backend, interval_s=0.01) as poller:
        items = sink.wait_for(3)
        assert poller.running
    assert all(t.source == "nvml" for t in items)
    assert not poller.running and backend.closed == 1


def test_poller_reports_error_once_then_recovers() -> None:
    err = RuntimeError("GPU is lost")
    backend = ScriptedBackend([None, err, err, err, None])
    sink = Collector()
    with TelemetryPoller(sink, backend, interval_s=0.01):
        items = sink.wait_for(4)
        while backend.calls < 6:  # a few more successful reads
            time.sleep(0.01)
    items = sink.items
    sources = [t.source for t in items]
    assert sources[:3] == ["nvml", "unavailable", "nvml"]
    assert sources.count("unavailable") == 1  # three failures, one event
    bad = items[1]
    assert bad.reason == "nvml: GPU is lost" and bad.gpus == ()


def test_poller_survives_emit_errors() -> None:
    backend = ScriptedBackend([None])
    calls = []

    def emit(t: Telemetry) -> None:
        calls.append(t)
        raise ValueError("UI is gone")

    with TelemetryPoller(emit, backend, interval_s=0.01) as poller:
        deadline = time.monotonic() + 3.0
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) >= 3 and poller.running


@pytest.mark.serial  # a wall-clock bound: not beside another test
def test_stop_is_prompt_and_idempotent() -> None:
    backend = ScriptedBackend([None])
    sink = Collector()
    poller = TelemetryPoller(sink, backend, interval_s=10.0)
    poller.start()
    poller.start()  # no second thread
    sink.wait_for(1)  # the first read happens at once, then it waits 10 s
    t0 = time.monotonic()
    poller.stop()
    assert time.monotonic() - t0 < 0.5
    poller.stop()
    assert not poller.running and backend.closed == 1 and len(sink.items) == 1
    with pytest.raises(RuntimeError):
        poller.start()


def test_stop_without_start_closes_backend() -> None:
    backend = ScriptedBackend([None])
    poller = TelemetryPoller(lambda t: None, backend)
    poller.stop()
    poller.stop()
    assert backend.closed == 1


def test_poller_over_nvml_backend_closes_nvml(nvml: FakeNvml) -> None:
    sink = Collector()
    with TelemetryPoller(sink, NvmlBackend(nvml), interval_s=0.01):
        items = sink.wait_for(1)
    assert len(items[0].gpus) == 2
    assert nvml.shutdowns == 1


def test_every_name_the_nvml_backend_can_emit_has_one_table_entry() -> None:
    """One table (engine.telemetry.throttle_reasons.THROTTLE_REASONS) names, labels and grades every reason."""
    from engine.telemetry.throttle_reasons import THROTTLE_BY_NAME, THROTTLE_REASONS

    every_bit = sum(r.bit for r in THROTTLE_REASONS)
    emitted = throttle_names(every_bit) + throttle_names(every_bit, FakeNvml())
    assert emitted and all(name in THROTTLE_BY_NAME for name in emitted)
    assert len(THROTTLE_BY_NAME) == len(THROTTLE_REASONS)  # no name twice
    if importlib.util.find_spec("pynvml") is not None:
        import pynvml

        # every reason the installed NVML bindings define maps to a row of the table
        for attr in dir(pynvml):
            for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
                suffix = attr.removeprefix(prefix)
                if attr.startswith(prefix) and suffix not in ("All", "None", "UserDefinedClocks"):
                    names = throttle_names(getattr(pynvml, attr), pynvml)
                    assert len(names) == 1 and names[0] in THROTTLE_BY_NAME, attr
        assert throttle_names(pynvml.nvmlClocksThrottleReasonAll, pynvml) == tuple(
            r.name for r in THROTTLE_REASONS
        )
    # rest and settings are not slowdowns: an idle GPU must not look throttled
    assert not THROTTLE_BY_NAME["idle"].warning
    assert not THROTTLE_BY_NAME["app_clocks"].warning
    assert THROTTLE_BY_NAME["power"].warning and THROTTLE_BY_NAME["hw_thermal"].warning


def test_psutil_backend_reads_the_run_s_own_cpu() -> None:
    """The zoomed Device panel draws the run's own CPU over time: each reading carries it."""
    backend = PsutilBackend()
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:  # some CPU of our own to measure
        sum(i * i for i in range(1000))
    t = backend.read()
    assert t.process_cpu_percent is not None and t.process_cpu_percent > 0.0
