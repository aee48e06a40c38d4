"""Alerts you hear: which events notify, when a run has stalled, the escape sequences that carry
a desktop notification through SSH and tmux, and the app sending them as the run goes."""

from __future__ import annotations

from pilot import run_pilot, settle, wait_for
from scripted import T0, ScriptedFactory

from cockpit.app.cockpit_app import CockpitApp
from cockpit.app.notifications import (
    Notice,
    NotifySettings,
    StallWatch,
    escape_sequences,
    notice_for,
)
from engine.events import Alert, StateChanged, Step


def step(n: int, step_time_s: float = 0.1) -> Step:
    return Step(step=n, loss=2.0, lr=1e-3, grad_norm=1.0, tokens_per_s=1e4,
                step_time_s=step_time_s, tokens=n * 100)  # fmt: skip


def test_a_finish_a_failure_and_a_fault_notify_and_nothing_else_does() -> None:
    done = notice_for(StateChanged(state="finished", step=300), "tiny")
    assert done == Notice("cockpit: tiny finished", "tiny finished at step 300")
    failed = notice_for(StateChanged(state="failed", step=12, reason="disk full"), "tiny")
    assert failed is not None and failed.body == "tiny failed at step 12: disk full"
    nan = notice_for(Alert(level="error", message="loss is not finite", step=40, code="nan"), "tiny")
    assert nan is not None and "step 40: loss is not finite" in nan.body
    assert notice_for(StateChanged(state="paused", step=5, reason="paused by user"), "tiny") is None
    assert notice_for(Alert(level="warning", message="slow", step=5, code="lr"), "tiny") is None


def test_a_stall_is_ten_usual_steps_and_at_least_30_s_said_once() -> None:
    watch = StallWatch()
    watch.step(step(1, 0.1), now=100.0)
    assert watch.check(100.0 + 29.0, "running", "tiny") is None  # under the 30 s floor
    stalled = watch.check(100.0 + 31.0, "running", "tiny")
    assert stalled is not None and "no step for 31 s" in stalled.body
    assert watch.check(100.0 + 60.0, "running", "tiny") is None  # said once per stall
    watch.step(step(2, 0.1), now=200.0)
    assert watch.check(200.0 + 31.0, "paused", "tiny") is None  # paused is not stalled
    slow = StallWatch()
    slow.step(step(1, 10.0), now=0.0)
    assert slow.check(60.0, "running", "tiny") is None  # 10 x a 10 s step is 100 s
    assert slow.check(101.0, "running", "tiny") is not None


def test_the_sequences_are_osc_9_and_777_wrapped_for_tmux_and_cleaned() -> None:
    notice = Notice("cockpit: tiny finished", "done; at step\x07 300")
    plain = escape_sequences(notice, in_tmux=False)
    assert plain == (
        "\x1b]9;done  at step  300\x07"
        "\x1b]777;notify;cockpit: tiny finished;done  at step  300\x07"
    )
    wrapped = escape_sequences(notice, in_tmux=True)
    assert wrapped.startswith("\x1bPtmux;\x1b\x1b]9;") and wrapped.endswith("\x1b\\")


def test_the_app_notifies_a_finished_run_once_and_rings_when_asked() -> None:
    factory = ScriptedFactory(finish=True)
    app = CockpitApp(factory, "default", notify=NotifySettings(desktop=True, bell=True))
    app.clock = lambda: T0 + 70.0  # the scripted run finishes at T0 + 63 s: fresh
    written: list[str] = []
    rings: list[bool] = []
    app.notifier.write = written.append
    app.notifier.ring = lambda: rings.append(True)

    async def scenario(pilot) -> None:  # noqa: ANN001
        await settle(pilot, factory)
        await wait_for(pilot, lambda: app.state == "finished")

    run_pilot(app, scenario)
    assert [n.title for n in app.notifier.sent] == ["cockpit: default finished"]
    assert len(written) == 1 and "\x1b]9;default finished at step 300" in written[0]
    assert rings == [True]


def test_an_old_event_replayed_on_attach_notifies_nobody() -> None:
    factory = ScriptedFactory(finish=True)
    app = CockpitApp(factory, "default", notify=NotifySettings(desktop=False))
    app.clock = lambda: T0 + 10_000.0  # the finish is hours old: a viewer attaching later

    async def scenario(pilot) -> None:  # noqa: ANN001
        await settle(pilot, factory)
        await wait_for(pilot, lambda: app.state == "finished")

    run_pilot(app, scenario)
    assert app.notifier.sent == []
