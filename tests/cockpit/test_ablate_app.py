"""`cockpit ablate` in the app, with the real engine on the tiny preset: the series' runs one
after another, the run on screen titled with its place in the series; at the end the table is
written and the other runs are overlaid on the last (the comparison); `q` mid-series stops the
run on its way with a checkpoint, and the series' record says what a rerun does next."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pilot import REAL_SIZE, Toasts, run_pilot, status_text, wait_for_engine
from textual.pilot import Pilot
from training_here import keys_while_training

from cockpit.ablation.series_record import DONE, RESUME, START, Series
from cockpit.ablation.spec import check_spec
from cockpit.app.ablating import AblationApp
from cockpit.cli import build_parser
from cockpit.cli.ablate import spec_from_args
from cockpit.cli.launch import make_trainer, train_arguments
from cockpit.cli.series_driver import SeriesDriver


@pytest.fixture(autouse=True)
def _keys_while_training() -> Iterator[None]:
    with keys_while_training():  # the engine trains in this process: it is never idle
        yield


def series_app(tmp_path: Path, steps: int) -> tuple[AblationApp, SeriesDriver]:
    args = build_parser().parse_args(
        [
            "ablate", "--preset", "tiny", "--change", "optim.name=lion", "--change", "model.qk_norm=true",
            "--steps", str(steps), "--set", "eval.interval=10", "--set", "sample.interval=0",
            "--set", "checkpoint.interval=0", "--set", "eval.batches=2", "--runs", str(tmp_path / "runs"),
            "--name", "s", "--no-telemetry",
        ]
    )  # fmt: skip
    spec = spec_from_args(args)
    check_spec(spec)
    driver = SeriesDriver(Series.open(spec, tmp_path / "runs"), args)
    first = driver.next_run()
    assert first is not None
    label, make = first
    made_first = []

    def factory(preset: str) -> Any:
        # as `cockpit ablate` (run_app) builds them: the series' first run once, then a run
        # picked in the app (p, n) as a new run of that preset under the runs root; never the
        # series' run again (its directory holds a run: a new one there is refused)
        if not made_first:
            made_first.append(preset)
            return make()
        return make_trainer(train_arguments(no_telemetry=True), preset, first=False, runs_root=args.runs_root)

    app = AblationApp(factory, "tiny", series=driver, first_label=label)
    return app, driver


@pytest.mark.slow  # the real engine, three runs
def test_the_series_runs_one_after_another_then_compares_them(tmp_path: Path) -> None:
    app, driver = series_app(tmp_path, steps=20)
    titles: list[str] = []

    async def scenario(pilot: Pilot) -> None:
        def seen() -> bool:
            text = status_text(app)
            if text.startswith("ablate") and (not titles or titles[-1] != text.split(" · ")[0]):
                titles.append(text)
            return app.series_done

        await wait_for_engine(pilot, seen, timeout=90)
        await wait_for_engine(pilot, lambda: len(app.main_screen.loss_panel.overlays) == 2)
        assert "ablate done" in app.session.status_note

    run_pilot(app, scenario, size=REAL_SIZE)
    shown = " ".join(titles)
    assert "ablate 2/3: optim.name=lion" in shown and "ablate 3/3: model.qk_norm=true" in shown
    assert driver.complete()
    series = tmp_path / "runs" / "s"
    md = (series / "results.md").read_text()
    assert md.count("| finished |") == 3
    assert (series / "results.csv").read_text().count("\n") == 4  # the header and 3 runs


@pytest.mark.slow  # the real engine, three runs
def test_q_mid_series_stops_the_run_with_a_checkpoint_for_a_rerun(tmp_path: Path) -> None:
    app, driver = series_app(tmp_path, steps=100000)
    # the first run short: the series reaches its second while the test waits
    driver.plans[0].train.overrides = [*driver.plans[0].train.overrides, "train.max_steps=10"]
    series = tmp_path / "runs" / "s"

    async def scenario(pilot: Pilot) -> None:
        await wait_for_engine(pilot, lambda: "ablate 2/3" in status_text(app) and app.session.view.step >= 3, timeout=90)
        await pilot.press("q")
        await wait_for_engine(pilot, lambda: app.screen.query("#confirm-dialog"))
        await pilot.press("y")
        await wait_for_engine(pilot, lambda: not app.session.engine_running, timeout=30)

    run_pilot(app, scenario, size=REAL_SIZE)
    assert not driver.complete()
    again = Series.open(driver.series.spec, tmp_path / "runs")
    assert [again.next_step(r) for r in again.runs] == [DONE, RESUME, START]
    assert again.runs[1].status == "stopped"
    assert not (series / "02-model.qk_norm=true").exists()


@pytest.mark.slow  # the real engine
def test_picking_another_run_mid_series_says_the_series_stopped_and_how_to_continue(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the picked preset's run goes to ./runs
    app, driver = series_app(tmp_path, steps=100000)
    toasts = Toasts()

    async def scenario(pilot: Pilot) -> None:
        await wait_for_engine(pilot, lambda: "ablate 1/3" in status_text(app) and app.session.view.step >= 3, timeout=60)
        app.switching.switch_to("tiny")  # what the preset menu (p) does once confirmed
        await wait_for_engine(pilot, lambda: any(t.title == "Ablation stopped" for t in toasts), timeout=30)

    run_pilot(app, scenario, size=REAL_SIZE, toasts=toasts)
    said = next(t.message for t in toasts if t.title == "Ablation stopped")
    assert said.startswith("ablate stopped: 0 of 3 runs done") and "run the same command again" in said
    assert said.endswith("tiny is not part of it")
    assert not [t.message for t in toasts if t.title == "Error"]
    assert [d.name for d in (tmp_path / "runs").iterdir() if d.name.startswith("tiny")]  # the picked run, on its own
    again = Series.open(driver.series.spec, tmp_path / "runs")
    assert [again.next_step(r) for r in again.runs] == [RESUME, START, START]  # nothing lost
