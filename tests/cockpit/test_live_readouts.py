"""What the screen shows stays the run's while a dialog is open and after a rollback: the status
line under a dialog moves with the step the dialog shows, the LR dialog's figures follow the
run's, and a rollback's discarded steps leave the status line and the plots at once."""

from __future__ import annotations

import pytest
from pilot import pilot_test, status_text, wait_for
from scripted import ScriptedFactory, step_event
from textual.pilot import Pilot
from textual.widgets import Static

from cockpit.app.cockpit_app import CockpitApp
from cockpit.figures.numbers import fmt_lr
from cockpit.screens.dialogs import ConfirmScreen
from cockpit.screens.live_settings import LiveSettingsScreen
from cockpit.screens.lr_dialog import LrScreen, run_lr_plan
from engine.optim import lr_change


def steps(factory: ScriptedFactory, first: int, last: int, lr: float = 8e-4) -> None:
    trainer = factory.trainer
    for step in range(first, last + 1):
        trainer._emit(step_event(step, 2.0, lr, 1.0, trainer._next_time()))


def text(app: CockpitApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


@pilot_test()  # step 300 of 2,000
async def test_the_status_line_under_a_dialog_moves_with_the_step_the_dialog_shows(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the load governor stretches the status line's redraws on a busy UI (up to 8 s): it held
    # the line at step 1,500 while the dialog said 1,538
    monkeypatch.setattr("cockpit.app.main_screen.STATUS_REFRESH_S", 60.0)
    await pilot.press("S")
    await wait_for(pilot, lambda: isinstance(app.screen, LiveSettingsScreen))
    steps(factory, 301, 338)
    await wait_for(pilot, lambda: "At step 338 of 2,000" in text(app, "#live-note"))
    assert "step 338/2,000" in status_text(app)


@pilot_test()
async def test_the_lr_dialog_follows_the_run_s_lr(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("l")
    await wait_for(pilot, lambda: isinstance(app.screen, LrScreen))
    await pilot.press(*"x2")
    opened = text(app, "#lr-current")
    steps(factory, 301, 320, lr=8.55e-4)
    await wait_for(pilot, lambda: app.view.lr == pytest.approx(8.55e-4))
    await wait_for(pilot, lambda: text(app, "#lr-current") != opened)
    assert text(app, "#lr-current").startswith(f"now {fmt_lr(8.55e-4)}")
    # what enter does is said at the run's step now
    change = lr_change("scale_lr", 2.0, run_lr_plan(app.view.info, 320, app.view.scale))
    assert f"→ {fmt_lr(change.new_lr)} from the next step" in str(
        app.screen.query_one("#lr-error").render()
    )


@pilot_test()  # step 300, last checkpoint at 250
async def test_a_rollback_takes_the_discarded_steps_off_the_screen_at_once(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("r")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await wait_for(pilot, lambda: app.state == "paused")
    await pilot.press("y")
    # the engine is back at step 250, running, its next step not yet trained
    await wait_for(pilot, lambda: any(c[0] == "rollback" for c in factory.trainer.calls))
    await wait_for(pilot, lambda: app.state == "running" and app.view.scale == 0.5 * 1.25)
    assert "step 250/2,000" in status_text(app)
    loss, lr = app.main_screen.loss_panel, app.main_screen.lr_panel
    assert loss.raw.last[0] == 250 and lr.applied.last[0] == 250
    assert loss.last_val_step is None or loss.last_val_step <= 250
