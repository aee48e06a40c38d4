"""The research screen: a hand-written research log (a baseline, kept and discarded changes, a
refused one) as a table over the running best chart; enter opens an experiment's run, o overlays
the kept ones, R on the runs screen reaches it. Snapshots at 80x24 and 160x48."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pilot import run_pilot, wait_for
from run_dirs import three_runs
from scripted import ScriptedFactory
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from cockpit.ablation.research_log import LogRow, ResearchLog
from cockpit.app.cockpit_app import CockpitApp
from cockpit.screens.research_screen import ResearchChoice, ResearchScreen, running_best
from cockpit.screens.runs_screen import RunsChoice, RunsScreen

PENDING = "pending"
SERIES = "night"
# (id, change, val bpb, status, note)
EXPERIMENTS = [
    ("00-baseline", "", 1.9012, "kept", "the baseline, preset tiny"),
    ("01-optim.lr=0.002", "optim.lr=0.002", 1.8731, "kept", "lower by 0.0281 (margin 0.004)"),
    ("02-model.mlp=relu2", "model.mlp=relu2", 1.8802, "discarded", "not lower than 1.8731"),
    ("03-optim.name=lion", "optim.name=lion", 1.8459, "kept", "lower by 0.0272 (margin 0.004)"),
    ("04-model.n_layer=64", "model.n_layer=64", None, "refused", "does not fit: 91 GiB"),
    (
        "05-optim.weight_decay=0",
        "optim.weight_decay=0",
        1.8511,
        "discarded",
        "not lower than 1.8459",
    ),
]


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """runs/ with a run directory per measured experiment and the series' log."""
    root = tmp_path / "runs"
    rows = []
    for run_id, change, bpb, status, note in EXPERIMENTS:
        run_dir = root / SERIES / run_id
        if bpb is not None:
            run_dir.mkdir(parents=True)
        rows.append(
            LogRow(
                id=run_id, change=change, parent="00-baseline" if change else "preset tiny",
                val_bpb=bpb, tokens=None if bpb is None else 27_392, train_time_s=60.0,
                peak_memory_bytes=None, status=status, reason="", proposed_by="changes file",
                note=note, run_dir=str(run_dir) if bpb is not None else "",
            )
        )  # fmt: skip
    directory = root / "research" / SERIES
    directory.mkdir(parents=True, mode=0o700)
    ResearchLog(directory).append(rows)
    return root


class Host(App[None]):
    """An app that shows `screen` at once and keeps what it was dismissed with."""

    def __init__(self, screen: Any) -> None:
        super().__init__()
        self.screen_under_test = screen
        self.choice: RunsChoice | ResearchChoice | None | str = PENDING

    def compose(self) -> ComposeResult:
        yield Static("the cockpit")

    def on_mount(self) -> None:
        self.push_screen(self.screen_under_test, self._chosen)

    def _chosen(self, choice: RunsChoice | ResearchChoice | None) -> None:
        self.choice = choice


async def shown(pilot: Pilot) -> ResearchScreen:
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ResearchScreen))
    screen = pilot.app.screen
    assert isinstance(screen, ResearchScreen)
    await wait_for(pilot, lambda: screen.read_once)
    await pilot.pause()
    return screen


def test_the_running_best_counts_only_kept_experiments() -> None:
    rows = [LogRow(i, "", "", bpb, None, None, None, s) for i, _, bpb, s, _ in EXPERIMENTS]
    assert running_best(rows) == [1.9012, 1.8731, 1.8731, 1.8459, 1.8459, 1.8459]


def test_the_table_lists_every_experiment_and_enter_opens_one(runs: Path) -> None:
    app = Host(ResearchScreen(runs))

    async def scenario(pilot: Pilot) -> list[list[str]]:
        screen = await shown(pilot)
        table = screen.query_one(DataTable)
        cells = [[str(c).strip() for c in table.get_row_at(i)] for i in range(table.row_count)]
        table.move_cursor(row=2)
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.choice != PENDING)
        return cells

    cells = run_pilot(app, scenario, size=(160, 48))
    assert [c[1] for c in cells] == [e[1] or "(baseline)" for e in EXPERIMENTS]
    assert cells[3][2:5] == ["1.8459", "1.8459", "kept ●"]
    assert cells[4][2:5] == ["-", "1.8459", "refused"]
    assert app.choice == ResearchChoice("open", [runs / SERIES / "02-model.mlp=relu2"])


def test_enter_on_an_experiment_without_a_run_says_so_and_stays(runs: Path) -> None:
    app = Host(ResearchScreen(runs))

    async def scenario(pilot: Pilot) -> None:
        screen = await shown(pilot)
        screen.query_one(DataTable).move_cursor(row=4)
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ResearchScreen)

    run_pilot(app, scenario, size=(80, 24))
    assert app.choice == PENDING


def test_o_overlays_the_kept_ones_and_r_on_the_runs_screen_reaches_it(runs: Path) -> None:
    current = runs / SERIES / "00-baseline"
    app = Host(RunsScreen(runs, str(current)))

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.screen_under_test._read_once, timeout=10)
        await pilot.press("R")
        await shown(pilot)
        await pilot.press("o")
        await wait_for(pilot, lambda: app.choice != PENDING)

    run_pilot(app, scenario, size=(160, 48))
    # the kept ones but the run shown, which they are overlaid on
    kept = [runs / SERIES / "01-optim.lr=0.002", runs / SERIES / "03-optim.name=lion"]
    assert app.choice == RunsChoice("overlay", kept)


def test_no_log_is_one_line_naming_what_writes_one(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    app = Host(ResearchScreen(tmp_path / "runs"))

    async def scenario(pilot: Pilot) -> str:
        screen = await shown(pilot)
        return str(screen.query_one("#research-title", Static).render())

    title = run_pilot(app, scenario, size=(160, 48))
    assert title.startswith("no research log under") and "cockpit ablate" in title


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_research_snapshot(snap_compare: Any, runs: Path, size: tuple[int, int]) -> None:
    os.utime(runs / "research" / SERIES / "log.tsv")
    app = Host(ResearchScreen(runs))

    async def run_before(pilot: Any) -> None:
        await shown(pilot)

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_in_the_app_h_r_and_enter_open_an_experiment_s_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    baseline, lower_lr, _ = three_runs(Path("runs"))
    directory = Path("runs") / "research" / SERIES
    directory.mkdir(parents=True, mode=0o700)
    ResearchLog(directory).append(
        [
            LogRow("baseline", "", "preset default", 1.9, 100, 60.0, None, "kept", run_dir=str(baseline)),
            LogRow("lower-lr", "optim.lr=1e-4", "baseline", 2.0, 100, 60.0, None, "discarded",
                   run_dir=str(lower_lr)),
        ]
    )  # fmt: skip
    factory = ScriptedFactory(steps=120, max_steps=2000)
    app = CockpitApp(factory, "default")

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: factory.trainers and factory.trainer.loaded.is_set())
        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen))
        await wait_for(pilot, lambda: app.screen.query_one(DataTable).row_count == 3)
        await pilot.press("R")
        await shown(pilot)
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen")
        await pilot.press("y")
        await wait_for(
            pilot, lambda: app.session.viewing_record and app.view.step == 300, timeout=10
        )
        assert Path(app.session.run_dir or "").name == "lower-lr"

    run_pilot(app, scenario, size=(120, 40))
