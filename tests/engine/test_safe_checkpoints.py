"""Checkpoints load with torch.load(weights_only=True): every optimizer's, the fp16 scaler's, the
random streams; cockpit loads them that way too, so a file someone sent you never runs its
pickle code; a format-1 checkpoint (numpy's RNG state as an ndarray) still resumes, with a note.
Real tiny runs, real files, the real CLI; only CUDA's RNG state is faked."""

from __future__ import annotations

import os
import pathlib
import pickle
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from command_here import cockpit_here
from tiny import tiny_overrides

from engine.checkpoint import store as ckpt
from engine.checkpoint.store import (
    CheckpointError,
    global_rng_state,
    latest_checkpoint,
    load_checkpoint,
    restore_global_rng,
    save_checkpoint,
)
from engine.config.presets import load_preset
from engine.train.trainer import Trainer

SMALL = tiny_overrides("model.block_size=32", "sample.max_new_tokens=4", quiet=True)  # 32: the tiny preset's own
CONVERTED = "checkpoint format 1 converted on load; the next checkpoint is written in format 2"


def train(run_dir: Path, *extra: str) -> Trainer:
    trainer = Trainer(
        load_preset("tiny", [*SMALL, *extra]), run_dir=run_dir, sinks=[], telemetry=False
    )
    assert trainer.run() == "finished"
    return trainer


def cockpit(*args: str) -> subprocess.CompletedProcess:
    return cockpit_here(*args, env={**os.environ, "TERM": "dumb"})


@pytest.mark.parametrize("optimizer", ["adamw", "muon", "lion", "adafactor"])
def test_every_optimizers_checkpoint_loads_with_plain_torch_load(tmp_path, optimizer) -> None:
    train(tmp_path, "train.max_steps=2", f"optim.name={optimizer}")
    path = latest_checkpoint(tmp_path)
    for state in (torch.load(path), torch.load(path, weights_only=True)):
        assert state["version"] == 2 and state["step"] == 2
        assert state["config"]["optim"]["name"] == optimizer
        saved = state["optimizer"]
        per_optimizer = saved["optimizers"] if "optimizers" in saved else [saved]  # Muon + AdamW
        assert all(s["state"] for s in per_optimizer), "the optimizer's moments were saved"
        assert isinstance(state["rng"]["numpy"]["key"], torch.Tensor)
    assert torch.serialization.get_unsafe_globals_in_checkpoint(path) == []


def test_fp16_scaler_and_cuda_rng_states_round_trip_weights_only(tmp_path, monkeypatch) -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=True, init_scale=1024.0, growth_interval=1)
    for _ in range(2):  # a scaled step, then growth: the state is no longer the default
        scaler.scale(model(torch.ones(2, 4)).sum()).backward()
        scaler.step(opt)
        scaler.update()
    cuda_rng = [torch.randint(0, 256, (16,), dtype=torch.uint8) for _ in range(2)]
    rng = {**global_rng_state("cpu"), "cuda": cuda_rng}  # what a 2-GPU run would record
    state = {"version": 2, "model": model.state_dict(), "config": {}, "scaler": scaler.state_dict()}
    path = save_checkpoint(tmp_path, 1, {**state, "rng": rng}, keep_last=1)

    plain = torch.load(path, weights_only=True)
    loaded = load_checkpoint(path)
    for got in (plain, loaded):
        assert got["scaler"] == scaler.state_dict() and got["scaler"]["scale"] == 4096.0
        assert all(torch.equal(a, b) for a, b in zip(got["rng"]["cuda"], cuda_rng, strict=True))
    fresh = torch.amp.GradScaler("cpu", enabled=True)
    fresh.load_state_dict(loaded["scaler"])
    assert fresh.get_scale() == 4096.0

    restored: list = []
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.extend)  # no CUDA here
    restore_global_rng(loaded["rng"], "cuda")
    assert [t.tolist() for t in restored] == [t.tolist() for t in cuda_rng]


def draws() -> tuple:
    return (
        [random.random() for _ in range(3)],
        random.gauss(0, 1),  # leaves Python's cached second gaussian in the state
        np.random.rand(3).tolist(),
        float(np.random.standard_normal()),  # numpy's cached gaussian too
        torch.rand(3).tolist(),
    )


def test_restore_global_rng_restores_python_numpy_and_torch_exactly(tmp_path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    draws()  # mid-stream, both gaussian caches filled
    saved = global_rng_state("cpu")
    torch.save(saved, tmp_path / "rng.pt")
    first = draws()
    restore_global_rng(saved, "cpu")
    assert draws() == first
    restore_global_rng(torch.load(tmp_path / "rng.pt", weights_only=True), "cpu")
    assert draws() == first


def as_format_1(path: Path) -> None:
    """Rewrite a checkpoint the way cockpit wrote it before format 2: numpy's RNG state as
    np.random.get_state() returns it (a tuple holding an ndarray)."""
    state = torch.load(path, weights_only=True)
    n = state["rng"]["numpy"]
    key = n["key"].numpy().astype(np.uint32)
    state["rng"]["numpy"] = (
        n["bit_generator"],
        key,
        n["pos"],
        n["has_gauss"],
        n["cached_gaussian"],
    )
    state["version"] = 1
    torch.save(state, path)


def test_a_format_1_checkpoint_resumes_exactly_with_a_note(tmp_path) -> None:
    train(tmp_path / "new", "train.max_steps=3")
    shutil.copytree(tmp_path / "new", tmp_path / "old")
    old = latest_checkpoint(tmp_path / "old")
    as_format_1(old)
    with pytest.raises(pickle.UnpicklingError, match="numpy"):
        torch.load(old)  # what format 2 fixes

    state = load_checkpoint(old)
    assert state["version"] == 2 and state["_notes"] == [CONVERTED]
    assert isinstance(state["rng"]["numpy"]["key"], torch.Tensor)
    assert load_checkpoint(old, mmap=True)["_notes"] == [CONVERTED]

    done = cockpit(
        "train", "--headless", "--no-telemetry", "--resume", str(tmp_path / "old"),
        "--set", "train.max_steps=6",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"resume: {CONVERTED}" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    after = torch.load(latest_checkpoint(tmp_path / "old"))  # written in format 2
    assert (after["version"], after["step"]) == (2, 6)

    # the same resume from the format-2 original ends with the same weights, bit for bit
    events: list = []
    trainer = Trainer(
        load_preset("default"),
        resume=tmp_path / "new",
        resume_overrides=["train.max_steps=6"],
        sinks=[events.append],
        telemetry=False,
    )
    assert trainer.run() == "finished"
    assert not any(CONVERTED in n for e in events for n in getattr(e, "notes", ()))
    reference = torch.load(latest_checkpoint(tmp_path / "new"))
    for name, weights in reference["model"].items():
        assert torch.equal(weights, after["model"][name]), name


class Payload:
    """What a booby-trapped checkpoint carries: unpickling it would create `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def booby_trapped(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    marker = tmp_path / f"ran-{kind}"
    state = {"model": {"w": torch.zeros(2)}, "config": {}, "extra": Payload(marker)}
    path = tmp_path / f"ckpt-{kind}.pt"
    if kind == "zip":
        torch.save(state, path)
    elif kind == "legacy":
        torch.save(state, path, _use_new_zipfile_serialization=False)
    else:
        path.write_bytes(pickle.dumps(state))
    return path, marker


@pytest.mark.parametrize("kind", ["zip", "legacy", "pickle"])
def test_a_checkpoint_with_foreign_objects_is_refused_and_its_code_never_runs(
    tmp_path, kind
) -> None:
    path, marker = booby_trapped(tmp_path, kind)
    for mmap in (False, True):
        with pytest.raises(CheckpointError) as refused:
            load_checkpoint(path, mmap=mmap)
        message = str(refused.value)
        assert "holds objects a checkpoint never holds" in message
        assert "will not run its code" in message and "\n" not in message
    assert not marker.exists()


def test_the_cli_refuses_a_booby_trapped_checkpoint_in_one_line(tmp_path) -> None:
    path, marker = booby_trapped(tmp_path, "zip")
    done = cockpit("train", "--headless", "--no-telemetry", "--resume", str(path))
    assert done.returncode == 2
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cockpit: "), lines
    assert "holds objects a checkpoint never holds" in lines[0]
    assert not marker.exists()


def test_a_damaged_or_newer_checkpoint_says_so(tmp_path) -> None:
    good = {"version": 2, "model": {"w": torch.zeros(2)}, "config": {}}
    path = save_checkpoint(tmp_path, 1, good, keep_last=5)
    path.write_bytes(path.read_bytes()[:200])  # cut short
    with pytest.raises(CheckpointError, match="cannot read this checkpoint"):
        load_checkpoint(path)
    newer = save_checkpoint(tmp_path, 2, {**good, "version": 3}, keep_last=5)
    with pytest.raises(CheckpointError, match="format 3 is newer .*; upgrade cockpit"):
        load_checkpoint(newer)


def test_records_are_written_as_plain_data() -> None:
    record = {"path": Path("/data/x.txt"), "n": np.int64(3), "f": np.float32(0.5), "t": (1, [2])}
    assert ckpt.plain_data(record) == {"path": "/data/x.txt", "n": 3, "f": 0.5, "t": (1, [2])}
    assert type(ckpt.plain_data(record)["n"]) is int
    with pytest.raises(TypeError, match="has no place in a checkpoint"):
        ckpt.plain_data({"x": object()})
