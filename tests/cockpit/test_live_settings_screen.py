"""The live settings screen against the scripted engine: S and the palette open it, it shows the
values in force, refuses a bad value in one line with nothing sent, sends exactly the edited
settings, previews a schedule change on the LR panel (cleared on cancel), cools a WSD run down
now, shows a read-only viewer the values with the fields disabled, and an attached one
steers the same way. Its decisions alone, without an app, first; the real engine taking the
screen's settings last."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pilot import REAL_SIZE, Toasts, pilot_test, real_app, run_pilot, wait_for_engine
from scripted import ScriptedFactory
from textual.app import App, ComposeResult
from textual.geometry import Region, Size
from textual.pilot import Pilot
from textual.widgets import Button, Input, Label

from cockpit.app.cockpit_app import CockpitApp
from cockpit.figures.live_decisions import (
    config_after,
    decide,
    decide_cooldown,
    field_help,
    shown_value,
)
from cockpit.screens.cooldown import CooldownScreen
from cockpit.screens.live_settings import LiveSettingsScreen, placement
from cockpit.widgets.lr import LrPanel
from engine.config import COOLDOWN, LIVE_SETTINGS, config_from_dict
from engine.optim import planned_curve

WSD = {"schedule": {"kind": "wsd", "decay_fraction": 0.2}}


# the decisions, alone --------------------------------------------------------------------------


def test_a_bad_value_is_refused_in_one_line_naming_the_key() -> None:
    cfg = config_from_dict({}, "test")
    decision = decide(cfg, 300, {"optim.weight_decay": "lots", "eval.interval": "50"})
    assert list(decision.refused) == ["optim.weight_decay"]
    (why,) = decision.refused.values()
    assert "optim.weight_decay" in why and "\n" not in why
    assert decision.change is None and decision.settings == {}


def test_a_run_cannot_be_shortened_behind_its_step() -> None:
    cfg = config_from_dict({}, "test")
    decision = decide(cfg, 300, {"train.max_steps": "200"})
    assert "step 300" in decision.refused["train.max_steps"]


def test_good_edits_are_sent_typed_as_the_config_holds_them() -> None:
    cfg = config_from_dict({}, "test")
    decision = decide(cfg, 300, {"optim.weight_decay": "0", "eval.interval": "50"})
    assert decision.refused == {} and decision.refusal == ""
    assert decision.settings == {"optim.weight_decay": 0.0, "eval.interval": 50}
    assert decide(cfg, 300, {}).refusal.startswith("nothing to change")
    same = shown_value(cfg.optim.weight_decay)
    assert decide(cfg, 300, {"optim.weight_decay": same}).refusal.startswith("nothing to change")


def test_cool_down_needs_a_wsd_schedule_and_a_length_in_steps() -> None:
    cosine = config_from_dict({}, "test")
    refused = decide_cooldown(cosine, 300, "")
    assert isinstance(refused, str) and "WSD" in refused
    wsd = config_from_dict(WSD, "test")
    length, new = decide_cooldown(wsd, 300, "100")  # type: ignore[misc]
    assert length == 100 and new.schedule.decay_start == 300 and new.train.max_steps == 400
    assert decide_cooldown(wsd, 300, "")[0] == 0  # type: ignore[index]
    assert "steps" in decide_cooldown(wsd, 300, "soon")  # type: ignore[operator]


def test_an_acknowledged_change_updates_the_config_the_app_sees() -> None:
    raw = {"name": "x", "optim": {"weight_decay": 0.1}}
    after = config_after(raw, {"optim.weight_decay": [0.1, 0.0], "train.max_steps": [2000, 5000]})
    assert after["optim"]["weight_decay"] == 0.0 and after["train"]["max_steps"] == 5000
    assert raw["optim"]["weight_decay"] == 0.1  # the event's own dict is left as it was


def test_each_setting_has_its_field_help_and_when_it_applies() -> None:
    for key in LIVE_SETTINGS:
        assert LIVE_SETTINGS[key] in field_help(key)
    assert field_help("optim.grad_clip").startswith("max gradient norm")


def test_the_box_leaves_the_lr_panel_in_view() -> None:
    screen = Size(160, 48)
    # wide: the LR panel bottom left, the box beside it
    assert placement(Region(0, 30, 96, 17), screen) == ("right", "top", 64, 48)
    # compact: the LR panel bottom right, the box above it
    assert placement(Region(40, 14, 40, 9), Size(80, 24)) == ("center", "top", 80, 14)
    # zoomed (it fills the screen): centred
    assert placement(Region(0, 0, 160, 48), screen)[:2] == ("center", "middle")
    # the status line (row 0) left in view above the box: one row less for it
    assert placement(Region(0, 30, 96, 17), screen, top=1) == ("right", "top", 64, 47)
    assert placement(Region(40, 14, 40, 9), Size(80, 24), top=1) == ("center", "top", 80, 13)


@pilot_test()
async def test_the_status_line_stays_whole_above_the_screen(pilot: Pilot, app: CockpitApp) -> None:
    """The box starts below the status line, which follows the run meanwhile: it covered row 0,
    leaving the line's cut ends beside its corners ('R╭─ Live settings' at 80x24)."""
    status = app.main_screen.status_line.region
    await open_screen(pilot, app)
    box = app.screen.query_one("#live-dialog").region
    assert box.y >= status.bottom


# the screen in the app -----------------------------------------------------------------------


async def open_screen(pilot: Pilot, app: CockpitApp) -> LiveSettingsScreen:
    await pilot.press("S")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, LiveSettingsScreen)
    return screen


def field(screen: Any, key: str) -> Input:
    return screen.query_one(f"#set-{key.replace('.', '--')}", Input)


def settings_sent(factory: ScriptedFactory) -> list[dict[str, Any]]:
    return [call[1] for call in factory.trainer.calls if call[0] == "set_settings"]


@pilot_test()
async def test_s_opens_the_screen_with_every_live_setting_and_its_value(
    pilot: Pilot, app: CockpitApp
) -> None:
    screen = await open_screen(pilot, app)
    assert screen.step == 300 and screen.config.train.max_steps == 2000
    keys = [str(label.render()) for label in screen.query(".live-key").results(Label)]
    assert keys == list(LIVE_SETTINGS)
    values = [str(label.render()) for label in screen.query(".live-value").results(Label)]
    assert values[keys.index("train.max_steps")] == "2000"
    assert values[keys.index("optim.weight_decay")] == shown_value(screen.config.optim.weight_decay)
    assert not field(screen, "optim.lr").disabled
    await pilot.press("escape")
    await pilot.pause()
    assert app.screen is app.main_screen


@pilot_test()
async def test_the_palette_entry_opens_the_screen(pilot: Pilot, app: CockpitApp) -> None:
    (entry,) = [c for c in app.get_system_commands(app.screen) if c.title == "Live settings"]
    assert entry.help.endswith("(S)")
    entry.callback()
    await pilot.pause()
    assert isinstance(app.screen, LiveSettingsScreen)


@pilot_test()
async def test_a_bad_value_is_refused_under_its_field_and_nothing_is_sent(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    screen = await open_screen(pilot, app)
    field(screen, "optim.weight_decay").value = "0"
    field(screen, "train.max_steps").value = "100"  # behind the run's step 300
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()
    assert app.screen is screen  # open, saying why
    why = screen.refusal_of("train.max_steps")
    assert "step 300" in why and "\n" not in why
    assert screen.refusal_of("optim.weight_decay") == ""
    shown = str(screen.query_one("#set-train--max_steps-refusal", Label).render())
    assert "step 300" in shown
    assert settings_sent(factory) == []


@pilot_test()
async def test_a_good_edit_sends_exactly_the_settings_asked_and_the_ack_updates_the_values(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    screen = await open_screen(pilot, app)
    field(screen, "optim.weight_decay").value = "0.05"
    field(screen, "eval.interval").value = "50"
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()
    assert app.screen is app.main_screen
    assert settings_sent(factory) == [{"optim.weight_decay": 0.05, "eval.interval": 50}]
    app.pump(force=True)  # the engine's SettingsChanged
    await pilot.pause()
    screen = await open_screen(pilot, app)
    assert screen.config.optim.weight_decay == 0.05 and screen.config.eval.interval == 50


@pilot_test()
async def test_a_schedule_change_is_previewed_on_the_lr_panel_and_cleared_on_cancel(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    panel = app.main_screen.lr_panel
    planned = list(panel.planned)
    screen = await open_screen(pilot, app)
    assert panel.preview == ()
    inp = field(screen, "train.max_steps")
    inp.focus()
    await pilot.press(*"4000")
    await pilot.pause()
    assert panel.preview_max_steps == 4000 and panel.preview[-1][0] == 3999
    assert panel.planned == planned  # the plan is the run's until the change is applied
    assert "preview" in str(panel.border_title)
    field(screen, "eval.interval").value = "50"  # no schedule in it: the preview stays
    await pilot.pause()
    assert panel.preview_max_steps == 4000
    await pilot.press("escape")
    await pilot.pause()
    assert panel.preview == () and "preview" not in str(panel.border_title)
    assert settings_sent(factory) == []


@pilot_test()
async def test_a_setting_that_leaves_the_schedule_as_it_is_has_no_preview(
    pilot: Pilot, app: CockpitApp
) -> None:
    screen = await open_screen(pilot, app)
    field(screen, "optim.weight_decay").value = "0"
    await pilot.pause()
    assert app.main_screen.lr_panel.preview == ()


@pilot_test()
async def test_cool_down_now_is_refused_on_a_cosine_schedule(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts
) -> None:
    await pilot.press("C")  # the key says why, and opens nothing
    await pilot.pause()
    assert app.screen is app.main_screen
    assert "WSD" in toasts[-1].message and "cosine" in toasts[-1].message
    screen = await open_screen(pilot, app)
    assert screen.query_one("#live-cooldown", Button).disabled
    assert screen.query_one("#live-cooldown-steps", Input).disabled
    why = str(screen.query_one("#live-cooldown-refusal").render())
    assert "WSD" in why and "cosine" in why
    assert settings_sent(factory) == []


@pilot_test(config=WSD)
async def test_c_cools_a_wsd_run_down_now_with_a_length(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("C")
    await pilot.pause()
    assert isinstance(app.screen, CooldownScreen)
    panel = app.main_screen.lr_panel
    assert panel.preview_max_steps == 300 + 400  # the configured fraction: 20% of 2000
    await pilot.press("1", "0", "0")
    await pilot.pause()
    assert panel.preview_max_steps == 400
    await pilot.press("enter")
    await pilot.pause()
    assert settings_sent(factory) == [{COOLDOWN: 100}]
    assert panel.preview == ()
    app.pump(force=True)
    await pilot.pause()
    assert app.view.info is not None and app.view.info.config["train"]["max_steps"] == 400


@pilot_test(config=WSD)
async def test_the_screen_s_cool_down_button_sends_the_configured_fraction(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    screen = await open_screen(pilot, app)
    button = screen.query_one("#live-cooldown", Button)
    assert not button.disabled
    button.press()
    await pilot.pause()
    assert settings_sent(factory) == [{COOLDOWN: 0}]


@pilot_test()
async def test_a_read_only_viewer_sees_the_values_with_the_fields_disabled(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    factory.trainer.read_only = True  # type: ignore[misc]
    screen = await open_screen(pilot, app)
    assert all(inp.disabled for inp in screen.query(Input).results(Input))
    assert screen.query_one("#live-apply", Button).disabled
    assert "read-only" in str(screen.query_one("#live-read-only").render())
    values = [str(label.render()) for label in screen.query(".live-value").results(Label)]
    assert "2000" in values
    await pilot.press("enter")
    await pilot.pause()
    assert settings_sent(factory) == []


@pilot_test()
async def test_an_attached_viewer_steers_the_same_way(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    factory.trainer.outlives_viewer = True  # type: ignore[misc]  # as a RemoteEngine: attached
    assert app.session.attached
    screen = await open_screen(pilot, app)
    assert not field(screen, "optim.grad_clip").disabled
    field(screen, "optim.grad_clip").value = "0.5"
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()
    assert settings_sent(factory) == [{"optim.grad_clip": 0.5}]


@pilot_test()
async def test_the_engine_s_refusal_is_shown(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts
) -> None:
    """The run moved on since the screen checked (it decides at its own step): its Alert says
    why, and nothing changed."""
    screen = await open_screen(pilot, app)
    field(screen, "train.max_steps").value = "400"  # fine at the app's step 300
    await pilot.pause()
    factory.trainer.step = 450  # the run's step when the command lands
    await pilot.press("enter")
    await pilot.pause()
    assert settings_sent(factory) == [{"train.max_steps": 400}]
    app.pump(force=True)
    await pilot.pause()
    assert any("step 450" in t.message and t.severity == "warning" for t in toasts)
    assert app.view.info is not None and app.view.info.config.get("train", {}).get("max_steps") != 400


def test_the_real_engine_takes_the_screen_s_settings(tmp_path: Path) -> None:
    """Through the contract to the real run: the change lands at a step boundary, and the
    screen opened again shows the value in force."""
    app, made = real_app(tmp_path)

    async def scenario(pilot: Pilot) -> None:
        await wait_for_engine(pilot, lambda: made and made[0].step >= 2)
        trainer = made[0]
        await pilot.press("S")
        await wait_for_engine(pilot, lambda: isinstance(app.screen, LiveSettingsScreen))
        screen = app.screen
        field(screen, "optim.weight_decay").value = "0.02"
        field(screen, "train.log_every").value = "3"
        screen.apply()  # type: ignore[attr-defined]
        await wait_for_engine(pilot, lambda: app.screen is app.main_screen)
        await wait_for_engine(
            pilot, lambda: (app.view.info.config.get("optim") or {}).get("weight_decay") == 0.02
        )
        assert trainer.cfg.optim.weight_decay == 0.02 and trainer.cfg.train.log_every == 3
        await pilot.press("S")
        await wait_for_engine(pilot, lambda: isinstance(app.screen, LiveSettingsScreen))
        assert app.screen.config.optim.weight_decay == 0.02  # type: ignore[attr-defined]
        trainer.stop(checkpoint=False)

    run_pilot(app, scenario, size=REAL_SIZE)


# the LR panel's preview, alone --------------------------------------------------------------


class PanelHost(App[None]):
    def compose(self) -> ComposeResult:
        yield LrPanel()


def test_the_lr_panel_draws_a_preview_beside_the_plan_until_it_is_cleared() -> None:
    cfg = config_from_dict({}, "test")
    longer = config_from_dict({"train": {"max_steps": 4000}}, "test")

    async def go() -> None:
        app = PanelHost()
        async with app.run_test(size=(100, 20)) as pilot:
            panel = app.query_one(LrPanel)
            panel.set_plan(planned_curve(cfg), cfg.train.max_steps)
            panel.add_step(300, 1e-3)
            assert panel.set_preview(planned_curve(longer), 4000)
            assert not panel.set_preview(planned_curve(longer), 4000)  # the same: no redraw
            panel.flush(force=True)
            await pilot.pause()
            assert "preview" in str(panel.border_title)
            assert panel.preview_max_steps == 4000 and panel.max_steps == 2000
            assert panel.clear_preview() and not panel.clear_preview()
            assert "preview" not in str(panel.border_title)

    asyncio.run(go())


# what the screen says ----------------------------------------------------------------------------


FUNCTION_WORDS = {"the", "a", "an", "of", "to", "from", "next", "is", "in", "on", "and", "or"}


def test_no_setting_s_help_says_the_same_thing_twice() -> None:
    """The screen shows the field's own help, then when a new value takes effect: the second
    part said the first again ('micro-batches per optimizer step · micro-batches per step')."""
    for key in LIVE_SETTINGS:
        own, _, when = field_help(key).partition(" · ")
        assert when, key
        own_words, when_words = own.lower().split(), when.lower().split()
        pairs = {tuple(own_words[i : i + 2]) for i in range(len(own_words) - 1)}
        repeated = [
            pair
            for pair in zip(when_words, when_words[1:], strict=False)
            if pair in pairs and not set(pair) <= FUNCTION_WORDS
        ]
        assert not repeated, (key, field_help(key))


@pilot_test()
async def test_the_lr_multiplier_in_force_is_shown_beside_optim_lr(
    pilot: Pilot, app: CockpitApp
) -> None:
    assert app.session.view.scale == 1.25  # the scripted run's LR change
    screen = await open_screen(pilot, app)
    keys = [str(label.render()) for label in screen.query(".live-key").results(Label)]
    values = [str(label.render()) for label in screen.query(".live-value").results(Label)]
    lr = shown_value(screen.config.optim.lr)
    assert values[keys.index("optim.lr")] == f"{lr} ×1.25"
    note = str(screen.query_one("#live-lr-scale").render())
    assert "×1.25" in note and "the peak in force is 1.25e-3" in note
