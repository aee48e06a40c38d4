"""`c` pressed again and again at one step: one file write, every press acknowledged."""

from __future__ import annotations

import os
import time
from pathlib import Path

from test_trainer import Recorder, start, tiny_cfg

from engine.checkpoint.store import list_checkpoints, load_checkpoint
from engine.train.trainer import Trainer


def file_identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns


def test_ten_checkpoints_at_one_step_write_once_and_answer_ten_times(tmp_path):
    rec = Recorder()
    trainer = Trainer(
        tiny_cfg("train.max_steps=100000", "eval.interval=0", "sample.interval=0"),
        run_dir=tmp_path,
        sinks=[rec],
        telemetry=False,
    )
    thread = start(trainer)
    rec.wait_for(lambda e: e.kind == "step" and e.step >= 2)
    trainer.pause()
    paused = rec.wait_for(lambda e: e.kind == "state" and e.state == "paused")

    trainer.checkpoint()
    first = rec.wait_for(lambda e: e.kind == "checkpoint")
    path = Path(first.path)
    identity = file_identity(path)
    time.sleep(0.02)  # a rewrite would show a later mtime (and a new inode: saves are atomic)
    for _ in range(9):
        trainer.checkpoint()
    deadline = time.monotonic() + 30
    while len(rec.of("checkpoint")) < 10 and time.monotonic() < deadline:
        time.sleep(0.02)

    acks = rec.of("checkpoint")
    assert len(acks) == 10  # every press answered
    assert {(e.step, e.path, e.reason) for e in acks} == {(paused.step, str(path), "manual")}
    assert file_identity(path) == identity  # written once
    assert [s for s, _ in list_checkpoints(tmp_path)] == [paused.step]
    saving = [e for e in rec.of("state") if e.state == "saving"]
    assert len(saving) == 1

    # Something that a checkpoint holds changed at the same step: the next c writes again.
    trainer.scale_lr(0.5)
    rec.wait_for(lambda e: e.kind == "lr_changed")
    trainer.checkpoint()
    deadline = time.monotonic() + 30
    while len(rec.of("checkpoint")) < 11 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert file_identity(path) != identity
    assert load_checkpoint(path)["lr_scale"] == 0.5

    trainer.stop(checkpoint=False)
    thread.join(30)
    assert not thread.is_alive()


def test_c_right_after_an_interval_save_at_that_step_writes_nothing(tmp_path):
    rec = Recorder()
    trainer = Trainer(
        tiny_cfg(
            "train.max_steps=100000",
            "eval.interval=0",
            "sample.interval=0",
            "checkpoint.interval=1",
        ),
        run_dir=tmp_path,
        sinks=[rec],
        telemetry=False,
    )
    thread = start(trainer)
    rec.wait_for(lambda e: e.kind == "step" and e.step >= 2)
    trainer.pause()
    paused = rec.wait_for(lambda e: e.kind == "state" and e.state == "paused")
    interval_save = [e for e in rec.of("checkpoint") if e.step == paused.step]
    assert [e.reason for e in interval_save] == ["interval"]
    path = Path(interval_save[0].path)
    identity = file_identity(path)
    time.sleep(0.02)

    trainer.checkpoint()
    ack = rec.wait_for(lambda e: e.kind == "checkpoint" and e.reason == "manual")
    assert (ack.step, ack.path) == (paused.step, str(path))
    assert file_identity(path) == identity
    trainer.stop(checkpoint=False)
    thread.join(30)
    assert not thread.is_alive()
