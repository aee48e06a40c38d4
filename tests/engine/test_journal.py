"""The intervention journal (engine/rundir/journal.py): one entry per intervention, who did it, rebuilt
from metrics.jsonl; and the viewer and command records a real run writes for it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from engine.control.client import RemoteEngine
from engine.rundir.journal import APP, ENGINE, JournalTail, journal, journal_records, read_journal

T = 1_764_512_345.0
ALICE = "alice@gpu1 (pts/3)"


def rec(kind: str, t: float, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "time": T + t, **fields}


def started(t: float = 0, **fields: Any) -> dict[str, Any]:
    return rec("run_started", t, **{"preset": "tiny", "start_step": 0, "resumed_from": None,
                                    **fields})  # fmt: skip


def lines(entries: list) -> list[tuple[int, str]]:
    return [(e.step, e.line) for e in entries]


def test_a_viewers_command_and_its_acknowledgement_are_one_entry() -> None:
    records = [
        started(),
        rec("viewer", 1, viewer=2, who=ALICE, read_only=False, attached=True, step=10),
        rec("step", 2, step=11, loss=2.0),
        rec("command", 3, name="scale_lr", args={"factor": 0.5}, viewer=2, who=ALICE, step=12),
        rec("lr_changed", 4, step=13, old_lr=3e-3, new_lr=1.5e-3, scale=0.5),
        rec("command", 5, name="pause", args={}, viewer=2, who=ALICE, step=13),
        rec("state", 6, state="paused", step=13, reason="paused by user"),
        rec("viewer", 7, viewer=2, who=ALICE, read_only=False, attached=False, step=13),
    ]
    assert lines(journal(records)) == [
        (0, f"{ENGINE}: started (preset tiny)"),
        (10, f"viewer 2 {ALICE}: attached"),
        (12, f"viewer 2 {ALICE}: LR x0.5 (3.0e-3 -> 1.5e-3)"),
        (13, f"viewer 2 {ALICE}: pause"),
        (13, f"viewer 2 {ALICE}: detached"),
    ]


def test_a_change_during_warmup_says_where_the_ramp_leads_and_a_no_op_is_not_journaled() -> None:
    records = [
        started(),
        rec("command", 1, name="set_lr", args={"lr": 1e-3}, viewer=2, who=ALICE, step=12),
        rec("lr_changed", 2, step=12, old_lr=1.9e-4, new_lr=6.2e-4, scale=3.33,
            after_warmup_lr=1e-3, warmup_ends=20),  # fmt: skip
        # the LR it already has: the engine's info note, and no entry (the 3.0e-4 -> 3.0e-4)
        rec("command", 3, name="set_lr", args={"lr": 1e-3}, viewer=2, who=ALICE, step=13),
        rec("alert", 4, level="info", message="LR unchanged: it is 0.001 already", step=13,
            code="lr"),  # fmt: skip
        rec("command", 5, name="pause", args={}, viewer=2, who=ALICE, step=14),
        rec("state", 6, state="paused", step=14, reason="paused by user"),
    ]
    assert lines(journal(records)) == [
        (0, f"{ENGINE}: started (preset tiny)"),
        (12, f"viewer 2 {ALICE}: LR 1.0e-3 (1.9e-4 -> 6.2e-4, 1.0e-3 from step 20)"),
        (14, f"viewer 2 {ALICE}: pause"),
    ]


def test_the_apps_own_commands_and_the_engines_doings_say_so() -> None:
    records = [
        started(),
        rec("state", 1, state="running", step=0, reason=""),
        rec("state", 2, state="paused", step=50, reason="paused by user"),
        rec("state", 3, state="running", step=50, reason="resumed by user"),
        rec("lr_changed", 4, step=60, old_lr=1e-3, new_lr=2e-3, scale=2.0),
        rec("state", 5, state="saving", step=70, reason="manual"),
        rec("checkpoint", 6, step=70, path="/r/ckpt-000070.pt", reason="manual"),
        rec("checkpoint", 7, step=100, path="/r/ckpt-000100.pt", reason="interval"),
        rec("alert", 8, level="info", message="peak corrected", step=100, code="peak"),
        # an anomaly the headless engine rolled back by itself: LR change, alert, running
        rec("alert", 9, level="warning", message="loss is NaN at step 120", step=120, code="nan"),
        rec("lr_changed", 10, step=100, old_lr=2e-3, new_lr=1e-3, scale=1.0),
        rec("alert", 11, level="info", message="rolled back to step 100", step=100, code="rollback"),
        rec("state", 12, state="running", step=100, reason="rolled back"),
        rec("state", 13, state="stopped", step=130, reason="switching preset"),
    ]
    assert lines(journal(records)) == [
        (0, f"{ENGINE}: started (preset tiny)"),
        (50, f"{APP}: pause"),
        (50, f"{APP}: resume"),
        (60, f"{APP}: LR (1.0e-3 -> 2.0e-3)"),
        (70, f"{APP}: checkpoint (ckpt-000070.pt)"),
        (120, f"{ENGINE}: warning nan (loss is NaN at step 120)"),
        (100, f"{ENGINE}: rollback (rolled back to step 100; 2.0e-3 -> 1.0e-3)"),
        (130, f"{APP}: preset switch (switching preset)"),
    ]


def test_a_viewers_rollback_refusal_and_a_resume_of_the_run() -> None:
    records = [
        started(),
        rec("command", 1, name="rollback", args={"lr_factor": 0.5}, viewer=1, who="", step=5),
        rec("alert", 2, level="warning", message="no checkpoint to roll back to yet", step=5,
            code="rollback"),  # fmt: skip
        rec("command", 3, name="set_lr", args={"lr": 20.0}, viewer=1, who="", step=6),
        rec("alert", 4, level="warning", message="20 is above the maximum LR 10", step=6, code="lr"),
        rec("command", 5, name="rollback", args={"lr_factor": 0.25}, viewer=1, who="", step=40),
        rec("lr_changed", 6, step=30, old_lr=1e-3, new_lr=2.5e-4, scale=0.25),
        rec("alert", 7, level="info", message="rolled back to step 30", step=30, code="rollback"),
        rec("state", 8, state="stopped", step=45, reason="SIGTERM"),
        started(9, start_step=45, resumed_from="/r/ckpt-000045.pt"),
    ]
    assert lines(journal(records)) == [
        (0, f"{ENGINE}: started (preset tiny)"),
        (5, "viewer 1: rollback, LR x0.5 (refused: no checkpoint to roll back to yet)"),
        (6, "viewer 1: LR 2.0e1 (refused: 20 is above the maximum LR 10)"),
        (40, "viewer 1: rollback, LR x0.25 (rolled back to step 30; 1.0e-3 -> 2.5e-4)"),
        (45, f"{APP}: stop (SIGTERM)"),
        (45, f"{APP}: resume (from ckpt-000045.pt)"),
    ]


def test_a_metrics_file_is_read_as_a_stream_skipping_what_does_not_matter(
    tmp_path: Path,
) -> None:
    metrics = tmp_path / "metrics.jsonl"
    body = [started(), *(rec("step", i, step=i, loss=2.0) for i in range(1, 2000))]
    body.append(rec("state", 2001, state="paused", step=1999, reason="paused by user"))
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in body)
    metrics.write_text(text + "{garbage\n" + '{"kind":"alert","time":1,"lev')  # cut by a crash
    raw = metrics.read_bytes().splitlines(keepends=True)
    kinds = [r["kind"] for r in journal_records(raw)]
    assert kinds == ["run_started", "state"]  # the steps were never parsed
    assert lines(read_journal(metrics))[-1] == (1999, f"{APP}: pause")


def test_a_tail_reads_whole_lines_as_they_are_written(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    tail = JournalTail(metrics)
    assert tail.poll() == 0 and tail.entries == []  # no file yet
    attach = json.dumps(rec("viewer", 1, viewer=1, who=ALICE, read_only=True, attached=True))
    metrics.write_text(json.dumps(started()) + "\n" + attach[:20])  # the second line half-written
    assert tail.poll() == 1 and len(tail.entries) == 1
    with metrics.open("a") as f:
        f.write(attach[20:] + "\n")
    assert tail.poll() == 1
    assert tail.entries[-1].line == f"viewer 1 {ALICE}: attached (read-only)"


def _wait(predicate: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} in {timeout_s}s"
        time.sleep(0.05)


def test_a_real_run_records_who_attached_and_what_they_did(live: Any) -> None:
    """A viewer over the socket halves the LR and pauses and resumes the run, then detaches;
    a second viewer's replay has those records, and metrics.jsonl's journal tells it all."""
    viewer = RemoteEngine(live.run_dir, who=ALICE)
    alice = f"viewer {viewer.viewer} {ALICE}"  # the probes that waited for the run came first
    try:
        viewer.scale_lr(0.5)
        live.wait_for_record("lr_changed")
        viewer.pause()
        live.wait_for_record("state", state="paused")
        viewer.resume()
        live.wait_for_record("state", state="running", reason="resumed by user")
    finally:
        viewer.close()
    live.wait_for_record("viewer", attached=False)
    second = RemoteEngine(live.run_dir, who="bob@laptop", read_only=True)
    bob = f"viewer {second.viewer} bob@laptop"
    try:
        _wait(lambda: second.live, "replay")
        replayed = [e.kind for e in second.drain_events()]
    finally:
        second.close()
    assert replayed.count("command") == 3 and replayed.count("viewer") >= 2
    live.wait_for_record("viewer", who="bob@laptop", attached=False)
    entries = read_journal(live.run_dir / "metrics.jsonl")
    mine = [e for e in entries if e.who.startswith("viewer")]
    assert [(e.who, e.what) for e in mine] == [
        (alice, "attached"),
        (alice, "LR x0.5"),
        (alice, "pause"),
        (alice, "resume"),
        (alice, "detached"),
        (bob, "attached"),
        (bob, "detached"),
    ]
    lr = mine[1].detail.split(", ")[0].split(" -> ")  # during warmup: ", X from step N" too
    old, new = (float(x) for x in lr)  # two significant digits each
    assert new == pytest.approx(old / 2, rel=0.1)
    assert mine[5].detail == "read-only"
