"""Sharded training (FSDP2) under torchrun (2 ranks, gloo, this CPU): step-1 gradients equal
one process on the whole batch, DCP checkpoints that resume on another world size (here one
process, unsharded), and a sharded checkpoint exported to one file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from launch import (
    REPO,
    STAND_IN,
    TINY,
    assert_gradients_match_one_process,
    checked,
    environment,
    records,
    run,
    single,
)

from engine.checkpoint.dcp_reader import load_whole
from engine.distributed.sharded import dcp_model_state

FSDP = [*TINY, "--set", "train.parallel=fsdp"]


def test_sharded_gradients_at_step_1_equal_one_process_on_the_whole_batch(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    checked(run(*FSDP, "--set", "train.max_steps=2", "--run-dir", str(run_dir), GRAD_CHECK="1"))
    assert (run_dir / "ckpt-00000002.dcp" / "meta.pt").is_file()  # a sharded checkpoint
    # averaged over ranks, not summed (pytorch/pytorch#162338 reported sums on gloo)
    assert_gradients_match_one_process(run_dir)


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    """A sharded run of 30 steps at world 2, saved at 15 and 30: launched once for the tests
    that read it or take up a copy of it."""
    sharded = tmp_path_factory.mktemp("fsdp") / "sharded"
    checked(run(*FSDP, "--set", "train.max_steps=30", "--set", "checkpoint.interval=15",
                "--run-dir", str(sharded), **isolated_env))  # fmt: skip
    return sharded


def test_a_sharded_checkpoint_resumes_on_one_process_and_exports_to_one_file(
    sharded_run: Path, tmp_path: Path
) -> None:
    sharded, resumed = sharded_run, tmp_path / "resumed"
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
        [sys.executable, str(STAND_IN), "-m", "cockpit", "export", str(sharded / "ckpt-00000030.dcp"),
         "--format", "safetensors", "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=120, env=environment(),
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    from safetensors.torch import load_file

    final = dcp_model_state(sharded / "ckpt-00000030.dcp")
    written = load_file(str(out))
    for key, value in written.items():
        whole = final[key]
        if value.shape != whole.shape:  # the export cuts the padded vocabulary's rows
            assert key in ("wte.weight", "lm_head.weight") and whole.shape[0] % 64 == 0
            assert value.shape[0] < whole.shape[0] and value.shape[1:] == whole.shape[1:]
            whole = whole[: value.shape[0]]
        torch.testing.assert_close(value, whole, rtol=0, atol=0)


def test_a_sharded_run_resumed_by_one_process_goes_back_to_fsdp_on_2_ranks(
    sharded_run: Path, tmp_path: Path
) -> None:
    # FSDP (2 ranks) -> one process (saves a whole .pt) -> FSDP on 2 ranks again, as the docs
    # (guide/distributed.md) say a run may change its world at a resume. Before: "model does not
    # match" (mixed Tensor and DTensor: the whole weights were copied into the shards as they were).
    run_dir = tmp_path / "run"
    shutil.copytree(sharded_run, run_dir)  # its last save, step 30, is a sharded checkpoint
    checked(single("--resume", str(run_dir / "ckpt-00000030.dcp"), "--set", "train.max_steps=32",
                   "--set", "checkpoint.interval=32", "--no-telemetry"))  # fmt: skip
    whole = torch.load(run_dir / "ckpt-00000032.pt", weights_only=True)
    checked(run("--resume", str(run_dir / "ckpt-00000032.pt"), "--set", "train.max_steps=34",
                "--set", "train.parallel=fsdp", "--no-telemetry", GRAD_CHECK="1"))  # fmt: skip
    start = torch.load(run_dir / "grads-0.pt", weights_only=True)["initial"]
    assert start.keys() == whole["model"].keys()
    assert all(torch.equal(start[k], whole["model"][k]) for k in start)  # the .pt's weights
    assert (run_dir / "ckpt-00000034.dcp" / "meta.pt").is_file()  # sharded again
    optim = load_whole(run_dir / "ckpt-00000034.dcp", "optim")
    steps = {float(v["step"]) for v in optim["state"].values()}
    assert steps == {34.0}, steps  # the optimizer's state went on from the .pt's 32, not afresh
    assert records(run_dir / "metrics.jsonl", "step")[-1]["step"] == 34


def test_a_sharded_run_refuses_an_optimizer_that_needs_whole_matrices(tmp_path: Path) -> None:
    result = run(*FSDP, "--set", "optim.name=muon", "--set", "train.max_steps=2",
                 "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert result.returncode != 0
    assert "needs whole matrices; use --set optim.name=adamw" in result.stdout + result.stderr
