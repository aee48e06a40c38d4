"""The training loop's parts built alone, without a Trainer: counters, reporter."""

from __future__ import annotations

import math

from engine.events import Alert, EventQueue, RunState, StateChanged
from engine.train.counters import Counters
from engine.train.reporter import Reporter


def test_counters_save_the_five_checkpoint_keys_and_load_them_back() -> None:
    counters = Counters(step=12, tokens=12 * 256, lr_scale=0.5, train_time_s=3.25, best_val=1.75)
    counters.rollbacks, counters.current_lr = 2, 1e-3
    state = counters.state_dict()
    # the keys and order checkpoints have always had; rollbacks and the LR are not saved
    assert state == {
        "step": 12,
        "lr_scale": 0.5,
        "train_time_s": 3.25,
        "tokens": 3072,
        "best_val": 1.75,
    }
    assert list(state) == ["step", "lr_scale", "train_time_s", "tokens", "best_val"]
    fresh = Counters()
    assert fresh.best_val == math.inf and fresh.step == 0 and fresh.lr_scale == 1.0
    fresh.rollbacks = 1
    fresh.load_state_dict({**state, "model": "ignored"})  # a whole checkpoint state will do
    assert fresh.state_dict() == state
    assert fresh.rollbacks == 1  # a restore (a rollback) keeps this process's count


def make_reporter(**kwargs):
    events, seen, counters = EventQueue(10), [], Counters(step=7, train_time_s=2.5)
    sinks = [seen.append]
    return Reporter(events=events, sinks=sinks, counters=counters, **kwargs), events, sinks, seen


def test_events_reach_the_queue_and_every_sink_even_one_added_later() -> None:
    reporter, events, sinks, seen = make_reporter()
    reporter.alert("warning", "disk nearly full", "disk")
    later: list = []
    sinks.append(later.append)
    reporter.alert("info", "second", "x")
    queued = events.drain()
    assert [e.message for e in queued] == ["disk nearly full", "second"]
    assert seen == queued and later == queued[1:]
    first = queued[0]
    assert isinstance(first, Alert)
    assert (first.level, first.step, first.code) == ("warning", 7, "disk")


def test_a_state_change_is_held_and_announced_with_the_step_and_training_time() -> None:
    ended: list[str] = []
    reporter, events, _, _ = make_reporter(before_final_state=ended.append)
    assert reporter.state == RunState.STARTING
    reporter.set_state(RunState.PAUSED, "paused by user")
    assert reporter.state == RunState.PAUSED and ended == []
    reporter.counters.step = 9
    reporter.set_state(RunState.FINISHED)
    assert ended == [RunState.FINISHED]  # before its StateChanged: the final state is the last
    changes = events.drain()
    assert all(isinstance(e, StateChanged) for e in changes)
    assert [(e.state, e.step, e.reason, e.train_time_s) for e in changes] == [
        ("paused", 7, "paused by user", 2.5),
        ("finished", 9, "", 2.5),
    ]


def test_what_runs_before_the_final_state_reports_ahead_of_it() -> None:
    reporter: Reporter
    reporter, events, _, _ = make_reporter(
        before_final_state=lambda state: reporter.alert("warning", f"closing before {state}")
    )
    reporter.set_state(RunState.STOPPED, "stopped by user")
    assert [e.kind for e in events.drain()] == ["alert", "state"]
