"""A sharded (FSDP) run under torchrun (2 ranks, gloo, this CPU) on a disk with no room for
its checkpoint: DCP's CheckpointException on every rank is the disk's failure, one alert and a
pause on every rank together, and once space is freed the checkpoint is written and the run
finishes. A real 8 MiB tmpfs holds the run directory (mounting it needs root)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from launch import TIMEOUT_S, TINY, records, start

from engine.checkpoint.store import load_checkpoint

FSDP = [*TINY, "--set", "train.parallel=fsdp"]


@pytest.fixture
def small_disk(tmpfs: Callable[[str], Path]) -> Path:
    """An 8 MiB tmpfs (mounting needs root)."""
    return tmpfs("size=8m")


def fill(disk: Path, leave_bytes: int) -> Path:
    """A filler file that takes the disk's space but about `leave_bytes`."""
    filler = disk / "filler"
    with filler.open("wb") as f:
        try:
            while True:
                f.write(b"x" * 65536)
                f.flush()
        except OSError:
            pass
    with filler.open("r+b") as f:
        f.truncate(max(0, filler.stat().st_size - leave_bytes))
    return filler


def test_a_sharded_checkpoint_on_a_full_disk_pauses_every_rank_and_is_written_once_freed(
    small_disk: Path,
) -> None:
    run_dir = small_disk / "run"
    # room for the run's small files and records, not for its first checkpoint's shards
    filler = fill(small_disk, leave_bytes=160 * 1024)
    process = start(*FSDP, "--set", "train.max_steps=20", "--set", "checkpoint.interval=10",
                    "--run-dir", str(run_dir))  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not [a for a in records(run_dir / "metrics.jsonl", "alert") if a.get("code") == "disk"]:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "no disk alert"
            time.sleep(0.2)
        filler.unlink()
        output, _ = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    alerts = records(run_dir / "metrics.jsonl", "alert")
    assert not [a for a in alerts if a.get("code") in ("crash", "rank")], alerts
    disk = [a for a in alerts if a.get("code") == "disk"]
    assert disk[0]["level"] == "error" and disk[0]["step"] == 10, disk
    assert "checkpoint at step 10 failed (No space left on device)" in disk[0]["message"]
    assert "disk space is back" in disk[-1]["message"]
    states = records(run_dir / "metrics.jsonl", "state")
    assert ("paused", "disk full") in [(s["state"], s["reason"]) for s in states]
    assert states[-1]["state"] == "finished"
    for rank in (0, 1):  # every rank paused, together, at the same step
        paused = [s for s in records(run_dir / f"rank-{rank}.jsonl", "state") if s["reason"] == "disk full"]
        assert [s["step"] for s in paused] == [10], (rank, paused)
    assert [c["step"] for c in records(run_dir / "metrics.jsonl", "checkpoint")] == [10, 20]
    assert load_checkpoint(run_dir / "ckpt-00000010.dcp")["step"] == 10
    assert load_checkpoint(run_dir / "ckpt-00000020.dcp")["step"] == 20
