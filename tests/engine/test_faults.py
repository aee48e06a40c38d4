"""Faults the engine survives: NaN, loss spikes, out of memory, a full disk, SIGKILL mid-save."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import torch
import warm_process
from tiny import tiny_overrides

from engine.checkpoint import store as ckpt
from engine.checkpoint.store import list_checkpoints, load_checkpoint
from engine.config.presets import load_preset
from engine.train.trainer import Trainer

SMALL = tiny_overrides("train.batch_size=8", "eval.interval=0", "sample.interval=0")


def cfg(*extra: str):
    return load_preset("default", [*SMALL, *extra])


class PoisonAt:
    """Wrap the model's forward to make the loss NaN (or raise OOM) at chosen calls."""

    def __init__(self, trainer: Trainer, at: set[int], kind: str = "nan") -> None:
        self.trainer, self.at, self.kind, self.calls = trainer, at, kind, 0
        self.inner = trainer.built.instruments.step.forward

    def __call__(self, x, y=None):
        self.calls += 1
        if self.calls in self.at:
            if self.kind == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory (injected)")
            logits, loss = self.inner(x, y)
            return logits, loss * float("nan")
        return self.inner(x, y)


def run_with(trainer: Trainer, install, *, stop_after_events=None) -> list:
    """Run `trainer` with `install(trainer)` called once it is set up."""
    events: list = []
    trainer.sinks.append(events.append)
    if stop_after_events:
        trainer.sinks.append(lambda e: stop_after_events(trainer, e))
    trainer.set_up()
    install(trainer)
    trainer.run()
    return events


def test_nan_step_is_never_applied_and_the_run_pauses(tmp_path):
    trainer = Trainer(cfg("train.max_steps=50"), run_dir=tmp_path, telemetry=False)
    snapshot = {}

    def install(t: Trainer) -> None:
        poison = PoisonAt(t, {6})
        t.built.instruments.step.forward = poison

    def on_event(t: Trainer, e) -> None:
        if e.kind == "step" and e.step == 5:
            weights = t.built.parts.model.state_dict()
            snapshot["weights"] = {k: v.clone() for k, v in weights.items()}
        if e.kind == "state" and e.state == "paused":
            weights = t.built.parts.model.state_dict()
            snapshot["paused_weights"] = {k: v.clone() for k, v in weights.items()}
            snapshot["step"] = t.step
            t.stop(checkpoint=False)

    events = run_with(trainer, install, stop_after_events=on_event)
    alert = next(e for e in events if e.kind == "alert" and e.code == "nan")
    assert "not applied" in alert.message and "roll back to the last checkpoint" in alert.message
    assert snapshot["step"] == 5  # step 6 never happened
    for name, value in snapshot["weights"].items():
        assert torch.equal(value, snapshot["paused_weights"][name]), name
    assert all(e.step <= 5 for e in events if e.kind == "step")


def test_headless_nan_rolls_back_with_half_the_lr(tmp_path):
    trainer = Trainer(
        cfg("train.max_steps=30", "checkpoint.interval=10"),
        run_dir=tmp_path,
        telemetry=False,
        interactive=False,
    )
    events = run_with(
        trainer, lambda t: setattr(t.built.instruments.step, "forward", PoisonAt(t, {15}))
    )
    assert trainer.state == "finished"
    rolled = [e for e in events if e.kind == "alert" and e.code == "rollback"]
    assert rolled and "step 10" in rolled[0].message
    assert trainer.lr_scale == 0.5
    assert trainer.step == 30


def test_a_refusal_read_back_steps_later_leaves_the_run_at_the_step_before_it(tmp_path):
    """Read back every 4 steps, a NaN at step 6 is known at step 8: steps 7 and 8 were held back
    with it, so the run pauses at step 5 with the weights and optimizer state of step 5."""
    trainer = Trainer(
        cfg("train.max_steps=50", "train.log_every=4"), run_dir=tmp_path, telemetry=False
    )
    seen: dict = {}

    def state(t: Trainer) -> list[torch.Tensor]:
        model, optimizer = t.built.parts.model, t.built.parts.optimizer
        moments = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
        return [v.detach().clone() for v in [*model.state_dict().values(), *moments]]

    def install(t: Trainer) -> None:
        t.built.instruments.step.forward = PoisonAt(t, {6})
        real_step = t.built.train_one_step

        def step(*args) -> None:
            real_step(*args)
            if t.step == 5:
                seen["after_5"] = state(t)

        t.built.train_one_step = step

    def on_event(t: Trainer, e) -> None:
        if e.kind == "state" and e.state == "paused":
            seen["paused"], seen["step"], seen["tokens"] = state(t), t.step, t.counters.tokens
            t.stop(checkpoint=False)

    events = run_with(trainer, install, stop_after_events=on_event)
    alert = next(e for e in events if e.kind == "alert" and e.code == "nan")
    assert alert.message.startswith(
        "non-finite gradient at step 6 (loss nan); the update was not applied"
    )
    assert seen["step"] == 5 and seen["tokens"] == 5 * trainer.cfg.tokens_per_step
    assert all(torch.equal(a, b) for a, b in zip(seen["after_5"], seen["paused"], strict=True))
    assert [e.step for e in events if e.kind == "step"] == [1, 2, 3, 4, 5]


def test_spike_detection_pauses(tmp_path):
    trainer = Trainer(
        cfg("train.max_steps=200", "train.spike_sigma=6"), run_dir=tmp_path, telemetry=False
    )

    class Spike:
        def __init__(self, t):
            self.inner, self.calls = t.built.instruments.step.forward, 0

        def __call__(self, x, y=None):
            self.calls += 1
            logits, loss = self.inner(x, y)
            return logits, loss * (50.0 if self.calls == 120 else 1.0)

    def on_event(t, e):
        if e.kind == "state" and e.state == "paused":
            t.stop(checkpoint=False)

    events = run_with(
        trainer,
        lambda t: setattr(t.built.instruments.step, "forward", Spike(t)),
        stop_after_events=on_event,
    )
    spike = next(e for e in events if e.kind == "alert" and e.code == "spike")
    assert "step 120" in spike.message


def test_out_of_memory_halves_the_micro_batch_and_goes_on(tmp_path):
    trainer = Trainer(
        cfg("train.max_steps=12", "train.batch_size=8", "train.grad_accum=1"),
        run_dir=tmp_path,
        telemetry=False,
    )
    poison: list[PoisonAt] = []

    def install(t: Trainer) -> None:
        poison.append(PoisonAt(t, {5}, kind="oom"))
        t.built.instruments.step.forward = poison[0]

    events = run_with(trainer, install)
    assert trainer.state == "finished" and trainer.step == 12
    assert (trainer.cfg.train.batch_size, trainer.cfg.train.grad_accum) == (4, 2)
    # steps 1-4 one micro-batch of 8, the refused call, then steps 5-12 two of 4 each: every
    # update still trains on 8 sequences, as the token count says
    assert poison[0].calls == 4 + 1 + 8 * 2
    oom = next(e for e in events if e.kind == "alert" and e.code == "oom")
    assert "micro-batch 4 x 2" in oom.message
    steps = [e.step for e in events if e.kind == "step"]
    assert steps == list(range(1, 13))  # no step lost or repeated


def test_out_of_memory_at_micro_batch_one_pauses_with_advice(tmp_path):
    trainer = Trainer(
        cfg("train.max_steps=50", "train.batch_size=1"), run_dir=tmp_path, telemetry=False
    )

    def on_event(t, e):
        if e.kind == "state" and e.state == "paused":
            t.stop(checkpoint=False)

    events = run_with(
        trainer,
        lambda t: setattr(t.built.instruments.step, "forward", PoisonAt(t, {3}, kind="oom")),
        stop_after_events=on_event,
    )
    oom = next(e for e in events if e.kind == "alert" and e.code == "oom")
    assert "cockpit plan" in oom.message


def test_full_disk_alerts_pauses_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    trainer = Trainer(
        cfg("train.max_steps=40", "checkpoint.interval=10"), run_dir=tmp_path, telemetry=False
    )
    real_save = ckpt.save_checkpoint

    def save(run_dir, step, state, keep_last):
        if step >= 20:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(run_dir, step, state, keep_last)

    monkeypatch.setattr(ckpt, "save_checkpoint", save)

    def on_event(t, e):
        if e.kind == "state" and e.state == "paused":
            t.stop(checkpoint=False)

    events = run_with(trainer, lambda t: None, stop_after_events=on_event)
    disk = next(e for e in events if e.kind == "alert" and e.code == "disk")
    assert "No space left" in disk.message and "intact" in disk.message
    assert [s for s, _ in list_checkpoints(tmp_path)] == [10]
    assert load_checkpoint(tmp_path / "ckpt-00000010.pt")["step"] == 10


SAVER = r"""
import sys, torch
from pathlib import Path
from engine.checkpoint.store import save_checkpoint
run_dir = Path(sys.argv[1])
big = {"model": {"w": torch.randn(4_000_000)}, "config": {}}
step = 2
print("ready", flush=True)
while True:
    save_checkpoint(run_dir, step, big, keep_last=1000)
    step += 1
"""


def test_sigkill_during_saves_never_damages_a_complete_checkpoint(tmp_path):
    saver = tmp_path / "saver.py"
    saver.write_text(SAVER)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    good = {"model": {"w": torch.arange(10.0)}, "config": {"name": "x"}}
    ckpt.save_checkpoint(run_dir, 1, good, keep_last=100)
    for attempt in range(6):
        # a real process that is killed, forked warm (torch imported): not one import per kill
        proc = warm_process.Popen(
            [sys.executable, str(saver), str(run_dir)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.15 + 0.1 * attempt)  # land the kill at different points of a save
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for _, path in list_checkpoints(run_dir):
            state = load_checkpoint(path)  # every complete checkpoint still loads
            assert "model" in state
    assert torch.equal(
        load_checkpoint(run_dir / "ckpt-00000001.pt")["model"]["w"], torch.arange(10.0)
    )
    # the next run in that directory clears what the killed saves left behind
    assert ckpt.remove_partial_saves(run_dir) >= 0
    assert not list(run_dir.glob(".*.tmp"))


def test_rollback_does_not_redo_the_restored_steps_eval_sample_and_checkpoint(tmp_path):
    trainer = Trainer(
        cfg(
            "train.max_steps=30",
            "checkpoint.interval=10",
            "eval.interval=10",
            "sample.interval=10",
            "sample.max_new_tokens=4",
        ),
        run_dir=tmp_path,
        telemetry=False,
        interactive=False,
    )
    # forward calls: steps 1-10, then 4 for the eval at 10: call 19 is step 15
    events = run_with(
        trainer, lambda t: setattr(t.built.instruments.step, "forward", PoisonAt(t, {19}))
    )
    assert trainer.state == "finished"
    rolled = [e for e in events if e.kind == "alert" and e.code == "rollback"]
    assert rolled and "rolled back to step 10" in rolled[0].message

    def steps(kind: str) -> list[int]:
        return [e.step for e in events if e.kind == kind]

    assert steps("eval") == [10, 20, 30]
    assert steps("checkpoint") == [10, 20, 30]
    per_step = {s: steps("sample").count(s) for s in steps("sample")}
    assert sorted(per_step) == [10, 20, 30] and len(set(per_step.values())) == 1


def test_a_nan_loss_is_written_as_null_not_bare_nan(tmp_path):
    import json

    from engine.rundir.metrics_log import read_history

    # Without the finite check the NaN step reaches the Step record (then the rollback).
    trainer = Trainer(
        cfg(
            "train.max_steps=20",
            "checkpoint.interval=5",
            "train.check_finite=false",
            "optim.grad_clip=0",
        ),
        run_dir=tmp_path,
        telemetry=False,
        interactive=False,
    )
    run_with(trainer, lambda t: setattr(t.built.instruments.step, "forward", PoisonAt(t, {8})))

    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line, parse_constant=refuse) for line in lines]
    bad = [r for r in records if r["kind"] == "step" and r["step"] == 8][0]
    assert bad["loss"] is None and bad["grad_norm"] is None
    replayed = [e for e in read_history(tmp_path / "metrics.jsonl", 7) if e.kind == "step"]
    assert all(isinstance(e.grad_norm, float) for e in replayed)  # null read back as NaN


def test_a_rollback_naming_a_checkpoint_refuses_when_a_newer_one_was_saved(tmp_path):
    """The app's question names the checkpoint a yes rolls back to; one saved before the yes
    reached the engine (another viewer's c) made the yes roll back to that one instead. Named,
    the engine refuses another and the run stays paused, untouched; naming the newest works."""
    trainer = Trainer(
        cfg("train.max_steps=40", "checkpoint.interval=5"), run_dir=tmp_path, telemetry=False
    )
    asked: list[str] = []

    def steer(event) -> None:
        if event.kind == "step" and event.step == 12:
            trainer.pause()
        elif event.kind == "state" and event.state == "paused" and not asked:
            asked.append("old")  # the question named step 5's; step 10's is the newest
            trainer.rollback(0.5, checkpoint=str(tmp_path / "ckpt-00000005.pt"))
        elif event.kind == "alert" and event.code == "rollback" and asked == ["old"]:
            asked.append("newest")
            trainer.rollback(0.5, checkpoint="ckpt-00000010.pt")
        elif event.kind == "alert" and event.code == "rollback" and len(asked) == 2:
            trainer.stop()

    trainer.sinks.append(steer)
    events = run_with(trainer, lambda t: None)
    refused, rolled = [e for e in events if e.kind == "alert" and e.code == "rollback"]
    assert refused.level == "warning"
    assert refused.message == (
        "rollback refused: the newest checkpoint is ckpt-00000010.pt, saved after the question "
        "named ckpt-00000005.pt; r asks again; the run stays paused from step 12 with the "
        "weights in memory"
    )
    assert rolled.level == "info" and rolled.message.startswith("rolled back to step 10")
