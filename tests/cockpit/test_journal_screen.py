"""The journal screen (`j`): the run's interventions from its metrics.jsonl, newest first.

Pilot tests on the scripted app (its run directory holds a hand-built metrics.jsonl) and on an
app attached to a real run; snapshots at 80x24 and 160x48.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_process import LiveRun
from pilot import run_pilot, settle, wait_for, wait_for_engine
from scripted import ScriptedFactory
from textual.widgets import DataTable

from cockpit.app.cockpit_app import CockpitApp
from cockpit.cli.attach import attached_app
from cockpit.screens.journal import JournalScreen
from engine.control.client import RemoteEngine

T = 1_796_069_000.0  # 2026-11-30 20:03:20 UTC
ALICE = "alice@gpu1 (pts/3)"
BOB = "bob@laptop (pts/0)"


def rec(kind: str, t: float, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "time": T + t, **fields}


# A run's interventions as the engine and its control socket record them (steps in between).
RECORDS = [
    rec("run_started", 0, preset="default", start_step=0, resumed_from=None),
    rec("state", 1, state="running", step=0, reason=""),
    *(rec("step", 2 + i / 10, step=i, loss=3.0) for i in range(1, 40)),
    rec("viewer", 12, viewer=1, who=ALICE, read_only=False, attached=True, step=40),
    rec("command", 30, name="scale_lr", args={"factor": 0.5}, viewer=1, who=ALICE, step=80),
    rec("lr_changed", 31, step=81, old_lr=3e-3, new_lr=1.5e-3, scale=0.5),
    rec("viewer", 42, viewer=2, who=BOB, read_only=True, attached=True, step=95),
    rec("state", 60, state="paused", step=120, reason="paused by user"),
    rec("state", 75, state="saving", step=120, reason="manual"),
    rec("checkpoint", 76, step=120, path="runs/default-scripted/ckpt-000120.pt", reason="manual"),
    rec("command", 90, name="resume", args={}, viewer=1, who=ALICE, step=120),
    rec("state", 91, state="running", step=120, reason="resumed by user"),
    rec("alert", 150, level="warning", message="loss spiked to 9.1 (6.2 sigma) at step 180",
        step=180, code="spike"),  # fmt: skip
    rec("command", 160, name="rollback", args={"lr_factor": 0.5}, viewer=1, who=ALICE, step=181),
    rec("lr_changed", 161, step=150, old_lr=1.5e-3, new_lr=7.5e-4, scale=0.25),
    rec("alert", 161, level="info", message="rolled back to step 150 (ckpt-000150.pt), LR x0.5",
        step=150, code="rollback"),  # fmt: skip
    rec("viewer", 200, viewer=1, who=ALICE, read_only=False, attached=False, step=190),
]
EXPECTED_NEWEST_FIRST = [  # (step, who, what) of each row
    ("190", f"viewer 1 {ALICE}", "detached"),
    ("181", f"viewer 1 {ALICE}", "rollback, LR x0.5: rolled back to step 150"),
    ("180", "engine", "warning spike: loss spiked to 9.1"),
    ("120", f"viewer 1 {ALICE}", "resume"),
    ("120", "app", "checkpoint: ckpt-000120.pt"),
    ("120", "app", "pause"),
    ("95", f"viewer 2 {BOB}", "attached: read-only"),
    ("80", f"viewer 1 {ALICE}", "LR x0.5: 3.0e-3 -> 1.5e-3"),
    ("40", f"viewer 1 {ALICE}", "attached"),
    ("0", "engine", "started: preset default"),
]


def write_records(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in records)


@pytest.fixture(autouse=True)
def _utc_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The journal's times of day read the same everywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The scripted run's directory (runs/default-scripted, relative) with RECORDS in it."""
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "runs" / "default-scripted"
    run_dir.mkdir(parents=True)
    write_records(run_dir / "metrics.jsonl", RECORDS)
    return run_dir / "metrics.jsonl"


def rows(app: Any) -> list[tuple[str, ...]]:
    table = app.screen.query_one(DataTable)
    return [tuple(str(cell) for cell in table.get_row_at(i)) for i in range(table.row_count)]


def test_j_shows_the_journal_newest_first_follows_the_file_and_esc_closes(metrics: Path) -> None:
    factory = ScriptedFactory()
    app = CockpitApp(factory, "default")

    async def scenario(pilot: Any) -> None:
        await settle(pilot, factory)
        await pilot.press("j")
        await wait_for(pilot, lambda: isinstance(app.screen, JournalScreen))
        await pilot.pause()
        shown = rows(app)
        assert len(shown) == len(EXPECTED_NEWEST_FIRST)
        for row, (step, who, what) in zip(shown, EXPECTED_NEWEST_FIRST, strict=True):
            assert (row[0], row[2]) == (step, who) and row[3].startswith(what), (row, what)
        hms = [time.strftime("%H:%M:%S", time.gmtime(T + t)) for t in (200, 0)]
        assert [shown[0][1], shown[-1][1]] == hms == ["20:06:40", "20:03:20"]
        # a viewer attaches while the journal is open: it shows within a poll
        write_records(metrics, [rec("viewer", 300, viewer=3, who="carol", read_only=False,
                                    attached=True, step=200)])  # fmt: skip
        await wait_for(pilot, lambda: rows(app)[0][2:] == ("viewer 3 carol", "attached"), 3.0)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, JournalScreen)

    run_pilot(app, scenario, size=(160, 48))


def test_the_palettes_journal_entry_opens_it_even_without_a_metrics_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the scripted run's directory does not exist here
    factory = ScriptedFactory()
    app = CockpitApp(factory, "default")

    async def scenario(pilot: Any) -> str:
        await settle(pilot, factory)
        entry = next(c for c in app.get_system_commands(app.screen) if c.title == "Journal")
        entry.callback()
        await wait_for(pilot, lambda: isinstance(app.screen, JournalScreen))
        await pilot.pause()
        return str(app.screen.query_one("#journal-note").render())

    note = run_pilot(app, scenario, size=(80, 24))
    assert note.startswith("Nothing yet")


def test_an_attached_app_shows_its_own_commands_under_its_viewer_name(live: LiveRun) -> None:
    app = attached_app(RemoteEngine(live.run_dir, who=ALICE))

    async def scenario(pilot: Any) -> list[tuple[str, ...]]:
        await wait_for_engine(pilot, lambda: app.view.step > 0)
        await pilot.press("minus")  # LR ÷1.25
        live.wait_for_record("lr_changed")
        await pilot.press("j")
        await wait_for_engine(pilot, lambda: isinstance(app.screen, JournalScreen))
        await wait_for_engine(pilot, lambda: any("LR x0.8" in r[3] for r in rows(app)))
        shown = rows(app)
        await pilot.press("escape")
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("d")  # detach: the run goes on
        await wait_for_engine(pilot, lambda: not app.is_running)
        return shown

    shown = run_pilot(app, scenario, size=(120, 36))
    viewer = next(r for r in shown if "LR x0.8" in r[3])[2]
    assert viewer.startswith("viewer ") and ALICE in viewer
    assert any(r[2] == viewer and r[3] == "attached" for r in shown)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_journal_snapshot(snap_compare: Any, metrics: Path, size: tuple[int, int]) -> None:
    factory = ScriptedFactory()
    app = CockpitApp(factory, "default")

    async def run_before(pilot: Any) -> None:
        await settle(pilot, factory)
        app.clear_notifications()
        await pilot.pause()
        await pilot.press("j")
        await wait_for(pilot, lambda: isinstance(app.screen, JournalScreen))
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
