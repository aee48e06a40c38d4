"""A full disk, for real: a small tmpfs holds the run directory of a tiny run, a filler file takes
its space mid-run. The run alerts and pauses, keeps its weights and its metrics records in
memory, and goes on by itself once the filler is deleted: every checkpoint loads, and
metrics.jsonl has every step, once."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.checkpoint.store import load_checkpoint
from engine.config.presets import load_preset
from engine.train.disk_full import RETRY_S, is_disk_full, short_write_failure, write_failure
from engine.train.trainer import Trainer

TIMEOUT_S = 120.0


@pytest.fixture
def small_disk(tmpfs: Callable[[str], Path]) -> Path:
    """A 2 MiB tmpfs (mounting needs root)."""
    return tmpfs("size=2m")


def fill(disk: Path, leave_bytes: int = 0) -> Path:
    """Take the disk's space with a filler file, leaving about `leave_bytes` free."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"x" * 65536)
    except OSError as e:
        assert is_disk_full(e)
    try:  # the last pages, a write of a few bytes at a time
        while True:
            os.write(fd, b"x" * 512)
    except OSError:
        pass
    if leave_bytes:
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave_bytes))
    os.close(fd)
    return filler


class FullDiskRun:
    """A tiny run on `disk`, in a thread; `fill_at` (step) fills the disk, leaving `leave_bytes`;
    once the run pauses for the disk, the filler is deleted."""

    def __init__(
        self, disk: Path, *overrides: str, fill_at: int, leave_bytes: int, free_after_s: float = 0.5
    ) -> None:
        cfg = load_preset(
            "tiny",
            ["train.max_steps=30", "eval.interval=0", "sample.interval=0", *overrides],
        )
        self.run_dir = disk / "run"
        self.disk = disk
        self.trainer = Trainer(cfg, run_dir=self.run_dir, telemetry=False)
        self.events: list[Any] = []
        self.paused_for_disk: dict[str, Any] = {}
        self.fill_at, self.leave_bytes = fill_at, leave_bytes
        self.free_after_s = free_after_s
        self.trainer.sinks.append(self.on_event)

    def on_event(self, event: Any) -> None:
        self.events.append(event)
        if event.kind == "step" and event.step == self.fill_at:
            fill(self.disk, self.leave_bytes)
            # an eval record is written at once (steps at least once a second): the next
            # write is sure to come, however fast the steps are
            self.trainer.evaluate()
        if event.kind == "state" and event.state == "paused" and event.reason == "disk full":
            self.paused_for_disk = {"step": event.step, "state": self.trainer.state}
            threading.Thread(target=self.free_space_soon, daemon=True).start()

    def free_space_soon(self) -> None:
        time.sleep(self.free_after_s)
        self.paused_for_disk["still_paused"] = self.trainer.state == "paused"
        (self.disk / "filler").unlink()

    def run(self) -> str:
        thread = threading.Thread(target=self.trainer.run, daemon=True)
        thread.start()
        thread.join(TIMEOUT_S)
        assert not thread.is_alive(), self.events[-5:]
        return self.trainer.state

    def alerts(self, code: str) -> list[Any]:
        return [e for e in self.events if e.kind == "alert" and e.code == code]

    def records(self) -> list[dict[str, Any]]:
        lines = (self.run_dir / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]  # every line whole


def assert_every_step_once(records: list[dict[str, Any]], last: int) -> None:
    steps = [r["step"] for r in records if r["kind"] == "step"]
    assert steps == list(range(1, last + 1))


def test_a_checkpoint_on_a_full_disk_alerts_pauses_and_is_written_once_there_is_room(small_disk):
    # Room for the metrics lines, not for a checkpoint (about 400 kB): torch.save fails with a
    # RuntimeError raised during the disk's OSError, not an OSError.
    run = FullDiskRun(
        small_disk, "checkpoint.interval=10", fill_at=11, leave_bytes=64 * 1024
    )
    assert run.run() == "finished"
    disk = run.alerts("disk")
    assert disk and disk[0].level == "error" and disk[0].step == 20
    assert "checkpoint at step 20 failed (No space left on device)" in disk[0].message
    assert "the previous one is intact" in disk[0].message and "\n" not in disk[0].message
    assert run.paused_for_disk["step"] == 20 and run.paused_for_disk["still_paused"]
    assert "disk space is back" in disk[-1].message
    saved = [e.step for e in run.events if e.kind == "checkpoint"]
    assert saved == [10, 20, 30]  # the one that failed, written at its step once there was room
    assert load_checkpoint(run.run_dir / "ckpt-00000030.pt")["step"] == 30
    records = run.records()
    assert_every_step_once(records, 30)
    assert not run.alerts("crash")
    assert [r["state"] for r in records if r["kind"] == "state"][-1] == "finished"


def test_metrics_on_a_full_disk_pause_the_run_and_no_record_is_lost(small_disk):
    run = FullDiskRun(small_disk, "checkpoint.interval=0", fill_at=5, leave_bytes=0)
    assert run.run() == "finished"
    disk = run.alerts("disk")
    assert disk and disk[0].level == "error"
    assert "metrics.jsonl cannot be written (No space left on device)" in disk[0].message
    assert "kept in memory" in disk[0].message
    assert run.paused_for_disk["still_paused"]
    records = run.records()
    assert_every_step_once(records, 30)  # those held while the disk was full too
    written = [r["message"] for r in records if r["kind"] == "alert" and r.get("code") == "disk"]
    assert written == [a.message for a in disk]  # the alerts themselves were kept and written
    states = [r["state"] for r in records if r["kind"] == "state"]
    assert "paused" in states and states[-1] == "finished"
    assert load_checkpoint(run.run_dir / "ckpt-00000030.pt")["step"] == 30
    assert not run.alerts("crash")


def test_a_write_failure_is_found_behind_torchs_runtime_error():
    try:
        try:
            raise OSError(28, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos")  # noqa: B904
    except RuntimeError as e:
        assert is_disk_full(e) and write_failure(e) == "No space left on device"
    assert write_failure(ValueError("a bug")) is None


def test_torchs_short_write_with_no_os_error_behind_it_is_a_full_disk_only_on_a_full_disk(small_disk, tmp_path):
    """A DCP shard writer raises torch's own "unexpected pos" with no OSError behind it (a
    sharded run's alert said that, not the disk); on a disk with room it stays a bug's words."""
    short = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    assert short_write_failure(short, tmp_path) is None  # room here: not the disk
    fill(small_disk)
    assert short_write_failure(short, small_disk) == "No space left on device"
    assert short_write_failure(RuntimeError("another error"), small_disk) is None


def test_a_stop_goes_from_saving_to_stopped(tmp_path):
    trainer = Trainer(
        load_preset("tiny", ["train.max_steps=1000", "eval.interval=0", "sample.interval=0"]),
        run_dir=tmp_path / "run",
        telemetry=False,
    )
    states: list[str] = []

    def on_event(event: Any) -> None:
        if event.kind == "state":
            states.append(event.state)
        if event.kind == "step" and event.step == 3:
            trainer.stop()

    trainer.sinks.append(on_event)
    assert trainer.run() == "stopped"
    assert states[-2:] == ["saving", "stopped"]
    assert load_checkpoint(tmp_path / "run" / "ckpt-00000003.pt")["step"] == 3


def test_the_metrics_writer_keeps_what_a_full_disk_refuses_bounded_and_writes_it_in_order(
    small_disk, monkeypatch
):
    from engine.events import Eval
    from engine.rundir.metrics_log import MetricsWriter

    monkeypatch.setattr(MetricsWriter, "MAX_UNWRITTEN_BYTES", 4096)
    failures: list[str] = []
    writer = MetricsWriter(small_disk / "metrics.jsonl", on_failure=lambda: failures.append("x"))
    filler = fill(small_disk)
    for step in range(1, 201):  # eval records are written at once: each one tries the disk
        writer(Eval(step=step, train_loss=1.0, val_loss=2.0, train_time_s=0.0))
    assert failures == ["x"]  # said once, not per record
    assert writer.failure == "No space left on device" and writer.lost > 0
    assert not writer.retry()  # still full
    filler.unlink()
    assert writer.retry() and writer.failure is None
    kept = 200 - writer.lost
    steps = [json.loads(line)["step"] for line in (small_disk / "metrics.jsonl").open()]
    assert steps == list(range(1, kept + 1))  # whole lines, in order, none twice
    assert "records could not be written" in (writer.close() or "")  # the lost ones are said


# A sharded run's checkpoint (a DCP directory): dcp.save reports a full disk as its own
# CheckpointException, a BaseException carrying each rank's failure.
SHARDED_WARNING = "torch.distributed is disabled"  # DCP in one process says so: that is the point


def test_a_sharded_save_on_a_full_disk_is_the_disks_failure_not_a_crash(small_disk, tmp_path):
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from engine.distributed.sharded import save_sharded
    from engine.distributed.world import World

    trainer = Trainer(
        load_preset("tiny", ["train.max_steps=2", "eval.interval=0", "sample.interval=0"]),
        run_dir=tmp_path / "run",
        telemetry=False,
    )
    assert trainer.run() == "finished"
    meta = trainer.built.checkpointer.state(weights=False)
    parts = trainer.built.parts
    filler = fill(small_disk, leave_bytes=64 * 1024)  # room for a few shards, not for all
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=SHARDED_WARNING)
        with pytest.raises(CheckpointException) as raised:  # what DCP itself raises
            dcp.save({"model": parts.model.state_dict()}, checkpoint_id=str(small_disk / "raw"))
        assert not isinstance(raised.value, Exception)  # so `except Exception` misses it
        assert is_disk_full(raised.value)  # found inside its per-rank failures
        assert write_failure(raised.value) == "No space left on device"
        shutil.rmtree(small_disk / "raw")
        path = small_disk / "ckpt-00000002.dcp"
        failure = save_sharded(path, meta, parts.model, parts.optimizer, World(), None)
        assert failure == "No space left on device"
        assert not path.exists()
        assert not list(small_disk.glob(".*.tmp"))  # the partial shards do not keep the space
        filler.unlink()
        assert save_sharded(path, meta, parts.model, parts.optimizer, World(), None) is None
    assert load_checkpoint(path)["step"] == 2


def test_a_sharded_checkpoint_on_a_full_disk_alerts_pauses_and_is_written_once_there_is_room(
    small_disk, monkeypatch
):
    import warnings

    from engine.checkpoint import checkpointer
    # A sharded (FSDP) run's checkpoints, written by one process as each rank writes its own;
    # the space is freed after a retry or two (RETRY_S)
    run = FullDiskRun(
        small_disk, "checkpoint.interval=10", fill_at=11, leave_bytes=64 * 1024,
        free_after_s=RETRY_S + 1.0,
    )  # fmt: skip
    save_sharded = checkpointer.save_sharded
    tried_while_full: list[int] = []

    def save_and_see(*args: Any) -> str | None:
        if (small_disk / "filler").exists():
            tried_while_full.append(run.trainer.step)
        return save_sharded(*args)

    monkeypatch.setattr(checkpointer, "save_sharded", save_and_see)

    run.trainer.set_up()
    run.trainer.built.checkpointer.sharded = True  # it writes as an FSDP run's ranks do
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=SHARDED_WARNING)
        assert run.run() == "finished"
    assert not run.alerts("crash"), run.alerts("crash")
    disk = run.alerts("disk")
    assert disk and disk[0].level == "error" and disk[0].step == 20
    assert "checkpoint at step 20 failed (No space left on device)" in disk[0].message
    assert run.paused_for_disk["step"] == 20 and run.paused_for_disk["still_paused"]
    assert "disk space is back" in disk[-1].message
    saved = [e.step for e in run.events if e.kind == "checkpoint"]
    assert saved == [10, 20, 30]
    # a retry writes nothing while there is less room than the last checkpoint (a directory) took
    assert tried_while_full == [20], tried_while_full
    assert load_checkpoint(run.run_dir / "ckpt-00000030.dcp")["step"] == 30
    assert_every_step_once(run.records(), 30)
