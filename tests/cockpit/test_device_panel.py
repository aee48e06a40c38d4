"""The Device panel says what the engine's telemetry says: throttle reasons from the engine's
own table, and no reading passed off as live once the run that produced it has ended."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from pilot import pilot_test, wait_for
from scripted import ScriptedFactory, config_error, telemetry_event
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp
from cockpit.widgets.gpu_view import gpu_header
from cockpit.widgets.throttling import throttle_labels
from engine.telemetry.throttle_reasons import THROTTLE_BY_NAME, throttle_names


def header_text(reading: Any) -> str:
    return "  ".join(seg.text.plain for seg in gpu_header(reading))


def test_an_idle_gpu_shows_no_warning_and_a_power_cap_does() -> None:
    nvml = telemetry_event("nvml", 0.0, 0)
    busy = nvml.gpus[0]
    idle = dataclasses.replace(busy, throttle=throttle_names(0x1 | 0x2))  # idle + app clocks
    assert "⚠" not in header_text(idle)
    assert "idle" in header_text(idle)
    capped = dataclasses.replace(busy, throttle=throttle_names(0x4 | 0x40))
    assert "⚠ power cap, thermal (hw)" in header_text(capped)


def test_every_engine_name_gets_its_table_label() -> None:
    for name, reason in THROTTLE_BY_NAME.items():
        warnings, notes = throttle_labels((name,))
        assert (warnings if reason.warning else notes) == [reason.label]
    # a name the table lacks is shown, as a warning (it may be a slowdown)
    assert throttle_labels(("new_reason",)) == (["new reason"], [])


def test_scripted_telemetry_uses_names_the_engine_emits() -> None:
    for k in range(5):
        for gpu in telemetry_event("nvml", 0.0, k).gpus:
            assert all(name in THROTTLE_BY_NAME for name in gpu.throttle), gpu.throttle


def panel_text(widget: Any) -> str:
    """What a strip-drawn panel (plots, memory) shows inside its border."""
    return "\n".join(strip.text for strip in widget.row_strips())


@pilot_test(size=(160, 48), steps=60, finish=True)
async def test_after_the_run_ends_the_device_panel_says_its_readings_stopped(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await wait_for(pilot, lambda: not app.session.engine_running)
    await pilot.pause()
    last = [ev for ev in factory.trainer.script if ev.kind == "telemetry"][-1]
    when = time.strftime("%H:%M:%S", time.localtime(last.time))
    subtitle = str(app.main_screen.device_panel.border_subtitle)
    assert f"readings stopped {when} (run ended)" in subtitle
    # a new run's first reading makes the panel live again
    app.main_screen.device_panel.update_telemetry(telemetry_event("psutil", last.time + 60, 1))
    assert not app.main_screen.device_panel.border_subtitle


@pilot_test(size=(160, 48), fail={"broken": config_error("broken")})
async def test_a_failed_preset_switch_leaves_no_panel_showing_the_old_run_or_waiting(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    assert "waiting" not in panel_text(app.main_screen.memory_panel)  # the run's breakdown is shown
    app.switching.switch_to("broken")
    await wait_for(pilot, lambda: factory.names == ["default", "broken"])
    await wait_for(pilot, lambda: app.state == "failed")
    app.pump(force=True)
    await pilot.pause()
    lr, memory = panel_text(app.main_screen.lr_panel), panel_text(app.main_screen.memory_panel)
    for text in (lr, memory):
        assert "no run: broken could not start" in text
        assert "waiting" not in text
    assert "weights" not in memory  # not the old run's breakdown
    assert "readings stopped" in str(app.main_screen.device_panel.border_subtitle)
    # the next run that starts waits for its own schedule and breakdown again
    app.switching.switch_to("default")
    await wait_for(pilot, lambda: len(factory.trainers) == 2)
    assert app.main_screen.lr_panel.empty_message == app.main_screen.lr_panel.EMPTY_MESSAGE
    assert app.main_screen.memory_panel.empty_message == app.main_screen.memory_panel.EMPTY_MESSAGE


def screen_lines(app: CockpitApp) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def chart_rows(lines: list[str], label: str) -> list[str]:
    """The rows of the zoomed panel's chart labelled `label`: its label's line and the
    unlabelled lines under it (a chart is as tall as the panel has room for)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(f"│ {label} "))
    rows = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("│      ") or not line.strip("│ "):
            break
        rows.append(line)
    return rows


@pilot_test(size=(80, 24))
async def test_the_zoomed_cpu_panel_shows_history_the_run_s_own_and_each_core_s(
    pilot: Pilot, app: CockpitApp
) -> None:
    """Zoomed on a CPU run the panel was 5 lines and 30 blank rows: it shows the history there
    (the run's own CPU and RSS, one strip chart per core); unzoomed, as before."""
    unzoomed = "\n".join(screen_lines(app))
    assert "cpu0" not in unzoomed and "│ run " not in unzoomed  # no room for it there
    await pilot.press("3")
    await pilot.pause(0.3)
    app.pump(force=True)
    await pilot.pause(0.3)
    lines = screen_lines(app)
    run = chart_rows(lines, "run")
    assert "cores" in run[0] and any(bar in "".join(run) for bar in "▁▂▃▄▅▆▇█")  # 1.5-2.1 cores
    assert any("│ rss " in line and "GiB" in line for line in lines)
    per_core = [line for line in lines if any(f"│ cpu{i} " in line for i in range(8))]
    assert len(per_core) == 8  # the scripted machine's 8 cores, one strip chart each
    inside = [line for line in lines if line.startswith("│")]
    blank = [line for line in inside if not line.strip("│ ")]
    assert len(blank) <= len(inside) // 3, "\n".join(lines)
