"""Sharded training (FSDP2) under torchrun (2 ranks, gloo, this CPU): step-1 gradients equal
one process on the whole batch, DCP checkpoints that resume on another world size (here one
process, unsharded), and a sharded checkpoint exported to one file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import torch
from launch import REPO, TINY, assert_gradients_match_one_process, checked, records, run, single

from engine.checkpoint.dcp_reader import load_whole
from engine.distributed.sharded import dcp_model_state

FSDP = [*TINY, "--set", "train.parallel=fsdp"]



def test_sharded_gradients_at_step_1_equal_one_process_on_the_whole_batch(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    checked(run(*FSDP, "--set", "train.max_steps=2", "--run-dir", str(run_dir), GRAD_CHECK="1"))
    assert (run_dir / "ckpt-00000002.dcp" / "meta.pt").is_file()  # a sharded checkpoint
    # averaged over ranks, not summed (pytorch/pytorch#162338 reported sums on gloo)
    assert_gradients_match_one_process(run_dir)


def test_a_sharded_checkpoint_resumes_on_one_process_and_exports_to_one_file(tmp_path: Path) -> None:
    sharded, resumed = tmp_path / "sharded", tmp_path / "resumed"
    checked(run(*FSDP, "--set", "train.max_steps=30", "--set", "checkpoint.interval=15",
                "--run-dir", str(sharded)))  # fmt: skip
    shutil.copytree(sharded, resumed)
    shutil.rmtree(resumed / "ckpt-00000030.dcp")
    shutil.rmtree(resumed / "best.dcp", ignore_errors=True)
    checked(single("--resume", str(resumed / "ckpt-00000015.dcp"), "--no-telemetry", GRAD_CHECK="1"))
    # the weights the one process started from are the checkpoint's, resharded into one
    start = torch.load(resumed / "grads-0.pt", weights_only=True)["initial"]
    saved = dcp_model_state(sharded / "ckpt-00000015.dcp")
    assert start.keys() == saved.keys() and all(torch.equal(start[k], saved[k]) for k in saved)
    started = records(resumed / "metrics.jsonl", "run_started")[-1]
    assert started["start_step"] == 15
    assert any("the data order from step 15 is new" in n for n in started["notes"]), started["notes"]
    steps = records(resumed / "metrics.jsonl", "step")
    assert steps[-1]["step"] == 30
    # one file out of the shards: the final checkpoint's weights, exactly
    out = tmp_path / "model.safetensors"
    exported = subprocess.run(
        [sys.executable, "-m", "cockpit", "export", str(sharded / "ckpt-00000030.dcp"),
         "--format", "safetensors", "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    from safetensors.torch import load_file

    final = dcp_model_state(sharded / "ckpt-00000030.dcp")
    written = load_file(str(out))
    for key, value in written.items():
        torch.testing.assert_close(value, final[key], rtol=0, atol=0)


def test_a_sharded_run_resumed_by_one_process_goes_back_to_fsdp_on_2_ranks(tmp_path: Path) -> None:
    # FSDP (2 ranks) -> one process (saves a whole .pt) -> FSDP on 2 ranks again, as the docs
    # (guide/distributed.md) say a run may change its world at a resume. Before: "model does not
    # match" (mixed Tensor and DTensor: the whole weights were copied into the shards as they were).
    run_dir = tmp_path / "run"
    checked(run(*FSDP, "--set", "train.max_steps=4", "--set", "checkpoint.interval=4",
                "--run-dir", str(run_dir)))  # fmt: skip
    checked(single("--resume", str(run_dir / "ckpt-00000004.dcp"), "--set", "train.max_steps=6",
                   "--set", "checkpoint.interval=6", "--no-telemetry"))  # fmt: skip
    whole = torch.load(run_dir / "ckpt-00000006.pt", weights_only=True)
    checked(run("--resume", str(run_dir / "ckpt-00000006.pt"), "--set", "train.max_steps=8",
                "--set", "train.parallel=fsdp", "--no-telemetry", GRAD_CHECK="1"))  # fmt: skip
    start = torch.load(run_dir / "grads-0.pt", weights_only=True)["initial"]
    assert start.keys() == whole["model"].keys()
    assert all(torch.equal(start[k], whole["model"][k]) for k in start)  # the .pt's weights
    assert (run_dir / "ckpt-00000008.dcp" / "meta.pt").is_file()  # sharded again
    optim = load_whole(run_dir / "ckpt-00000008.dcp", "optim")
    steps = {float(v["step"]) for v in optim["state"].values()}
    assert steps == {8.0}, steps  # the optimizer's state went on from the .pt's 6, not afresh
    assert records(run_dir / "metrics.jsonl", "step")[-1]["step"] == 8


def test_a_sharded_run_refuses_an_optimizer_that_needs_whole_matrices(tmp_path: Path) -> None:
    result = run(*FSDP, "--set", "optim.name=muon", "--set", "train.max_steps=2",
                 "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert result.returncode != 0
    assert "needs whole matrices; use --set optim.name=adamw" in result.stdout + result.stderr
