"""The runs screen: Pilot tests on an app that pushes it over run directories the test writes
(a finished run, a crashed one without a checkpoint, a stopped one with one; a real live run in
the last test), at 160x48 and 80x24."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from live_process import LiveRun
from pilot import Toasts, run_pilot, wait_for
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from cockpit.screens.runs_screen import RunsChoice, RunsScreen
from cockpit.screens.settings import parse_settings

NOW = time.time()
WIDE, SMALL = (160, 48), (80, 24)
PENDING = "pending"


def write_run(run_dir: Path, hours_ago: float, steps: int, final: str | None = None,
              checkpoint_at: int | None = None, config: bool = True) -> None:  # fmt: skip
    """A run's files as the engine leaves them: metrics.jsonl (run_started, steps, an eval every 100
    steps, a checkpoint, the final state), its config.toml and checkpoint file."""
    run_dir.mkdir(parents=True)
    t = NOW - hours_ago * 3600
    records: list[dict[str, Any]] = [
        {"kind": "state", "time": t, "state": "starting", "step": 0, "reason": ""},
        {"kind": "run_started", "time": t + 1, "preset": "tiny", "start_step": 0, "max_steps": 1000,
         "tokens_per_step": 256, "resumed_from": None, "train_time_s": 0.0},
        {"kind": "state", "time": t + 1, "state": "running", "step": 0, "reason": ""},
    ]  # fmt: skip
    for n in range(1, steps + 1):
        records.append({"kind": "step", "time": t + 1 + n, "step": n, "loss": 4.0 - n / 1000,
                        "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 1e4, "step_time_s": 0.05,
                        "tokens": 256 * n, "mfu": 0.1, "data_time_s": 0.0, "update_ratio": None})  # fmt: skip
        if n % 100 == 0:
            records.append({"kind": "eval", "time": t + 1.5 + n, "step": n, "train_loss": 3.0,
                            "val_loss": 3.5 - n / 1000, "train_time_s": n * 0.05, "full_split": False})  # fmt: skip
        if n == checkpoint_at:
            path = run_dir / f"ckpt-{n:08d}.pt"
            path.write_bytes(b"\0" * 1000)
            records.append({"kind": "checkpoint", "time": t + 1.7 + n, "step": n, "path": str(path),
                            "reason": "interval"})  # fmt: skip
    if final:
        records.append(
            {"kind": "state", "time": t + 2 + steps, "state": final, "step": steps, "reason": ""}
        )
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
    (run_dir / "metrics.jsonl").write_text(text)
    if config:
        (run_dir / "config.toml").write_text("[train]\nmax_steps = 1000\n")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """runs/: stopped (newest, checkpoint at 200), sweep/finished (checkpoint at 300), crashed
    (oldest: no final state, no checkpoint); notes/ is not a run."""
    base = tmp_path / "runs"
    write_run(base / "stopped", hours_ago=1, steps=250, final="stopped", checkpoint_at=200)
    write_run(
        base / "sweep" / "finished", hours_ago=3, steps=300, final="finished", checkpoint_at=300
    )
    write_run(base / "crashed", hours_ago=26, steps=120, config=False)
    (base / "notes").mkdir()
    (base / "notes" / "todo.txt").write_text("not a run")
    return base


class Host(App[None]):
    """An app that shows the runs screen at once and keeps what it was dismissed with."""

    def __init__(self, root: Path, current: Path | None = None) -> None:
        super().__init__()
        self.screen_under_test = RunsScreen(root, str(current) if current else None)
        self.choice: RunsChoice | None | str = PENDING

    def compose(self) -> ComposeResult:
        yield Static("the cockpit")

    def on_mount(self) -> None:
        self.push_screen(self.screen_under_test, self._chosen)

    def _chosen(self, choice: RunsChoice | None) -> None:
        self.choice = choice


def play(root: Path, scenario: Callable[[Pilot, RunsScreen], Awaitable[None]], *,
         size: tuple[int, int] = WIDE, current: Path | None = None,
         toasts: Toasts | None = None) -> Host:  # fmt: skip
    """Open the screen over `root`, wait for its first listing, play `scenario`."""
    app = Host(root, current)

    async def go(pilot: Pilot) -> None:
        screen = app.screen_under_test
        await wait_for(pilot, lambda: screen._read_once, timeout=10)
        await pilot.pause()
        await scenario(pilot, screen)

    run_pilot(app, go, size=size, toasts=toasts)
    return app


def table_rows(screen: RunsScreen) -> list[list[str]]:
    table = screen.query_one(DataTable)
    return [[str(c).strip() for c in table.get_row_at(i)] for i in range(table.row_count)]


def header(screen: RunsScreen) -> list[str]:
    return [str(c.label).strip() for c in screen.query_one(DataTable).ordered_columns]


def text_of(screen: RunsScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def go_to(pilot: Pilot, screen: RunsScreen, name: str) -> None:
    """Move the cursor to the run named `name`."""
    names = [e.name for e in screen.entries]
    screen.query_one(DataTable).move_cursor(row=names.index(name))
    await pilot.pause()


def test_every_run_newest_first_with_its_state_and_the_current_one_marked(root: Path) -> None:
    async def scenario(pilot: Pilot, screen: RunsScreen) -> None:
        assert header(screen) == ["", "RUN", "PRESET", "STATE", "STEP", "BEST VAL", "TOKENS",
                                  "TRAIN", "WHEN", "SIZE", "CKPT"]  # fmt: skip
        rows = table_rows(screen)
        assert [r[1] for r in rows] == ["stopped", "sweep/finished", "crashed"]
        assert [r[3] for r in rows] == ["stopped", "finished", "crashed"]
        assert [r[0] for r in rows] == ["", "●", ""]  # the run this cockpit shows
        assert rows[1][4:6] == ["300/1k", "3.2000@300"] and rows[1][-1] == "ckpt-00000300.pt"
        assert rows[2][-1] == "-"
        assert text_of(screen, "#runs-title") == f"Runs under {root}: 3, newest first"
        hint = text_of(screen, "#runs-hint")
        assert (
            hint == "stopped at 250: ⏎ view · r resume at 200 · n new run · f fork · space select"
        )
        await go_to(pilot, screen, "crashed")
        hint = text_of(screen, "#runs-hint")
        assert "no checkpoint" in hint and " r " not in hint and "n new" not in hint

    play(root, scenario, current=root / "sweep" / "finished")


def test_space_selects_and_o_overlays_the_selected_runs_in_order(root: Path) -> None:
    async def scenario(pilot: Pilot, screen: RunsScreen) -> None:
        await go_to(pilot, screen, "crashed")
        await pilot.press("space")
        await go_to(pilot, screen, "stopped")
        await pilot.press("space")
        assert [r[0] for r in table_rows(screen)] == ["✓", "", "✓"]
        assert text_of(screen, "#runs-hint").endswith("· o overlay 2")
        await pilot.press("o")

    app = play(root, scenario)
    assert app.choice == RunsChoice("overlay", [root / "crashed", root / "stopped"], [])


def test_enter_opens_the_cursors_run_and_escape_goes_back(root: Path) -> None:
    async def open_second(pilot: Pilot, screen: RunsScreen) -> None:
        await pilot.press("down", "enter")

    assert play(root, open_second).choice == RunsChoice("open", [root / "sweep" / "finished"], [])

    async def back(pilot: Pilot, screen: RunsScreen) -> None:
        await pilot.press("escape")

    assert play(root, back).choice is None


def test_resume_new_and_fork_refuse_a_crashed_run_without_a_checkpoint_in_one_line(
    root: Path,
) -> None:
    toasts = Toasts()

    async def scenario(pilot: Pilot, screen: RunsScreen) -> None:
        await go_to(pilot, screen, "crashed")
        for key in "rnf":
            await pilot.press(key)
        await pilot.pause()
        assert screen.is_current  # still open

    app = play(root, scenario, toasts=toasts)
    assert app.choice == PENDING
    assert [t.message for t in toasts] == [
        "crashed saved no checkpoint to resume from",
        "crashed has no config.toml to start a new run from",
        "crashed saved no checkpoint to fork from",
    ]
    assert all("\n" not in t.message for t in toasts)


def test_resume_and_new_return_the_run(root: Path) -> None:
    async def resume(pilot: Pilot, screen: RunsScreen) -> None:
        await pilot.press("r")

    assert play(root, resume).choice == RunsChoice("resume", [root / "stopped"], [])

    async def new(pilot: Pilot, screen: RunsScreen) -> None:
        await pilot.press("down", "n")

    assert play(root, new).choice == RunsChoice("new", [root / "sweep" / "finished"], [])


def test_fork_refuses_a_bad_setting_under_the_input_and_returns_the_good_ones(root: Path) -> None:
    async def scenario(pilot: Pilot, screen: RunsScreen) -> None:
        await pilot.press("f")
        assert screen.query_one("#runs-fork").display
        await pilot.press(*"nonsense", "enter")
        error = text_of(screen, "#runs-fork-error")
        assert error == "'nonsense': expected KEY=VALUE, for example optim.lr=3e-4"
        assert screen.is_current and app.choice == PENDING
        # typed, the keys n, o, s... were the input's, not the screen's; now the settings
        screen.query_one("#runs-fork-input", Input).value = "optim.lr=1e-4 train.max_steps=5000"
        await pilot.press("enter")

    app = Host(root)
    runs_screen = app.screen_under_test

    async def go(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: runs_screen._read_once, timeout=10)
        await scenario(pilot, runs_screen)

    run_pilot(app, go, size=WIDE)
    assert app.choice == RunsChoice(
        "fork", [root / "stopped"], ["optim.lr=1e-4", "train.max_steps=5000"]
    )


def test_escape_in_the_fork_input_returns_to_the_table(root: Path) -> None:
    async def scenario(pilot: Pilot, screen: RunsScreen) -> None:
        await pilot.press("f", "x", "escape")
        assert not screen.query_one("#runs-fork").display and screen.is_current
        assert screen.query_one(DataTable).has_focus

    assert play(root, scenario).choice == PENDING


def test_fork_settings_are_checked_as_set_checks_them() -> None:
    assert parse_settings(' optim.lr=1e-4  data.source="a b" ') == [
        "optim.lr=1e-4",
        "data.source=a b",
    ]
    assert parse_settings("") == []
    for bad, why in (("optim.nope=1", "unknown key 'nope'"), ('optim.lr="1', "close the quote")):
        with pytest.raises(ValueError, match=why):
            parse_settings(bad)


def test_a_refresh_lists_a_run_written_after_the_screen_opened_keeping_the_cursor(
    root: Path,
) -> None:
    async def scenario(pilot: Pilot, screen: RunsScreen) -> None:
        await go_to(pilot, screen, "sweep/finished")
        write_run(root / "newer", hours_ago=0.1, steps=10)
        await wait_for(pilot, lambda: len(screen.entries) == 4, timeout=6)
        await pilot.pause()
        assert [r[1] for r in table_rows(screen)] == [
            "newer",
            "stopped",
            "sweep/finished",
            "crashed",
        ]
        assert screen.query_one(DataTable).cursor_row == 2  # still on sweep/finished
        await pilot.press("enter")

    assert play(root, scenario).choice == RunsChoice("open", [root / "sweep" / "finished"], [])


def test_80x24_fits_the_table_dropping_columns_as_cockpit_runs_does(root: Path) -> None:
    write_run(root / "shakespeare-char-20261130-213600-lr-sweep-0003", hours_ago=0.5, steps=5)

    async def scenario(pilot: Pilot, screen: RunsScreen) -> None:
        table = screen.query_one(DataTable)
        columns = header(screen)
        assert "CKPT" not in columns and "SIZE" not in columns and "TOKENS" not in columns
        assert columns[:4] == ["", "RUN", "PRESET", "STATE"]
        assert table.virtual_size.width <= 80 - 1, (table.virtual_size, columns)
        name = table_rows(screen)[0][1]
        assert "..." in name and name.startswith("shakespeare") and name.endswith("0003")
        assert screen.query_one("#runs-hint").size.height == 1
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        assert "CKPT" in header(screen) and table_rows(screen)[0][1].endswith("sweep-0003")

    play(root, scenario, size=SMALL)


def test_no_runs_says_so_and_a_missing_root_says_why(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()

    async def empty(pilot: Pilot, screen: RunsScreen) -> None:
        assert text_of(screen, "#runs-title") == (
            f"no runs under {tmp_path / 'empty'} yet: this run appears here once it has written its first step"
        )
        assert not screen.query_one(DataTable).display
        await pilot.press("enter", "o", "r")
        assert screen.is_current

    play(tmp_path / "empty", empty, size=SMALL)

    async def missing(pilot: Pilot, screen: RunsScreen) -> None:
        assert f"no runs under {tmp_path / 'nope'} yet (it does not exist): " in text_of(
            screen, "#runs-title"
        )

    play(tmp_path / "nope", missing)


def test_an_unreadable_run_is_a_row_saying_so_without_a_word_on_stderr(
    root: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    (root / "crashed" / "metrics.jsonl").chmod(0)

    async def scenario(pilot: Pilot, screen: RunsScreen) -> None:
        rows = table_rows(screen)
        assert [r[1] for r in rows] == ["stopped", "sweep/finished", "crashed"]
        assert rows[2][3] == "unreadable"

    try:
        play(root, scenario)
    finally:
        (root / "crashed" / "metrics.jsonl").chmod(0o644)
    assert capfd.readouterr().err == ""


def test_a_live_run_is_listed_live_opens_and_refuses_a_resume(tmp_path: Path) -> None:
    """A real headless run: its state and step come from its socket, read off the UI thread, and
    its step moves with the refresh."""
    root = tmp_path / "runs"
    write_run(root / "old", hours_ago=5, steps=50, final="finished", checkpoint_at=50)
    live = LiveRun(root / "live")
    toasts = Toasts()
    try:
        live.start()

        async def scenario(pilot: Pilot, screen: RunsScreen) -> None:
            assert [(r[1], r[3]) for r in table_rows(screen)] == [
                ("live", "live"),
                ("old", "finished"),
            ]
            first_step = table_rows(screen)[0][4]
            await wait_for(pilot, lambda: table_rows(screen)[0][4] != first_step, timeout=8)
            hint = text_of(screen, "#runs-hint")
            assert (
                hint.startswith("live at ") and ": ⏎ attach · " in hint and "r resume" not in hint
            )
            await pilot.press("r")
            await pilot.pause()
            assert screen.is_current
            await pilot.press("enter")

        app = play(root, scenario, toasts=toasts)
    finally:
        live.close()
    assert app.choice == RunsChoice("open", [root / "live"], [])
    assert [t.message for t in toasts] == [
        "live is live: it needs no resume (enter attaches to it)"
    ]


def test_the_screen_imports_no_torch() -> None:
    import subprocess

    code = "import sys, cockpit.screens.runs_screen; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_closing_the_screen_while_it_reads_leaves_the_app_running(root: Path) -> None:
    app = Host(root)

    async def go(pilot: Pilot) -> None:
        await pilot.press("escape")  # before the first listing came back
        await pilot.pause(0.3)
        assert app.choice is None and app.is_running

    run_pilot(app, go, size=WIDE)


def test_the_good_runs_are_listed_beside_a_bad_one(root: Path) -> None:
    """A summary.json of the wrong types (it is rebuilt from metrics.jsonl) and a run whose
    metrics.jsonl cannot be read (a link to itself): the other runs list, the bad one is a row
    whose hint says what is wrong, and enter on it says so instead of opening it."""
    summary = root / "stopped" / "summary.json"
    async def first_look(pilot: Pilot, screen: RunsScreen) -> None:
        await pilot.pause()

    play(root, first_look)  # the summaries are written
    facts = json.loads(summary.read_text())
    summary.write_text(json.dumps({**facts, "step": "lots", "best_vals": "garbage"}))
    loop = root / "loop"
    loop.mkdir()
    (loop / "metrics.jsonl").symlink_to(loop / "metrics.jsonl")
    toasts = Toasts()

    async def scenario(pilot: Pilot, screen: RunsScreen) -> None:
        rows = table_rows(screen)
        by_name = {r[1]: r for r in rows}
        assert set(by_name) == {"stopped", "sweep/finished", "crashed", "loop"}
        assert by_name["stopped"][3:5] == ["stopped", "250/1k"]  # rebuilt from its records
        assert by_name["loop"][3] == "unreadable"
        await go_to(pilot, screen, "loop")
        assert text_of(screen, "#runs-hint") == (
            "unreadable: cannot read it (Too many levels of symbolic links)"
        )
        await pilot.press("enter")
        await pilot.pause()

    app = play(root, scenario, toasts=toasts)
    assert app.choice == PENDING  # not opened
    assert any("loop cannot be opened: cannot read it" in t.message for t in toasts), toasts
    assert json.loads(summary.read_text())["step"] == 250  # written back sound


def roll_back(run_dir: Path, to_step: int, trained_to: int) -> None:
    """Append to `run_dir`'s records a rollback to its checkpoint of `to_step`, as the engine
    writes one (the LR halved, the alert, the run going on), then steps up to `trained_to`."""
    metrics = run_dir / "metrics.jsonl"
    t = json.loads(metrics.read_text().splitlines()[-1])["time"] + 1
    records: list[dict[str, Any]] = [
        {"kind": "lr_changed", "time": t, "step": to_step, "old_lr": 1e-3, "new_lr": 5e-4, "scale": 0.5},
        {"kind": "alert", "time": t, "level": "info", "step": to_step, "code": "rollback",
         "message": f"rolled back to step {to_step} (ckpt-{to_step:08d}.pt), LR x0.5"},
        {"kind": "state", "time": t, "state": "running", "step": to_step, "reason": "rolled back",
         "train_time_s": to_step * 0.05},
    ]  # fmt: skip
    for n in range(to_step + 1, trained_to + 1):
        records.append({"kind": "step", "time": t + n, "step": n, "loss": 4.0, "lr": 5e-4,
                        "grad_norm": 1.0, "tokens_per_s": 1e4, "step_time_s": 0.05,
                        "tokens": 256 * n, "mfu": 0.1, "data_time_s": 0.0, "update_ratio": None})  # fmt: skip
    with metrics.open("a") as f:
        f.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in records)


def test_a_rolled_back_run_s_figures_are_of_the_branch_it_is_on(tmp_path: Path) -> None:
    """Evaluated at 100 (3.4) and 200 (3.3), rolled back to its checkpoint of 150 and trained
    on to 180: its best val is 3.4 at 100, not the discarded branch's 3.3 at 200; its tokens and
    training time are of step 180."""
    root = tmp_path / "runs"
    write_run(root / "rolled", hours_ago=1, steps=250, checkpoint_at=150)
    roll_back(root / "rolled", 150, 180)

    async def scenario(pilot: Pilot, screen: RunsScreen) -> None:
        (row,) = table_rows(screen)
        assert row[4:8] == ["180/1k", "3.4000@100", "46.1k", "9s"], row

    play(root, scenario)
    listed = json.loads((root / "rolled" / "summary.json").read_text())
    assert listed["best_val"] == {"value": 3.4, "step": 100} and listed["last_val"] is None
