"""The training loop's parts built alone, without a Trainer: the checkpointer (real files in a
tmp dir), the fault handler, the command handler (a pause holds the step) and the full-disk wait."""

from __future__ import annotations

import errno
import math
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from engine.checkpoint import store as ckpt
from engine.checkpoint.checkpointer import Checkpointer, Nested
from engine.config.presets import load_preset
from engine.distributed.world import World
from engine.events import (
    Alert,
    CheckpointSaved,
    Eval,
    EventQueue,
    LrChanged,
    RunState,
    StateChanged,
)
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.rundir.metrics_log import MetricsWriter
from engine.train.command_queue import CommandQueue, Pause, Resume, ScaleLr, Stop
from engine.train.commands import CommandHandler, StopRequest
from engine.train.counters import Counters
from engine.train.disk_full import DiskWait
from engine.train.fault_handler import NO_CHECKPOINT, FaultHandler
from engine.train.faults import SpikeDetector
from engine.train.reporter import Reporter

VOCAB = 32


class ConfigState:
    """The part of a checkpoint a resume reads first (the run's own is RunDescription)."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    def state_dict(self) -> dict[str, Any]:
        return {"config": self.cfg.to_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


class Parts:
    """A tiny real run's parts: config, GPT, optimizer holder, counters, reporter, disk."""

    def __init__(self, run_dir: Path | None, *, keep_best: bool = True) -> None:
        self.cfg = load_preset(
            "tiny",
            [
                "model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.block_size=8",
                f"checkpoint.keep_best={str(keep_best).lower()}", "checkpoint.keep_last=3",
            ],
        )  # fmt: skip
        torch.manual_seed(0)
        self.model = GPT(self.cfg.model, VOCAB)
        self.holder = SimpleNamespace(optimizer=build_optimizer(self.model, self.cfg.optim, "cpu"))
        self.scaler = torch.amp.GradScaler("cpu", enabled=False)
        self.counters = Counters()
        self.events: list[Any] = []
        self.reporter = Reporter(events=EventQueue(1000), sinks=[self.events.append], counters=self.counters)
        self.reporter.state = RunState.RUNNING
        self.queue = CommandQueue()
        self.metrics = MetricsWriter()
        self.disk = DiskWait(
            metrics=self.metrics, world=World(), group=None, reporter=self.reporter,
            counters=self.counters, queue=self.queue, max_steps=self.cfg.train.max_steps,
        )  # fmt: skip
        self.checkpointer = Checkpointer(
            run_dir=run_dir, world=World(), group=None, settings=self.cfg.checkpoint,
            sharded=False, model=self.model, optimizer=self.holder, optim=self.cfg.optim,
            device_type="cpu",
            states={
                "scaler": Nested("scaler", self.scaler),
                "counters": self.counters,
                "run": ConfigState(self.cfg),
            },
            counters=self.counters, reporter=self.reporter, disk=self.disk,
        )  # fmt: skip
        self.stopping = StopRequest()
        self.spikes = SpikeDetector(3.0)
        self.pending = ["a step not read back"]
        self.faults = FaultHandler(
            cfg=self.cfg, interactive=True, world=World(), checkpointer=self.checkpointer,
            counters=self.counters, reporter=self.reporter, stopping=self.stopping,
            spikes=self.spikes, model=self.model, optimizer=self.holder,
            batches=SimpleNamespace(batch_size=self.cfg.train.batch_size), device_type="cpu",
            forget_pending=self.pending.clear,
        )  # fmt: skip

    def alerts(self, code: str) -> list[Alert]:
        return [e for e in self.events if isinstance(e, Alert) and e.code == code]

    def states(self) -> list[str]:
        return [e.state for e in self.events if isinstance(e, StateChanged)]

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def nudge(self) -> None:
        """A change to the weights, as a step would make."""
        with torch.no_grad():
            for p in self.model.parameters():
                p.add_(0.5)

    def train_one_step(self) -> None:
        """A real optimizer step: the optimizer gets moments a checkpoint must keep."""
        x = torch.randint(0, VOCAB, (2, 8))
        _, loss = self.model(x, x)
        loss.backward()
        self.holder.optimizer.step()
        self.holder.optimizer.zero_grad(set_to_none=True)


def test_the_checkpointer_saves_files_that_load_and_restores_them(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    parts.train_one_step()
    parts.counters.step, parts.counters.tokens, parts.counters.lr_scale = 10, 1234, 0.5
    saved_weights = parts.weights()
    saved_moments = [m["exp_avg"].clone() for m in parts.holder.optimizer.state.values()]
    path = parts.checkpointer.save("interval")
    assert path == tmp_path / "ckpt-00000010.pt" and parts.checkpointer.last_checkpoint == path
    state = ckpt.load_checkpoint(path)
    for key in ("version", "model", "optimizer", "scaler", "step", "lr_scale", "train_time_s",
                "tokens", "best_val", "is_best", "config"):  # fmt: skip
        assert key in state, key
    assert (state["step"], state["tokens"], state["lr_scale"], state["is_best"]) == (10, 1234, 0.5, False)
    # saving goes through SAVING and back to the state before it, and is announced
    assert parts.states() == ["saving", "running"]
    assert [e.path for e in parts.events if isinstance(e, CheckpointSaved)] == [str(path)]

    parts.train_one_step()
    parts.counters.step, parts.counters.tokens = 17, 9999
    notes = parts.checkpointer.restore(state)
    assert notes == []
    assert (parts.counters.step, parts.counters.tokens, parts.counters.lr_scale) == (10, 1234, 0.5)
    for name, value in parts.weights().items():
        assert torch.equal(value, saved_weights[name]), name
    moments = [m["exp_avg"] for m in parts.holder.optimizer.state.values()]
    assert len(moments) == len(saved_moments) > 0
    assert all(torch.equal(a, b) for a, b in zip(moments, saved_moments, strict=True))


def evaluated(step: int, val_loss: float) -> Eval:
    return Eval(step=step, train_loss=val_loss, val_loss=val_loss, train_time_s=1.0)


def test_best_pt_is_the_checkpoint_whose_own_eval_beat_the_best(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    checkpointer, counters = parts.checkpointer, parts.counters
    counters.step = 10
    first = checkpointer.save_and_mark("interval", evaluated(10, 3.0))
    assert first is not None and (tmp_path / "best.pt").samefile(first)
    assert ckpt.load_checkpoint(first)["is_best"] is True and counters.best_val == 3.0
    counters.step = 20
    worse = checkpointer.save_and_mark("interval", evaluated(20, 3.5))
    assert worse is not None and ckpt.load_checkpoint(worse)["is_best"] is False
    assert (tmp_path / "best.pt").samefile(first) and counters.best_val == 3.0
    counters.step = 30  # an eval of another step marks nothing
    stale = checkpointer.save_and_mark("interval", evaluated(20, 1.0))
    assert stale is not None and (tmp_path / "best.pt").samefile(first)
    counters.step = 40
    better = checkpointer.save_and_mark("final", evaluated(40, 2.0))
    assert better is not None and (tmp_path / "best.pt").samefile(better)
    assert ckpt.load_checkpoint(tmp_path / "best.pt")["best_val"] == 2.0


def test_a_manual_save_repeated_at_the_same_step_writes_nothing_new(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    parts.counters.step = 5
    parts.checkpointer.save_manual()
    written = (tmp_path / "ckpt-00000005.pt").stat().st_mtime_ns
    parts.checkpointer.save_manual()
    saved = [e for e in parts.events if isinstance(e, CheckpointSaved)]
    assert [e.path for e in saved] == [str(tmp_path / "ckpt-00000005.pt")] * 2
    assert (tmp_path / "ckpt-00000005.pt").stat().st_mtime_ns == written
    assert parts.states() == ["saving", "running"]  # the second only acknowledged


def test_a_full_disk_pauses_and_the_retry_writes_the_checkpoint(tmp_path, monkeypatch) -> None:
    parts = Parts(tmp_path)
    real_save, full = ckpt.save_checkpoint, [True]

    def save(*args: Any) -> Path:
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(*args)

    monkeypatch.setattr(ckpt, "save_checkpoint", save)
    parts.counters.step = 20
    try:
        assert parts.checkpointer.save("interval") is None
        assert parts.reporter.state == RunState.PAUSED and parts.disk.waiting
        (failed,) = parts.alerts("disk")
        assert failed.level == "error" and "No space left on device" in failed.message
        assert not list(tmp_path.glob("ckpt-*"))
        assert parts.disk.retry(parts.checkpointer, by_user=True) is False  # still full
        assert "still no room" in parts.alerts("disk")[-1].message
        full[0] = False
        assert parts.disk.retry(parts.checkpointer) is True
    finally:
        parts.disk.cancel()
    assert ckpt.load_checkpoint(tmp_path / "ckpt-00000020.pt")["step"] == 20
    assert "disk space is back" in parts.alerts("disk")[-1].message
    assert parts.reporter.state == RunState.RUNNING and not parts.disk.waiting


def test_the_retry_timer_queues_a_retry_command(tmp_path, monkeypatch) -> None:
    from engine.train import disk_full

    monkeypatch.setattr(disk_full, "RETRY_S", 0.05)
    parts = Parts(tmp_path)
    parts.disk.checkpoint_failed("No space left on device", "interval", was_running=True)
    try:
        assert parts.queue.take_all(wait_s=2.0) == [("disk_retry", None)]
    finally:
        parts.disk.cancel()


def test_a_nan_paused_with_nothing_to_roll_back_to(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    parts.faults.anomaly("loss is not finite at step 6", "nan")
    (alert,) = parts.alerts("nan")
    assert alert.level == "error" and alert.message.startswith("loss is not finite at step 6: paused")
    assert parts.reporter.state == RunState.PAUSED and not parts.stopping.requested
    parts.faults.rollback(0.5)  # asked for anyway: refused in one line
    assert parts.alerts("rollback")[-1].message == NO_CHECKPOINT


def test_an_unattended_nan_rolls_back_to_the_checkpoint_with_half_the_lr(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    parts.faults.interactive = False
    parts.counters.step = 10
    saved = parts.weights()
    parts.checkpointer.save("interval")
    parts.nudge()
    parts.counters.step = 14
    parts.faults.anomaly("loss is not finite at step 15", "nan")
    assert parts.alerts("nan")[0].message.endswith("rolling back to ckpt-00000010.pt with the LR halved")
    assert (parts.counters.step, parts.counters.rollbacks, parts.counters.lr_scale) == (10, 1, 0.5)
    assert parts.pending == []  # the steps after the checkpoint are undone
    assert "rolled back to step 10" in parts.alerts("rollback")[-1].message
    assert [e.scale for e in parts.events if isinstance(e, LrChanged)] == [0.5]
    for name, value in parts.weights().items():
        assert torch.equal(value, saved[name]), name


def test_an_unattended_spike_past_the_rollback_limit_stops_without_saving(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    parts.faults.interactive = False
    parts.counters.rollbacks = parts.cfg.train.max_rollbacks
    parts.faults.anomaly("loss spike at step 30: 9.0000 against a moving average of 2.0000", "spike")
    assert parts.stopping.requested and parts.stopping.save is False
    assert parts.stopping.failure is not None and "rollbacks did not help" in parts.stopping.failure


def test_out_of_memory_halves_the_micro_batch_then_pauses_at_one(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    t = parts.cfg.train
    t.batch_size, t.grad_accum = 2, 1
    assert parts.faults.shrink_micro_batch() is True
    assert (t.batch_size, t.grad_accum, parts.faults.batches.batch_size) == (1, 2, 1)
    assert parts.reporter.state == RunState.RUNNING
    assert parts.faults.shrink_micro_batch() is False
    assert parts.reporter.state == RunState.PAUSED
    assert "cockpit plan" in parts.alerts("oom")[-1].message


def handler_for(parts: Parts) -> CommandHandler:
    return CommandHandler(
        queue=parts.queue, reporter=parts.reporter, counters=parts.counters,
        stopping=parts.stopping, should_stop=lambda: False, cfg=parts.cfg,
        optimizer=parts.holder, checkpointer=parts.checkpointer, disk=parts.disk,
        rollback=parts.faults.rollback, flush=lambda: None, sample=lambda: None, evaluate=lambda: None,
    )  # fmt: skip


def test_a_paused_run_holds_its_step_until_resumed(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    handler = handler_for(parts)
    counters, report = parts.counters, parts.reporter
    trained = threading.Event()

    def loop() -> None:  # the boundary, then a step when running: as the training loop does
        while counters.step < 3 and not parts.stopping.requested:
            handler.apply_queued()
            if report.state == RunState.RUNNING:
                counters.step += 1
                trained.set()

    parts.queue.put(Pause())
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    time.sleep(0.6)  # a few of the paused queue's polls
    assert thread.is_alive() and counters.step == 0 and report.state == RunState.PAUSED
    parts.queue.put(Resume())
    thread.join(5)
    assert not thread.is_alive() and counters.step == 3
    assert parts.states() == ["paused", "running"]


def test_commands_change_the_lr_and_stop_with_the_first_reason(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    handler = handler_for(parts)
    parts.counters.step = parts.cfg.schedule.warmup_steps + 1  # past warmup: no "after warmup"
    parts.queue.put(ScaleLr(0.5, "app"))
    parts.queue.put(Stop(False, "quit"))
    parts.queue.put(Stop(True, "SIGTERM"))  # later: the first stop asked for wins
    handler.apply_queued()
    assert parts.counters.lr_scale == 0.5
    lr = [e for e in parts.events if isinstance(e, LrChanged)]
    assert len(lr) == 1 and math.isclose(lr[0].new_lr, lr[0].old_lr * 0.5, rel_tol=1e-6)
    handler.apply_queued()
    assert (parts.stopping.save, parts.stopping.reason) == (False, "quit")


def test_keep_best_off_leaves_no_best_pt(tmp_path: Path) -> None:
    parts = Parts(tmp_path, keep_best=False)
    parts.counters.step = 10
    path = parts.checkpointer.save_and_mark("interval", evaluated(10, 3.0))
    assert path is not None and ckpt.load_checkpoint(path)["is_best"] is True
    assert not (tmp_path / "best.pt").exists()
