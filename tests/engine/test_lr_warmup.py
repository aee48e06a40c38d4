"""A hand-set LR during warmup, on a real engine: the LR typed is the LR once warmup is over,
the ramp leads up to it, the optimizer never applies more than MAX_LR, and what the LR dialog
says (cockpit.screens.lr_dialog.lr_decision, the same rule) is what the optimizer applies."""

from __future__ import annotations

import json
import threading

import pytest

from cockpit.screens.lr_dialog import lr_decision
from engine.config.run_config import MAX_LR
from engine.events import Event
from engine.optim.schedule import lr_plan
from engine.rundir.journal import read_journal
from engine.train.trainer import Trainer
from tests.engine.test_trainer import Recorder, start, tiny_cfg

WARMUP = 60
PEAK = 3e-4


class AppliedLr:
    """A sink that reads every parameter group's LR off the optimizer at each step event (on
    the engine's thread, where the events are emitted): what the optimizer actually applied."""

    def __init__(self) -> None:
        self.trainer: Trainer | None = None
        self.highest = 0.0
        self.by_step: dict[int, float] = {}
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        if event.kind != "step" or self.trainer is None:
            return
        lrs = [float(g["lr"]) for g in self.trainer.built.parts.optimizer.param_groups]
        with self._lock:
            self.highest = max(self.highest, *lrs)
            self.by_step[event.step] = event.lr


def paused_in_warmup(tmp_path, *extra: str) -> tuple[Trainer, Recorder, AppliedLr, threading.Thread]:
    rec, applied = Recorder(), AppliedLr()
    trainer = Trainer(
        tiny_cfg(
            f"optim.lr={PEAK}",
            "schedule.kind=constant",
            f"schedule.warmup_steps={WARMUP}",
            f"train.max_steps={WARMUP + 30}",
            "eval.interval=0",
            "sample.interval=0",
            "checkpoint.interval=0",
            *extra,
        ),
        run_dir=tmp_path,
        sinks=[rec, applied],
        telemetry=False,
    )
    applied.trainer = trainer
    thread = start(trainer)
    rec.wait_for(lambda e: e.kind == "step" and e.step >= 3)
    trainer.pause()
    rec.wait_for(lambda e: e.kind == "state" and e.state == "paused")
    assert trainer.step < WARMUP // 2, "the test needs a pause well inside warmup"
    return trainer, rec, applied, thread


def finish(trainer: Trainer, rec: Recorder, thread: threading.Thread) -> None:
    trainer.resume()
    thread.join(60)
    assert not thread.is_alive() and trainer.state == "finished"


@pytest.mark.parametrize("typed", ["1e-3", "10"])
def test_an_lr_typed_during_warmup_is_the_lr_after_it_never_above_the_maximum(
    tmp_path, typed: str
) -> None:
    """The issue's runs: 1e-3 typed at step 12 became x7.77 (7.8e-3 after warmup); 10 (the
    maximum) typed at step 9 became an applied 13.0 at step 12."""
    trainer, rec, applied, thread = paused_in_warmup(tmp_path)
    step = trainer.step
    # what the dialog would say at this step, from the run's config as the app has it
    op, value, said = lr_decision(typed, lr_plan(step, trainer.cfg, trainer.lr_scale))
    assert said is not None and said.settled_step == WARMUP
    assert said.settled_lr == pytest.approx(float(typed))
    trainer.set_lr(value)
    ack = rec.wait_for(lambda e: e.kind == "lr_changed")
    assert ack.scale == pytest.approx(said.scale) and ack.new_lr == pytest.approx(said.new_lr)
    assert (ack.after_warmup_lr, ack.warmup_ends) == (pytest.approx(float(typed)), WARMUP)
    finish(trainer, rec, thread)

    assert applied.highest <= MAX_LR * (1 + 1e-12)
    lrs = applied.by_step  # step event N: the LR of optimizer step N-1
    # the ramp leads up to the typed LR, reached as warmup ends, and stays there (constant)
    ramp = [lrs[s + 1] for s in range(step, WARMUP)]
    assert ramp == sorted(ramp) and ramp[-1] < float(typed)
    assert lrs[WARMUP + 1] == pytest.approx(float(typed), rel=1e-9)
    assert lrs[WARMUP + 30] == pytest.approx(float(typed), rel=1e-9)
    assert max(lrs.values()) <= MAX_LR * (1 + 1e-12)


def test_a_factor_that_would_pass_the_maximum_after_warmup_is_refused(tmp_path) -> None:
    trainer, rec, applied, thread = paused_in_warmup(tmp_path, "optim.lr=1")
    plan = lr_plan(trainer.step, trainer.cfg, trainer.lr_scale)
    with pytest.raises(ValueError) as said:  # the LR now is under 0.5: x20 is under 10 *now*
        lr_decision("x20", plan)
    trainer.scale_lr(20.0)
    refused = rec.wait_for(lambda e: e.kind == "alert" and e.code == "lr")
    assert refused.level == "warning"
    assert refused.message == f"LR change refused: {said.value}"
    assert "at step 60 (after warmup)" in refused.message
    finish(trainer, rec, thread)
    assert not rec.of("lr_changed") and trainer.lr_scale == 1.0
    assert applied.highest == pytest.approx(1.0)


def test_the_lr_it_already_has_is_no_change_and_not_journaled(tmp_path) -> None:
    """Typing 3e-4 during warmup towards 3e-4 changes nothing: no LrChanged, no journal entry
    (the issue's `3.0e-4 -> 3.0e-4`), a short info note instead."""
    trainer, rec, _applied, thread = paused_in_warmup(tmp_path)
    _op, _value, said = lr_decision(str(PEAK), lr_plan(trainer.step, trainer.cfg, 1.0))
    assert said is not None and said.unchanged
    trainer.set_lr(PEAK)
    note = rec.wait_for(lambda e: e.kind == "alert" and e.code == "lr")
    assert (note.level, note.message) == ("info", "LR unchanged: it is 0.0003 from step 60 (after warmup) already")
    finish(trainer, rec, thread)
    assert not rec.of("lr_changed")
    metrics = tmp_path / "metrics.jsonl"
    kinds = [json.loads(line)["kind"] for line in metrics.read_text().splitlines()]
    assert "lr_changed" not in kinds
    assert not [e for e in read_journal(metrics) if "LR" in e.what]


def test_the_optimizer_never_applies_more_than_the_maximum_whatever_the_multiplier(tmp_path) -> None:
    """A multiplier set late in a decay meets a schedule that rises again when a resume changes
    the plan (train on a finished WSD run): the factor the optimizer applies is capped at MAX_LR."""
    rec, applied = Recorder(), AppliedLr()
    trainer = Trainer(
        tiny_cfg(f"optim.lr={PEAK}", "schedule.warmup_steps=2", "train.max_steps=8",
                 "eval.interval=0", "sample.interval=0", "checkpoint.interval=0"),
        run_dir=tmp_path, sinks=[rec, applied], telemetry=False,
    )  # fmt: skip
    applied.trainer = trainer
    trainer.counters.lr_scale = 1e5  # as a checkpoint's multiplier from the old plan's floor would be
    assert trainer.run() == "finished"
    assert applied.highest == pytest.approx(MAX_LR)  # reached, and never passed
    assert max(applied.by_step.values()) == pytest.approx(MAX_LR)
