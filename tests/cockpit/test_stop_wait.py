"""The notes a quit or a preset switch shows while the run stops at its next step boundary."""

from __future__ import annotations

from cockpit.app.session_runs import SessionRun, format_exit_report
from cockpit.app.stop_wait import BoundaryWork, leave_question, quit_note, quit_question, stop_wait


def test_the_wait_counts_down_to_the_next_step_boundary() -> None:
    last_step = (100.0, 30.0)  # a step ended at t=100 and took 30 s: the next ends at 130
    assert stop_wait("running", last_step, started=110.0, now=112.0) == (
        "saving at the next step boundary, in ~18s (a step takes 30s) · waited 2s"
    )
    assert stop_wait("running", last_step, 110.0, 130.2).startswith(
        "saving at the next step boundary, any moment now"
    )
    assert stop_wait("running", None, 110.0, 112.0).startswith("saving when the first step ends")


def test_the_wait_says_what_the_state_allows() -> None:
    assert stop_wait("saving", (100.0, 30.0), 110.0, 112.0).startswith("writing the final checkpoint")
    assert stop_wait("paused", (100.0, 30.0), 110.0, 112.0).startswith("saving a checkpoint and stopping")
    assert stop_wait("finished", None, 110.0, 112.0).startswith("the run has finished")
    assert quit_note("w").endswith("ctrl+c again: quit now without saving")


def test_the_quit_question_warns_of_a_long_step_only_while_training() -> None:
    assert quit_question("tiny", running=False, state="idle", step_s=0.0) == (
        "Quit cockpit? No run is in progress."
    )
    assert "A step takes" not in quit_question("tiny", True, "running", 2.0)
    assert "A step takes 1:00 here" in quit_question("gpt2", True, "running", 60.0)
    assert "A step takes" not in quit_question("gpt2", True, "finished", 60.0)


def test_an_attached_viewer_is_asked_to_detach_or_stop_naming_the_way_back() -> None:
    ask = leave_question("tiny", "runs/my run", read_only=False)
    assert "cockpit attach 'runs/my run'" in ask and "Or stop the run" in ask
    watch_only = leave_question("tiny", "runs/x", read_only=True)
    assert "cannot stop the run" in watch_only and "Or stop" not in watch_only
    assert "\\[b]" in leave_question("[b]", "runs/[b]", read_only=False)  # markup is escaped


def test_leaving_a_run_that_goes_on_says_how_to_come_back() -> None:
    common = dict(preset="tiny", run_dir="runs/x", step=120, start_step=0, checkpoint=(100, "c"))
    detached = SessionRun(state="running", attached=True, detached=True, **common)
    assert format_exit_report([detached]) == (
        "run dir: runs/x\ndetached at step 120: the run goes on (running); "
        "come back: cockpit attach runs/x"
    )
    stopping = SessionRun(state="saving", attached=True, **common)
    assert "saves a checkpoint and stops on its own" in format_exit_report([stopping], forced=True)
    stopped = SessionRun(state="stopped", attached=True, **common)
    assert "resume: cockpit --resume runs/x" in format_exit_report([stopped])
    note = quit_note("saving at the next step boundary", attached=True)
    assert "leave now (it still saves and stops)" in note and "without saving" not in note


def test_the_wait_counts_the_work_due_at_the_boundary() -> None:
    work = BoundaryWork()
    work.configure({"eval": {"interval": 0}, "sample": {"interval": 50}, "checkpoint": {"interval": 100}}, 1000)
    work.step(100.0, 99)  # training step 100: its sample and checkpoint come after it
    assert stop_wait("running", (100.0, 0.03), 100.0, 100.01, work=work).startswith(
        "saving at the next step boundary, any moment now "
        "(a step takes 0.03s, then the sample and checkpoint due there)"
    )
    work.step(100.03, 100)  # step 100 ended: its work is being done
    assert stop_wait("running", (100.03, 0.03), 100.0, 105.0, work=work).startswith(
        "saving after the sample and checkpoint due at this step"
    )
    work.done("sample", 100, 115.03)
    work.done("checkpoint", 100, 116.03)
    work.step(116.06, 149)  # the next boundary's sample: 15 s last time
    assert "then the sample (~15s last time) due there" in stop_wait(
        "running", (116.06, 0.03), 116.1, 116.1, work=work
    )
    assert work.due_at(1000) == []  # the last step's work is the run's end's (run_end.finish)
