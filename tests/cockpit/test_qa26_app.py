"""QA of the batch-size schedule and sequence-length warmup in the app (issue 26 item 1): the
figures the app shows of a run whose steps grow must be those of the steps it trains."""

from __future__ import annotations

from pilot import Toasts, pilot_test
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp
from cockpit.figures.progress import scaled_from, size_at
from engine.events import SettingsChanged

RAMP = ((0, 16), (50, 64), (100, 144), (150, 256))  # tiny, batch 2 -> 8 and seq 8 -> 32 over 150


def test_a_schedule_scaled_from_a_step_keeps_its_past_and_scales_what_follows() -> None:
    assert size_at(RAMP, 0) == 16 and size_at(RAMP, 60) == 64 and size_at(RAMP, 150) == 256
    assert scaled_from(RAMP, 60, 256, 512) == ((0, 16), (50, 64), (60, 128), (100, 288), (150, 512))
    assert scaled_from(RAMP, 50, 256, 512) == ((0, 16), (50, 128), (100, 288), (150, 512))
    assert scaled_from(RAMP, 200, 256, 512)[-1] == (200, 512)  # past the ramps: from there on


@pilot_test()
async def test_a_grad_accum_change_mid_ramp_says_the_tokens_the_steps_train(
    pilot: Pilot, app: CockpitApp, toasts: Toasts
) -> None:
    """`set train.grad_accum=2` at step 60 of a 150-step ramp: the toast said '512 tokens a step
    (was 256)', the full sizes, while the run went from 64 to 128; the ETA and the LR panel's
    staircase kept the old sizes ahead."""
    view, screen = app.session.view, app.main_screen
    view.tracker.tokens_schedule = RAMP
    screen.lr_panel.set_tokens_schedule(RAMP)
    screen.loss_panel.tokens_per_step = 256
    ack = SettingsChanged(
        step=60, changes={"train.grad_accum": [1, 2]}, max_steps=view.max_steps, tokens_per_step=512
    )
    app.run_events.settings_changed(ack)
    await pilot.pause()
    (toast,) = [t for t in toasts if t.title.startswith("Settings changed")]
    assert "128 tokens a step (was 64), 512 once the ramps end" in toast.message
    scaled = ((0, 16), (50, 64), (60, 128), (100, 288), (150, 512))
    assert view.tracker.tokens_schedule == scaled  # the ETA weighs the steps ahead at their size
    assert screen.lr_panel.tokens_schedule == scaled  # and the staircase draws them


def test_the_staircase_s_legend_is_whole_on_a_narrow_lr_panel() -> None:
    """80x24: the LR panel is 40 wide and its title was cut to 'LR planned applied ahead
    tokens/s…', which reads as tokens a second."""
    from pilot import run_pilot
    from textual.app import App, ComposeResult

    from cockpit.widgets.lr import LrPanel

    class Narrow(App):
        CSS = "LrPanel { border: round $primary; width: 40; }"

        def compose(self) -> ComposeResult:
            yield LrPanel()

    app = Narrow()

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(LrPanel)
        panel.set_plan([(0, 0.0), (10, 1e-3), (100, 1e-4)], 100)
        panel.set_tokens_schedule(RAMP)
        panel.scale = 0.5  # a rollback's multiplier: the legend says 'ahead' too
        panel.update_labels()
        await pilot.pause()
        panel.flush(force=True)
        await pilot.pause()
        drawn = app.export_screenshot()  # the border, its title in it
        assert "tok/step" in drawn and "…" not in drawn

    run_pilot(app, scenario, size=(80, 24))
