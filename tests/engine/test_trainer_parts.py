"""The trainer's small parts, tested alone: throughput window, best-checkpoint rule, run health,
run directory, Step read-back. None of these needs a Trainer."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
import torch

from engine.checkpoint.checkpointer import is_new_best
from engine.config.run_config import ConfigError
from engine.events import Eval
from engine.rundir.layout import create_run_dir, write_error_log
from engine.train.command_queue import CommandQueue, Pause, Resume, SetLr
from engine.train.readback import (
    PendingStep,
    ThroughputWindow,
    read_back,
    refusal_message,
    step_events,
)
from engine.train.step import HEALTH_EVERY, ratio_after_step, update_ratio, watch_before_step


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------- throughput window
def test_throughput_is_steps_times_tokens_over_the_window() -> None:
    clock = FakeClock()
    window = ThroughputWindow(clock)
    clock.now += 2.0
    tokens_per_s, step_time = window.rates(4, 1000)
    assert tokens_per_s == pytest.approx(2000.0) and step_time == pytest.approx(0.5)


def test_pauses_and_evaluations_are_left_out_of_the_window() -> None:
    clock = FakeClock()
    window = ThroughputWindow(clock)
    clock.now += 1.0  # training
    paused_at = clock.now
    clock.now += 30.0  # paused, or evaluating
    window.exclude(paused_at, has_steps=True)
    clock.now += 1.0  # training again
    tokens_per_s, step_time = window.rates(2, 500)
    assert tokens_per_s == pytest.approx(500.0) and step_time == pytest.approx(1.0)


def test_time_before_the_first_step_of_a_window_restarts_it() -> None:
    clock = FakeClock()
    window = ThroughputWindow(clock)
    clock.now += 50.0  # blocked on a command with no step trained yet
    window.exclude(clock.now - 5.0, has_steps=False)
    clock.now += 2.0
    assert window.rates(1, 100)[1] == pytest.approx(2.0)


def test_restart_empties_the_window() -> None:
    clock = FakeClock()
    window = ThroughputWindow(clock)
    clock.now += 10.0
    window.restart()
    clock.now += 1.0
    assert window.rates(1, 10)[0] == pytest.approx(10.0)


# ---------------------------------------------------------------------- best checkpoint
def _eval(step: int, val: float) -> Eval:
    return Eval(step=step, train_loss=val, val_loss=val, train_time_s=1.0)


def test_a_checkpoint_is_best_only_when_the_eval_at_its_own_step_beat_the_best() -> None:
    assert is_new_best(_eval(20, 2.5), 20, math.inf)
    assert is_new_best(_eval(20, 2.5), 20, 2.6)
    assert not is_new_best(_eval(20, 2.7), 20, 2.6)  # worse than the best so far
    assert not is_new_best(_eval(20, 2.5), 20, 2.5)  # a tie is not better
    assert not is_new_best(_eval(10, 2.0), 20, math.inf)  # the eval measured other weights
    assert not is_new_best(None, 20, math.inf)  # no eval yet
    assert not is_new_best(_eval(20, math.nan), 20, math.inf)


# ---------------------------------------------------------------------- run health
def test_update_ratio_is_the_relative_change_of_the_weights() -> None:
    before = [torch.ones(2, 2)]
    after = [torch.ones(2, 2) * 1.1]
    assert float(update_ratio(before, after)) == pytest.approx(0.1, rel=1e-5)


def test_only_every_health_every_steps_is_watched() -> None:
    class Attn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_proj = torch.nn.Linear(3, 3, bias=False)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = Attn()

    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList([Block(), Block()])
    assert watch_before_step(model, 1) is None and ratio_after_step(None) is None
    watch = watch_before_step(model, HEALTH_EVERY)
    assert watch is not None
    with torch.no_grad():
        for block in model.blocks:
            block.attn.c_proj.weight.mul_(1.5)
    assert float(ratio_after_step(watch)) == pytest.approx(0.5, rel=1e-5)


# ---------------------------------------------------------------------- run directory
def test_run_dir_is_created(tmp_path: Path) -> None:
    create_run_dir(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())


def test_an_unwritable_run_dir_is_refused_with_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")  # refused even for root, unlike a chmod
    with pytest.raises(ConfigError, match="not writable.*pass --run-dir DIR"):
        create_run_dir(blocker / "run")


def test_error_log_keeps_the_traceback(tmp_path: Path) -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        path = write_error_log(tmp_path)
    assert path == tmp_path / "error.log" and "RuntimeError: boom" in path.read_text()
    assert write_error_log(None) is None and write_error_log(tmp_path / "missing") is None


# ---------------------------------------------------------------------- Step read-back
def test_step_events_carry_the_read_back_values_and_token_counts() -> None:
    pending = [
        PendingStep(11, torch.tensor(2.5), torch.tensor(0.5), 1e-3, 0.01, None),
        PendingStep(12, torch.tensor(2.25), torch.tensor(0.25), 1e-3, 0.02, torch.tensor(0.002)),
    ]
    read = read_back(pending)
    assert read.losses == [2.5, 2.25] and read.grad_norms == [0.5, 0.25]
    assert read.held_back == [False, False] and read.applied == 2  # not checked: applied
    steps = step_events(
        pending, read, tokens_per_s=800.0, step_time_s=0.5,
        tokens_after=1200, tokens_per_step=100, mfu=0.1,
    )  # fmt: skip
    assert [(s.step, s.loss, s.tokens) for s in steps] == [(11, 2.5, 1100), (12, 2.25, 1200)]
    assert math.isnan(steps[0].update_ratio) and steps[1].update_ratio == pytest.approx(0.002)
    assert all(s.tokens_per_s == 800.0 and s.step_time_s == 0.5 for s in steps)


def test_unmeasured_gradient_norms_read_back_as_nan() -> None:
    pending = [PendingStep(1, torch.tensor(3.0), None, 1e-3, 0.0, None)]
    assert math.isnan(read_back(pending).grad_norms[0])


def test_the_first_step_held_back_is_the_refused_one_and_its_loss_is_in_the_alert() -> None:
    flags = [0.0, 1.0, 1.0]  # step 6 refused, step 7 held back for it
    pending = [
        PendingStep(5 + i, torch.tensor(loss), torch.tensor(0.5), 1e-3, 0.0, None, torch.tensor(f))
        for i, (loss, f) in enumerate(zip([2.5, 906.0, 2.4], flags, strict=True))
    ]
    read = read_back(pending)
    assert read.held_back == [False, True, True] and read.applied == 1
    message = refusal_message(pending[read.applied].step, read.losses[read.applied])
    assert message == "non-finite gradient at step 6 (loss 906); the update was not applied"


# ---------------------------------------------------------------------- command queue
def test_commands_come_out_in_order_and_none_when_empty() -> None:
    commands = CommandQueue()
    commands.put(Pause())
    commands.put(SetLr(0.001))
    never = lambda: False  # noqa: E731
    assert commands.take(False, never) == Pause()
    assert commands.take(False, never) == SetLr(0.001)
    assert commands.take(False, never) is None


def test_a_paused_queue_waits_for_a_command_until_the_run_is_closing() -> None:
    commands = CommandQueue()
    checks = []

    def closing() -> bool:
        checks.append(1)
        return len(checks) >= 2

    assert commands.take(True, closing) is None
    assert len(checks) == 2  # it waited through one empty poll before giving up

    threading.Timer(0.05, commands.put, args=(Resume(),)).start()
    assert commands.take(True, lambda: False) == Resume()
