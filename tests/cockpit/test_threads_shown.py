"""The CPU threads a run measured (a `threads` record, engine/train/thread_tuner.py) are shown
under the Device panel's CPU readings, with the step times that chose them."""

from __future__ import annotations

from pilot import pilot_test
from scripted import ScriptedFactory
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp
from engine.events import ThreadsChosen


def screen_text(app: CockpitApp) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


@pilot_test(size=(160, 48))
async def test_the_measured_thread_count_and_its_times_show_on_the_device_panel(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    panel = app.main_screen.device_panel
    assert "threads" not in screen_text(app)  # nothing measured: no line, no room taken
    trainer = factory.trainer
    measured = ThreadsChosen(step=8, threads=2, previous=1, step_times_s={"1": 0.41, "2": 0.24},
                             reason="the first steps", time=trainer.script[-1].time + 1)  # fmt: skip
    trainer.events.put(measured)
    app.pump(force=True)
    await pilot.pause()
    assert "threads 2 (measured: 1→410 ms, 2→240 ms)" in screen_text(app)
    line = panel.query_one(".threads")
    assert line.tooltip == "measured at step 8: the first steps"
    # measured again under load: the new count replaces the old
    again = ThreadsChosen(step=40, threads=1, previous=2, step_times_s={"2": 0.9, "1": 0.42},
                          reason="the step time went from 240 ms to 900 ms",
                          time=measured.time + 1)  # fmt: skip
    trainer.events.put(again)
    app.pump(force=True)
    await pilot.pause()
    text = screen_text(app)
    assert "threads 1 (measured: 1→420 ms, 2→900 ms)" in text and "threads 2" not in text
