"""Every steering key says why it does nothing where it cannot act: a run that finished or
failed, a read-only viewer. They were silent there (the bindings are disabled, so the key went
nowhere); a paused run takes them all. Scripted runs."""

from __future__ import annotations

import pytest
from pilot import Toasts, pilot_test
from scripted import ScriptedFactory
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp
from cockpit.app.offers import STEERING_BY_KEY

# every key of every command that needs a running engine: space, c, C, l, + =, - _, s, e, r
KEYS = sorted(STEERING_BY_KEY)


async def press_each(pilot: Pilot, app: CockpitApp, toasts: Toasts) -> dict[str, list[str]]:
    """Each key pressed on the main screen: the toasts each raised (title: message)."""
    said: dict[str, list[str]] = {}
    for key in KEYS:
        toasts.clear()
        app.session.refusal_said = None  # each key its own answer, not the one before's
        await pilot.press(key)
        await pilot.pause()
        assert app.screen is app.main_screen, key  # nothing opened
        said[key] = [f"{t.title}: {t.message}" for t in toasts]
    return said


@pytest.mark.parametrize("ending", [{"finish": True}, {"fail_at": 300}], ids=["finished", "failed"])
def test_a_run_that_ended_answers_every_steering_key_in_one_line(ending: dict[str, object]) -> None:
    @pilot_test(**ending)
    async def scenario(pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts) -> None:
        state = app.session.state
        assert state in ("finished", "failed")
        said = await press_each(pilot, app, toasts)
        for key, lines in said.items():
            assert len(lines) == 1, (key, lines)
            assert f"the run {state}: nothing trains to steer" in lines[0], (key, lines)
            assert "\n" not in lines[0]
        assert said["C"][0].startswith("Cool down now: ")
        assert factory.trainer.calls == []  # nothing was sent

    scenario()


@pilot_test()
async def test_a_read_only_viewer_answers_every_steering_key_in_one_line(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts
) -> None:
    factory.trainer.read_only = True  # as a viewer attached with --read-only
    app.refresh_offers()
    await pilot.pause()
    said = await press_each(pilot, app, toasts)
    for key, lines in said.items():
        assert len(lines) == 1 and "only watches" in lines[0] and "--read-only" in lines[0], (key, lines)
    assert said["C"][0].startswith("Cool down now: ")
    assert factory.trainer.calls == []


@pilot_test(finish=True)
async def test_a_burst_of_presses_says_it_once_while_it_is_on_screen(
    pilot: Pilot, app: CockpitApp, toasts: Toasts
) -> None:
    toasts.clear()
    await pilot.press("C", "C", "C", "C")
    await pilot.pause()
    assert len(toasts) == 1


@pilot_test()
async def test_a_running_run_s_keys_act_and_say_no_refusal(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts
) -> None:
    toasts.clear()
    await pilot.press("s", "e", "plus")
    await pilot.pause()
    assert ("sample",) in factory.trainer.calls and ("evaluate",) in factory.trainer.calls
    assert not any("nothing trains" in t.message or "only watches" in t.message for t in toasts)
