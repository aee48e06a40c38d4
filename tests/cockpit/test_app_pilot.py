"""Drive the cockpit with keys (Textual's Pilot) against the scripted trainer.

Each test runs as a plain test through `pilot_test` or `run_pilot` (tests/cockpit/pilot.py): no
async pytest plugin needed.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pilot import (
    Toasts,
    alert_text,
    pilot_test,
    run_pilot,
    scripted_app,
    settle,
    status_text,
    wait_for,
)
from scripted import ScriptedFactory, ScriptedTrainer, build_script, config_error
from textual.pilot import Pilot
from textual.widgets import Input

from cockpit.app.cockpit_app import CockpitApp
from cockpit.app.key_table import COMMANDS, PANEL_IDS, help_rows
from cockpit.app.session_runs import SessionRun, format_exit_report
from cockpit.screens.dialogs import ConfirmScreen
from cockpit.screens.help_screen import HelpScreen
from cockpit.screens.lr_dialog import LrScreen
from cockpit.screens.preset_menu import PresetScreen
from cockpit.widgets.status import AlertLine
from engine.events import Alert, CheckpointSaved, StateChanged, Step


def commands(trainer: ScriptedTrainer) -> list[str]:
    return [c[0] for c in trainer.calls]


@pilot_test()
async def test_space_pauses_then_resumes(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    assert app.state == "running"
    assert app.main_screen.samples_panel.sampling_offered  # an empty panel would say: press s
    await pilot.press("space")
    await settle(pilot)
    assert app.state == "paused"
    assert app.main_screen.status_line.state == "paused"
    await pilot.press("space")
    await settle(pilot)
    assert app.state == "running"
    assert commands(factory.trainer) == ["pause", "resume"]


@pilot_test()
async def test_space_twice_before_ack_still_resumes(pilot: Pilot, factory: ScriptedFactory) -> None:
    await pilot.press("space", "space")  # no drain in between
    assert commands(factory.trainer) == ["pause", "resume"]


@pilot_test()
async def test_space_acts_on_the_engine_state_even_before_its_event_is_drained(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    """Pause, resume, then pause again before the app drained the engine's "running": the
    third press must pause (the engine runs), not send a second resume that changes nothing."""
    await pilot.press("space")
    app.pump()  # drains "paused"
    assert app.state == "paused"
    await pilot.press("space")  # resume: the engine runs, its event not drained yet
    app.feed.pump = lambda force=False: 0  # type: ignore[method-assign] # the timer waits
    app.view.requested = None  # as after draining the stale "paused" echo
    app.session.state = "paused"
    await pilot.press("space")
    assert commands(factory.trainer) == ["pause", "resume", "pause"]


@pilot_test()
async def test_checkpoint_key_shows_path_in_a_toast(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts
) -> None:
    await pilot.press("c")
    await settle(pilot)
    assert commands(factory.trainer) == ["checkpoint"]
    path = "runs/default-scripted/ckpt-000300.pt"
    assert any(path in t.message for t in toasts), [t.message for t in toasts]
    assert app.view.last_checkpoint == (300, path, "manual")
    assert app.state == "running"


@pilot_test()
async def test_lr_dialog_sets_absolute_lr(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("l")
    await pilot.pause()
    assert isinstance(app.screen, LrScreen)
    await pilot.press(*"5e-4", "enter")
    await pilot.pause()
    assert not isinstance(app.screen, LrScreen)
    assert factory.trainer.calls == [("set_lr", 5e-4)]
    await settle(pilot)
    assert app.view.lr == pytest.approx(5e-4)


@pilot_test()
async def test_lr_dialog_scales(pilot: Pilot, factory: ScriptedFactory) -> None:
    await pilot.press("l")
    await pilot.pause()
    await pilot.press("slash", "2", "enter")
    await pilot.pause()
    assert factory.trainer.calls == [("scale_lr", 0.5)]


INVALID_LR_INPUTS = ["abc", "-1", "0", "nan", "inf", "1e9", "x0", "/0", "x1000", ""]


@pilot_test()
async def test_lr_dialog_rejects_invalid_input(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("l")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, LrScreen)
    field = screen.query_one(Input)
    for text in INVALID_LR_INPUTS:
        field.value = ""
        await pilot.press(*text, "enter")
        assert app.screen is screen, f"{text!r}: the dialog stays open"
        assert screen.error, f"{text!r}: an inline error is shown"
        assert factory.trainer.calls == [], text
    await pilot.press("escape")
    await pilot.pause()
    assert not isinstance(app.screen, LrScreen)
    assert factory.trainer.calls == []


@pilot_test()
async def test_plus_and_minus_scale_lr(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("plus")
    await pilot.press("minus")
    calls = factory.trainer.calls
    assert calls[0] == ("scale_lr", 1.25)
    assert calls[1][0] == "scale_lr" and calls[1][1] == pytest.approx(0.8)
    await settle(pilot)
    assert app.view.scale == pytest.approx(1.25)  # the script's 1.25, x1.25, x0.8


@pilot_test()
async def test_sample_and_evaluate_keys(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    n_samples = len(app.main_screen.samples_panel.samples)
    await pilot.press("s", "e")
    await settle(pilot)
    assert commands(factory.trainer) == ["sample", "evaluate"]
    assert len(app.main_screen.samples_panel.samples) == n_samples + 1
    assert app.main_screen.loss_panel.last_val == pytest.approx(1.7)


@pilot_test()
async def test_preset_switch_checkpoints_then_starts_the_new_preset(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    first = factory.trainer
    await pilot.press("p")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, PresetScreen)
    names = [r.name for r in screen.rows]
    assert "default" in names and "tiny" in names
    assert [r.name for r in screen.rows if r.current] == ["default"]
    # the current preset is highlighted; walk down to "tiny" and choose it
    target = names.index("tiny")
    for _ in range(target - names.index("default")):
        await pilot.press("down")
    await pilot.press("enter")
    await pilot.pause()
    assert isinstance(app.screen, ConfirmScreen)
    assert first.calls == []
    await pilot.press("y")
    await wait_for(pilot, lambda: len(factory.trainers) == 2)
    assert first.calls == [("stop", True)]
    assert factory.names == ["default", "tiny"]
    await settle(pilot, factory)
    assert app.preset == "tiny"
    assert app.state == "running"
    assert app.session.engine_running
    # panels were reset and refilled by the new run (same script: 300 steps)
    assert app.main_screen.loss_panel.raw.total == 300


@pilot_test()
async def test_preset_menu_cancel_changes_nothing(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("p")
    await pilot.pause()
    await pilot.press("down", "enter")
    await pilot.pause()
    await pilot.press("n")
    await pilot.pause()
    assert factory.trainer.calls == []
    assert factory.names == ["default"]
    await pilot.press("p")
    await pilot.pause()
    await pilot.press("escape")
    await pilot.pause()
    assert not isinstance(app.screen, PresetScreen)
    assert factory.names == ["default"]


def test_preset_menu_shows_data_availability() -> None:
    factory = ScriptedFactory()

    def data_available(name: str) -> tuple[bool, str]:
        return (False, "tinyshakespeare: not downloaded") if "shakespeare" in name else (True, "")

    app = CockpitApp(factory, "default", data_available=data_available)

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        await pilot.press("p")
        await pilot.pause()
        rows = {r.name: r for r in app.screen.rows}
        assert rows["shakespeare-char"].data_ok is False
        assert rows["shakespeare-char"].data_note == "tinyshakespeare: not downloaded"
        assert rows["default"].data_ok is True

    run_pilot(app, scenario)


def test_quit_asks_then_checkpoints_and_exits() -> None:
    app, factory = scripted_app()

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert factory.trainer.calls == []
        await pilot.press("y")
        await wait_for(pilot, lambda: app.return_code is not None)
        assert factory.trainer.calls == [("stop", True)]

    run_pilot(app, scenario)
    assert app.return_code == 0


@pilot_test()
async def test_quit_cancel_keeps_running(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("q")
    await pilot.pause()
    await pilot.press("escape")
    await pilot.pause()
    assert app.return_code is None
    assert factory.trainer.calls == []
    assert not isinstance(app.screen, ConfirmScreen)


@pilot_test()
async def test_ctrl_c_asks_like_q_and_twice_confirms(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("ctrl+c")
    await pilot.pause()
    assert isinstance(app.screen, ConfirmScreen)
    await pilot.press("ctrl+c")
    await wait_for(pilot, lambda: app.return_code is not None)
    assert factory.trainer.calls == [("stop", True)]
    assert app.return_code == 0 and not app.quit_forced  # saved, as the help says it does
    (ctrl_c,) = [d for k, d in help_rows() if k.startswith("ctrl+c")]
    second_press = ctrl_c.splitlines()[1]  # the help's row: one line for each press
    assert second_press.startswith("again") and "save a checkpoint" in second_press
    assert "without" not in second_press


def offered_now(app: CockpitApp) -> dict[str, list[str]]:
    """What the footer (its labels), the help (its rows) and the palette (its titles) offer."""
    return {
        "footer": [  # shown dimmed (disabled) counts: offered, to no effect
            b.binding.description for b in app.screen.active_bindings.values() if b.binding.show
        ],
        "help": [f"{k} {d}" for k, d in help_rows(app.offered)],
        "palette": [c.title for c in app.get_system_commands(app.screen)],
    }


@pilot_test(steps=300, max_steps=300, finish=True)
async def test_after_its_own_run_ended_the_app_offers_no_steering_keys(
    pilot: Pilot, app: CockpitApp
) -> None:
    assert app.state == "finished"
    await pilot.pause()
    offered = offered_now(app)
    steering = [cmd for cmd in COMMANDS if cmd.needs_engine]
    assert {cmd.keys for cmd in steering} >= {"space", "c", "l", "s", "e"}
    help_text = " ".join(offered["help"])
    for cmd in steering:
        for label in [cmd.footer, *(f for _, f in cmd.bound_as)]:
            assert not label or label not in offered["footer"], (label, offered)
        assert not cmd.title or cmd.title not in offered["palette"], (cmd.title, offered)
        assert not cmd.help or cmd.help not in help_text, (cmd.help, offered)
    assert {"Preset", "Help", "Quit"} <= set(offered["footer"])  # what still works
    assert "Switch preset" in offered["palette"] and "this help" in help_text
    assert not app.main_screen.samples_panel.sampling_offered  # nor does the samples panel name s


@pilot_test(fail={"default": config_error("default")})
async def test_factory_error_shows_failed_and_quit_still_works(
    pilot: Pilot, app: CockpitApp
) -> None:
    assert app.state == "failed"
    assert app.main_screen.status_line.state == "failed"
    assert "optim.lr" in alert_text(app)
    assert "config error" in alert_text(app)
    # no run: the empty samples panel does not offer s (a press would do nothing)
    assert not app.main_screen.samples_panel.sampling_offered
    await pilot.press("space", "c", "plus")  # nothing to command: no crash
    await pilot.press("q")
    await pilot.pause()
    assert isinstance(app.screen, ConfirmScreen)
    await pilot.press("y")
    await wait_for(pilot, lambda: app.return_code is not None)


@pilot_test(fail={"default": RuntimeError("no CUDA device")})
async def test_unexpected_factory_exception_is_shown(app: CockpitApp) -> None:
    assert app.state == "failed"
    assert "RuntimeError" in alert_text(app)
    assert "no CUDA device" in alert_text(app)


class ConfigError(Exception):  # another library's, not engine.config.run_config's: not a config error of ours
    pass


@pilot_test(fail={"default": ConfigError("a plugin's own failure")})
async def test_only_the_engines_config_error_is_called_a_config_error(app: CockpitApp) -> None:
    # the app tells a config error by its class, not by its name
    assert "ConfigError: a plugin's own failure" in alert_text(app)
    assert "config error" not in alert_text(app)


def test_engine_exception_in_run_is_shown_not_raised() -> None:
    class Exploding(ScriptedTrainer):
        def run(self, should_stop: Callable[[], bool] | None = None) -> str:
            raise RuntimeError("boom in the engine")

    app = CockpitApp(lambda name: Exploding(name), "default")

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.state == "failed")
        assert "boom in the engine" in alert_text(app)
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("y")
        await wait_for(pilot, lambda: app.return_code is not None)

    run_pilot(app, scenario)


@pilot_test(fail_at=120, telemetry="nvml")
async def test_engine_failure_events_show_failed(app: CockpitApp) -> None:
    assert app.state == "failed"
    assert "CUDA out of memory" in alert_text(app)
    assert app.query_one(AlertLine).has_class("-error")


@pilot_test(finish=True)
async def test_finished_run_shows_a_summary_and_disables_run_keys(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await wait_for(pilot, lambda: not app.session.engine_running)
    await settle(pilot)
    assert app.state == "finished"
    note = alert_text(app)
    assert "finished at step 300" in note and "best val" in note
    assert "ckpt-000300.pt" in note
    assert app.check_action("checkpoint", ()) is False  # nothing to save: not offered
    await pilot.press("c", "space")
    assert factory.trainer.calls == []


def resumed_script(
    new_steps: int = 50, train_time_s: float = 0.0, preset: str = "default"
) -> list[Any]:
    """A run resumed at step 250: RunStarted, then its history replayed with old timestamps
    (the last session ran at 3,840 tokens/s and 31% MFU), then `new_steps` live steps."""
    past = build_script(preset, steps=250)
    started = past[0]
    t1 = started.time + 10_000.0
    script: list[Any] = [
        dataclasses.replace(
            started,
            start_step=250,
            resumed_from="runs/x/ckpt-000250.pt",
            time=t1,
            train_time_s=train_time_s,
            peak_flops=1e12,
            peak_source="measured: matmul",
        ),
        StateChanged(state="running", step=250, time=t1 + 1.0),
    ]
    script += [
        dataclasses.replace(e, mfu=0.31) if e.kind == "step" else e
        for e in past
        if e.kind in ("step", "eval", "lr_changed", "sample", "checkpoint")
    ]
    for i in range(1, new_steps + 1):
        script.append(
            Step(
                step=250 + i,
                loss=1.5,
                lr=1e-3,
                grad_norm=0.5,
                tokens_per_s=3840.0,
                step_time_s=0.2,
                tokens=(250 + i) * 768,
                time=t1 + 2.0 + i * 0.5,
            )
        )
    return script


def test_resumed_history_is_drawn_but_not_announced() -> None:
    script = resumed_script()
    app = CockpitApp(lambda name: ScriptedTrainer(name, script=script), "default")
    toasts = Toasts()

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.trainer is not None and app.trainer.loaded.is_set())
        await settle(pilot)
        assert app.main_screen.loss_panel.raw.total == 300  # 250 replayed + 50 new
        assert app.main_screen.lr_panel.changes  # the past LR change is drawn
        titles = [t.title for t in toasts]
        assert not any(t and t.startswith("LR changed") for t in titles), titles
        assert any(t and t.startswith("Resumed") for t in titles), titles
        # speed and ETA come from this session's steps only: 2 steps/s
        assert app.view.tracker.rate == pytest.approx(2.0)

    run_pilot(app, scenario, toasts=toasts)


def test_a_resume_says_what_it_changed() -> None:
    """The resume's notes (an LR set with --set, an optimizer started fresh...) reach the
    screen, not only the headless output and metrics.jsonl."""

    script = resumed_script(new_steps=0)
    script[0] = dataclasses.replace(
        script[0], notes=("optim.lr: 0.001 -> 0.01 (applied from the first resumed step)",)
    )
    app = CockpitApp(lambda name: ScriptedTrainer(name, script=script), "default")
    toasts = Toasts()

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.trainer is not None and app.trainer.loaded.is_set())
        await settle(pilot)
        resumed = [t for t in toasts if t.title.startswith("Resumed at step 250")]
        assert len(resumed) == 1
        assert "optim.lr: 0.001 -> 0.01" in resumed[0].message
        assert resumed[0].timeout >= 10  # time to read it

    run_pilot(app, scenario, toasts=toasts)


def test_a_resumed_run_continues_elapsed_and_shows_no_replayed_speed_as_live() -> None:
    script = resumed_script(new_steps=0, train_time_s=500.0)
    trainer = ScriptedTrainer("default", script=script)
    app = CockpitApp(lambda name: trainer, "default")

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot)
        await wait_for(pilot, lambda: trainer.loaded.is_set())
        await settle(pilot)
        assert app.state == "running" and app.view.step == 250
        # the replayed step 250 ran at 3,840 tok/s and 31% MFU in the last session
        assert app.view.tokens_per_s is None
        text = status_text(app)
        assert "– tok/s" in text and "3.8k" not in text
        assert "MFU" not in text
        # 500 s trained before (the RunStarted's train_time_s); no step of this session yet
        assert app.main_screen.loss_panel.clock.trained_s() == pytest.approx(500.0)
        assert "trained 8:20" in text and "elapsed" not in text, text
        # the first live step: its own speed, and elapsed goes on from 500 s
        trainer._emit(
            Step(
                step=251,
                loss=1.5,
                lr=1e-3,
                grad_norm=0.5,
                tokens_per_s=2000.0,
                step_time_s=0.4,
                tokens=251 * 768,
                mfu=0.2,
                time=script[0].time + 4.0,
            )
        )
        await settle(pilot)
        assert app.view.tokens_per_s == 2000.0 and app.view.mfu == 0.2
        assert "2.00k tok/s" in status_text(app)
        # training time goes on by the step's time (0.4 s), not by the wall clock
        assert app.main_screen.loss_panel.clock.trained_s() == pytest.approx(500.4)

    run_pilot(app, scenario, size=(160, 40))


class GatedTrainer(ScriptedTrainer):
    """Plays its script only once `gate` is set: the seconds a resume spends loading."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()

    def run(self, should_stop: Callable[[], bool] | None = None) -> str:
        self.gate.wait(10)
        return super().run(should_stop)


def test_a_resume_shows_the_runs_preset_from_the_start(tmp_path) -> None:
    run_dir = tmp_path / "tiny-20261130-142301"
    run_dir.mkdir()
    (run_dir / "config.json").write_text('{"name": "tiny"}')
    resume = str(run_dir / "ckpt-000250.pt")

    trainer = GatedTrainer("tiny", script=resumed_script(preset="tiny"), resume_from=resume)
    app = CockpitApp(lambda name: trainer, "default")  # what the CLI passes with --resume

    async def scenario(pilot: Pilot) -> None:
        await pilot.pause()
        assert app.main_screen.status_line.state == "starting"
        assert status_text(app).startswith("tiny"), status_text(app)
        assert "default" not in status_text(app) + alert_text(app)
        assert alert_text(app) == f"resuming tiny from {resume}..."
        trainer.gate.set()
        await wait_for(pilot, lambda: trainer.loaded.is_set())
        await settle(pilot)
        assert app.preset == "tiny" and alert_text(app) == ""

    run_pilot(app, scenario, size=(160, 40))


def test_a_resume_whose_preset_is_unknown_says_which_run_it_resumes(tmp_path) -> None:
    run_dir = tmp_path / "my-run"
    run_dir.mkdir()  # no config.json to read the preset from

    trainer = GatedTrainer("tiny", script=resumed_script(), resume_from=str(run_dir))
    app = CockpitApp(lambda name: trainer, "default")

    async def scenario(pilot: Pilot) -> None:
        await pilot.pause()
        assert alert_text(app) == f"resuming {run_dir}..."
        assert status_text(app).startswith("my-run")
        trainer.gate.set()
        await wait_for(pilot, lambda: trainer.loaded.is_set())

    run_pilot(app, scenario, size=(160, 40))


def test_a_flat_loss_curve_draws() -> None:
    """Regression: a constant loss once sent the tick computation into an endless loop."""
    started = build_script("default", steps=0)[0]
    script = [started] + [
        Step(
            step=i,
            loss=2.0,
            lr=1e-3,
            grad_norm=0.5,
            tokens_per_s=1.0,
            step_time_s=0.1,
            tokens=i * 768,
            time=started.time + i,
        )
        for i in range(1, 60)
    ]

    app = CockpitApp(lambda name: ScriptedTrainer(name, script=script), "default")

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.trainer is not None and app.trainer.loaded.is_set())
        await settle(pilot)
        await pilot.press("g")  # log y too
        await settle(pilot)
        assert app.main_screen.loss_panel.draw_count >= 2

    run_pilot(app, scenario)


@pilot_test(nan_at=180)  # before the first checkpoint (step 250)
async def test_nan_alert_is_prominent_and_paused(pilot: Pilot, app: CockpitApp) -> None:
    assert app.state == "paused"
    banner = alert_text(app)
    assert "loss is not finite at step 180" in banner
    # no checkpoint yet: it says so and offers what works
    assert "paused, no checkpoint yet" in banner
    assert "l: lower the LR, then space: resume" in banner and "p: start afresh" in banner
    assert "r:" not in banner
    assert app.query_one(AlertLine).has_class("-error")
    assert math.isnan(app.main_screen.loss_panel.last_loss)
    assert app.main_screen.loss_panel.nan_steps == [(180, 180 * 768)]
    # resuming clears the banner
    await pilot.press("space")
    await settle(pilot)
    assert app.state == "running"
    assert alert_text(app) == ""


@pilot_test(nan_at=280, anomaly="gradient")
async def test_a_non_finite_gradient_banner_names_the_fault_the_damage_and_the_checkpoint(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    """Loss 906 on a 96-symbol vocabulary (a fresh model starts near 4.56): the weights were
    already damaged before the gradient went non-finite; r goes back to ckpt-250 at once."""
    assert app.state == "paused"
    banner = alert_text(app)
    assert banner.startswith("✗ non-finite gradient at step 280 (loss 906)")
    assert "NaN loss" not in banner
    assert "the weights may be damaged" in banner
    assert "paused · r: back to ckpt-000250.pt, LR halved · l: lower the LR" in banner
    assert app.query_one(AlertLine).has_class("-error")
    await pilot.press("r")  # during an anomaly pause: at once, no question
    await pilot.pause()
    assert not isinstance(app.screen, ConfirmScreen)
    assert factory.trainer.calls == [("rollback", 0.5)]
    await settle(pilot)
    assert app.state == "running"
    banner = alert_text(app)
    assert "rolled back to step 250 (ckpt-000250.pt), LR x0.5" in banner
    assert "paused" not in banner


@pilot_test(nan_at=280, on_anomaly="rollback")
async def test_an_unattended_rollback_is_not_called_a_pause(app: CockpitApp) -> None:
    assert app.state == "running"
    assert app.view.step == 260  # trained on after the rollback to 250
    banner = alert_text(app)
    assert "loss is not finite at step 280" in banner
    assert "rolled back to step 250 (ckpt-000250.pt), LR x0.5" in banner
    assert "paused" not in banner and "resume" not in banner


@pilot_test(nan_at=280, on_anomaly="rollback")
async def test_a_rollback_drops_the_abandoned_steps_from_the_live_curves(app: CockpitApp) -> None:
    # trained to 280 (NaN there), rolled back to 250, trained 251-260 again: the curves hold
    # steps 1-260 once each, as the same run reopened from its files draws them
    for series in (app.main_screen.loss_panel.raw, app.main_screen.loss_panel.smooth, app.main_screen.lr_panel.applied):
        assert series.xs.tolist() == list(range(1, 261))
    assert app.main_screen.loss_panel.nan_steps == []  # the NaN was on the abandoned branch


@pilot_test(nan_at=280, anomaly="spike")
async def test_resuming_from_a_spike_pause_clears_the_banner(pilot: Pilot, app: CockpitApp) -> None:
    assert app.state == "paused"
    banner = alert_text(app)
    assert banner.startswith("✗ loss spike at step 280: 9.1000 against a moving average")
    assert "NaN" not in banner and "damaged" not in banner
    assert "paused · l: lower the LR, then space: resume · r: back to ckpt-000250" in banner
    await pilot.press("space")
    await settle(pilot)
    assert app.state == "running"
    assert alert_text(app) == ""


def test_a_run_that_gives_up_on_a_nan_says_failed_and_why_not_paused() -> None:
    """A headless-style give-up (no checkpoint to roll back to) seen in the app."""
    script = build_script("default", steps=120)
    t = script[-1].time
    fault = "loss is not finite at step 121"
    script += [
        Alert(
            level="error",
            code="nan",
            step=121,
            time=t + 0.1,
            message=f"{fault}; no checkpoint to roll back to: stopping",
        ),
        StateChanged(
            state="failed", step=121, reason=f"{fault}; no checkpoint to roll back to", time=t + 0.2
        ),
    ]

    app = CockpitApp(lambda name: ScriptedTrainer(name, script=script), "default")

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.trainer is not None and app.trainer.loaded.is_set())
        await settle(pilot)
        assert app.state == "failed"
        banner = alert_text(app)
        assert banner == f"✗ FAILED at step 121: {fault}; no checkpoint to roll back to"
        assert "paused" not in banner and "resume" not in banner

    run_pilot(app, scenario)


@pilot_test()  # step 300, last checkpoint at 250
async def test_r_on_a_healthy_run_asks_first_and_cancel_changes_nothing(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    for cancel in ("n", "escape"):
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        question = str(app.screen.query_one(".dialog-message").render())
        assert "ckpt-000250.pt at step 250" in question
        assert "discards the 50 steps" in question and "halves the LR" in question
        await pilot.press(cancel)
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        await wait_for(pilot, lambda: app.state == "running")  # paused while asked, resumed
        assert not [c for c in factory.trainer.calls if c[0] == "rollback"]  # never told to roll back
    await pilot.press("r")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("y")
    # the checkpoint the question named goes with the command: the engine refuses another
    await wait_for(pilot, lambda: [c[:2] for c in factory.trainer.calls[-2:]] == [("pause",), ("rollback", 0.5)])
    assert Path(factory.trainer.calls[-1][2]).name == "ckpt-000250.pt"


@pilot_test(steps=120)  # the script's first checkpoint is at step 250
async def test_r_without_a_checkpoint_is_a_short_notice_not_a_banner(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts
) -> None:
    await pilot.press("r")
    await settle(pilot)
    assert not isinstance(app.screen, ConfirmScreen)
    assert factory.trainer.calls == []
    notice = [t for t in toasts if "no checkpoint to roll back to" in t.message]
    assert len(notice) == 1 and notice[0].timeout <= 5
    assert alert_text(app) == ""  # nothing that stays for hundreds of steps


@pilot_test()
async def test_ten_c_presses_ask_for_one_save_and_show_three_toasts_at_most(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts
) -> None:
    toasts.clear()  # the script's own (an LR change)
    pump = app.feed.pump
    app.feed.pump = lambda force=False: 0  # type: ignore[method-assign] # the engine's answer waits
    await pilot.press(*["c"] * 10)
    assert commands(factory.trainer) == ["checkpoint"]
    app.feed.pump = pump  # type: ignore[method-assign]
    await settle(pilot)
    titles = [t.title for t in toasts]
    # "saving..." is still on screen for the other nine: no "already saving" under it
    assert titles == ["Checkpoint", "Checkpoint saved at step 300"], titles
    assert all(t.timeout <= 6 for t in toasts)
    # pressed again while that toast shows: a new request, no new toast
    await pilot.press("c")
    await settle(pilot)
    assert commands(factory.trainer) == ["checkpoint", "checkpoint"]
    assert len(toasts) == 2
    # once it is gone, the engine's re-acknowledgement of the same file says what it is
    app.session.checkpoint_toast_until = 0.0
    await pilot.press("c")
    await settle(pilot)
    assert toasts[-1].title == "Checkpoint already saved at step 300"
    assert app.view.last_checkpoint[:2] == (300, "runs/default-scripted/ckpt-000300.pt")


@pilot_test()
async def test_dialogs_block_run_keys(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("question_mark")
    await pilot.pause()
    assert isinstance(app.screen, HelpScreen)
    await pilot.press("c", "space", "s", "plus")
    assert factory.trainer.calls == []
    await pilot.press("escape")
    await pilot.pause()
    assert not isinstance(app.screen, HelpScreen)


@pilot_test()
async def test_command_palette_lists_the_actions(pilot: Pilot, app: CockpitApp) -> None:
    titles = [c.title for c in app.get_system_commands(app.screen)]
    for want in (
        "Pause / resume",
        "Checkpoint now",
        "Set learning rate",
        "LR ×1.25",
        "LR ÷1.25",
        "Sample now",
        "Evaluate now",
        "Switch preset",
        "Help",
        "Quit",
        "Loss x axis: steps / tokens / time",
        "Runs",
        "Fork this run",
        "Loss y axis: linear / log",
    ):
        assert want in titles
    assert titles.count("Quit") == 1
    # and the palette's Quit asks too
    quit_cmd = next(c for c in app.get_system_commands(app.screen) if c.title == "Quit")
    await quit_cmd.callback()
    await pilot.pause()
    assert isinstance(app.screen, ConfirmScreen)


@pilot_test()
async def test_toggles_and_zoom(pilot: Pilot, app: CockpitApp) -> None:
    await pilot.press("t", "g")
    assert app.main_screen.loss_panel.x_axis == "tokens" and app.main_screen.loss_panel.log_y
    assert "tokens" in str(app.main_screen.loss_panel.border_title)
    await pilot.press("4")
    await pilot.pause()
    assert app.screen.maximized is app.main_screen.memory_panel
    await pilot.press("4")
    await pilot.pause()
    assert app.screen.maximized is None
    await pilot.press("z")
    await pilot.pause()
    assert app.screen.maximized is not None


@pilot_test()
async def test_plots_redraw_at_most_about_once_a_second(app: CockpitApp) -> None:
    panel = app.main_screen.loss_panel
    base = panel.governor._last_draw
    assert base is not None
    interval = panel.governor.interval
    assert interval >= 1.0
    draws = 0
    for i in range(40):  # 40 data changes within the interval
        panel.add_step(1000 + i, 1.5, (1000 + i) * 768)
        draws += panel.flush(now=base + 0.5 + i / 80)
    assert draws == 0
    assert panel.flush(now=base + interval + 0.01) is True
    assert panel.flush(now=base + interval + 0.02) is False  # nothing new


@pilot_test(size=(160, 48))
async def test_resize_toggles_compact_layout(pilot: Pilot, app: CockpitApp) -> None:
    assert not app.screen.has_class("compact")
    assert app.main_screen.samples_panel.display
    await pilot.resize_terminal(80, 24)
    await pilot.pause()
    assert app.screen.has_class("compact")
    assert app.main_screen.samples_panel.region.area == 0


# zoom, palette, help (issue 10, item 18) -----------------------------------------------------
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_zoom_fills_the_screen_for_every_panel(size: tuple[int, int]) -> None:
    """1-5 zoom each panel to the whole screen (below the status line, above the footer): the
    device and memory panels too, which are sized to their content in the grid."""

    app, factory = scripted_app()

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        width, height = size
        for key, panel_id in enumerate(PANEL_IDS, start=1):
            await pilot.press(str(key))
            await pilot.pause()
            panel = app.main_screen.query_one(f"#{panel_id}")
            assert app.main_screen.maximized is panel
            region = panel.region
            assert region.width == width, (panel_id, region)
            assert region.height >= height - 4, (panel_id, region)  # status, alert, footer
            await pilot.press(str(key))
            await pilot.pause()
            assert app.main_screen.maximized is None

    run_pilot(app, scenario, size=size)


@pilot_test()
async def test_zoom_banner_goes_when_the_zoom_ends(pilot: Pilot, app: CockpitApp) -> None:
    """The "zoomed in" banner goes at once, whether the zoom ends by esc, z or the same key."""
    for unzoom in ("escape", "z", "3"):
        await pilot.press("3")
        await pilot.pause()
        assert "zoomed in" in alert_text(app)
        await pilot.press(unzoom)
        await pilot.pause()
        assert app.main_screen.maximized is None
        assert "zoomed in" not in alert_text(app), unzoom


def test_help_fits_80x24_and_long_entries_wrap_in_their_column() -> None:
    from textual.widgets import Static

    app, factory = scripted_app()

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        await pilot.press("question_mark")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, HelpScreen)
        dialog = screen.query_one("#help-dialog")
        assert dialog.max_scroll_y == 0, "everything shows without scrolling"
        note = screen.query_one("#help-note", Static)
        assert note.region.height >= 1 and note.region.bottom <= dialog.region.bottom
        assert "toast" not in str(note.render()).lower()
        descriptions = list(screen.query(".help-description"))
        assert len({d.region.x for d in descriptions}) == 1, "one column for descriptions"
        rollback = next(d for d in descriptions if "roll back" in str(d.render()))
        assert rollback.region.height >= 1

    run_pilot(app, scenario, size=(80, 24))


# quitting a run whose next step boundary is minutes away (issue 10, item 16) -------------------
SLOW_STEP_S = 120.0  # gpt2-small on 2 CPU cores: one optimizer step takes minutes


class SlowStepTrainer(ScriptedTrainer):
    """Three 2-minute steps, then a step in progress: a stop is honoured (checkpoint, then
    "stopped") only when the test sets `boundary`, as the engine does at its next step."""

    def __init__(self) -> None:
        started = build_script("gpt2-small", steps=0)[0]
        t0 = started.time
        self.last_step_time = t0 + 2.0 + 3 * SLOW_STEP_S
        script: list[Any] = [started, StateChanged(state="running", step=0, time=t0 + 1.0)]
        for i in range(1, 4):
            script.append(
                Step(
                    step=i,
                    loss=10.5,
                    lr=6e-4,
                    grad_norm=1.0,
                    tokens_per_s=524_288 / SLOW_STEP_S,
                    step_time_s=SLOW_STEP_S,
                    tokens=i * 524_288,
                    time=t0 + 2.0 + i * SLOW_STEP_S,
                )
            )
        super().__init__("gpt2-small", script=script)
        self.boundary = threading.Event()
        self.stop_requested: bool | None = None
        self.cancelled = False

    def stop(self, checkpoint: bool = True, reason: str = "stopped by user") -> None:
        self.calls.append(("stop", checkpoint))
        self.stop_requested = checkpoint
        self.stop_reason = reason

    def run(self, should_stop: Callable[[], bool] | None = None) -> str:
        for ev in self.script:
            self._emit(ev)
        self.loaded.set()
        try:
            while not self.boundary.wait(0.01):
                if should_stop is not None and should_stop():
                    self.cancelled = True
                    return "stopped"  # a forced quit: the step never reached its end
            self.step += 1
            if self.stop_requested:
                self._emit(
                    CheckpointSaved(
                        step=self.step,
                        reason="stop",
                        time=self._next_time(),
                        path=f"runs/gpt2-small-scripted/ckpt-{self.step:06d}.pt",
                    )
                )
            self._ack_state("stopped", "user")
            return "stopped"
        finally:
            self.finished.set()


class BusyBoundaryTrainer(ScriptedTrainer):
    """Trained to step 100 and busy there with the sample due at it (every 50 steps; the one
    at step 50 took 0.6 s): a stop waits for it. stop() is only recorded."""

    def __init__(self) -> None:
        script = build_script(steps=100, max_steps=1000, eval_every=0, sample_every=50)
        started = dataclasses.replace(script[0], config={"name": "default", "sample": {"interval": 50}})
        script = [started, *(e for e in script[1:] if not (e.kind == "sample" and e.step == 100))]
        super().__init__("default", script=script)
        self.last_step_time = max(e.time for e in script if e.kind == "step")

    def stop(self, checkpoint: bool = True, reason: str = "stopped by user") -> None:
        self.calls.append(("stop", checkpoint))


def test_the_quit_countdown_counts_the_work_due_at_the_boundary() -> None:
    trainer = BusyBoundaryTrainer()
    app = CockpitApp(lambda name: trainer, "default")
    app.clock = lambda: trainer.last_step_time + 8.0  # 8 s into the sample

    async def scenario(pilot: Pilot) -> str:
        await wait_for(pilot, lambda: trainer.loaded.is_set())
        await settle(pilot)
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        note = alert_text(app)
        await pilot.press("ctrl+c")  # leave without waiting
        await wait_for(pilot, lambda: app.return_code is not None)
        return note

    note = run_pilot(app, scenario)
    assert trainer.calls == [("stop", True)]
    assert "saving after the sample (~0.6s last time) due at this step" in note, note
    assert "a step takes 0s" not in note


def test_quit_waits_for_a_distant_step_boundary_with_a_countdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The old fixed limit (QUIT_TIMEOUT_S, 10 s) shortened: quitting must not time out at all.
    monkeypatch.setattr("cockpit.app.cockpit_app.QUIT_TIMEOUT_S", 0.05, raising=False)
    monkeypatch.setattr("cockpit.app.stop_wait.NOTE_REFRESH_S", 0.05)
    trainer = SlowStepTrainer()

    app = CockpitApp(lambda name: trainer, "gpt2-small")
    now = [trainer.last_step_time + 30.0]  # 30 s into the fourth step
    app.clock = lambda: now[0]

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: trainer.loaded.is_set())
        await settle(pilot)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "A step takes 2:00" in app.screen.message
        await pilot.press("y")
        await pilot.pause()
        assert trainer.calls == [("stop", True)] and trainer.stop_reason == "quit"
        note = alert_text(app)
        assert "in ~1:30" in note and "a step takes 2:00" in note, note
        assert "ctrl+c again: quit now without saving" in note
        await pilot.pause(0.3)  # several times the (shortened) old limit
        now[0] += 600.0  # ten minutes later, the step still has not ended
        await pilot.pause(0.2)
        assert app.return_code is None, "quitting gave up before the checkpoint"
        note = alert_text(app)
        assert "waited 10:00" in note and "any moment now" in note, note
        assert not trainer.cancelled
        trainer.boundary.set()  # the step ends: checkpoint, stopped, exit
        await wait_for(pilot, lambda: app.return_code is not None)

    run_pilot(app, scenario)
    assert app.return_code == 0
    assert not app.quit_forced
    [run_summary] = app.exit_summary()
    assert run_summary.checkpoint == (4, "runs/gpt2-small-scripted/ckpt-000004.pt")
    assert run_summary.unsaved_steps == 0


def test_quit_before_the_first_step_says_there_is_no_estimate() -> None:
    trainer = SlowStepTrainer()
    trainer.script = trainer.script[:2]  # started, running, no step finished yet
    app = CockpitApp(lambda name: trainer, "gpt2-small")

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: trainer.loaded.is_set())
        await settle(pilot)
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert "when the first step ends" in alert_text(app)
        assert "no estimate" in alert_text(app)
        trainer.boundary.set()
        await wait_for(pilot, lambda: app.return_code is not None)

    run_pilot(app, scenario)


def test_ctrl_c_while_quitting_waits_forces_and_reports_what_was_lost() -> None:
    trainer = SlowStepTrainer()
    app = CockpitApp(lambda name: trainer, "gpt2-small")

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: trainer.loaded.is_set())
        await settle(pilot)
        await pilot.press("ctrl+c")
        await pilot.pause()
        await pilot.press("ctrl+c")  # confirms the quit dialog
        await pilot.pause()
        assert app.return_code is None and trainer.calls == [("stop", True)]
        await pilot.press("ctrl+c")  # again while it waits: now, without the checkpoint
        await wait_for(pilot, lambda: app.return_code is not None)

    run_pilot(app, scenario)
    assert app.quit_forced
    assert trainer.cancelled
    report = format_exit_report(app.exit_summary(), forced=app.quit_forced)
    assert "no checkpoint was saved" in report
    assert "quit without saving: steps 1-3 (3) are lost" in report
    assert "resume:" not in report  # nothing to resume from


def test_exit_report_names_the_run_dir_checkpoint_and_resume_command() -> None:
    saved = SessionRun("tiny", "runs/my run", "stopped", 120, 0, (120, "runs/my run/ckpt-000120.pt"))
    assert format_exit_report([saved]).splitlines() == [
        "run dir: runs/my run",
        "last checkpoint: runs/my run/ckpt-000120.pt (step 120)",
        "resume: cockpit --resume 'runs/my run'",
    ]
    unsaved = SessionRun("default", "runs/d", "stopped", 40, 0, None)
    assert format_exit_report([unsaved]).splitlines() == [
        "run dir: runs/d",
        "no checkpoint was saved",
        "start again: cockpit --preset default",
    ]
    finished = SessionRun("tiny", "runs/f", "finished", 300, 0, (300, "runs/f/ckpt-000300.pt"))
    assert format_exit_report([finished]).splitlines()[-1] == (
        "finished; to train on: cockpit --resume runs/f --set train.max_steps=600"
    )
    behind = SessionRun("tiny", "runs/t", "running", 130, 0, (120, "runs/t/ckpt-000120.pt"))
    assert "steps 121-130 (10) are lost" in format_exit_report([behind], forced=True)
    # a session that switched presets reports both runs, the current one last
    both = format_exit_report([saved, behind])
    assert both.index("runs/my run") < both.index("runs/t") and "\n\n" in both


def test_a_run_with_no_checkpoint_starts_again_from_its_own_config(tmp_path: Path) -> None:
    """`cockpit --preset tiny --data X --set ...` quit before its first checkpoint: starting
    again means that run (its corpus and overrides), which is RUN_DIR/config.toml, not `tiny`."""
    (tmp_path / "config.toml").write_text('name = "tiny"\n')
    unsaved = SessionRun("tiny", str(tmp_path), "stopped", 0, 0, None)
    assert format_exit_report([unsaved]).splitlines()[-1] == (
        f"start again: cockpit --preset {tmp_path / 'config.toml'}"
    )


def test_leaving_after_a_preset_switch_reports_both_runs() -> None:
    app, factory = scripted_app()

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        app.switching.switch_to("tiny")
        await wait_for(pilot, lambda: len(factory.trainers) == 2)
        await settle(pilot, factory)
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("y")
        await wait_for(pilot, lambda: app.return_code is not None)

    run_pilot(app, scenario)
    runs = app.exit_summary()
    assert [r.run_dir for r in runs] == ["runs/default-scripted", "runs/tiny-scripted"]
    assert [r.checkpoint for r in runs] == [
        (300, "runs/default-scripted/ckpt-000300.pt"),
        (300, "runs/tiny-scripted/ckpt-000300.pt"),
    ]


# the preset menu: stand-in corpora, presets far beyond this machine (issue 10, item 17) -------
def test_picking_a_preset_far_beyond_this_machine_warns_before_starting() -> None:
    checked_on: list[threading.Thread] = []

    def data_available(name: str) -> tuple[bool, str, bool]:
        if name == "gpt2-small":
            return True, "stand-in corpus (pydoc): pass --data", True
        return True, "", False

    def fit_warning(name: str, known_peak: Any) -> str:
        checked_on.append(threading.current_thread())
        if name != "gpt2-small":
            return ""
        return "gpt2-small is far beyond this machine: it needs ~17.22 GiB of memory"

    factory = ScriptedFactory()
    app = CockpitApp(factory, "default", data_available=data_available, fit_warning=fit_warning)

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        await pilot.press("p")
        await pilot.pause()
        rows = {r.name: r for r in app.screen.rows}
        assert rows["gpt2-small"].data_stand_in and not rows["default"].data_stand_in
        app.screen.dismiss("gpt2-small")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        message = app.screen.message
        assert "far beyond this machine" in message and "17.22 GiB" in message
        assert "stand-in corpus (pydoc)" in message
        assert "cockpit --preset gpt2-small --data PATH" in message
        assert checked_on and checked_on[0] is not threading.main_thread()  # never the UI's
        await pilot.press("n")
        await pilot.pause()
        assert factory.names == ["default"]  # nothing started
        # a preset that fits is asked about without a warning
        await pilot.press("p")
        await pilot.pause()
        app.screen.dismiss("tiny")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "⚠" not in app.screen.message

    run_pilot(app, scenario)


def test_preset_fit_warning_from_the_memory_plan_and_the_step_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real estimate (meta-device model, FLOPs per step) for a CPU at 50 GFLOP/s."""
    import psutil

    from cockpit.cli.preset_fit import preset_fit_warning
    from engine.config import format_bytes, load_preset
    from engine.plan import plan_memory

    cpu = ("cpu", 50e9)
    warning = preset_fit_warning("gpt2-small", [], cpu)
    assert "gpt2-small is far beyond this machine" in warning
    planned = plan_memory(load_preset("gpt2-small"), 50257, "cpu", None).total  # `cockpit plan`'s
    assert f"needs ~{format_bytes(planned)} of memory" in warning and planned > 6 * 2**30
    assert "524,288 tokens" in warning and "~2.5 h" in warning and "sized for a GPU" in warning
    assert preset_fit_warning("tiny", [], cpu) == ""
    assert preset_fit_warning("default", [], cpu) == ""
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(total=4 * 2**30))
    small_machine = preset_fit_warning("gpt2-small", [], cpu)
    assert "this machine has 4.00 GiB (it does not fit: starting it is refused)" in small_machine


def test_switching_away_from_a_slow_run_waits_for_its_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A preset switch, like quitting, waits for the step boundary with a countdown instead of
    cancelling the run after a fixed time."""
    monkeypatch.setattr("cockpit.app.cockpit_app.SWITCH_TIMEOUT_S", 0.05, raising=False)  # the old limit
    monkeypatch.setattr("cockpit.app.stop_wait.NOTE_REFRESH_S", 0.05)
    slow = SlowStepTrainer()
    started: list[str] = []

    def factory(name: str) -> ScriptedTrainer:
        started.append(name)
        return slow if name == "gpt2-small" else ScriptedTrainer(name)

    app = CockpitApp(factory, "gpt2-small")
    now = [slow.last_step_time + 30.0]
    app.clock = lambda: now[0]

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: slow.loaded.is_set())
        await settle(pilot)
        app.switching.switch_to("tiny")
        await pilot.pause()
        assert "switching to tiny: saving at the next step boundary, in ~1:30" in alert_text(app)
        await pilot.pause(0.3)
        now[0] += 600.0
        await pilot.pause(0.2)
        assert not slow.cancelled and started == ["gpt2-small"]
        assert slow.stop_reason == "switching preset"
        assert "waited 10:00" in alert_text(app)
        slow.boundary.set()
        await wait_for(pilot, lambda: started == ["gpt2-small", "tiny"])

    run_pilot(app, scenario)
    [first, _second] = app.exit_summary()
    assert first.checkpoint == (4, "runs/gpt2-small-scripted/ckpt-000004.pt")
