"""Data parallel training under torchrun (2 ranks, gloo, this CPU): the same gradients as one
process on the whole batch, the same weights on every rank, every command applied at the same
step on every rank, signals and a lost rank handled, and an exact resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import torch
from launch import (
    TINY,
    assert_gradients_match_one_process,
    checked,
    rank_records,
    records,
    run,
    single,
    start,
    wait_for,
    weights,
)

from engine.control.client import RemoteEngine


def test_gradients_at_step_1_equal_one_process_on_the_whole_batch(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    checked(run(*TINY, "--set", "train.max_steps=2", "--run-dir", str(run_dir), GRAD_CHECK="1"))
    assert_gradients_match_one_process(run_dir)


def test_a_step_of_one_micro_batch_is_split_over_the_ranks_with_a_note(tmp_path: Path) -> None:
    # grad_accum=1 (nanogpt-cpu's) at world 2: each rank takes half the micro-batch (was refused)
    run_dir = tmp_path / "run"
    result = run(*TINY, "--set", "train.grad_accum=1", "--set", "train.max_steps=2",
                 "--run-dir", str(run_dir), GRAD_CHECK="1")  # fmt: skip
    checked(result)
    assert "note: train.grad_accum=1 cannot be shared by 2 ranks: each rank takes" in result.stdout
    for rank in (0, 1):
        (x, _), = torch.load(run_dir / f"grads-{rank}.pt", weights_only=True)["batches"]
        assert x.shape[0] == 2  # 2 of the step's 4 sequences
    assert_gradients_match_one_process(run_dir)  # the same step as one process on all 4
    notes = records(run_dir / "metrics.jsonl", "run_started")[-1]["notes"]
    assert any("each rank takes 1 micro-batch of 2 sequences instead of 1 of 4" in n for n in notes), notes


STEPS = 40


@pytest.fixture(scope="module")
def world_2_run(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    """A run of 40 steps at world 2, saved at 20 and 40: launched once for the tests that read
    it (the exact resume takes up a copy of it)."""
    run_dir = tmp_path_factory.mktemp("ddp") / "two"
    checked(run(*TINY, "--set", f"train.max_steps={STEPS}", "--set", f"checkpoint.interval={STEPS // 2}",
                "--run-dir", str(run_dir), **isolated_env))  # fmt: skip
    return run_dir


def test_every_rank_ends_with_the_same_weights_and_the_loss_of_one_process(
    world_2_run: Path, tmp_path: Path
) -> None:
    steps = ["--set", f"train.max_steps={STEPS}"]
    first, second = weights(world_2_run, 0), weights(world_2_run, 1)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)  # bit-identical replicas
    checked(single(*TINY, *steps, "--run-dir", str(tmp_path / "one")))
    # the same global batch (2 micro-batches of 4), different draws: the same loss, within noise
    losses = {
        name: [r["loss"] for r in records(run_dir / "metrics.jsonl", "step")][-10:]
        for name, run_dir in (("one", tmp_path / "one"), ("two", world_2_run))
    }
    mean = {name: sum(v) / len(v) for name, v in losses.items()}
    assert abs(mean["two"] - mean["one"]) < 0.05 * mean["one"], mean
    tokens = records(world_2_run / "metrics.jsonl", "step")[-1]["tokens"]
    assert tokens == 40 * 2 * 4 * 32  # tokens_per_step unchanged by the world size


def test_commands_through_the_socket_apply_at_the_same_step_on_every_rank(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    process = start(*TINY, "--set", "train.max_steps=1000000", "--run-dir", str(run_dir), GROUPS_CHECK="1")
    try:
        wait_for(lambda: (run_dir / "control.sock").exists() and rank_records(run_dir, 1, "step"))
        viewer = RemoteEngine(run_dir)
        # a payload; grad_accum 2 -> 4: each rank 2 micro-batches a step instead of 1
        viewer.set_settings({"optim.weight_decay": 0.0, "eval.interval": 1000, "train.grad_accum": 4})
        viewer.scale_lr(0.5)
        viewer.checkpoint()
        viewer.pause()
        # each rank writes its own records: both, once each has paused
        wait_for(
            lambda: all(
                any(r["state"] == "paused" for r in rank_records(run_dir, k, "state"))
                for k in (0, 1)
            )
        )
        for kind, match in (
            ("settings_changed", lambda r: r["changes"]["optim.weight_decay"] == [0.1, 0.0]),
            ("lr_changed", lambda r: r["scale"] == 0.5),
            ("checkpoint", lambda r: r["reason"] == "manual"),
            ("state", lambda r: r["state"] == "paused"),
        ):
            at = [[r["step"] for r in rank_records(run_dir, rank, kind) if match(r)] for rank in (0, 1)]
            assert at[0] and at[0] == at[1], (kind, at)  # the same step on both ranks
        paused_at = [r["step"] for r in rank_records(run_dir, 0, "state") if r["state"] == "paused"][-1]
        steps_before = len(rank_records(run_dir, 1, "step"))
        time.sleep(1.0)  # paused: no rank steps, and nobody trips a timeout
        assert len(rank_records(run_dir, 1, "step")) == steps_before
        viewer.resume()
        wait_for(lambda: rank_records(run_dir, 1, "step")[-1]["step"] > paused_at + 5)
        viewer.stop(checkpoint=True, reason="test over")
        assert viewer.run() == "stopped"
        assert process.wait(60) == 0
        ends = [[r["step"] for r in rank_records(run_dir, k, "state") if r["state"] == "stopped"] for k in (0, 1)]
        assert ends[0] == ends[1] and len(ends[0]) == 1
        # each rank's optimizer took the set's weight decay at the step after its boundary
        (changed,) = rank_records(run_dir, 1, "settings_changed")
        assert changed["by"].startswith("viewer ") and changed["changes"]["eval.interval"] == [0, 1000]
        decays = [json.loads((run_dir / f"groups-{rank}.json").read_text()) for rank in (0, 1)]
        assert decays[0] == decays[1], decays
        (first, before), (then, after) = decays[0]  # each group's decay at 0 and after the set
        assert (first, then) == (0, changed["step"]) and 0.1 in before, decays
        assert set(after) == {0.0}, decays
        tokens = {r["step"]: r["tokens"] for r in rank_records(run_dir, 0, "step")}
        at = changed["step"]  # the step after it trains on twice the tokens, over both ranks
        assert tokens[at + 1] - tokens[at] == 2 * (tokens[at] - tokens[at - 1]) == 4 * 4 * 32
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_sigterm_to_one_rank_stops_every_rank_at_the_same_step_with_a_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    process = start(*TINY, "--set", "train.max_steps=1000000", "--run-dir", str(run_dir))
    try:
        wait_for(lambda: len(rank_records(run_dir, 1, "step")) > 5)
        os.kill(int((run_dir / "pid-1").read_text()), signal.SIGTERM)  # a scheduler, one rank
        assert process.wait(60) == 0, process.stdout.read() if process.stdout else ""
        saved = [[r["step"] for r in rank_records(run_dir, k, "checkpoint") if r["reason"] == "stop"] for k in (0, 1)]
        assert saved[0] and saved[0] == saved[1]
        final = records(run_dir / "metrics.jsonl", "state")[-1]
        assert final["state"] == "stopped" and "SIGTERM on rank 1" in final["reason"]
        assert (run_dir / f"ckpt-{saved[0][0]:08d}.pt").is_file()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_a_rank_killed_is_reported_by_rank_0_and_its_viewer(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    process = start(
        *TINY, "--set", "train.max_steps=1000000", "--set", "checkpoint.interval=20",
        "--run-dir", str(run_dir),
    )  # fmt: skip
    try:
        wait_for(lambda: list(run_dir.glob("ckpt-*.pt")) and (run_dir / "control.sock").exists())
        viewer = RemoteEngine(run_dir)
        os.kill(int((run_dir / "pid-1").read_text()), signal.SIGKILL)
        assert viewer.run() == "failed"  # within the test's timeout: nothing hangs
        events = viewer.drain_events()
        errors = [e.message for e in events if getattr(e, "level", "") == "error"]
        assert any("rank 1 (pid" in m and "is gone" in m and "ckpt-" in m for m in errors), errors
        process.wait(60)
        newest = max(run_dir.glob("ckpt-*.pt"))
        assert torch.load(newest, weights_only=True)["step"] > 0  # the last checkpoint is intact
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_a_sigterm_after_a_rank_died_says_no_checkpoint_was_saved(tmp_path: Path) -> None:
    # What torchrun does when a rank dies: SIGTERM to the others. Rank 0 must not promise a
    # checkpoint it cannot save (was "SIGTERM: saving a checkpoint and stopping", then nothing).
    run_dir = tmp_path / "run"
    process = start(
        *TINY, "--set", "train.max_steps=1000000", "--set", "checkpoint.interval=20",
        "--run-dir", str(run_dir),
    )  # fmt: skip
    try:
        wait_for(lambda: list(run_dir.glob("ckpt-*.pt")))
        rank_1, rank_0 = (int((run_dir / f"pid-{r}").read_text()) for r in (1, 0))
        os.kill(rank_1, signal.SIGSTOP)  # rank 1 stuck, then gone, as rank 0 is told to stop
        time.sleep(0.3)
        os.kill(rank_0, signal.SIGTERM)
        time.sleep(0.5)
        os.kill(rank_1, signal.SIGKILL)
        out = process.communicate(timeout=120)[0]
        assert "saving a checkpoint and stopping" not in out, out[-3000:]
        (line,) = [x for x in out.splitlines() if x.startswith("error: rank 1 (pid")]
        newest = max(run_dir.glob("ckpt-*.pt")).name
        assert "the checkpoint the stop (SIGTERM) asked for could not be saved" in line, line
        assert f"last checkpoint {newest}" in line and f"--resume {run_dir}" in line
        final = records(run_dir / "metrics.jsonl", "state")[-1]
        assert final["state"] == "failed" and "could not be saved" in final["reason"]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_an_exact_resume_at_world_2_is_bit_identical(world_2_run: Path, tmp_path: Path) -> None:
    straight, resumed = world_2_run, tmp_path / "resumed"
    shutil.copytree(straight, resumed)  # the same run, taken up again from its step-20 save
    for name in ("weights-0.pt", "weights-1.pt", "best.pt", f"ckpt-{STEPS:08d}.pt"):
        (resumed / name).unlink(missing_ok=True)
    checked(run("--resume", str(resumed / f"ckpt-{STEPS // 2:08d}.pt"), "--no-telemetry"))
    for rank in (0, 1):
        a, b = weights(straight, rank), weights(resumed, rank)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), rank


def test_torchrun_restarts_resume_from_the_last_checkpoint_by_themselves(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    process = start(
        # 400 steps: rank 1 is killed at the step-50 save, some 300 steps (seconds) before the end
        *TINY, "--set", "train.max_steps=400", "--set", "checkpoint.interval=50",
        "--run-dir", str(run_dir), restarts=1,
    )  # fmt: skip
    try:
        wait_for(lambda: list(run_dir.glob("ckpt-*.pt")))
        first_pid = (run_dir / "pid-1").read_text()
        os.kill(int(first_pid), signal.SIGKILL)
        assert process.wait(180) == 0, process.stdout.read() if process.stdout else ""
        assert (run_dir / "pid-1").read_text() != first_pid  # torchrun started it again
        starts = records(run_dir / "metrics.jsonl", "run_started")
        assert len(starts) == 2 and starts[1]["resumed_from"] and starts[1]["start_step"] >= 50
        assert records(run_dir / "metrics.jsonl", "state")[-1]["state"] == "finished"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
