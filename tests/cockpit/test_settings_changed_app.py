"""The app draws an acknowledged `set` (SettingsChanged, from the scripted engine): the LR panel's
plan ahead re-planned, the status line's step count and ETA on the new length, and a toast that
names the change and who made it."""

from __future__ import annotations

from pilot import Toasts, pilot_test, status_text
from scripted import ScriptedFactory
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp


@pilot_test()
async def test_a_longer_run_is_re_planned_on_the_lr_panel_and_counted_on_the_status_line(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts
) -> None:
    panel = app.main_screen.lr_panel
    step = app.session.view.step
    before = list(panel.planned)
    assert panel.max_steps == 2000 and "/2,000" in status_text(app)
    sent = []  # what the engine emits, as the app will drain it
    put = factory.trainer.events.put
    factory.trainer.events.put = lambda ev: (sent.append(ev), put(ev))  # type: ignore[method-assign]
    factory.trainer.set_settings({"train.max_steps": 4000}, by="viewer 2 alice@gpu1 (pts/3)")
    app.pump(force=True)
    await pilot.pause()
    (ack,) = sent
    assert panel.max_steps == 4000 and panel.planned[-1][0] == ack.planned_lr[-1][0] > 3900
    # the past stays as it was planned; ahead of the change, the new plan
    assert [p for p in panel.planned if p[0] < step] == [p for p in before if p[0] < step]
    assert [p for p in panel.planned if p[0] >= step] == [p for p in ack.planned_lr if p[0] >= step]
    assert app.session.view.max_steps == 4000 and "/4,000" in status_text(app)
    assert app.session.boundary_work.max_steps == 4000  # what a stop waits for
    (toast,) = [t for t in toasts if t.title.startswith("Settings changed")]
    assert toast.title == f"Settings changed at step {step:,} by viewer 2 alice@gpu1 (pts/3)"
    assert "train.max_steps" in toast.message and "4000" in toast.message


@pilot_test()
async def test_a_change_without_a_new_schedule_keeps_the_plan(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts
) -> None:
    panel = app.main_screen.lr_panel
    before = list(panel.planned)
    factory.trainer.set_settings({"eval.interval": 50})
    app.pump(force=True)
    await pilot.pause()
    assert panel.planned == before and panel.max_steps == 2000
    (toast,) = [t for t in toasts if t.title.startswith("Settings changed")]
    assert toast.title.endswith(f"step {app.session.view.step:,}")  # by the app: not named
    assert factory.trainer.calls[-1] == ("set_settings", {"eval.interval": 50}, "app")


def test_a_headless_run_prints_the_change_and_counts_to_the_new_length() -> None:
    from cockpit.cli.headless import ProgressPrinter
    from engine.events import SettingsChanged, Step

    lines: list[str] = []
    printer = ProgressPrinter(out=lines.append, interval_s=0.0, clock=lambda: 0.0)
    printer(
        SettingsChanged(
            step=300, changes={"train.max_steps": [2000, 5000], "optim.weight_decay": [0.1, 0.0]},
            by="viewer 2 alice@gpu1 (pts/3)", max_steps=5000, tokens_per_step=768,
        )
    )  # fmt: skip
    printer(Step(step=301, loss=2.0, lr=1e-3, grad_norm=0.5, tokens_per_s=1e4, step_time_s=0.1,
                 tokens=301 * 768))  # fmt: skip
    assert lines[0] == (
        "set       300 | train.max_steps 2000 -> 5000, optim.weight_decay 0.1 -> 0 "
        "(by viewer 2 alice@gpu1 (pts/3))"
    )
    assert lines[1].startswith("step    301/5000 |")


@pilot_test()
async def test_a_change_older_than_the_runs_start_is_in_its_config_already(
    pilot: Pilot, app: CockpitApp, factory: ScriptedFactory, toasts: Toasts
) -> None:
    # a resumed run's history: its RunStarted (newer) holds the settings in force
    from engine.events import SettingsChanged

    info = app.session.view.info
    assert info is not None
    panel = app.main_screen.lr_panel
    before = list(panel.planned)
    factory.trainer.events.put(
        SettingsChanged(step=10, changes={"train.max_steps": [1000, 9000]}, max_steps=9000,
                        planned_lr=((0, 1e-3), (8999, 1e-4)), time=info.time - 1)
    )  # fmt: skip
    app.pump(force=True)
    await pilot.pause()
    assert app.session.view.max_steps == 2000 and panel.planned == before
    assert app.session.view.info.config == info.config
    assert not [t for t in toasts if t.title.startswith("Settings")]
