"""One writer of the optimizer's learning rates: the step, once per step, from the schedule and
the counters; an LR command only moves the multiplier, which the next step applies."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from engine.events import Event, LrChanged, Step
from engine.train.trainer import Trainer
from tests.engine.test_trainer import tiny_cfg


def writer() -> str:
    """The function of the engine's that wrote: the step, or whoever else did."""
    frame = sys._getframe(2)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "train_step" if "train_step" in names else " < ".join(names[:4])


class CountedGroup(dict):
    """A parameter group that notes every write of its "lr" (step, writer)."""

    def __init__(self, group: dict[str, Any], writes: list[tuple[int, str]], trainer: Trainer):
        super().__init__(group)
        self.writes, self.trainer = writes, trainer

    def __setitem__(self, key: str, value: Any) -> None:
        if key == "lr":
            self.writes.append((self.trainer.step, writer()))
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        if "lr" in dict(*args, **kwargs):
            self.writes.append((self.trainer.step, writer()))
        super().update(*args, **kwargs)


def test_only_the_step_writes_the_lrs_once_a_step_through_set_lr_and_scale_lr(tmp_path) -> None:
    steps = 12
    events: list[Event] = []
    trainer: Trainer

    def sink(event: Event) -> None:
        events.append(event)
        if isinstance(event, Step) and event.step == 3:
            trainer.set_lr(2e-3)
        if isinstance(event, Step) and event.step == 7:
            trainer.scale_lr(0.5)

    trainer = Trainer(
        tiny_cfg(
            f"train.max_steps={steps}", "optim.lr=1e-3", "schedule.kind=constant",
            "schedule.warmup_steps=0", "eval.interval=0", "sample.interval=0",
            "checkpoint.interval=0",
        ),
        run_dir=tmp_path / "run", sinks=[sink], telemetry=False,
    )  # fmt: skip
    trainer.set_up()
    writes: list[tuple[int, str]] = []
    groups = trainer.built.parts.optimizer.param_groups
    groups[:] = [CountedGroup(g, writes, trainer) for g in groups]
    assert trainer.run() == "finished"

    assert {who for _, who in writes} == {"train_step"}
    per_step = {step: sum(1 for s, _ in writes if s == step) for step in range(steps)}
    assert per_step == {step: len(groups) for step in range(steps)}  # each group once a step
    acks = [e for e in events if isinstance(e, LrChanged)]
    assert [(a.old_lr, a.new_lr) for a in acks] == [
        (pytest.approx(1e-3), pytest.approx(2e-3)), (pytest.approx(2e-3), pytest.approx(1e-3))
    ]
    # what the app shows is what the next step applies (Step N: the LR of the N-th update)
    lrs = {e.step: e.lr for e in events if isinstance(e, Step)}
    assert lrs[3] == pytest.approx(1e-3) and lrs[4] == pytest.approx(2e-3)
    assert lrs[7] == pytest.approx(2e-3) and lrs[8] == pytest.approx(1e-3)
    assert [g["lr"] for g in groups] == [pytest.approx(1e-3)] * len(groups)
