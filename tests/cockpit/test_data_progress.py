"""The corpus preparation as a user sees it: headless lines at a bounded rate, and in the app a
progress bar with its figures while the corpus is prepared, gone once it is; q during the
preparation stops it and quits at once.

The slow preparation is a fake at the seam `engine.train.setup.prepare`: it emits DataProgress
events as the streaming prepare does, honours `should_stop`, then hands over to the real one.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from pilot import REAL_SIZE, real_app, run_pilot, settle, wait_for, wait_for_engine
from scripted import T0, ScriptedFactory, build_script
from slow_prepare import slow_prepare
from textual.pilot import Pilot
from textual.widgets import ProgressBar

import engine.data.preparation
import engine.train.setup
from cockpit.app.cockpit_app import CockpitApp
from cockpit.app.stop_wait import quit_question, stop_wait
from cockpit.cli import main
from cockpit.cli.headless import ProgressPrinter
from cockpit.widgets.data_progress import DataProgressPanel
from engine.events import DataProgress, RunState

TOTAL = 4_000_000


def progress(i: int, n: int, *, done: bool = False, t: float = T0) -> DataProgress:
    return DataProgress(
        source="corpus.txt",
        tokenizer="r50k_base",
        bytes_read=i * TOTAL // n,
        bytes_total=TOTAL,
        documents=i * 10,
        skipped=0,
        tokens=i * 250_000,
        elapsed_s=0.5 * i,
        done=done,
        time=t + 0.01 * i,
    )


# headless ------------------------------------------------------------------------------------


def test_headless_prints_preparation_lines_at_a_bounded_rate_and_always_the_last() -> None:
    lines: list[str] = []
    now = [0.0]
    printer = ProgressPrinter(out=lines.append, interval_s=2.0, clock=lambda: now[0])
    for i in range(20):  # one event every 0.25 s for 5 s
        now[0] = 0.25 * i
        printer(progress(i, 20))
    now[0] = 5.01
    printer(progress(20, 20, done=True))
    assert len(lines) == 4  # at 0, 2 and 4 s, and the final one
    for line in lines[:3]:
        assert line.startswith("data      | preparing corpus.txt (r50k_base): ")
    assert "(80%)" in lines[2] and "ETA" in lines[2]  # the event at 4 s
    assert lines[-1].startswith("data      | prepared corpus.txt (r50k_base): ")
    assert "took" in lines[-1]


def two_headless_steps(run_dir: Path) -> list[str]:
    """`cockpit train --headless` of two tiny steps: enough to see the preparation's lines."""
    return [
        "train", "--headless", "--preset", "tiny", "--no-telemetry", "--run-dir", str(run_dir),
        "--set", "train.max_steps=2",
    ]  # fmt: skip


def test_headless_train_shows_the_preparation_while_it_lasts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        engine.train.setup, "prepare", slow_prepare(chunks=25, delay_s=0.1, total=TOTAL)
    )
    code = main(two_headless_steps(tmp_path / "run"))
    assert code == 0
    out = capsys.readouterr().out.splitlines()
    preparing = [line for line in out if line.startswith("data      | preparing fake corpus")]
    assert 1 <= len(preparing) <= 3  # 2.5 s of preparation, a line at most every 2 s
    data_lines = [line for line in out if line.startswith("data      |")]
    assert data_lines[-1].startswith("data      | prepared fake corpus")
    assert out.index(data_lines[-1]) < next(i for i, s in enumerate(out) if "parameters" in s)


def test_headless_train_with_the_real_preparation_says_what_it_prepared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(two_headless_steps(tmp_path / "run"))
    assert code == 0
    out = capsys.readouterr().out
    # prepared now, or earlier in this test session (the cache is shared): one line either way
    assert re.search(r"^data      \| (prepared|.*: prepared earlier).*tokens", out, re.M), out


# the app -------------------------------------------------------------------------------------


def data_panel(app: CockpitApp) -> DataProgressPanel:
    return app.query_one(DataProgressPanel)


def test_the_app_shows_the_progress_bar_while_preparing_and_hides_it_after() -> None:
    factory = ScriptedFactory(script=[progress(i, 8) for i in range(5)])
    app = CockpitApp(factory, "default")

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        panel = data_panel(app)
        assert panel.display and panel.region.height > 0
        assert panel.query_one(ProgressBar).percentage == pytest.approx(0.5)
        figures = str(panel.figures.render())
        assert "(50%)" in figures and "40 docs" in figures and "1.00M tokens" in figures
        assert "Preparing corpus.txt (r50k_base)" in str(panel.title.render())
        assert app.main_screen.preparing_corpus

        trainer = factory.trainer
        trainer._emit(progress(8, 8, done=True, t=T0 - 1))
        for ev in build_script("default", steps=20):
            trainer._emit(ev)
        await pilot.pause()
        app.pump(force=True)
        await pilot.pause()
        assert not panel.display and not app.main_screen.preparing_corpus
        assert app.main_screen.loss_panel.has_data()  # the run's panels as always

    run_pilot(app, scenario)


@pytest.mark.serial  # a wall-clock bound: not beside another test
def test_q_during_preparation_stops_it_and_quits_promptly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        engine.train.setup, "prepare", slow_prepare(chunks=100_000, delay_s=0.02, total=TOTAL)
    )
    app, made = real_app(tmp_path)
    timing: dict[str, float] = {}

    async def scenario(pilot: Pilot) -> None:
        await wait_for_engine(pilot, lambda: app.main_screen.preparing_corpus)
        assert data_panel(app).display
        await pilot.press("q")
        await wait_for(pilot, lambda: bool(app.screen.query("#confirm-dialog")))
        assert "Stop preparing the corpus" in str(app.screen.query_one(".dialog-message").render())
        timing["confirmed"] = time.monotonic()
        await pilot.press("y")
        await wait_for_engine(pilot, lambda: not app.is_running, timeout=5)

    run_pilot(app, scenario, size=REAL_SIZE)
    assert time.monotonic() - timing["confirmed"] < 2.0
    trainer = made[0]
    assert trainer.state == RunState.STOPPED
    assert not trainer.run_dir.exists()  # nothing on disk
    assert app.exit_summary() == []  # nothing to report: the run never started


def test_the_quit_wait_during_preparation_says_there_is_nothing_to_save() -> None:
    wait = stop_wait(RunState.STARTING, None, 100.0, 103.0, preparing=True)
    assert wait == (
        "stopping the corpus preparation (nothing trained yet: nothing to save) · waited 3s"
    )
    assert "Stop preparing the corpus of [b]tiny[/b]" in quit_question(
        "tiny", True, RunState.STARTING, 0.0, preparing=True
    )
