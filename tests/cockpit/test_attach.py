"""The app attached to a run in another process: a real headless run, its real socket, Pilot.

Every key works as in-process and is acknowledged by the run (its metrics.jsonl says so);
leaving detaches and the run goes on; attaching again shows the whole history; two viewers
see each other's commands; a read-only viewer cannot command; an engine killed under a viewer
is named with its last checkpoint and the command that resumes it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_process
from live_process import LiveRun
from pilot import TINY, Toasts, real_app, run_pilot, status_text, wait_for_engine
from training_here import keys_while_training

from cockpit.cli.attach import attached_app
from cockpit.screens.dialogs import ChoiceScreen
from engine.config.presets import load_preset
from engine.control.client import RemoteEngine
from engine.events import LrChanged

SIZE = (120, 36)



def shown_keys(app: object) -> list[str]:
    """The footer's labels, the dimmed (disabled) ones too."""
    return [b.binding.description for b in app.active_bindings.values() if b.binding.show]


def test_attach_steer_detach_and_attach_again(live: LiveRun) -> None:
    app = attached_app(RemoteEngine(live.run_dir))

    async def scenario(pilot) -> dict[str, object]:
        await wait_for_engine(pilot, lambda: app.view.step > 0 and app.main_screen.loss_panel.has_data())
        assert app.session.attached and not app.session.read_only
        await pilot.press("space")
        await wait_for_engine(pilot, lambda: app.state == "paused")
        live.wait_for_record("state", state="paused")
        paused_at = app.view.step
        await pilot.pause(0.3)
        assert app.view.step == paused_at  # the step counter stops when paused
        await pilot.press("c")
        ckpt = live.wait_for_record("checkpoint", reason="manual")
        assert Path(ckpt["path"]).is_file()
        await wait_for_engine(pilot, lambda: app.view.last_checkpoint is not None
                              and app.view.last_checkpoint[2] == "manual")  # fmt: skip
        await pilot.press("plus")
        changed = live.wait_for_record("lr_changed")
        assert changed["scale"] == pytest.approx(1.25)
        await pilot.press("space")
        await wait_for_engine(pilot, lambda: app.state == "running")
        await pilot.press("q")
        await wait_for_engine(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        await pilot.press("d")
        await wait_for_engine(pilot, lambda: not app.is_running)
        return {"step": app.view.step}

    seen = run_pilot(app, scenario, size=SIZE)
    report = app.exit_summary()[-1]
    assert report.detached and report.attached
    assert live.process is not None and live.process.poll() is None
    assert live.steps_grow(by=20)  # the run went on without its viewer
    # attach again: the whole history (from step 1), and the run further along
    again = attached_app(RemoteEngine(live.run_dir))

    async def second(pilot) -> tuple[int, float]:
        await wait_for_engine(pilot, lambda: again.view.step > seen["step"])
        await wait_for_engine(pilot, lambda: again.main_screen.loss_panel.has_data())
        xs = again.main_screen.loss_panel.raw.xs
        again.detach()
        return xs[0], again.main_screen.lr_panel.scale

    first_x, scale = run_pilot(again, second, size=SIZE)
    assert first_x <= 2  # the curve starts at the run's first steps
    assert scale == pytest.approx(1.25)  # the LR change is part of what a new viewer sees


def test_attaching_draws_the_runs_past_and_announces_none_of_it(live: LiveRun) -> None:
    other = RemoteEngine(live.run_dir, who="bob@gpu1 (pts/9)")
    other.checkpoint()  # before this viewer came: a manual checkpoint and an LR change
    live.wait_for_record("checkpoint", reason="manual")
    other.scale_lr(0.5)
    live.wait_for_record("lr_changed")
    other.close()
    toasts = Toasts()
    app = attached_app(RemoteEngine(live.run_dir))

    async def scenario(pilot) -> list[str]:
        await wait_for_engine(pilot, lambda: app.view.step > 0 and app.view.last_checkpoint is not None)
        await wait_for_engine(pilot, lambda: app.main_screen.lr_panel.scale == pytest.approx(0.5))  # drawn
        past = [t.title for t in toasts]
        await pilot.press("c")  # news: announced
        await wait_for_engine(pilot, lambda: any(t.title.startswith("Checkpoint") for t in toasts))
        app.detach()
        return past

    past = run_pilot(app, scenario, size=SIZE, toasts=toasts)
    assert not [t for t in past if t.startswith(("Checkpoint", "LR changed", "Resumed"))], past


def test_two_viewers_see_each_others_commands(live: LiveRun) -> None:
    other = RemoteEngine(live.run_dir, who="bob@gpu1 (pts/9)")
    app = attached_app(RemoteEngine(live.run_dir))

    async def scenario(pilot) -> list[object]:
        await wait_for_engine(pilot, lambda: app.view.step > 0)
        other.scale_lr(0.5)  # the other viewer lowers the LR: this app's LR panel shows it
        await wait_for_engine(pilot, lambda: app.main_screen.lr_panel.scale == pytest.approx(0.5))
        await pilot.press("space")  # this app pauses: the other viewer hears of it
        await wait_for_engine(pilot, lambda: other.state == "paused")
        app.detach()
        return other.drain_events()

    events = run_pilot(app, scenario, size=SIZE)
    assert any(isinstance(e, LrChanged) and e.scale == pytest.approx(0.5) for e in events)
    other.close()


def test_a_read_only_viewer_watches_but_cannot_command(live: LiveRun) -> None:
    app = attached_app(RemoteEngine(live.run_dir, read_only=True))

    async def scenario(pilot) -> str:
        await wait_for_engine(pilot, lambda: app.view.step > 0)
        assert app.session.read_only
        footer = " ".join(
            b.binding.description for b in app.active_bindings.values() if b.binding.show and b.enabled
        )
        shown = shown_keys(app)  # dimmed ones too
        assert "Preset" not in shown  # a viewer starts no run: p is not offered
        await pilot.press("space", "c", "plus")
        await pilot.pause(0.5)
        assert app.state in ("running", "saving")  # not paused (tiny saves every 50 steps)
        step = app.view.step
        await wait_for_engine(pilot, lambda: app.view.step > step)  # still training
        await pilot.press("q")
        await wait_for_engine(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        assert "read-only" in str(app.screen.message)
        await pilot.press("s")  # no stop for a read-only viewer: s is not an answer here
        await pilot.pause(0.2)
        assert isinstance(app.screen, ChoiceScreen)
        await pilot.press("d")
        await wait_for_engine(pilot, lambda: not app.is_running)
        return footer

    footer = run_pilot(app, scenario, size=SIZE)
    assert "read-only viewer" in footer
    assert "Pause" not in footer and "Ckpt" not in footer  # the steering keys are not offered
    assert not live.records("state", state="paused") and not live.records("lr_changed")
    assert not live.records("checkpoint", reason="manual")


def test_an_engine_killed_under_the_viewer_is_named_with_its_last_checkpoint(live: LiveRun) -> None:
    live.wait_for_record("checkpoint")  # the tiny preset saves every 50 steps
    app = attached_app(RemoteEngine(live.run_dir))

    async def scenario(pilot) -> str:
        await wait_for_engine(pilot, lambda: app.view.step > 0)
        live.kill()
        await wait_for_engine(pilot, lambda: app.state == "failed", timeout=10)
        text = status_text(app) + " " + str(app.main_screen.alert_line.render())
        await pilot.press("q")  # nothing hangs: the run is gone, q just asks to quit
        await pilot.press("y")
        await wait_for_engine(pilot, lambda: not app.is_running, timeout=10)
        return text

    run_pilot(app, scenario, size=SIZE)
    alert = app.view.alert
    assert alert is not None and "is gone" in alert[1]
    assert f"cockpit --resume {live.run_dir}" in alert[1] and "ckpt-" in alert[1]


def test_an_engine_killed_before_any_checkpoint_names_the_command_that_works(
    tmp_path: Path,
) -> None:
    live = LiveRun(tmp_path / "run", "checkpoint.interval=0").start()  # nothing to resume from
    try:
        app = attached_app(RemoteEngine(live.run_dir))

        async def scenario(pilot) -> None:
            await wait_for_engine(pilot, lambda: app.view.step > 0)
            live.kill()
            await wait_for_engine(pilot, lambda: app.state == "failed", timeout=10)
            await pilot.pause()
            dead = {"Pause", "Resume", "Ckpt", "LR", "Sample", "Eval", "Preset"} & set(shown_keys(app))
            assert not dead, dead  # nothing to steer: not offered
            await pilot.press("q", "y")
            await wait_for_engine(pilot, lambda: not app.is_running, timeout=10)

        run_pilot(app, scenario, size=SIZE)
    finally:
        live.close()
    assert not list(live.run_dir.glob("ckpt-*"))
    alert = app.view.alert
    assert alert is not None and "is gone" in alert[1] and "no checkpoint was saved" in alert[1]
    assert "--resume" not in alert[1]  # refused without a checkpoint
    config = live.run_dir / "config.toml"
    assert f"start it again with: cockpit --preset {config}" in alert[1]
    assert load_preset(str(config)).name == "tiny"  # the command named loads the run's config


def test_a_viewer_killed_leaves_the_run_unaffected(live: LiveRun) -> None:
    code = (
        "import sys, time; from engine.control.client import RemoteEngine; "
        f"e = RemoteEngine({str(live.run_dir)!r}); print('attached', flush=True); time.sleep(60)"
    )
    viewer = warm_process.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert viewer.stdout is not None and viewer.stdout.readline().strip() == b"attached"
        os.kill(viewer.pid, signal.SIGKILL)
        viewer.wait(10)
    finally:
        if viewer.poll() is None:
            viewer.kill()
    assert live.steps_grow(by=20)
    assert not live.records("alert", level="error")
    assert not live.records("state", state="failed")


def test_attach_refusals_are_one_line(tmp_path: Path) -> None:
    def attach(*argv: str) -> subprocess.CompletedProcess[str]:
        return warm_process.run(
            [sys.executable, "-m", "cockpit", "attach", *argv],
            capture_output=True, text=True, cwd=tmp_path, timeout=30,
        )  # fmt: skip

    (tmp_path / "runs").mkdir()
    finished = tmp_path / "runs" / "old"
    finished.mkdir()
    cases = {
        "nothing-here": "no such run directory",
        str(finished): "no live run in",
        "": "no live run under runs/",
    }
    for target, expected in cases.items():
        started = time.monotonic()
        result = attach(*([target] if target else []))
        assert result.returncode == 2, result
        assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.stderr and time.monotonic() - started < 20


def test_the_apps_own_run_can_be_watched_and_steered_from_a_second_terminal(tmp_path: Path) -> None:
    app, made = real_app(tmp_path, overrides=[*TINY, "train.max_steps=100000"])

    async def scenario(pilot) -> list[object]:
        await wait_for_engine(pilot, lambda: app.view.step > 2)
        assert not app.session.attached  # its own run: quitting stops it
        other = RemoteEngine(made[0].run_dir)
        other.scale_lr(0.5)  # the second terminal lowers the LR: the app's panel shows it
        await wait_for_engine(pilot, lambda: app.main_screen.lr_panel.scale == pytest.approx(0.5))
        await pilot.press("space")
        await wait_for_engine(pilot, lambda: other.state == "paused")
        made[0].stop(checkpoint=False)
        assert other.run() == "stopped"  # the run's end reaches the second terminal too
        return other.drain_events()

    with keys_while_training():  # the app's own run trains in this process: never idle
        events = run_pilot(app, scenario, size=SIZE)
    assert any(isinstance(e, LrChanged) for e in events)
