"""Defects found by using the live settings screen and cool down in a real terminal (issue 25's
QA of the app), each pinned by what a user would notice: keys typed ahead land where they were
meant to, every key says something in every state, an acknowledged change is drawn at once."""

from __future__ import annotations

from typing import Any

from pilot import Toasts, pilot_test, wait_for
from scripted import ScriptedFactory
from textual import events
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import Input, Label

from cockpit.app.cockpit_app import CockpitApp
from cockpit.screens.cooldown import CooldownScreen
from cockpit.screens.live_settings import LiveSettingsScreen
from engine.events import RunState, StateChanged

WSD = {"schedule": {"kind": "wsd", "decay_fraction": 0.2}}


def field(screen: Any, key: str) -> Input:
    return screen.query_one(f"#set-{key.replace('.', '--')}", Input)


async def type_ahead(pilot: Pilot, *keys: str) -> None:
    """Keys arriving faster than the app handles them (a busy machine, a quick typist, a
    paste of keystrokes): all queued before any is handled, then handled in order."""
    for key in keys:
        char = {"full_stop": "."}.get(key, key if len(key) == 1 else None)
        pilot.app.post_message(events.Key(key, char))
    await pilot.pause()
    await pilot.pause()


async def open_screen(pilot: Pilot, app: CockpitApp) -> LiveSettingsScreen:
    await pilot.press("S")
    await pilot.pause()
    assert isinstance(app.screen, LiveSettingsScreen)
    return app.screen


@pilot_test()
async def test_digits_typed_right_after_tab_go_into_the_next_field(
    pilot: Pilot, app: CockpitApp
) -> None:
    """Tab then 0.05 at once: the value is the weight decay's, not the LR's (the tab used to
    reach the field after the digits, which went into the field being left)."""
    screen = await open_screen(pilot, app)
    assert app.focused is field(screen, "optim.lr")
    await type_ahead(pilot, "tab", "0", "full_stop", "0", "5")
    assert field(screen, "optim.lr").value == ""
    assert field(screen, "optim.weight_decay").value == "0.05"
    await type_ahead(pilot, "shift+tab", "1")
    assert field(screen, "optim.lr").value == "1"


@pilot_test()
async def test_a_key_right_after_esc_reaches_the_main_screen(
    pilot: Pilot, app: CockpitApp
) -> None:
    """esc then j at once: the screen closes and the journal opens (j used to be typed into
    the field of the screen being closed, and lost)."""
    await open_screen(pilot, app)
    await type_ahead(pilot, "escape", "j")
    assert type(app.screen).__name__ == "JournalScreen"


@pilot_test()
async def test_c_before_the_run_started_says_why_nothing_opens(
    pilot: Pilot, app: CockpitApp, toasts: Toasts
) -> None:
    app.session.view.info = None  # as while the run starts: its settings not known yet
    await pilot.press("C")
    await pilot.pause()
    assert app.screen is app.main_screen
    assert toasts and "not known yet" in toasts[-1].message and toasts[-1].title == "Cool down now"


@pilot_test(config=WSD)
async def test_the_lr_panel_draws_the_acknowledged_schedule_at_once(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    """Cool down acknowledged: the panel's planned curve and axis are the new run's on the
    drain that routes the acknowledgement, not at the panel's next slow redraw (seconds later
    on a loaded machine, the status line saying /700 beside a plan to 2,000 meanwhile)."""
    panel = app.main_screen.lr_panel
    app.pump(force=True)  # drawn just now: the panel's own pace would wait seconds for the next
    await pilot.press("C")
    await pilot.pause()
    await pilot.press("enter")  # the configured fraction: 400 steps from step 300
    await pilot.pause()
    app.pump()  # the drain the engine's acknowledgement wakes, not forced
    await pilot.pause()
    assert panel.max_steps == 700 and panel.planned[-1][0] == 699
    assert not panel.stale  # its redraw asked for with the acknowledgement


@pilot_test()
async def test_the_screen_follows_the_run_s_step_while_open(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    """Left open while the run trains: 'At step N' is the run's step now (it stayed at the step
    the screen opened at, e.g. 'At step 0' at 80x24 where the status line is covered), and a
    length the run has passed since is refused under its field, not sent to be refused."""
    screen = await open_screen(pilot, app)
    assert "At step 300 of 2,000" in str(screen.query_one("#live-note").render())
    app.session.view.step = 450  # the run trained on (the drain's Step events)
    note = screen.query_one("#live-note")
    await wait_for(pilot, lambda: "At step 450 of 2,000" in str(note.render()))  # within ~1 s
    field(screen, "train.max_steps").value = "400"
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()
    assert app.screen is screen and "step 450" in screen.refusal_of("train.max_steps")
    assert [c for c in factory.trainer.calls if c[0] == "set_settings"] == []


@pilot_test()
async def test_a_grad_accum_change_says_the_tokens_a_step(
    pilot: Pilot, app: CockpitApp, toasts: Toasts
) -> None:
    """Tokens a step are on no panel: the acknowledgement's toast says them, before and after."""
    before = app.main_screen.loss_panel.tokens_per_step
    screen = await open_screen(pilot, app)
    field(screen, "train.grad_accum").value = "4"
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()
    app.pump(force=True)
    await pilot.pause()
    (ack,) = [t for t in toasts if t.title.startswith("Settings changed")]
    assert "train.grad_accum 1 -> 4" in ack.message
    assert f"{4 * before:,} tokens a step (was {before:,})" in ack.message


@pilot_test()
async def test_a_read_only_screen_does_not_say_values_will_be_sent(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    factory.trainer.read_only = True  # type: ignore[misc]
    screen = await open_screen(pilot, app)
    note = str(screen.query_one("#live-note").render())
    assert note.startswith("At step 300") and "apply from the next step" not in note


@pilot_test(config={"sample": {"prompts": ["hello", "a\nb"]}})
async def test_a_value_too_long_for_its_column_ends_in_an_ellipsis(
    pilot: Pilot, app: CockpitApp
) -> None:
    """'["hello", "a\\nb"]' in a 12-cell column read '["hello",' (a list of one prompt, cut
    without a sign); now it ends in '…', the whole value in the field's placeholder."""
    screen = await open_screen(pilot, app)
    keys = [str(label.render()) for label in screen.query(".live-key").results(Label)]
    label = list(screen.query(".live-value").results(Label))[keys.index("sample.prompts")]
    (line,) = label.render_lines(Region(0, 0, label.size.width, 1))
    assert line.text.rstrip().endswith("…") and line.text.startswith('["hello",')
    assert field(screen, "sample.prompts").placeholder == '["hello", "a\\nb"]'


@pilot_test()
async def test_a_finished_run_s_screen_names_the_command_that_changes_its_settings(
    pilot: Pilot, app: CockpitApp
) -> None:
    """'resume it with --set KEY=VALUE' named no command; the line is one to type now."""
    assert app.view.info is not None
    app.feed.route(StateChanged(state=RunState.FINISHED, step=300, time=app.view.info.time + 1))
    screen = await open_screen(pilot, app)
    why = str(screen.query_one("#live-read-only").render())
    assert "cockpit train --resume runs/default-scripted --set KEY=VALUE" in why


@pilot_test(config=WSD)
async def test_the_cool_down_dialog_follows_the_run_s_step_while_open(
    pilot: Pilot, app: CockpitApp
) -> None:
    """C at step 300, the run trains on: the text's 'next step' and the previewed end are the
    run's now (they stayed at 301 and 700: at 80x24, 'step 703' beside a status line of 802)."""
    await pilot.press("C")
    await pilot.pause()
    assert isinstance(app.screen, CooldownScreen)
    panel = app.main_screen.lr_panel
    await wait_for(pilot, lambda: panel.preview_max_steps == 700)
    app.session.view.step = 450
    message = app.screen.query_one("#cooldown-message")
    await wait_for(pilot, lambda: "(step 451;" in str(message.render()))  # within ~1 s
    # the preview reaches the LR panel as a message of its own, handled after the text's update
    await wait_for(pilot, lambda: panel.preview_max_steps == 850)  # 450 + the configured 400
