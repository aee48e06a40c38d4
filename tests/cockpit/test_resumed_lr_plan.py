"""A resumed run's LR panel draws its past with the schedule it followed then: a `set` that
re-planned the schedule mid-run (a new peak LR, a longer run), saved in the checkpoint's
timeline, shapes the planned curve from its step on only. The real engine on a tiny model."""

from __future__ import annotations

from pathlib import Path

from pilot import TINY, run_pilot, wait_for_engine
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp
from engine.config.presets import load_preset
from engine.events import Event
from engine.optim.schedule import lr_at
from engine.train.trainer import Trainer

FIRST = [*TINY, "train.max_steps=40", "train.log_every=1", "schedule.warmup_steps=2"]
CHANGE_AT = 12
NEW = {"optim.lr": 1e-3, "train.max_steps": 60}


def stopped_after_a_replan(run_dir: Path) -> None:
    """A run whose peak LR and length were set at step 12, stopped (and saved) at step 20."""
    trainer = Trainer(load_preset("tiny", FIRST), run_dir=run_dir, telemetry=False, interactive=False)

    def sink(event: Event) -> None:
        if event.kind == "step" and event.step == CHANGE_AT:
            trainer.set_settings(dict(NEW))
        if event.kind == "step" and event.step == 20:
            trainer.stop()

    trainer.sinks.append(sink)
    assert trainer.run() == "stopped"


def test_a_resumed_run_draws_its_past_with_the_schedule_it_followed(tmp_path: Path) -> None:
    stopped_after_a_replan(tmp_path / "run")
    before = load_preset("tiny", FIRST)  # the schedule in force until step 12
    after = load_preset("tiny", [*FIRST, "optim.lr=1e-3", "train.max_steps=60", "schedule.decay_steps=40"])

    def factory(preset: str) -> Trainer:  # the CLI's `cockpit train --resume RUN_DIR`
        return Trainer(load_preset(preset, []), resume=tmp_path / "run", telemetry=False)

    app = CockpitApp(factory, "default")

    async def scenario(pilot: Pilot) -> None:
        panel = app.main_screen.lr_panel
        await wait_for_engine(pilot, lambda: app.view.step > 20 and panel.planned)
        app.trainer.stop(checkpoint=False)
        assert panel.max_steps == 60
        for step in (0, 5, CHANGE_AT - 1):  # trained at the old peak LR, planned so
            assert abs(panel.planned_at(step) - lr_at(step, before)) < 1e-9, step
        for step in (CHANGE_AT, 30, 59):  # the re-planned schedule from the change on
            assert abs(panel.planned_at(step) - lr_at(step, after)) < 1e-9, step
        # what the run applied before the change is on the planned curve (1 step behind:
        # a step's LR is the plan's at the step before it)
        for step, lr in zip(panel.applied.xs, panel.applied.ys, strict=True):
            if 1 <= step <= CHANGE_AT:
                assert abs(panel.planned_at(int(step) - 1) - lr) < 1e-6 * lr, step

    run_pilot(app, scenario, size=(120, 40))
