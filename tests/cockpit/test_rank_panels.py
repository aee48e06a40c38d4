"""The Device and Memory panels under torchrun: one row per rank from scripted RankReports (the
straggler line, CPU and GPU ranks, more ranks than rows), at 80x24 and 160x48; a single process
looks as before (tests/cockpit/test_snapshots.py)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from pilot import settle
from scripted import T0, GiB, MiB, ScriptedFactory, build_script, telemetry_event

from cockpit.app.cockpit_app import CockpitApp
from cockpit.widgets.ranks import ranks_lines, straggler
from engine.events import RankReading, RankReport

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


def rank_report(kind: str, n: int, slow: int | None = None, step: int = 300, t: float = 0.0) -> RankReport:
    """`n` ranks on two hosts; rank `slow` 25% slower than the others' 412 ms."""
    ranks = []
    for rank in range(n):
        host = f"gpu-node-{'ab'[rank * 2 // n]}" if kind == "nvml" else "vm"
        step_time = 0.412 * (1.25 if rank == slow else 1.0) + 0.001 * rank
        gpus = ()
        if kind == "nvml":
            gpu = telemetry_event("nvml", t, rank).gpus[rank % 2]
            gpus = (dataclasses.replace(gpu, index=rank % (n // 2 or 1)),)
        ranks.append(
            RankReading(
                rank=rank, host=host, local_rank=rank % (n // 2 or 1), steps=5,
                step_time_s=step_time, data_time_s=0.002, gpus=gpus,
                cpu_percent=None if kind == "nvml" else 97.0 - rank,
                process_rss=int(1.23 * GiB) + rank * 40 * MiB,
                memory_peak=int((58.1 + 0.4 * rank) * GiB) if kind == "nvml" else int(1.2 * GiB) + rank * MiB,
            )
        )  # fmt: skip
    return RankReport(step=step, ranks=tuple(ranks), time=t or T0 + 2.0 + step * 0.2 + 0.03)


def ranks_script(kind: str, n: int, slow: int | None) -> list[Any]:
    script = build_script(telemetry=kind)
    return [*script, rank_report(kind, n, slow)]


def scenario(factory: ScriptedFactory, keys: tuple[str, ...] = ()) -> tuple[CockpitApp, Any]:
    app = CockpitApp(factory, "default")

    async def run_before(pilot: Any) -> None:
        await settle(pilot, factory)
        app.clear_notifications()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await settle(pilot)
        app.clear_notifications()
        await pilot.pause()

    return app, run_before


@pytest.fixture(params=list(SIZES), ids=list(SIZES))
def size(request: pytest.FixtureRequest) -> tuple[int, int]:
    return SIZES[request.param]


def test_eight_gpu_ranks_with_a_straggler(snap_compare: Any, size: tuple[int, int]) -> None:
    """80x24: the slowest and fastest ranks and '+4 more'; 160x48: all eight, hosts and power
    limits, and the memory panel's max over the ranks."""
    app, before = scenario(ScriptedFactory(script=ranks_script("nvml", 8, slow=5)))
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_two_cpu_ranks(snap_compare: Any, size: tuple[int, int]) -> None:
    """CPU ranks (this machine): each process's CPU% and RSS instead of GPU figures."""
    app, before = scenario(ScriptedFactory(script=ranks_script("psutil", 2, slow=None)))
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_zoomed_memory_with_ranks(snap_compare: Any) -> None:
    app, before = scenario(ScriptedFactory(script=ranks_script("nvml", 8, slow=5)), ("4",))
    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


def plain(lines: list[Any]) -> list[str]:
    return [line.plain for line in lines]


def test_the_slowest_rank_is_flagged_only_above_ten_percent_over_the_mean() -> None:
    assert straggler(rank_report("nvml", 8, slow=None)) is None
    flagged = straggler(rank_report("nvml", 8, slow=5))
    assert flagged is not None and flagged[0].rank == 5 and 0.1 < flagged[1] < 0.25
    line = plain(ranks_lines(rank_report("nvml", 2, slow=1), 80, None))[0]
    assert line.startswith("⚠ step: mean") and "slowest r1 516ms" in line
    calm = plain(ranks_lines(rank_report("psutil", 2, slow=None), 80, None))[0]
    assert calm == "step: mean 412ms · slowest r1 413ms"


def test_rows_fit_the_width_and_the_height() -> None:
    report = rank_report("nvml", 8, slow=5)
    for width in (24, 36, 60, 120):
        lines = plain(ranks_lines(report, width, None))
        assert len(lines) == 9 and all(len(line) <= width for line in lines[1:]), (width, lines)
    rows = plain(ranks_lines(report, 36, 6))
    assert len(rows) == 6 and rows[-1] == "+4 more (zoom: 3)"
    shown = [row.split()[0] for row in rows[1:-1]]
    assert "r5" in shown and "r0" in shown  # the slowest and the fastest
    # CPU ranks at 80x24: the labels go before the time waiting for data does
    cpu = plain(ranks_lines(rank_report("psutil", 2), 36, None))
    assert cpu[1] == "r0 vm 97% 1.23 GiB 412ms data 2ms", cpu
    assert plain(ranks_lines(rank_report("psutil", 2), 60, None))[1].startswith("r0 vm cpu 97% rss")
    # GPU ranks: the device's own figures go before the time waiting for data does
    gpu = plain(ranks_lines(rank_report("nvml", 2), 60, None))
    assert "690/700W" in gpu[2] and "power cap" in gpu[2] and "data" not in gpu[2]


def test_a_paused_interval_has_no_step_line_figures() -> None:
    report = rank_report("psutil", 2)
    idle = dataclasses.replace(
        report, ranks=tuple(dataclasses.replace(r, steps=0, step_time_s=math.nan, data_time_s=math.nan) for r in report.ranks)
    )
    lines = plain(ranks_lines(idle, 36, None))
    assert lines[0] == "step: no steps in this interval" and lines[1].endswith(" - data -")


async def _telemetry_after_a_report(pilot: Any, app: CockpitApp, factory: ScriptedFactory) -> None:
    await settle(pilot, factory)
    panel = app.main_screen.device_panel
    assert panel.mode == "ranks" and "2 ranks · GPU" in str(panel.border_title)
    panel.update_telemetry(telemetry_event("psutil", T0 + 999, 0))  # rank 0's own machine
    assert panel.mode == "ranks"
    assert "max over 2 ranks" in "\n".join(s.text for s in app.main_screen.memory_panel.row_strips())


def test_rank_0s_own_telemetry_does_not_replace_the_rank_rows() -> None:
    import asyncio

    factory = ScriptedFactory(script=ranks_script("nvml", 2, slow=1))
    app = CockpitApp(factory, "default")

    async def run() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await _telemetry_after_a_report(pilot, app, factory)

    asyncio.run(run())


def test_one_rank_under_torchrun_keeps_the_single_process_view() -> None:
    import asyncio

    factory = ScriptedFactory(script=ranks_script("nvml", 1, slow=None))
    app = CockpitApp(factory, "default")

    async def run() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await settle(pilot, factory)
            assert app.main_screen.device_panel.mode == "nvml" and app.main_screen.memory_panel.rank_max is None

    asyncio.run(run())
