"""What every rank of a torchrun world is doing, gathered by rank 0 every few seconds: each rank's
`RankReporter` keeps its newest telemetry, memory and step times; when the command exchange says
a report is due, one all_gather_object on the gloo group brings them to rank 0, which emits the
`RankReport`. A single process never reports.
"""

from __future__ import annotations

import math
import socket
import time
from typing import Any

import psutil
import torch

from engine.distributed.world import World, gather_to_all
from engine.events import DeviceReading, Event, MemoryBreakdown, RankReading, RankReport, Telemetry

RANK_REPORT_INTERVAL_S = 2.0  # one small gather on the gloo group per interval
BREAKDOWN_PARTS = ("weights", "gradients", "optimizer", "activations", "cache", "other")


class RankReporter:
    """One rank's side of the report: a sink for its own events, its step times, its reading."""

    def __init__(self, world: World, interval_s: float = RANK_REPORT_INTERVAL_S) -> None:
        self.world = world
        self.interval_s = interval_s
        self.host = socket.gethostname()
        self.gathers = 0
        self.gather_s = 0.0  # wall time spent in the gathers (the report's cost)
        self._telemetry: Telemetry | None = None
        self._memory: MemoryBreakdown | None = None
        self._due_at = time.monotonic() + interval_s
        self._process: Any = None  # psutil.Process, made on the first reading
        self._reset()

    def _reset(self) -> None:
        self._steps = 0
        self._step_s = 0.0
        self._data_s = 0.0

    def __call__(self, event: Event) -> None:
        """The sink (any thread): keep this rank's newest readings."""
        if isinstance(event, Telemetry):
            self._telemetry = event
        elif isinstance(event, MemoryBreakdown):
            self._memory = event

    def add_step(self, seconds: float, data_seconds: float) -> None:
        """One step this rank trained: its wall time, and the part spent waiting for batches."""
        self._steps += 1
        self._step_s += seconds
        self._data_s += data_seconds

    def due(self) -> bool:
        """Rank 0: time to ask every rank for its reading (the clock restarts when it is)."""
        now = time.monotonic()
        if now < self._due_at:
            return False
        self._due_at = now + self.interval_s
        return True

    def reading(self, device: torch.device) -> RankReading:
        """This rank over the interval since the last reading (which starts a new one)."""
        steps = self._steps
        step_s = self._step_s / steps if steps else math.nan
        data_s = self._data_s / steps if steps else math.nan
        self._reset()
        cpu, rss = self._process_figures()
        return RankReading(
            rank=self.world.rank,
            host=self.host,
            local_rank=self.world.local_rank,
            steps=steps,
            step_time_s=step_s,
            data_time_s=data_s,
            gpus=self._own_gpu(device),
            cpu_percent=cpu,
            process_rss=rss,
            memory_peak=self._memory_peak(device, rss),
        )

    def gather(self, device: torch.device, group: Any, step: int) -> RankReport | None:
        """Every rank calls this at the same exchange; rank 0 gets the report, the others None."""
        mine = self.reading(device)
        t0 = time.perf_counter()
        every = gather_to_all(mine, self.world, group)
        self.gather_s += time.perf_counter() - t0
        self.gathers += 1
        if not self.world.is_main:
            return None
        return RankReport(step=step, ranks=tuple(every))

    def _own_gpu(self, device: torch.device) -> tuple[DeviceReading, ...]:
        """This rank's GPU from its newest Telemetry: NVML's index of the rank's CUDA device
        (LOCAL_RANK), or the only GPU when the reading has one."""
        reading = self._telemetry
        if device.type != "cuda" or reading is None or not reading.gpus:
            return ()
        index = device.index if device.index is not None else self.world.local_rank
        mine = [g for g in reading.gpus if g.index == index]
        if not mine and len(reading.gpus) == 1:
            mine = list(reading.gpus)
        return tuple(mine[:1])

    def _process_figures(self) -> tuple[float | None, int | None]:
        """This process's CPU share since the last reading and its RSS (psutil: microseconds)."""
        try:
            if self._process is None:
                self._process = psutil.Process()
                self._process.cpu_percent(None)  # the first call only starts the interval
                return None, int(self._process.memory_info().rss)
            return float(self._process.cpu_percent(None)), int(self._process.memory_info().rss)
        except psutil.Error:
            return None, None

    def _memory_peak(self, device: torch.device, rss: int | None) -> int | None:
        """The total of this rank's newest memory breakdown (what the memory panel shows as
        used for rank 0, taken at a step's peak); before the first one, the CUDA allocator's
        peak or, off CUDA, the RSS."""
        breakdown = self._memory
        if breakdown is not None:
            return sum(max(0, int(getattr(breakdown, part))) for part in BREAKDOWN_PARTS)
        if device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(device))
        return rss
