"""RUN_DIR/summary.json (engine/rundir/summary.py): written by a real run's sink, rebuilt equal after
deletion, folded in from its offset only, tolerant of a line cut mid-write, and right about a
resume from an older checkpoint or a rollback to one."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from run_copies import train_here

from engine.events import Eval, StateChanged, Step
from engine.rundir.summary import (
    SUMMARY_NAME,
    SummarySink,
    fold_metrics,
    read_summary,
    size_on_disk,
)
from engine.rundir.summary_facts import RunSummary

STEPS = 60


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_lines(path: Path, lines: list[dict[str, Any]], tail: str = "") -> None:
    with path.open("a") as f:
        f.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in lines)
        f.write(tail)


def step(n: int, t: float = 1000.0, step_time: float = 0.5) -> dict[str, Any]:
    return {"kind": "step", "time": t + n, "step": n, "loss": 3.0, "lr": 1e-3, "grad_norm": 1.0,
            "tokens_per_s": 100.0, "step_time_s": step_time, "tokens": 64 * n, "mfu": 0.1,
            "data_time_s": 0.0, "update_ratio": None}  # fmt: skip


def started(start_step: int = 0, resumed_from: str | None = None, train_time_s: float = 0.0) -> dict[str, Any]:
    return {"kind": "run_started", "time": 999.0 + start_step, "preset": "tiny", "start_step": start_step,
            "max_steps": 1000, "tokens_per_step": 64, "resumed_from": resumed_from,
            "train_time_s": train_time_s}  # fmt: skip


def evaluation(n: int, val: float | None, train_time_s: float) -> dict[str, Any]:
    return {"kind": "eval", "time": 1000.5 + n, "step": n, "train_loss": 3.0, "val_loss": val,
            "train_time_s": train_time_s, "full_split": False}  # fmt: skip


def saved(n: int, run_dir: Path, reason: str = "interval") -> dict[str, Any]:
    return {"kind": "checkpoint", "time": 1000.7 + n, "step": n,
            "path": str(run_dir / f"ckpt-{n:08d}.pt"), "reason": reason}  # fmt: skip


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    """A real tiny headless run to its end: evals every 20 steps, a checkpoint every 30."""
    run_dir = tmp_path_factory.mktemp("summary") / "tiny-run"
    sets = [f"train.max_steps={STEPS}", "eval.interval=20", "checkpoint.interval=30"]
    return train_here(run_dir, sets, isolated_env)


def test_the_sink_of_a_real_run_wrote_its_facts(finished_run: Path) -> None:
    written = json.loads((finished_run / SUMMARY_NAME).read_text())
    metrics = records(finished_run / "metrics.jsonl")
    evals = [r for r in metrics if r["kind"] == "eval"]
    steps = [r for r in metrics if r["kind"] == "step"]
    best = min(evals, key=lambda r: r["val_loss"])
    assert written["preset"] == "tiny" and written["last_state"] == "finished"
    assert written["step"] == written["max_steps"] == STEPS
    assert written["tokens"] == max(r["tokens"] for r in steps)
    assert written["best_val"] == {"value": best["val_loss"], "step": best["step"]}
    assert written["last_val"] == {"value": evals[-1]["val_loss"], "step": STEPS}
    assert written["train_time_s"] == pytest.approx(evals[-1]["train_time_s"])
    assert written["last_checkpoint"] == {"path": str(finished_run / f"ckpt-{STEPS:08d}.pt"), "step": STEPS}
    assert written["parent"] is None and written["world_size"] == 1
    assert written["started"] == metrics[0]["time"]
    # it summarised no more than is on disk (the reader folds in the rest)
    assert 0 < written["offset"] <= (finished_run / "metrics.jsonl").stat().st_size


def test_the_summary_rebuilt_after_deletion_equals_the_one_the_sink_wrote(finished_run: Path) -> None:
    written = json.loads((finished_run / SUMMARY_NAME).read_text())
    (finished_run / SUMMARY_NAME).unlink()
    rebuilt = read_summary(finished_run).to_json()
    assert rebuilt["offset"] == (finished_run / "metrics.jsonl").stat().st_size
    assert {**rebuilt, "offset": 0} == {**written, "offset": 0}
    assert json.loads((finished_run / SUMMARY_NAME).read_text()) == rebuilt  # written back


def test_a_summary_is_folded_in_from_its_offset_not_reread(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    write_lines(metrics, [started(), step(1), evaluation(1, 2.0, 0.5), step(2)])
    first = read_summary(tmp_path)
    assert first.facts["offset"] == metrics.stat().st_size and first.facts["step"] == 2
    # Rewrite a line already summarised, same length: a reader that went back would see it.
    text = metrics.read_text().replace('"val_loss":2.0', '"val_loss":0.1')
    metrics.write_text(text)
    write_lines(metrics, [step(3), evaluation(3, 1.5, 1.5)])
    second = read_summary(tmp_path)
    assert second.best_val == {"value": 1.5, "step": 3}  # not 0.1: the old lines were not read
    assert second.facts["step"] == 3 and second.facts["offset"] == metrics.stat().st_size


def test_a_last_line_cut_mid_write_waits_for_its_end(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    cut = json.dumps(step(3))[:40]
    write_lines(metrics, [started(), step(1), step(2)], tail=cut)
    summary = read_summary(tmp_path)
    assert summary.facts["step"] == 2 and summary.facts["tokens"] == 128
    assert summary.facts["offset"] == metrics.stat().st_size - len(cut)
    with metrics.open("a") as f:  # the writer finishes the line, and goes on
        f.write(json.dumps(step(3), separators=(",", ":"))[40:] + "\n")
    write_lines(metrics, [step(4)])
    summary = read_summary(tmp_path)
    assert summary.facts["step"] == 4 and summary.facts["offset"] == metrics.stat().st_size


def test_a_cut_line_glued_to_a_resumed_writers_first_line_is_skipped(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    write_lines(metrics, [started(), step(1), step(2)], tail=json.dumps(step(3))[:30])
    write_lines(metrics, [started(2, "ckpt-2.pt"), step(3), step(4)])  # the crash, then a resume
    summary = read_summary(tmp_path)
    assert summary.facts["step"] == 4 and summary.facts["offset"] == metrics.stat().st_size


def test_a_resume_from_an_older_checkpoint_drops_the_abandoned_branch(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    write_lines(metrics, [
        started(), step(10), evaluation(10, 2.0, 5.0), saved(10, tmp_path),
        step(20), evaluation(20, 1.0, 10.0), saved(20, tmp_path),
        started(10, str(tmp_path / "ckpt-00000010.pt"), train_time_s=5.0), step(12, step_time=1.0),
    ])  # fmt: skip
    summary = read_summary(tmp_path)
    assert summary.best_val == {"value": 2.0, "step": 10}  # 1.0 at step 20 is another branch's
    assert summary.facts["last_val"] is None
    assert summary.facts["last_checkpoint"] == {"path": str(tmp_path / "ckpt-00000010.pt"), "step": 10}
    assert summary.facts["step"] == 12 and summary.facts["tokens"] == 64 * 12
    assert summary.train_time_s == pytest.approx(5.0 + 2 * 1.0)  # 2 steps of 1 s since the resume
    assert summary.facts["started"] == 999.0  # the run's first start, not the resume's



def rolled_back(n: int, train_time_s: float) -> dict[str, Any]:
    """The state record a rollback to the checkpoint of step `n` writes (the fault handler's)."""
    return {"kind": "state", "time": 1100.0 + n, "state": "running", "step": n,
            "reason": "rolled back", "train_time_s": train_time_s}  # fmt: skip


def test_a_rollback_drops_the_abandoned_branch_from_the_figures(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    write_lines(metrics, [
        started(), step(10), evaluation(10, 2.0, 5.0), saved(10, tmp_path),
        step(20), evaluation(20, 1.0, 10.0), rolled_back(10, 5.0), step(12, step_time=1.0),
    ])  # fmt: skip
    summary = read_summary(tmp_path)
    assert summary.best_val == {"value": 2.0, "step": 10}  # 1.0 at step 20 was discarded
    assert summary.facts["last_val"] is None
    assert summary.facts["step"] == 12 and summary.facts["tokens"] == 64 * 12
    assert summary.train_time_s == pytest.approx(5.0 + 2 * 1.0)
    # A summary.json written before rollbacks were folded in holds the discarded branch's best:
    # it is rebuilt from the records, not trusted.
    old = {**summary.to_json(), "version": 1, "best_vals": [[10, 2.0], [20, 1.0]]}
    (tmp_path / SUMMARY_NAME).write_text(json.dumps(old))
    assert read_summary(tmp_path).best_val == {"value": 2.0, "step": 10}


def test_the_sink_of_a_run_that_rolled_back_writes_the_branch_it_is_on(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text("")
    sink = SummarySink(tmp_path)
    for n in (10, 20):
        sink(Step(step=n, loss=3.0, lr=1e-3, grad_norm=1.0, tokens_per_s=1.0, step_time_s=0.5,
                  tokens=64 * n))  # fmt: skip
        sink(Eval(step=n, train_loss=3.0, val_loss=3.0 - n / 10, train_time_s=n * 0.5))
    sink(StateChanged(state="running", step=10, reason="rolled back", train_time_s=5.0))
    sink(Step(step=11, loss=3.0, lr=5e-4, grad_norm=1.0, tokens_per_s=1.0, step_time_s=0.5,
              tokens=64 * 11))  # fmt: skip
    sink.close()
    on_disk = json.loads((tmp_path / SUMMARY_NAME).read_text())
    assert on_disk["best_val"] == {"value": 2.0, "step": 10}
    assert on_disk["step"] == 11 and on_disk["tokens"] == 64 * 11
    assert on_disk["train_time_s"] == pytest.approx(5.5)

def test_a_nan_val_loss_and_the_best_checkpoint_change_nothing_they_should_not(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    write_lines(metrics, [
        started(), step(10), evaluation(10, 2.0, 5.0), saved(10, tmp_path),
        step(20), evaluation(20, None, 10.0), saved(10, tmp_path, reason="best"),
    ])  # fmt: skip
    summary = read_summary(tmp_path)
    assert summary.best_val == {"value": 2.0, "step": 10}
    assert summary.facts["last_val"] == {"value": 2.0, "step": 10}
    assert summary.facts["last_checkpoint"]["path"].endswith("ckpt-00000010.pt")


@pytest.mark.serial  # a wall-clock bound: not beside another test
def test_the_sink_writes_when_due_not_every_step(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text("")
    sink = SummarySink(tmp_path)
    sink(Step(step=1, loss=3.0, lr=1e-3, grad_norm=1.0, tokens_per_s=1.0, step_time_s=0.1, tokens=64))
    assert json.loads((tmp_path / SUMMARY_NAME).read_text())["step"] == 1  # the first: due at once
    t0 = time.monotonic()
    for n in range(2, 20_000):
        sink(Step(step=n, loss=3.0, lr=1e-3, grad_norm=1.0, tokens_per_s=1.0, step_time_s=0.1,
                  tokens=64 * n))  # fmt: skip
    per_step = (time.monotonic() - t0) / 20_000
    if time.monotonic() - t0 < SummarySink.INTERVAL_S:
        assert json.loads((tmp_path / SUMMARY_NAME).read_text())["step"] == 1  # not yet due
    assert per_step < 50e-6, f"{per_step * 1e6:.1f} us a step"
    sink(Eval(step=19_999, train_loss=2.0, val_loss=math.nan, train_time_s=9.0))
    sink.close()
    on_disk = json.loads((tmp_path / SUMMARY_NAME).read_text())
    assert on_disk["step"] == 19_999 and on_disk["best_val"] is None
    assert on_disk["train_time_s"] == pytest.approx(9.0)


def test_size_on_disk_counts_a_hard_link_once(finished_run: Path) -> None:
    best = finished_run / "best.pt"
    assert best.exists() and best.stat().st_nlink == 2
    every = sum(p.stat().st_blocks * 512 for p in finished_run.rglob("*") if p.is_file())
    assert size_on_disk(finished_run) == every - best.stat().st_blocks * 512


def test_an_unusable_summary_file_is_rebuilt(tmp_path: Path) -> None:
    write_lines(tmp_path / "metrics.jsonl", [started(), step(5)])
    (tmp_path / SUMMARY_NAME).write_text('{"version": 99}')
    assert read_summary(tmp_path).facts["step"] == 5
    assert isinstance(RunSummary().to_json()["train_time_s"], float)
    assert fold_metrics(RunSummary({**RunSummary().facts}), tmp_path / "metrics.jsonl")
