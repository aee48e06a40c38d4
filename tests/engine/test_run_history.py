"""engine/rundir/history.py and replay_reader.py: a run read back from its metrics.jsonl (curves,
a replay), against a plain json.loads reading of the same files, on run directories written here
the way the engine writes them (crashes, resumes, cut lines, NaN losses), on a real run, and on a
live one."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import warm_process
from live_process import LiveRun

from engine.events import (
    Alert,
    CheckpointSaved,
    DeviceReading,
    Eval,
    Event,
    LrChanged,
    MemoryBreakdown,
    RunStarted,
    Sample,
    StateChanged,
    Step,
    Telemetry,
)
from engine.rundir.history import read_curves
from engine.rundir.metrics_log import REPLAY_STEPS
from engine.rundir.metrics_scan import RunHistoryError, read_metrics, scan_replay_fast
from engine.rundir.replay_reader import Replay, read_replay

REPO = Path(__file__).resolve().parents[2]
TPS = 256  # tokens per step


class Clock:
    """Record times that always move forward."""

    def __init__(self) -> None:
        self.now = 1_790_000_000.0

    def __call__(self) -> float:
        self.now += 0.01
        return self.now


def line(event: Event) -> str:
    """One metrics.jsonl line, as the engine's MetricsWriter writes it."""
    record = event.to_record()
    record.pop("config", None)
    return json.dumps(record, separators=(",", ":"), default=str) + "\n"


def started(
    clock: Clock, start: int = 0, train_time_s: float = 0.0, max_steps: int = 1000
) -> RunStarted:
    return RunStarted(
        run_dir="x", preset="tiny", description="", config={"name": "tiny"}, device="cpu",
        dtype="float32", n_params=1, n_params_non_embedding=1, vocab_size=65, tokenizer="char",
        train_tokens=1, val_tokens=1, start_step=start, max_steps=max_steps, tokens_per_step=TPS,
        planned_lr=((0, 1e-3),), train_time_s=train_time_s, time=clock(),
    )  # fmt: skip


def step(clock: Clock, n: int, loss: float | None = None) -> Step:
    return Step(
        step=n, loss=3.0 + 1.0 / n if loss is None else loss, lr=1e-3, grad_norm=0.5,
        tokens_per_s=1e5, step_time_s=0.01 + (n % 7) * 1e-3, tokens=n * TPS, mfu=0.3,
        data_time_s=1e-4, update_ratio=math.nan if n % 3 else 1e-3, time=clock(),
    )  # fmt: skip


def session(clock: Clock, first: int, last: int, start: int = 0, train_time_s: float = 0.0,
            ending: str | None = "finished", nan_at: int = -1) -> list[str]:  # fmt: skip
    """One engine's lines: steps first..last, an eval (and a sample) every 50, a checkpoint
    every 100, then its final state (None: it crashed)."""
    lines = [line(StateChanged(state="starting", step=start, time=clock()))]
    lines.append(line(started(clock, start, train_time_s)))
    lines.append(line(StateChanged(state="running", step=start, time=clock())))
    elapsed = train_time_s
    for n in range(first, last + 1):
        s = step(clock, n, math.nan if n == nan_at else None)
        elapsed += s.step_time_s
        lines.append(line(s))
        if n % 50 == 0:
            val = math.nan if n == nan_at else 2.5 + 1.0 / n
            lines.append(
                line(Eval(step=n, train_loss=2.4, val_loss=val, train_time_s=elapsed, time=clock()))
            )
            lines.append(line(Sample(step=n, prompt="def ", text="x", time=clock())))
        if n % 100 == 0:
            path = f"ckpt-{n:08d}.pt"
            lines.append(line(CheckpointSaved(step=n, path=path, reason="interval", time=clock())))
    if ending is not None:
        lines.append(line(StateChanged(state=ending, step=last, time=clock())))
    return lines


def write(run_dir: Path, lines: list[str]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(lines))
    return run_dir


def crash_and_resume(tmp_path: Path) -> Path:
    """Steps 1..230, killed mid-line (the cut line glued to the next engine's first line);
    resumed from the checkpoint at 100: 101..260 trained again, with a NaN loss at 150."""
    clock = Clock()
    first = session(clock, 1, 230, ending=None)
    first[-1] = first[-1][: len(first[-1]) // 2]  # cut mid-write, no newline
    abandoned_time = 100 * 0.013
    second = session(clock, 101, 260, start=100, train_time_s=abandoned_time, nan_at=150)
    return write(tmp_path / "resumed", first + second)


# ------------------------------------------------------------------ the reference: json.loads


def reference_curves(run_dir: Path) -> dict[str, Any]:
    """read_history's semantics, spelled out plainly: every line parsed."""
    steps: dict[int, tuple[float, float, float]] = {}
    evals: dict[int, tuple[float, float]] = {}
    clock, newest_start = 0.0, None
    for text in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            r = json.loads(text)
        except ValueError:
            continue
        kind = r.get("kind")
        if kind == "run_started":
            newest_start = r
            s = r["start_step"]
            steps = {k: v for k, v in steps.items() if k <= s}
            evals = {k: v for k, v in evals.items() if k <= s}
            clock = r["train_time_s"]
        elif kind == "state" and r.get("reason") == "rolled back":  # back at a checkpoint
            s = r["step"]
            steps = {k: v for k, v in steps.items() if k <= s}
            evals = {k: v for k, v in evals.items() if k <= s}
            clock = r["train_time_s"]
        elif kind == "step":
            clock += r["step_time_s"]
            loss = math.nan if r["loss"] is None else r["loss"]
            steps[r["step"]] = (r["tokens"], clock, loss)
        elif kind == "eval":
            clock = r["train_time_s"]
            evals[r["step"]] = (
                r["train_time_s"],
                math.nan if r["val_loss"] is None else r["val_loss"],
            )
    assert newest_start is not None
    order, val_order = sorted(steps), sorted(evals)
    return {
        "step": order,
        "tokens": [steps[k][0] for k in order],
        "train_s": [steps[k][1] for k in order],
        "loss": [steps[k][2] for k in order],
        "val_step": val_order,
        "val_tokens": [k * newest_start["tokens_per_step"] for k in val_order],
        "val_train_s": [evals[k][0] for k in val_order],
        "val_loss": [evals[k][1] for k in val_order],
        "tokens_per_step": newest_start["tokens_per_step"],
        "max_steps": newest_start["max_steps"],
        "preset": newest_start["preset"],
    }


def assert_same_as_reference(run_dir: Path) -> None:
    curves, want = read_curves(run_dir), reference_curves(run_dir)
    for name in ("step", "tokens", "loss", "val_step", "val_tokens", "val_loss", "val_train_s"):
        np.testing.assert_array_equal(
            getattr(curves, name), np.array(want[name], float), err_msg=name
        )
    np.testing.assert_allclose(
        curves.train_s, want["train_s"], rtol=1e-12
    )  # summed in another order
    assert (curves.tokens_per_step, curves.max_steps, curves.preset) == (
        want["tokens_per_step"], want["max_steps"], want["preset"],
    )  # fmt: skip
    assert curves.name == run_dir.name
    assert curves.step.dtype == np.int64 and curves.val_step.dtype == np.int64


# ------------------------------------------------------------------ read_curves


def test_a_plain_run_reads_as_the_reference_does(tmp_path: Path) -> None:
    run = write(tmp_path / "plain", session(Clock(), 1, 300))
    assert_same_as_reference(run)
    curves = read_curves(run)
    assert curves.step.tolist() == list(range(1, 301)) and len(curves.val_step) == 6


def test_a_crash_and_a_resume_from_an_older_checkpoint_drop_the_abandoned_branch(
    tmp_path: Path,
) -> None:
    run = crash_and_resume(tmp_path)
    assert_same_as_reference(run)
    curves = read_curves(run)
    assert curves.step.tolist() == list(
        range(1, 261)
    )  # 1..100 from the first engine, the rest again
    assert curves.val_step.tolist() == [50, 100, 150, 200, 250]
    assert math.isnan(curves.loss[149]) and math.isnan(
        curves.val_loss[2]
    )  # step 150: NaN, read back
    # training time restarts from the resume's train_time_s at step 100, not the abandoned 230
    assert curves.train_s[100] == pytest.approx(100 * 0.013 + step(Clock(), 101).step_time_s)


def test_a_step_line_in_another_layout_is_parsed_whole_and_a_last_line_without_newline_counts(
    tmp_path: Path,
) -> None:
    clock = Clock()
    lines = session(clock, 1, 120, ending=None)
    old = json.loads(lines[10])
    del old["mfu"], old["update_ratio"]  # an older engine's step record
    lines[10] = json.dumps(old, separators=(",", ":")) + "\n"
    spaced = json.loads(lines[20])
    lines[20] = json.dumps(spaced) + "\n"  # spaces: another writer
    lines[30] = lines[30].replace('"loss":', '"loss":x', 1)  # not JSON: skipped, as json.loads does
    lines[40] = lines[40].replace(
        '"update_ratio":null', '"update_ratio":NaN'
    )  # an older, lax writer
    lines[41] = lines[41].replace('"update_ratio":null', '"update_ratio":NaN')
    lines.append(line(step(clock, 121)).rstrip("\n"))  # whole, but the newline never written
    run = write(tmp_path / "odd", lines)
    assert_same_as_reference(run)
    assert (
        28 not in read_curves(run).step.tolist() and read_curves(run).step[-1] == 121
    )  # line 30: step 28


def test_a_rollback_retrains_steps_and_the_later_records_win(tmp_path: Path) -> None:
    clock = Clock()
    lines = session(clock, 1, 140, ending=None)
    lines += [
        line(step(clock, n, loss=1.0)) for n in range(101, 151)
    ]  # same engine, no run_started
    lines.append(line(StateChanged(state="finished", step=150, time=clock())))
    run = write(tmp_path / "rolled", lines)
    assert_same_as_reference(run)
    assert read_curves(run).loss[100:].tolist() == [1.0] * 50


def test_a_rollback_drops_the_branch_it_discarded(tmp_path: Path) -> None:
    """Trained to 140 (evals at 50 and 100), rolled back to the checkpoint of step 60 and trained
    on to 80: the steps 81..140 and the eval at 100 were another branch's."""
    clock = Clock()
    lines = session(clock, 1, 140, ending=None)
    at_60 = sum(step(Clock(), n).step_time_s for n in range(1, 61))
    lines.append(
        line(
            StateChanged(
                state="running", step=60, reason="rolled back", train_time_s=at_60, time=clock()
            )
        )
    )
    lines += [line(step(clock, n, loss=1.0)) for n in range(61, 81)]
    lines.append(line(StateChanged(state="finished", step=80, time=clock())))
    run = write(tmp_path / "rolled-back", lines)
    assert_same_as_reference(run)
    curves = read_curves(run)
    assert curves.step.tolist() == list(range(1, 81)) and curves.val_step.tolist() == [50]
    replayed = [e for e in read_replay(run).events if isinstance(e, (Step, Eval))]
    assert max(e.step for e in replayed) == 80 and [
        e.step for e in replayed if isinstance(e, Eval)
    ] == [50]


def test_what_is_not_a_run_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RunHistoryError, match=r"nothing: no metrics.jsonl: not a run directory$"):
        read_curves(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    with pytest.raises(RunHistoryError, match="metrics.jsonl is empty: the run recorded nothing"):
        read_replay(tmp_path / "empty")
    write(tmp_path / "unstarted", [line(StateChanged(state="starting", step=0, time=1.0))])
    with pytest.raises(
        RunHistoryError, match="has no run_started record: the run never started training"
    ):
        read_curves(tmp_path / "unstarted")


# ------------------------------------------------------------------ read_replay


def test_a_replay_holds_every_panel_and_all_of_it_is_older_than_its_run_started(
    tmp_path: Path,
) -> None:
    clock = Clock()
    lines = session(clock, 1, 3000, ending=None)
    lines.insert(3, line(MemoryBreakdown(step=0, device="cpu", capacity=9, weights=1, gradients=1,
                                          optimizer=2, activations=3, activations_measured=False,
                                          cache=0, other=1, time=clock())))  # fmt: skip
    lines.append(line(LrChanged(step=3000, old_lr=1e-3, new_lr=5e-4, scale=0.5, time=clock())))
    lines.append(
        line(
            Alert(level="warning", message="rolled back", step=3000, code="rollback", time=clock())
        )
    )
    for _ in range(200):
        gpu = DeviceReading(index=0, name="cpu", util_percent=math.nan)
        lines.append(line(Telemetry(source="psutil", gpus=(gpu,), cpu_percent=50.0, time=clock())))
    lines.append(
        line(StateChanged(state="stopped", step=3000, reason="stopped by user", time=clock()))
    )
    replay = read_replay(write(tmp_path / "full", lines), max_steps=100)

    first, rest = replay.events[0], replay.events[1:]
    assert isinstance(first, RunStarted) and first.config == {}  # no config.json here
    assert all(e.time < first.time for e in rest) and first.time == pytest.approx(clock.now + 0.001)
    kinds = [e.kind for e in rest]
    assert kinds.count("step") <= 101 and rest[kinds.index("eval") - 1].kind == "step"
    steps = [e.step for e in rest if isinstance(e, Step)]
    assert steps[-1] == 3000 and steps == sorted(steps)
    assert (
        kinds.count("eval") == 60
        and kinds.count("sample") == 60
        and kinds.count("checkpoint") == 30
    )
    assert (
        kinds.count("lr_changed") == 1 and kinds.count("alert") == 1 and kinds.count("memory") == 1
    )
    assert kinds.count("telemetry") == 120 and kinds[-1] == "state"
    assert (replay.final_state, replay.reason) == ("stopped", "stopped by user")
    assert rest[-1] == StateChanged(
        state="stopped", step=3000, reason="stopped by user", time=clock.now
    )


def test_a_run_with_no_final_state_ends_crashed_at_its_last_step(tmp_path: Path) -> None:
    run = crash_and_resume(tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    write(run, lines[:-1])  # no final state: the second engine vanished too
    replay = read_replay(run)
    assert replay.final_state == "failed"
    assert replay.reason == (
        "crashed: the run's process vanished without a final state at step 260 (killed, or out of memory?)"
    )
    final = replay.events[-1]
    assert isinstance(final, StateChanged) and final.state == "failed" and final.step == 260
    assert replay.events[0].start_step == 100  # type: ignore[attr-defined]  # the newest start
    assert [e.step for e in replay.events if e.kind == "eval"] == [50, 100, 150, 200, 250]  # type: ignore[attr-defined]
    nan_step = next(e for e in replay.events if isinstance(e, Step) and e.step == 150)
    assert math.isnan(nan_step.loss)


# ------------------------------------------------------------------ read_replay's fast way


def same_replay(a: Replay, b: Replay) -> bool:
    """Same events in the same order (repr: a NaN equals a NaN) and the same ending."""
    return [repr(e) for e in a.events] == [repr(e) for e in b.events] and (
        a.final_state, a.reason, a.newest_time) == (b.final_state, b.reason, b.newest_time)  # fmt: skip


def assert_fast_read_as_the_general_one(
    run_dir: Path, fast: bool, max_steps: int = REPLAY_STEPS
) -> Replay:
    """The fast way is taken (or refused) as `fast` says, and either way the replay is the
    general scan's, event for event."""
    taken = scan_replay_fast(read_metrics(run_dir), max_steps) is not None
    assert taken == fast, f"the fast way was {'taken' if taken else 'refused'}"
    replay = read_replay(run_dir, max_steps)
    assert same_replay(replay, read_replay(run_dir, max_steps, fast=False))
    return replay


@pytest.mark.parametrize("max_steps", [REPLAY_STEPS, 7, 1])
def test_a_plain_run_replays_the_fast_way_as_the_general_way_does(
    tmp_path: Path, max_steps: int
) -> None:
    run = write(tmp_path / "plain", session(Clock(), 1, 300, nan_at=150))
    replay = assert_fast_read_as_the_general_one(run, fast=True, max_steps=max_steps)
    steps = [e.step for e in replay.events if isinstance(e, Step)]
    assert steps[-1] == 300 and len(steps) <= max_steps + 1 and replay.final_state == "finished"
    if max_steps >= 300:
        assert steps == list(range(1, 301))
        assert math.isnan(
            next(e.loss for e in replay.events if isinstance(e, Step) and e.step == 150)
        )


def test_a_killed_run_whose_last_line_is_cut_replays_the_fast_way(tmp_path: Path) -> None:
    lines = session(Clock(), 1, 230, ending=None)
    lines[-1] = lines[-1][: len(lines[-1]) // 2]  # step 230, cut mid-write: no newline
    replay = assert_fast_read_as_the_general_one(write(tmp_path / "killed", lines), fast=True)
    assert replay.final_state == "failed" and "at step 229 " in replay.reason


def test_a_resume_from_the_last_step_replays_the_fast_way(tmp_path: Path) -> None:
    clock = Clock()
    run = write(
        tmp_path / "continued",
        session(clock, 1, 200, ending="stopped") + session(clock, 201, 300, start=200),
    )
    replay = assert_fast_read_as_the_general_one(run, fast=True, max_steps=50)
    assert replay.events[0].start_step == 200  # type: ignore[attr-defined]


def test_readings_and_a_memory_breakdown_replay_the_fast_way(tmp_path: Path) -> None:
    clock = Clock()
    lines = session(clock, 1, 400, ending=None)
    lines.insert(3, line(MemoryBreakdown(step=0, device="cpu", capacity=9, weights=1, gradients=1,
                                          optimizer=2, activations=3, activations_measured=False,
                                          cache=0, other=1, time=clock())))  # fmt: skip
    lines.append(
        line(Alert(level="warning", message="loss spike", step=400, code="spike", time=clock()))
    )
    for _ in range(150):
        gpu = DeviceReading(index=0, name="cpu", util_percent=math.nan)
        lines.append(line(Telemetry(source="psutil", gpus=(gpu,), cpu_percent=50.0, time=clock())))
    lines.append(
        line(StateChanged(state="stopped", step=400, reason="stopped by user", time=clock()))
    )
    replay = assert_fast_read_as_the_general_one(
        write(tmp_path / "readings", lines), fast=True, max_steps=30
    )
    kinds = [e.kind for e in replay.events]
    assert (
        kinds.count("telemetry") == 120 and kinds.count("memory") == 1 and kinds.count("alert") == 1
    )


def test_a_bad_step_line_replays_the_fast_way_only_when_it_is_thinned_out(tmp_path: Path) -> None:
    lines = session(Clock(), 1, 300)
    at = next(
        i
        for i, text in enumerate(lines)
        if text.startswith('{"kind":"step","time":') and '"step":28,' in text
    )
    lines[at] = lines[at].replace(
        '"loss":', '"loss":x', 1
    )  # the scan counts it as step 28; JSON refuses it
    run = write(tmp_path / "bad", lines)
    assert_fast_read_as_the_general_one(run, fast=True, max_steps=10)  # kept: steps 1, 31, 61...
    assert_fast_read_as_the_general_one(run, fast=False)  # kept: parsing it fails, the general way


def make_retrained(tmp_path: Path) -> Path:
    clock = Clock()
    lines = session(clock, 1, 140, ending=None)
    lines += [line(step(clock, n, loss=1.0)) for n in range(101, 151)]  # no run_started, no alert
    lines.append(line(StateChanged(state="finished", step=150, time=clock())))
    return write(tmp_path / "retrained", lines)


def make_gap(tmp_path: Path) -> Path:
    lines = [
        text
        for text in session(Clock(), 1, 300)
        if '"kind":"step"' not in text or '"step":77,' not in text
    ]
    return write(tmp_path / "gap", lines)


def make_whole_last_line(tmp_path: Path) -> Path:
    lines = session(Clock(), 1, 120, ending=None)
    lines[-1] = lines[-1].rstrip("\n")  # a whole step line, its newline never written: parsed whole
    return write(tmp_path / "whole", lines)


def make_rollback_alert(tmp_path: Path) -> Path:
    clock = Clock()
    lines = session(clock, 1, 200, ending=None)
    lines.append(
        line(
            Alert(
                level="info",
                message="rolled back to step 200",
                step=200,
                code="rollback",
                time=clock(),
            )
        )
    )
    lines += [line(step(clock, n)) for n in range(201, 260)] + [
        line(StateChanged(state="finished", step=259, time=clock()))
    ]
    return write(tmp_path / "rollback", lines)


def make_odd_layouts(tmp_path: Path) -> Path:
    lines = session(Clock(), 1, 120)
    lines[20] = json.dumps(json.loads(lines[20])) + "\n"  # spaces: another writer's step line
    return write(tmp_path / "odd", lines)


@pytest.mark.parametrize(
    "make",
    [
        crash_and_resume,
        make_retrained,
        make_gap,
        make_whole_last_line,
        make_rollback_alert,
        make_odd_layouts,
    ],
)
@pytest.mark.parametrize("max_steps", [REPLAY_STEPS, 9])
def test_what_the_fast_way_cannot_show_is_read_the_general_way(
    tmp_path: Path, make: Any, max_steps: int
) -> None:
    """A resume from an older step, steps retrained, a step missing, a last line without its
    newline, a rollback, a step line in another layout: the fast way refuses, the replay is
    the general scan's."""
    assert_fast_read_as_the_general_one(make(tmp_path), fast=False, max_steps=max_steps)


# ------------------------------------------------------------------ real runs


def test_a_real_run_reads_back_as_its_metrics_say(tmp_path: Path) -> None:
    run = tmp_path / "real"
    argv = [sys.executable, "-m", "cockpit", "train", "--headless", "--preset", "tiny", "--run-dir",
            str(run), "--set", "train.max_steps=200", "--no-telemetry"]  # fmt: skip
    # a real process, forked warm (torch imported): what it writes is the point, not its start
    done = warm_process.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(text) for text in (run / "metrics.jsonl").read_text().splitlines()]
    last_step = [r for r in records if r["kind"] == "step"][-1]
    vals = [r["val_loss"] for r in records if r["kind"] == "eval"]
    curves = read_curves(run)
    assert curves.step[-1] == 200 and curves.loss[-1] == last_step["loss"]
    assert curves.val_loss.tolist() == vals and curves.preset == "tiny" and curves.max_steps == 200
    assert_same_as_reference(run)
    replay = read_replay(run)
    assert replay.final_state == "finished"
    assert replay.events[0].config["name"] == "tiny"  # type: ignore[attr-defined]  # config.json's
    assert_fast_read_as_the_general_one(run, fast=True)


def test_a_live_run_is_refused_and_a_killed_one_reads_as_crashed(tmp_path: Path) -> None:
    live = LiveRun(tmp_path / "live")
    try:
        live.start()
        with pytest.raises(RunHistoryError) as refused:
            read_replay(live.run_dir)
        assert (
            str(refused.value)
            == f"{live.run_dir} is live: attach to it (cockpit attach {live.run_dir})"
        )
        live.wait_for_record("eval")  # some steps on disk (the writer flushes on an eval)
        live.kill()  # no final state: the process vanished
        replay = read_replay(live.run_dir)
        assert replay.final_state == "failed" and replay.reason.startswith(
            "crashed: the run's process vanished"
        )
        last = live.step()
        assert (
            last > 0
            and f"at step {last} " in replay.reason
            and read_curves(live.run_dir).step[-1] == last
        )
    finally:
        live.close()
