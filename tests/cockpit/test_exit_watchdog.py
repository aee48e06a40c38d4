"""After a forced quit the process ends even if the training thread is stuck, report first."""

from __future__ import annotations

import io
import threading

from cockpit.app.exit_watchdog import start_exit_watchdog


def test_a_stuck_engine_gets_its_grace_then_the_report_and_exit_1() -> None:
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, daemon=True)
    stuck.start()
    exited: list[int] = []
    out, err = io.StringIO(), io.StringIO()
    watcher = start_exit_watchdog(
        stuck, ui_running=lambda: False, report=lambda: "run dir: runs/x",
        grace_s=0.05, exit_process=exited.append, out=out, err=err,
    )
    watcher.join(5)
    release.set()
    assert exited == [1]
    assert out.getvalue() == "run dir: runs/x\n"
    assert "exiting without it" in err.getvalue()


def test_an_engine_that_ends_in_its_grace_is_left_to_exit_normally() -> None:
    done = threading.Thread(target=lambda: None)
    done.start()
    exited: list[int] = []
    out = io.StringIO()
    watcher = start_exit_watchdog(
        done, ui_running=lambda: False, report=lambda: "report",
        grace_s=1.0, exit_process=exited.append, out=out, err=io.StringIO(),
    )
    watcher.join(5)
    assert exited == [] and out.getvalue() == ""
