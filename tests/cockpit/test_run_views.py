"""Snapshots of the runs screen, a finished run's read-only view and a three-run overlay, at 80x24
and 160x48, fed by fixed run directories written by the test (tests/cockpit/run_dirs.py).

The runs live under ./runs of a temporary working directory, so the paths on screen are the same
on every machine; their start times are whole days back, so "1d ago" is too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pilot import wait_for
from run_dirs import three_runs
from textual.widgets import DataTable

from cockpit.app.cockpit_app import CockpitApp
from cockpit.screens.runs_screen import RunsScreen
from engine.rundir.recorded import RecordedRun

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


@pytest.fixture(params=list(SIZES), ids=list(SIZES))
def size(request: pytest.FixtureRequest) -> tuple[int, int]:
    return SIZES[request.param]


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield three_runs(Path("runs"))
    monkeypatch.undo()
    time.tzset()


def view_of(run_dir: Path, overlays: list[Path] = ()) -> CockpitApp:
    return CockpitApp(
        lambda _preset: RecordedRun(run_dir), run_dir.name, overlays=[str(p) for p in overlays]
    )


async def settled(pilot: Any, app: CockpitApp, overlays: int = 0) -> None:
    await wait_for(pilot, lambda: app.view.step > 0 and app.state in ("finished", "failed"))
    await wait_for(pilot, lambda: len(app.main_screen.loss_panel.overlays) == overlays, timeout=10)
    await pilot.pause()
    app.pump(force=True)
    app.clear_notifications()
    await pilot.pause()


def test_finished_run_view(snap_compare: Any, size: tuple[int, int], runs: list[Path]) -> None:
    app = view_of(runs[0])

    async def run_before(pilot: Any) -> None:
        await settled(pilot, app)

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_three_run_overlay(snap_compare: Any, size: tuple[int, int], runs: list[Path]) -> None:
    app = view_of(runs[0], overlays=runs[1:])

    async def run_before(pilot: Any) -> None:
        await settled(pilot, app, overlays=2)

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_runs_screen(snap_compare: Any, size: tuple[int, int], runs: list[Path]) -> None:
    app = view_of(runs[0])

    async def run_before(pilot: Any) -> None:
        await settled(pilot, app)
        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen))
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 3)
        await pilot.press("down", "space")  # lower-lr selected for comparison
        await pilot.pause()
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_live_run_compared_with_two_others(snap_compare: Any, runs: list[Path]) -> None:
    """docs/compare.svg: today's run, training, over yesterday's and a lower-LR run."""
    from run_dirs import write_run
    from scripted import ScriptedFactory

    yesterday = write_run(Path("runs"), "yesterday", days_ago=1, loss_shift=0.12)
    lower_lr = write_run(Path("runs"), "lr-3e-4", days_ago=2, loss_shift=-0.15, steps=300)
    factory = ScriptedFactory(steps=300, max_steps=600)
    app = CockpitApp(factory, "default", overlays=[str(yesterday), str(lower_lr)])

    async def run_before(pilot: Any) -> None:
        from pilot import settle

        await settle(pilot, factory)
        await wait_for(pilot, lambda: len(app.main_screen.loss_panel.overlays) == 2, timeout=10)
        await settle(pilot)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(160, 48), run_before=run_before)
