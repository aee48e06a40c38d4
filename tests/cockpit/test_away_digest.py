"""While you were away: a viewer that detached from a real live run gets no digest back within
10 minutes; attaching again after the run took steps, an alert and another's live set, it gets
the digest over the live screen, which goes on updating under it; any key closes it and does
nothing else. And the dialog's look."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from live_process import LiveRun
from pilot import run_pilot, settle, status_text, wait_for, wait_for_engine
from run_dirs import write_run
from scripted import ScriptedFactory
from textual.widgets import DataTable

from cockpit.app.cockpit_app import CockpitApp
from cockpit.cli.attach import attached_app
from cockpit.screens.away_dialog import AwayScreen
from cockpit.screens.runs_screen import RunsScreen
from engine.control.client import RemoteEngine
from engine.rundir.digest import Digest, Noted, digest_lines, local_clock
from engine.rundir.recorded import RecordedRun

SIZE = (120, 36)
AGENT = "agent@box (script)"


def test_back_after_a_detach_the_digest_shows_the_alert_and_the_live_set(
    live: LiveRun, tmp_path: Path
) -> None:
    first = attached_app(RemoteEngine(live.run_dir))

    async def watch_then_leave(pilot: Any) -> None:
        await wait_for_engine(pilot, lambda: first.view.step > 0)
        assert not isinstance(first.screen, AwayScreen)  # never detached before: nothing to tell
        first.detach()
        await wait_for_engine(pilot, lambda: not first.is_running)

    run_pilot(first, watch_then_leave, size=SIZE)
    live.wait_for_record("viewer", attached=False)
    assert live.steps_grow(by=3)
    soon = attached_app(RemoteEngine(live.run_dir))  # back within the 10 minutes: no digest

    async def look(pilot: Any) -> bool:
        await wait_for_engine(pilot, lambda: soon.view.step > 0)
        await pilot.pause(0.5)
        away = isinstance(soon.screen, AwayScreen)
        soon.detach()
        await wait_for_engine(pilot, lambda: not soon.is_running)
        return away

    assert run_pilot(soon, look, size=SIZE) is False
    left = max(r["time"] for r in live.records("viewer", attached=False))
    # while this user is away: another sets a live setting, and a rollback is refused (an alert)
    agent = RemoteEngine(live.run_dir, who=AGENT)
    agent.set_settings({"optim.weight_decay": 0.05})
    live.wait_for_record("settings_changed")
    agent.rollback(checkpoint="ckpt-99999999.pt")
    alert = live.wait_for_record("alert", code="rollback", level="warning")
    agent.close()
    assert live.steps_grow(by=5)
    # back (after any gap: the 10 minutes a person waits are not waited here)
    again = attached_app(RemoteEngine(live.run_dir), away_min_s=0)

    async def come_back(pilot: Any) -> tuple[str, str, str, str]:
        await wait_for_engine(
            pilot, lambda: isinstance(again.screen, AwayScreen) and again.screen.shown()
        )
        shown = again.screen.shown()
        under, step = status_text(again), again.view.step
        # the run goes on under the digest: its step and the status line drawn under it
        await wait_for_engine(
            pilot, lambda: again.view.step > step + 2 and status_text(again) != under
        )
        assert isinstance(again.screen, AwayScreen)
        await pilot.press("space")  # closes the digest; pauses nothing
        await wait_for(pilot, lambda: not isinstance(again.screen, AwayScreen))
        await pilot.pause(0.3)
        state = again.state
        again.detach()
        return shown, under, status_text(again), state

    shown, under, later, state = run_pilot(again, come_back, size=SIZE)
    assert later != under and state != "paused"
    assert live.records("command", name="pause") == []  # the key that closed it paused nothing
    assert "trained " in shown and " steps (step " in shown
    assert "\nalerts: " in shown and "warning rollback" in shown and alert["message"][:30] in shown
    assert f"{AGENT}: set optim.weight_decay" in shown and "-> 0.05" in shown
    assert "attached" not in shown
    assert shown.startswith(f"Since {local_clock(left)} (")  # the second viewer's detach
    # away again; then the live run opened from another app's runs screen (h) shows the digest too
    live.wait_for_record("viewer", attached=False, viewer=again_number(live))
    agent = RemoteEngine(live.run_dir, who=AGENT)
    agent.set_settings({"optim.weight_decay": 0.07})
    live.wait_for_record("settings_changed", by=f"viewer {agent.viewer} {AGENT}")
    agent.close()
    assert live.steps_grow(by=3)
    finished = write_run(tmp_path, "old")
    other = CockpitApp(lambda _preset: RecordedRun(finished), "old", runs_root=str(tmp_path))
    other.opening.away_min_s = 0

    async def open_it(pilot: Any) -> str:
        await wait_for(pilot, lambda: other.state == "finished")
        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(other.screen, RunsScreen))
        table = other.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 2, timeout=10)
        await pilot.press("enter")  # the newest first: the live run
        await wait_for_engine(
            pilot, lambda: isinstance(other.screen, AwayScreen) and other.screen.shown()
        )
        assert other.session.attached and other.session.run_dir == str(live.run_dir)
        text = other.screen.shown()
        await pilot.press("x")
        await wait_for(pilot, lambda: not isinstance(other.screen, AwayScreen))
        other.detach()
        return text

    text = run_pilot(other, open_it, size=SIZE)
    assert f"{AGENT}: set optim.weight_decay 0.05 -> 0.07" in text and "rollback" not in text


def again_number(live: LiveRun) -> int:
    """The number of the newest viewer that attached (the one back after the gap)."""
    return live.records("viewer", attached=True)[-1]["viewer"]


T0 = 1_700_000_000.0
SHOWN = Digest(
    since=T0, until=T0 + 8 * 3600, step_from=1200, step_to=4800, tokens_from=1_228_800,
    tokens_to=4_915_200, evals=7, best_val=1.8734, best_val_bpb=1.342, best_val_step=4500,
    best_val_time=T0 + 7.5 * 3600,
    alerts=[Noted(T0 + 3 * 3600, 2310, "engine", "warning spike", "loss 6.12 is 5.1 sigma above its mean")],
    actions=[Noted(T0 + 3 * 3600 + 2, 2000, "engine", "rollback", "rolled back to ckpt-00002000.pt; 3.0e-3 -> 1.5e-3")],
    settings=[Noted(T0 + 5 * 3600, 3400, "viewer 2 bob@gpu1 (pts/9)", "set schedule.decay_start 4000 -> 3600")],
    checkpoints=[Noted(T0 + 4 * 3600, 3000, "interval", "ckpt-00003000.pt"),
                 Noted(T0 + 8 * 3600, 4500, "best", "best.pt")],
)  # fmt: skip


def clock(t: float) -> str:
    seconds = int(t - T0) + 6 * 3600
    return f"{seconds // 3600 % 24:02d}:{seconds % 3600 // 60:02d}"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_away_snapshot(snap_compare: Any, size: tuple[int, int]) -> None:
    factory = ScriptedFactory()
    app = CockpitApp(factory, "default")

    async def run_before(pilot: Any) -> None:
        await settle(pilot, factory)
        app.clear_notifications()
        app.push_screen(AwayScreen(digest_lines(SHOWN, now=T0 + 8.2 * 3600, clock=clock)))
        await wait_for(pilot, lambda: isinstance(app.screen, AwayScreen))
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
