"""The zoomed Device panel's history, fed readings over six minutes: on a GPU box each GPU's
utilisation, the run's own SM use, memory and the run's share, power; the run's own CPU and RSS;
on a CPU box each core too. The charts cover the last 5 minutes, fill the panel, and leave a
gap where no reading came."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pilot import pilot_test, settle
from scripted import T0, GiB, ScriptedFactory
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp
from cockpit.widgets.meters import HistoryMeter
from engine.events import DeviceReading, Telemetry

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}
START = T0 + 100.0  # after the scripted run's own readings
GAP = range(200, 230)  # seconds with no reading (the viewer was away): a gap in every chart


def dips(k: int) -> bool:
    return k % 50 < 5  # an evaluation every 50 s: the GPU idles for 5 s


def gpu_reading(k: int) -> Telemetry:
    """Second k of a run on a 24 GB card: the run holds most of its memory, which grows over
    the first minute; utilisation and power dip at each evaluation."""
    util = 30.0 if dips(k) else 92 + 6 * math.sin(k / 9)
    return Telemetry(
        source="nvml",
        time=START + k,
        cpu_percent=14.0,
        cpu_per_core=(20.0,) * 16,
        ram_used=40 * GiB,
        ram_total=128 * GiB,
        process_rss=int((6 + k / 200) * GiB),
        process_cpu_percent=180.0 if dips(k) else 110 + 30 * math.sin(k / 15),
        gpus=(
            DeviceReading(
                index=0,
                name="NVIDIA GeForce RTX 4090",
                util_percent=util,
                mem_util_percent=55,
                mem_used=int((12 + min(k, 60) / 6) * GiB),
                mem_total=24 * GiB,
                process_mem=int((11 + min(k, 60) / 6) * GiB),
                temperature_c=66,
                power_w=120.0 if dips(k) else 300 + 1.2 * util,
                power_limit_w=450,
                sm_clock_mhz=2520,
                process_util_percent=util - 4,
            ),
        ),
    )


def cpu_reading(k: int) -> Telemetry:
    """Second k of a run on an 8-core machine that uses about 6 of them."""
    cores = tuple(15.0 if dips(k) else 70 + 25 * math.sin(k / 11 + i) for i in range(8))
    return Telemetry(
        source="psutil",
        time=START + k,
        cpu_percent=sum(cores) / 8,
        cpu_per_core=cores,
        ram_used=int(5.2 * GiB),
        ram_total=int(15.6 * GiB),
        process_rss=int((1.1 + k / 1000) * GiB),
        process_cpu_percent=90.0 if dips(k) else 560 + 60 * math.sin(k / 13),
    )


def readings(kind: str) -> list[Telemetry]:
    make = gpu_reading if kind == "gpu" else cpu_reading
    return [make(k) for k in range(360) if k not in GAP]


async def feed_zoomed(pilot: Pilot, app: CockpitApp, kind: str) -> None:
    """Zoom the Device panel, feed it six minutes of readings, and draw them."""
    await pilot.press("3")
    await pilot.pause()
    panel = app.main_screen.device_panel
    for ev in readings(kind):
        panel.update_telemetry(ev)
    app.pump(force=True)
    await pilot.pause(0.2)  # the charts take the room the panel has: laid out, then drawn
    app.pump(force=True)
    await pilot.pause()


def scenario(kind: str) -> tuple[CockpitApp, Callable[[Any], Awaitable[None]]]:
    factory = ScriptedFactory(telemetry="nvml" if kind == "gpu" else "psutil")
    app = CockpitApp(factory, "default")

    async def before(pilot: Pilot) -> None:
        await settle(pilot, factory)
        app.clear_notifications()
        await feed_zoomed(pilot, app, kind)
        app.clear_notifications()
        await pilot.pause()

    return app, before


@pytest.fixture(params=list(SIZES), ids=list(SIZES))
def size(request: pytest.FixtureRequest) -> tuple[int, int]:
    return SIZES[request.param]


def test_zoomed_gpu_history(snap_compare: Any, size: tuple[int, int]) -> None:
    app, before = scenario("gpu")
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_zoomed_cpu_history(snap_compare: Any, size: tuple[int, int]) -> None:
    app, before = scenario("cpu")
    assert snap_compare(app, terminal_size=size, run_before=before)


def screen_lines(app: CockpitApp) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def panel_rows(lines: list[str]) -> list[str]:
    """The zoomed panel's rows inside its border."""
    return [line[2:-2] for line in lines if line.startswith("│") and line.endswith("│")]


@pilot_test(size=(160, 48), telemetry="nvml")
async def test_the_zoomed_gpu_panel_shows_the_run_s_own_process_over_the_last_5_minutes(
    pilot: Pilot, app: CockpitApp
) -> None:
    await feed_zoomed(pilot, app, "gpu")
    rows = panel_rows(screen_lines(app))
    text = "\n".join(rows)
    assert "last 5 min, newest on the right" in text
    last = gpu_reading(359).gpus[0]
    labelled = {row[:6].strip(): row for row in rows if row[:6].strip()}
    # the newest reading's figures beside their charts: the run's own SM use and memory
    assert labelled["util"].rstrip().endswith(f"{last.util_percent:.0f}%")
    run_rows = [row for row in rows if row.startswith(" run ")]
    assert run_rows[0].rstrip().endswith(f"{last.process_util_percent:.0f}% SM")
    assert run_rows[1].rstrip().endswith("21 GiB")  # the run's 21 of the card's 24 GiB
    assert labelled["power"].rstrip().endswith(f"{last.power_w:.0f}/450 W")
    rss = gpu_reading(359).process_rss or 0
    assert labelled["rss"].rstrip().endswith(f"{rss / GiB:.3g} GiB")
    # the 30 s without readings is a blank stretch in every chart (not a fall to zero)
    chart = [row[6:-16] for row in rows if row.startswith("      ") or row[:6].strip()]
    bars = [row for row in chart if any(b in row for b in "▁▂▃▄▅▆▇█")]
    assert bars and all(" " * 10 in row.strip() for row in bars)
    # the charts share the panel's height: taller than a row each, down to the panel's bottom
    panel = app.main_screen.device_panel
    meters = list(panel.query(HistoryMeter))
    assert len(meters) == 7 and all(m.region.height > 1 for m in meters)
    assert max(m.region.bottom for m in meters) >= panel.content_region.bottom - 2


@pilot_test(size=(160, 48), telemetry="nvml")
async def test_unzoomed_the_gpu_panel_shows_no_history(pilot: Pilot, app: CockpitApp) -> None:
    app.pump(force=True)
    await pilot.pause()
    text = "\n".join(screen_lines(app))
    assert "last 5 min" not in text and "% SM" not in text
