"""Other runs from inside the app: a finished run's read-only view (no engine starts), opening a
run from the runs screen, overlaying runs with the legend checked against the files, and a real
resume and fork started from the app."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from pilot import TINY, Toasts, alert_text, run_pilot, wait_for, wait_for_engine
from run_copies import copy_run, train_here
from run_dirs import three_runs, write_run
from scripted import ScriptedFactory, ScriptedTrainer, build_script
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Label

from cockpit.app.cockpit_app import CockpitApp
from cockpit.figures.series import DebiasedEMA
from cockpit.screens.runs_screen import RunsScreen
from cockpit.screens.settings import SettingsScreen
from engine.rundir.recorded import RecordedRun

SIZE = (120, 40)


def recorded_app(run_dir: Path, **options: Any) -> CockpitApp:
    """The app opened on a run that is over, as `cockpit compare RUN` opens it."""
    return CockpitApp(lambda _preset: RecordedRun(run_dir), run_dir.name, **options)


def file_losses(run_dir: Path) -> list[tuple[int, float]]:
    """Every step's (step, loss) as metrics.jsonl says, read the slow plain way."""
    steps = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == "step":
            steps.append((record["step"], record["loss"]))
    return steps


def ema_at(run_dir: Path, step: int, beta: float = 0.9) -> float:
    ema = DebiasedEMA(beta)
    value = None
    for at, loss in file_losses(run_dir):
        if at > step:
            break
        value = ema.update(loss)
    assert value is not None
    return value


def test_a_finished_run_opens_read_only_with_no_engine(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "baseline")
    app = recorded_app(run_dir)
    toasts = Toasts()

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.state == "finished" and app.view.step == 300)
        app.pump(force=True)
        assert app.session.viewing_record and not app.session.engine_running
        assert len(app.main_screen.loss_panel.raw) == 300  # every step of the file, drawn
        assert app.main_screen.loss_panel.best_val is not None
        assert app.view.last_checkpoint is not None
        footer = {b.binding.action for b in app.screen.active_bindings.values() if b.enabled}
        assert {"resume_run", "runs", "run_over_note"} <= footer
        assert "rollback" not in footer and "toggle_pause" not in footer
        await pilot.press("space")  # a steering key says why it does nothing
        await pilot.pause()
        assert any("nothing runs to steer" in t.message for t in toasts)
        await pilot.press("r")  # this app resumes nothing: it says so in one line
        await pilot.pause()
        assert any("starts no run" in t.message for t in toasts)

    run_pilot(app, scenario, size=SIZE, toasts=toasts)
    assert "no engine" not in " ".join(t.message for t in toasts)


def test_a_crashed_run_says_so(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "crashed", finish=False, crash_at=180)
    app = recorded_app(run_dir)

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.state == "failed")
        app.pump(force=True)
        assert app.view.step == 180
        assert "crashed" in alert_text(app)

    run_pilot(app, scenario, size=SIZE)


def test_the_runs_screen_opens_a_finished_run_in_place_of_the_app_s_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    three_runs(Path("runs"))
    factory = ScriptedFactory(steps=120, max_steps=2000)
    app = CockpitApp(factory, "default")

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: factory.trainers and factory.trainer.loaded.is_set())
        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen))
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 3)
        await pilot.press("down")  # the newest first: baseline, then lower-lr
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen")
        assert "saved (a checkpoint) and stopped first" in str(app.screen.message)
        await pilot.press("y")
        await wait_for(pilot, lambda: app.session.viewing_record and app.view.step == 300, timeout=10)
        assert Path(app.session.run_dir or "").name == "lower-lr"
        assert ("stop", True) in factory.trainers[0].calls  # with a checkpoint
        assert len(factory.trainers) == 1  # no preset was started

    run_pilot(app, scenario, size=SIZE)


def test_two_overlaid_runs_show_their_values_from_the_files(tmp_path: Path) -> None:
    base, lower, crashed = three_runs(tmp_path)
    app = recorded_app(base, overlays=[str(lower), str(crashed)])

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: len(app.main_screen.loss_panel.overlays) == 2, timeout=10)
        await wait_for(pilot, lambda: app.view.step == 300)
        app.pump(force=True)
        entries = {e.name: e.value for e in app.main_screen.loss_panel.legend_entries()}
        # the EMA of each run at the current run's step, as the file's losses give it
        assert entries["lower-lr"] == pytest.approx(ema_at(lower, 300), abs=1e-9)
        # it never got to step 300: its last loss, at the step it ended at (not '-')
        crashed_end = file_losses(crashed)[-1][0]
        ended = next(e for e in app.main_screen.loss_panel.legend_entries() if e.name == "crashed")
        assert ended.ended_at == crashed_end == 180
        assert entries["crashed"] == pytest.approx(ema_at(crashed, crashed_end), abs=1e-9)
        assert app.main_screen.loss_panel.current_value() == pytest.approx(ema_at(base, 300), abs=1e-9)
        legend = str(app.main_screen.loss_panel.border_subtitle)
        assert "lower-lr" in legend and "-0.150" in legend  # 0.15 better than lower-lr
        assert f"crashed {entries['crashed']:.3f}@180" in legend  # no difference: another x
        await pilot.press("t")  # tokens: the same runs, the same values at the same point
        app.pump(force=True)
        entries = {e.name: e.value for e in app.main_screen.loss_panel.legend_entries()}
        assert entries["lower-lr"] == pytest.approx(ema_at(lower, 300), abs=1e-9)

    run_pilot(app, scenario, size=SIZE)


# a real run, resumed and forked from the app ----------------------------------------------------

TINY_STEPS = 30


@pytest.fixture(scope="module")
def trained_tiny_run(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    """A real `tiny` run of 30 steps that finished with checkpoints at 20 and 30: trained once
    for the module, read only through the copies `finished_tiny_run` makes."""
    run_dir = tmp_path_factory.mktemp("trained") / "tiny-run"
    sets = [f"train.max_steps={TINY_STEPS}", "checkpoint.interval=20", "eval.interval=0", "sample.interval=0"]
    train_here(run_dir, sets, isolated_env)
    assert (run_dir / "ckpt-00000020.pt").exists()
    return run_dir


@pytest.fixture
def finished_tiny_run(trained_tiny_run: Path, tmp_path: Path) -> Path:
    """This test's own copy of the trained run (resumed in place, forked beside), alone in its
    directory as if trained there."""
    return copy_run(trained_tiny_run, tmp_path / "tiny-run")


@pytest.fixture
def rolled_back_run(tmp_path: Path) -> Path:
    """A real `tiny` run (made smaller) that met a NaN at step 15, rolled back on its own to
    the checkpoint of step 10 (unattended), trained on to 30 and finished; then resumed from 30
    to 36."""
    import torch

    from cockpit.cli.launch import resume_trainer, train_arguments
    from engine.config.presets import load_preset
    from engine.train.trainer import Trainer

    run_dir = tmp_path / "recovered"
    sets = [*TINY, "train.max_steps=30", "checkpoint.interval=10", "train.on_anomaly=rollback"]
    trainer = Trainer(load_preset("tiny", sets), run_dir=run_dir, telemetry=False, interactive=False)
    trainer.set_up()
    step_parts = trainer.built.instruments.step
    forward, calls = step_parts.forward, []

    def poisoned(x: torch.Tensor, y: torch.Tensor | None = None) -> Any:  # the 15th loss: NaN
        calls.append(1)
        logits, loss = forward(x, y)
        return logits, loss * float("nan") if len(calls) == 15 else loss

    step_parts.forward = poisoned
    assert trainer.run() == "finished" and trainer.rollbacks == 1
    resumed = resume_trainer(train_arguments(no_telemetry=True), str(run_dir), ["train.max_steps=36"])
    assert resumed.run() == "finished"
    return run_dir


def test_a_finished_run_s_view_draws_its_past_and_announces_none_of_it(
    rolled_back_run: Path,
) -> None:
    app = recorded_app(rolled_back_run)
    toasts = Toasts()
    records = [json.loads(line) for line in (rolled_back_run / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "alert" and r.get("code") == "rollback" for r in records)

    async def scenario(pilot: Pilot) -> str:
        await wait_for(pilot, lambda: app.state == "finished" and app.view.step == 36)
        app.pump(force=True)
        await pilot.pause()
        return alert_text(app)

    banner = run_pilot(app, scenario, size=SIZE, toasts=toasts)
    assert [t.title for t in toasts] == [], [(t.title, t.message) for t in toasts]
    assert "not finite" not in banner and "roll" not in banner, banner  # the fault is behind it
    assert "finished at step 36" in banner
    assert app.view.anomaly is None
    assert app.main_screen.loss_panel.markers  # drawn: the rollback and its LR change are on the curve


def real_recorded_app(run_dir: Path) -> CockpitApp:
    from cockpit.cli.launch import resume_trainer, train_arguments

    return recorded_app(
        run_dir, resume_factory=lambda target, sets: resume_trainer(
            train_arguments(no_telemetry=True), target, sets
        )
    )


def test_resume_a_finished_run_asks_how_far_and_trains_on(finished_tiny_run: Path) -> None:
    app = real_recorded_app(finished_tiny_run)
    toasts = Toasts()

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.state == "finished")
        await pilot.press("r")
        await wait_for_engine(
            pilot, lambda: isinstance(app.screen, SettingsScreen) or toasts, timeout=60
        )
        assert isinstance(app.screen, SettingsScreen), [t.message for t in toasts]
        assert app.screen.initial == f"train.max_steps={2 * TINY_STEPS}"
        await pilot.press("enter")
        await wait_for_engine(pilot, lambda: not app.session.viewing_record and app.view.info is not None)
        await wait_for_engine(pilot, lambda: app.view.step > TINY_STEPS + 2)
        assert app.view.info.start_step == TINY_STEPS  # from its last checkpoint
        assert app.view.max_steps == 2 * TINY_STEPS
        assert len(app.main_screen.loss_panel.raw) > TINY_STEPS  # the curve goes on from the file's
        await wait_for_engine(pilot, lambda: app.state == "finished", timeout=120)

    run_pilot(app, scenario, size=SIZE, toasts=toasts)


def test_fork_from_a_checkpoint_with_a_lower_lr(finished_tiny_run: Path) -> None:
    app = real_recorded_app(finished_tiny_run)
    parent_metrics = (finished_tiny_run / "metrics.jsonl").read_bytes()

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.state == "finished")
        await pilot.press("f")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
        screen = app.screen
        steps = [int(name.split("-")[1].split(".")[0]) for name in screen.checkpoints]
        assert steps == sorted(steps, reverse=True)  # the newest first
        from textual.widgets import Select

        older = next(name for name in screen.checkpoints if name.endswith("-00000020.pt"))
        screen.query_one(Select).value = older
        await pilot.press(*"optim.lr=1e-4 schedule.min_lr=1e-5", "enter")
        await wait_for_engine(pilot, lambda: not app.session.viewing_record and app.view.info is not None)
        await wait_for_engine(pilot, lambda: app.view.step > 22)
        info = app.view.info
        branch = Path(info.run_dir)
        assert info.start_step == 20  # the checkpoint's step
        assert info.config["optim"]["lr"] == pytest.approx(1e-4)
        fork = json.loads((branch / "fork.json").read_text())
        assert fork["step"] == 20 and fork["checkpoint"] == older
        # the parent's weights: the branch's checkpoint is the parent's file itself
        assert os.path.samefile(branch / older, finished_tiny_run / older)
        await wait_for_engine(pilot, lambda: app.state == "finished", timeout=120)

    run_pilot(app, scenario, size=SIZE)
    assert (finished_tiny_run / "metrics.jsonl").read_bytes() == parent_metrics  # untouched


def test_the_fork_dialog_refuses_a_bad_setting_inline_and_stays_open(finished_tiny_run: Path) -> None:
    app = real_recorded_app(finished_tiny_run)
    toasts = Toasts()

    async def scenario(pilot: Pilot) -> list[str]:
        await wait_for(pilot, lambda: app.state == "finished")
        await pilot.press("f")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
        screen = app.screen
        errors = []
        for bad in ("optim.lr=-1", "model.n_layer=4", "optim.nope=1"):
            screen.query_one(Input).value = bad
            await pilot.press("enter")
            await pilot.pause(0.2)
            assert app.screen is screen, bad  # still open, the setting still there to fix
            errors.append(str(screen.query_one("#settings-error", Label).render()))
        await pilot.press("escape")
        return errors

    errors = run_pilot(app, scenario, size=SIZE, toasts=toasts)
    assert "optim.lr: expected a value > 0.0, got -1.0" in errors[0]
    assert "cannot change model.n_layer" in errors[1] and "unknown key 'nope'" in errors[2]
    assert not any("--resume" in e for e in errors), errors  # nothing here says --resume
    assert not [t for t in toasts if "Cannot fork" in str(t.title)]
    assert sorted(p.name for p in finished_tiny_run.parent.iterdir()) == ["tiny-run"]  # no branch


def runs_screen_app(run_dir: Path) -> CockpitApp:
    """An app whose runs screen lists `run_dir`'s parent, on a scripted run of its own."""
    from cockpit.cli.launch import resume_trainer, train_arguments

    return CockpitApp(
        ScriptedFactory(steps=10, max_steps=2000),
        "default",
        runs_root=str(run_dir.parent),
        resume_factory=lambda target, sets: resume_trainer(
            train_arguments(no_telemetry=True), target, sets
        ),
    )


async def pick_in_runs_screen(pilot: Pilot, app: CockpitApp, *keys: str) -> None:
    await pilot.press("h")
    await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen))
    table = app.screen.query_one(DataTable)
    await wait_for(pilot, lambda: table.row_count == 1, timeout=10)
    await pilot.press(*keys)


def test_resume_from_the_runs_screen(finished_tiny_run: Path) -> None:
    app = runs_screen_app(finished_tiny_run)

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.trainer is not None and app.view.step >= 10)
        await pick_in_runs_screen(pilot, app, "r")
        # finished: how far to train on, then the app's own run is saved and stopped first
        await wait_for_engine(pilot, lambda: isinstance(app.screen, SettingsScreen), timeout=60)
        await pilot.press("enter")
        await wait_for_engine(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen")
        await pilot.press("y")
        await wait_for_engine(pilot, lambda: app.view.info is not None and app.view.info.start_step == TINY_STEPS)
        await wait_for_engine(pilot, lambda: app.view.step > TINY_STEPS + 2)
        assert app.session.run_dir == str(finished_tiny_run)
        await wait_for_engine(pilot, lambda: app.state == "finished", timeout=120)

    run_pilot(app, scenario, size=SIZE)


def test_fork_from_the_runs_screen(finished_tiny_run: Path) -> None:
    app = runs_screen_app(finished_tiny_run)

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.trainer is not None and app.view.step >= 10)
        await pick_in_runs_screen(pilot, app, "f", *"optim.lr=1e-4 schedule.min_lr=1e-5", "enter")
        # the app's own run is saved and stopped first: asked before the branch is made
        await wait_for_engine(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen")
        await pilot.press("y")
        # from its last checkpoint (step 30 of 30): the app asks again with more steps
        await wait_for_engine(pilot, lambda: isinstance(app.screen, SettingsScreen), timeout=60)
        assert app.screen.initial.endswith(f"train.max_steps={2 * TINY_STEPS}")
        assert "Enter trains the branch here: default (step 10) is saved" in app.screen.message
        await pilot.press("enter")
        await wait_for_engine(pilot, lambda: app.view.info is not None and app.view.info.start_step == TINY_STEPS)
        info = app.view.info
        assert info.config["optim"]["lr"] == pytest.approx(1e-4)
        assert Path(info.run_dir).name.startswith("tiny-run-fork-30-")
        await wait_for_engine(pilot, lambda: app.state == "finished", timeout=120)

    run_pilot(app, scenario, size=SIZE)


def test_a_live_run_opened_from_the_runs_screen_is_attached_to(tmp_path: Path) -> None:
    """enter on a live run: the app's finished view is left for a viewer of that run, which
    steers it (a pause reaches it) and leaves it running when the app goes."""
    from live_process import LiveRun

    from engine.control.live_runs import probe

    finished = write_run(tmp_path / "runs", "old")
    live = LiveRun(tmp_path / "runs" / "live")
    app = recorded_app(finished, runs_root=str(tmp_path / "runs"))
    try:
        live.start()

        async def scenario(pilot: Pilot) -> None:
            await wait_for(pilot, lambda: app.state == "finished")
            await pilot.press("h")
            await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen))
            table = app.screen.query_one(DataTable)
            await wait_for(pilot, lambda: table.row_count == 2, timeout=10)
            await pilot.press("enter")  # the newest first: the live run
            await wait_for_engine(pilot, lambda: app.session.attached and app.session.engine_running)
            await wait_for_engine(pilot, lambda: app.view.step > 2)
            assert app.session.run_dir == str(live.run_dir)
            await pilot.press("space")
            await wait_for_engine(pilot, lambda: app.state == "paused")

        run_pilot(app, scenario, size=SIZE)
        greeting = probe(live.run_dir, timeout_s=5.0)
        assert greeting is not None and greeting.state == "paused"  # it goes on, paused
    finally:
        live.close()


def test_an_overlaid_live_run_grows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run still training, overlaid on a finished one: its curve is read again as it goes."""
    from live_process import LiveRun

    monkeypatch.setattr("cockpit.app.comparing.LIVE_REFRESH_MIN_S", 0.5)
    finished = write_run(tmp_path / "runs", "old")
    live = LiveRun(tmp_path / "runs" / "live")
    try:
        live.start()
        app = recorded_app(finished, overlays=[str(live.run_dir)])

        async def scenario(pilot: Pilot) -> None:
            await wait_for_engine(pilot, lambda: len(app.main_screen.loss_panel.overlays) == 1)
            first = len(app.main_screen.loss_panel.overlays[0])
            await wait_for_engine(pilot, lambda: len(app.main_screen.loss_panel.overlays[0]) > first + 5)
            colour = app.main_screen.loss_panel.overlay_colours[0]
            await wait_for_engine(pilot, lambda: len(app.main_screen.loss_panel.overlays[0]) > first + 20)
            assert app.main_screen.loss_panel.overlay_colours[0] == colour  # the same run, the same colour

        run_pilot(app, scenario, size=SIZE)
    finally:
        live.close()


def live_app_on(run_dir: Path) -> tuple[CockpitApp, list[ScriptedTrainer]]:
    """The app on a run still training (scripted, at step 300), whose directory is `run_dir`:
    its checkpoints are the ones `f` offers; a branch trains in the real engine."""
    from cockpit.cli.launch import resume_trainer, train_arguments

    made: list[ScriptedTrainer] = []

    def factory(name: str) -> ScriptedTrainer:
        script = build_script(name)
        script[0] = dataclasses.replace(script[0], run_dir=str(run_dir))  # its RunStarted
        made.append(ScriptedTrainer(name, script=script))
        return made[-1]

    app = CockpitApp(
        factory,
        "default",
        resume_factory=lambda target, sets: resume_trainer(train_arguments(no_telemetry=True), target, sets),
    )
    return app, made


def test_enter_in_the_fork_dialog_of_a_live_run_starts_the_branch(finished_tiny_run: Path) -> None:
    """`f` on a run that trains: the dialog says what enter does to it, and enter saves and stops
    it and trains the branch here, with a toast naming the branch (it made the branch, then
    asked again; a Cancel there left an untrained branch behind with not a word)."""
    app, made = live_app_on(finished_tiny_run)
    toasts = Toasts()

    async def scenario(pilot: Pilot) -> str:
        await wait_for(pilot, lambda: app.state == "running" and app.view.step == 300)
        await pilot.press("f")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
        message = app.screen.message
        from textual.widgets import Select

        app.screen.query_one(Select).value = "ckpt-00000020.pt"
        await pilot.press(*"optim.lr=1e-3", "enter")
        await wait_for_engine(pilot, lambda: app.view.info is not None and app.view.info.start_step == 20)
        await wait_for_engine(pilot, lambda: app.view.step > 21)
        return message

    message = run_pilot(app, scenario, size=SIZE, toasts=toasts)
    assert (
        "Enter trains the branch here: default (step 300) is saved (a checkpoint) and stopped "
        "first; resume it later from the runs screen (h)." in message
    )
    assert ("stop", True) in made[0].calls  # saved and stopped, as a switch does
    (branch,) = [p for p in finished_tiny_run.parent.iterdir() if p.name.startswith("tiny-run-fork-20-")]
    forked = [t for t in toasts if t.title == f"Forked: training {branch.name}"]
    assert forked and str(branch) in forked[0].message, [(t.title, t.message) for t in toasts]
    assert "lr" in json.loads((branch / "fork.json").read_text())["overrides"][0]


def test_the_fork_dialog_of_a_live_run_names_the_step_it_is_at_now(finished_tiny_run: Path) -> None:
    """The step the fork dialog says the run is saved at follows the run while the dialog is
    open (it said 'step 1,100' with the run at 3,051 behind it)."""
    from scripted import step_event

    app, made = live_app_on(finished_tiny_run)

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.state == "running" and app.view.step == 300)
        await pilot.press("f")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
        assert "default (step 300) is saved" in app.screen.message
        trainer = made[0]
        for step in range(301, 339):
            trainer._emit(step_event(step, 2.0, 1e-3, 1.0, trainer._next_time()))
        await wait_for(pilot, lambda: "default (step 338) is saved" in app.screen.message)
        shown = str(app.screen.query_one(".dialog-message").render())
        assert "default (step 338) is saved" in shown.replace("\n", " ")

    run_pilot(app, scenario, size=SIZE)


def test_a_fork_from_the_runs_screen_asks_before_it_makes_the_branch(finished_tiny_run: Path) -> None:
    """From the runs screen (whose fork line does not say what happens to the run on screen) the
    app asks first: Cancel leaves nothing made."""
    app, made = live_app_on(finished_tiny_run)

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.state == "running" and app.view.step == 300)
        app.starts.fork_run(finished_tiny_run / "ckpt-00000020.pt", ["optim.lr=1e-3"])
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen")
        await pilot.press("n")
        await pilot.pause(0.5)

    run_pilot(app, scenario, size=SIZE)
    assert sorted(p.name for p in finished_tiny_run.parent.iterdir()) == ["tiny-run"]  # no branch
    assert not [c for c in made[0].calls if c[0] == "stop"]


def test_f_in_a_viewer_says_at_once_that_it_starts_no_run() -> None:
    """A viewer (`cockpit attach`: no runs start in it) says so at f, not after the dialog."""
    app = CockpitApp(ScriptedFactory(), "default")
    toasts = Toasts()

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.state == "running" and app.view.step == 300)
        await pilot.press("f")
        await pilot.pause()
        assert app.screen is app.main_screen

    run_pilot(app, scenario, size=SIZE, toasts=toasts)
    assert [t.title for t in toasts if t.title.startswith("Cannot")] == ["Cannot start a run here"]
