"""The Device panel repaints only what a reading changed: a figure that reads the same as a
second ago (RAM, the process's RSS, the per-core bars) is not redrawn, so the screen update
around it stays small (drawing time is training time)."""

from __future__ import annotations

import asyncio
import dataclasses

from textual.app import App, ComposeResult

from cockpit.widgets.cpu_view import CpuView
from cockpit.widgets.device import DevicePanel
from engine.events import Telemetry

GiB = 2**30


def reading(cpu: float, t: float) -> Telemetry:
    return Telemetry(
        source="psutil",
        cpu_percent=cpu,
        cpu_per_core=(90.0, 95.0),
        ram_used=5 * GiB,
        ram_total=16 * GiB,
        process_rss=int(1.5 * GiB),
        time=t,
    )


class PanelApp(App):
    def compose(self) -> ComposeResult:
        yield DevicePanel(id="device")


def test_a_reading_repaints_only_the_figures_it_changed() -> None:
    async def run() -> tuple[list[str], str]:
        app = PanelApp()
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(DevicePanel)
            panel.update_telemetry(reading(50.0, 1.0))
            panel.flush(10.0, force=True)
            await pilot.pause()
            view = app.query_one(CpuView)
            repainted: list[str] = []
            watched = {
                "ram value": view.ram_meter.value,
                "rss": view.rss,
                "cores": view.cores,
                "cpu value": view.cpu_meter.value,
                "cpu chart": view.cpu_meter.spark,
            }
            for name, widget in watched.items():
                original = widget.refresh

                def counting(*args, _name=name, _original=original, **kwargs):
                    repainted.append(_name)
                    return _original(*args, **kwargs)

                widget.refresh = counting  # type: ignore[method-assign]
            # a second later: only the CPU figure moved (RAM, RSS and the core bars read the same)
            panel.update_telemetry(dataclasses.replace(reading(60.0, 2.0)))
            panel.flush(20.0, force=True)
            await pilot.pause()
            shown = "\n".join(line.text for line in app.screen._compositor.render_strips())
            shown += "\n" + "\n".join(str(w.render()) for w in (view.cpu_meter.value, view.ram_meter.value, view.cores))
        return sorted(set(repainted)), shown

    repainted, shown = asyncio.run(run())
    assert repainted == ["cpu chart", "cpu value"]
    # and the screen still shows every figure
    assert "60%" in shown and "process RSS 1.5 GiB" in shown and "GiB" in shown and "×2" in shown
