"""Every rank's readings reach rank 0's metrics file (2 ranks, gloo, this CPU): RankReports
with both ranks, their hosts, step times and memory; only rank 0 emits them."""

from __future__ import annotations

import math
import os
import signal
import socket
from pathlib import Path

from launch import TINY, rank_records, records, start, wait_for

from engine.control.client import RemoteEngine
from engine.distributed.command_exchange import RankSync
from engine.distributed.world import World
from engine.events import Event, RankReport


def timed_reports(run_dir: Path) -> list[dict]:
    """The ranks records in which every rank trained steps."""
    return [
        r for r in records(run_dir / "metrics.jsonl", "ranks")
        if len(r["ranks"]) == 2 and all(rank["steps"] > 0 for rank in r["ranks"])
    ]  # fmt: skip


def test_metrics_hold_every_ranks_report(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    steps = ["--set", "train.max_steps=1000000", "--set", "checkpoint.interval=0"]
    process = start(*TINY, *steps, "--run-dir", str(run_dir))
    try:
        wait_for(lambda: len(timed_reports(run_dir)) >= 2)
        viewer = RemoteEngine(run_dir)
        viewer.stop(checkpoint=False, reason="test over")
        assert viewer.run() == "stopped"
        assert process.wait(60) == 0, process.stdout.read() if process.stdout else ""
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    record = timed_reports(run_dir)[-1]
    report = Event.from_record(record)
    assert isinstance(report, RankReport) and report.step > 0
    assert [r.rank for r in report.ranks] == [0, 1] and [r.local_rank for r in report.ranks] == [0, 1]
    host = socket.gethostname()
    for rank in report.ranks:
        assert rank.host == host and rank.gpus == ()  # CPU ranks: no GPU reading
        assert 0 < rank.step_time_s < 5 and 0 <= rank.data_time_s < rank.step_time_s
        assert rank.process_rss and rank.process_rss > 10 << 20
        assert rank.memory_peak and rank.memory_peak > 0
        assert rank.cpu_percent is not None and rank.cpu_percent > 0  # a later report: measured
    assert math.isfinite(report.mean_step_time_s) and report.slowest is not None
    # rank 0 alone gathers into a report; rank 1 only hands its reading over
    assert rank_records(run_dir, 0, "ranks") and not rank_records(run_dir, 1, "ranks")
    steps = [r["step"] for r in records(run_dir / "metrics.jsonl", "ranks")]
    assert steps == sorted(steps)


def test_one_process_is_never_asked_for_a_report() -> None:
    sync = RankSync(World())
    assert sync.exchange([("pause", None)], report_due=True) == [("pause", None)]
    assert sync.report_due is False
