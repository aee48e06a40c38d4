"""The LR dialog against the scripted trainer: the LR it already has is no change: nothing is
sent (so nothing is journaled), and the dialog says why it stays open."""

from __future__ import annotations

from pilot import pilot_test
from scripted import ScriptedFactory
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp
from cockpit.screens.lr_dialog import LrScreen


async def open_dialog(pilot: Pilot, app: CockpitApp) -> LrScreen:
    await pilot.press("l")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, LrScreen) and screen.plan is not None
    return screen


@pilot_test()
async def test_the_lr_it_already_has_is_not_sent(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    screen = await open_dialog(pilot, app)
    plan = screen.plan
    assert plan is not None
    already = plan.settled * plan.scale  # what it is set to be from here (or warmup's end) on
    field = screen.query_one("#lr-input")
    field.value = repr(already)
    await pilot.pause()
    assert str(screen.query_one("#lr-error").render()).startswith("enter: nothing changes (the LR is ")
    await pilot.press("enter")
    await pilot.pause()
    assert app.screen is screen  # the dialog stays, saying why
    assert screen.error.endswith("already: nothing to change")
    assert factory.trainer.calls == []

