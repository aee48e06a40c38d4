"""The rollback question (r on a healthy run) names a checkpoint and the steps a yes discards:
the run pauses while it is open, so what a yes does is what it says, and the text follows
what arrives meanwhile (a checkpoint saved before the pause took hold is the one it names)."""

from __future__ import annotations

from pathlib import Path

from pilot import REAL_SIZE, Toasts, pilot_test, real_app, run_pilot, wait_for, wait_for_engine
from scripted import ScriptedFactory, step_event
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp
from cockpit.screens.dialogs import ConfirmScreen
from engine.events import CheckpointSaved


def question(app: CockpitApp) -> str:
    return str(app.screen.query_one(".dialog-message").render())


@pilot_test()  # step 300, last checkpoint at 250
async def test_the_run_pauses_while_the_question_is_open_and_cancel_resumes_it(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("r")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    assert factory.trainer.calls == [("pause",)]
    await wait_for(pilot, lambda: "paused while you decide" in question(app))
    assert "ckpt-000250.pt at step 250" in question(app) and "discards the 50 steps" in question(app)
    await pilot.press("n")
    await wait_for(pilot, lambda: app.state == "running")
    assert factory.trainer.calls == [("pause",), ("resume",)]  # never told to roll back


@pilot_test()
async def test_a_checkpoint_saved_while_it_is_open_is_the_one_it_names_and_rolls_back_to(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    await pilot.press("r")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    trainer = factory.trainer
    # steps and a checkpoint from before the pause took hold, arriving with the dialog open
    for step in range(301, 311):
        trainer._emit(step_event(step, 2.0, 3e-4, 1.0, trainer._next_time()))
    trainer._emit(
        CheckpointSaved(step=310, reason="interval", path="runs/default-scripted/ckpt-000310.pt", time=trainer._next_time())
    )
    await wait_for(pilot, lambda: "ckpt-000310.pt at step 310" in question(app))
    assert "discards the 0 steps" in question(app)
    await pilot.press("y")
    await wait_for(pilot, lambda: any(c[:2] == ("rollback", 0.5) for c in trainer.calls))
    (rollback,) = [c for c in trainer.calls if c[0] == "rollback"]
    assert rollback[2].endswith("ckpt-000310.pt")  # the one named goes with the command
    assert ("resume",) not in trainer.calls


@pilot_test()
async def test_r_while_a_checkpoint_is_being_saved_pauses_too(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    factory.trainer._ack_state("saving")  # the save that will be the newest checkpoint
    await wait_for(pilot, lambda: app.state == "saving")
    await pilot.press("r")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    assert factory.trainer.calls == [("pause",)]
    await wait_for(pilot, lambda: "paused while you decide" in question(app))


@pilot_test()
async def test_a_yes_before_the_pause_is_seen_rolls_nothing_back_and_says_so(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts
) -> None:
    trainer = factory.trainer
    trainer.pause = lambda: trainer.calls.append(("pause",))  # asked, not yet at a step boundary
    await pilot.press("r")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    assert "pausing while you decide" in question(app)
    await pilot.press("y")
    await wait_for(pilot, lambda: any("not rolled back: the run had not paused yet" in t.message for t in toasts))
    assert not [c for c in trainer.calls if c[0] == "rollback"]


@pilot_test()  # step 300, last checkpoint at 250 (saved with every setting its default)
async def test_the_question_names_the_settings_a_rollback_puts_back(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory
) -> None:
    trainer = factory.trainer
    trainer.set_settings({"optim.weight_decay": 0.05, "train.max_steps": 4000})  # after the save
    await wait_for(pilot, lambda: app.view.max_steps == 4000)
    await pilot.press("r")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    assert "Settings go back to those at step 250: optim.weight_decay 0.05 -> 0.1, " in question(app)
    assert "train.max_steps 4000 -> 2000." in question(app)
    await pilot.press("n")
    # saved again now: a rollback to that checkpoint keeps them, and the question says nothing of it
    trainer.checkpoint()
    await wait_for(pilot, lambda: app.view.last_checkpoint is not None and app.view.last_checkpoint[0] == 300)
    await pilot.press("r")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and "ckpt-000300" in question(app))
    assert "Settings go back" not in question(app)


def test_the_real_engine_puts_back_the_settings_the_question_names(tmp_path: Path) -> None:
    app, _ = real_app(tmp_path)
    toasts = Toasts()

    async def scenario(pilot: Pilot) -> str:
        await wait_for_engine(pilot, lambda: app.view.step >= 3)
        await pilot.press("c")
        await wait_for_engine(pilot, lambda: app.view.last_checkpoint is not None)
        step = app.view.last_checkpoint[0]
        app.trainer.set_settings({"optim.weight_decay": 0.05, "train.max_steps": 2_000_000})
        await wait_for_engine(pilot, lambda: app.view.max_steps == 2_000_000)
        await pilot.press("r")
        await wait_for_engine(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.state == "paused")
        asked = question(app)
        assert f"Settings go back to those at step {step}: " in asked
        await pilot.press("y")
        await wait_for_engine(pilot, lambda: any(t.title == "Rolled back" for t in toasts))
        assert app.view.max_steps == 1_000_000  # the engine put it back, as the question said
        return asked

    asked = run_pilot(app, scenario, size=REAL_SIZE, toasts=toasts)
    (rolled,) = [t.message for t in toasts if t.title == "Rolled back"]
    # "optim.weight_decay 0.05 -> 0.1, train.max_steps 2000000 -> 1000000", in the engine's words
    put_back = asked.rsplit("Settings go back to those at step ", 1)[1].split(": ", 1)[1].rstrip(".")
    assert "optim.weight_decay 0.05 -> 0.1" in put_back and "settings back to those at step" in rolled
    assert put_back in rolled, (asked, rolled)
