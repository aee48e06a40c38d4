"""The status line while the run's final evaluation runs: 'final evaluation…', not 'ETA 0s'.

After the last step the engine evaluates, samples and saves before it says finished; the status
line said `RUNNING 90/90 100% ETA 0s` all that while (20 s on a big eval), which reads as a hang.
"""

from __future__ import annotations

from pilot import pilot_test, status_text
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp


@pilot_test(steps=310, max_steps=310)
async def test_every_step_trained_and_not_finished_says_final_evaluation(
    pilot: Pilot, app: CockpitApp
) -> None:
    app.refresh_status()
    await pilot.pause()
    text = status_text(app)
    assert "310/310" in text and "final evaluation…" in text, text
    assert "ETA" not in text


@pilot_test(steps=300, max_steps=2000)
async def test_a_run_still_training_shows_its_eta(pilot: Pilot, app: CockpitApp) -> None:
    app.refresh_status()
    await pilot.pause()
    text = status_text(app)
    assert "ETA" in text and "final evaluation" not in text, text
