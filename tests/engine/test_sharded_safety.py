"""A sharded checkpoint (a DCP directory) someone else could have written never runs code when
cockpit opens it: its `.metadata` is read by an unpickler that knows only DCP's own index
classes, its non-tensor values load weights-only, and a damaged one is refused in one line that
names the file and the fix. Real checkpoints: a tiny run's, re-saved as a DCP directory by the
project's own `save_sharded`; the real CLI, in this process."""

from __future__ import annotations

import os
import pathlib
import pickle
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import torch
from command_here import cockpit_here
from tiny import tiny_overrides

from engine.checkpoint.store import CheckpointError, load_checkpoint
from engine.config.loading import config_from_dict
from engine.config.presets import load_preset
from engine.data.tokenizers import tokenizer_from_meta
from engine.distributed.sharded import dcp_model_state, load_sharded, save_sharded
from engine.distributed.world import World
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.train.trainer import Trainer

SMALL = tiny_overrides(
    "model.block_size=32",  # the tiny preset's own
    "sample.max_new_tokens=4",
    "train.max_steps=2",
    quiet=True,
)
SHARDED = "ckpt-00000002.dcp"


class Payload:
    """What a booby-trapped file carries: unpickling it creates `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[float]]:
    """A finished tiny run whose only checkpoint is a DCP directory written by save_sharded
    (what a sharded run writes, here from one process), the weights and the LRs it holds."""
    run_dir = tmp_path_factory.mktemp("sharded") / "run"
    trainer = Trainer(load_preset("tiny", SMALL), run_dir=run_dir, sinks=[], telemetry=False)
    assert trainer.run() == "finished"
    meta = trainer.built.checkpointer.state(weights=False)
    parts = trainer.built.parts
    with warnings.catch_warnings():  # DCP in one process says so: that is the point here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        failure = save_sharded(run_dir / SHARDED, meta, parts.model, parts.optimizer, World(), None)
    assert failure is None
    for single in run_dir.glob("*.pt"):  # the run's one-file checkpoints: the .dcp is the one
        single.unlink()
    weights = {k: v.detach().clone() for k, v in parts.model.state_dict().items()}
    lrs = [group["lr"] for group in parts.optimizer.param_groups]
    return run_dir, weights, lrs


@pytest.fixture
def run_dir(sharded_run, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(sharded_run[0], copy)
    return copy


def cockpit(*args: str) -> subprocess.CompletedProcess:
    return cockpit_here(*args, env={**os.environ, "TERM": "dumb"})


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cockpit: "), lines
    assert "Traceback" not in lines[0]
    return lines[0]


def metadata_of(dcp: Path):  # noqa: ANN201 - DCP's Metadata (written by this test's own run)
    with (dcp / ".metadata").open("rb") as f:
        return pickle.load(f)  # the test's own file: trusted


def write_metadata(dcp: Path, metadata) -> None:  # noqa: ANN001
    with (dcp / ".metadata").open("wb") as f:
        pickle.dump(metadata, f)


def trap_metadata(dcp: Path, marker: Path) -> None:
    """Replace .metadata with a working index that also runs code when plainly unpickled (what
    torch's FileSystemReader does): the load would otherwise succeed, the code run silently."""
    metadata = metadata_of(dcp)
    metadata.storage_meta.modules = [Payload(marker)]
    write_metadata(dcp, metadata)


def trap_a_value(dcp: Path, marker: Path) -> None:
    """Point one of the optimizer's non-tensor values (DCP's byte items, which its default
    planner loads with torch.load(weights_only=False)) at a pickle that runs code; the index
    itself holds DCP's classes only."""
    import io

    metadata = metadata_of(dcp)
    index = next(i for i in metadata.storage_data if i.fqn == "optim.param_groups.0.lr")
    buffer = io.BytesIO()
    torch.save(Payload(marker), buffer)
    shard = dcp / metadata.storage_data[index].relative_path
    offset = shard.stat().st_size
    with shard.open("ab") as f:
        f.write(buffer.getvalue())
    stored = metadata.storage_data[index]
    stored.offset, stored.length = offset, len(buffer.getvalue())
    write_metadata(dcp, metadata)


def test_a_clean_sharded_checkpoint_still_loads_whole_and_resumes(sharded_run, run_dir) -> None:
    _, weights, lrs = sharded_run
    loaded = dcp_model_state(run_dir / SHARDED)
    assert loaded.keys() == weights.keys()
    assert all(torch.equal(loaded[k], weights[k]) for k in weights)
    state = load_checkpoint(run_dir)
    assert state["_sharded"] and state["step"] == 2
    cfg = config_from_dict(state["config"])  # a fresh model and optimizer of the same shape
    model = GPT(cfg.model, tokenizer_from_meta(state["tokenizer"]).vocab_size)
    optimizer = build_optimizer(model, cfg.optim, "cpu")
    load_sharded(run_dir / SHARDED, model, optimizer)
    assert all(torch.equal(model.state_dict()[k], weights[k]) for k in weights)
    # the optimizer's non-tensor values (DCP's byte items) came back too
    assert [group["lr"] for group in optimizer.param_groups] == lrs


@pytest.mark.parametrize("command", ["sample", "export", "resume"])
def test_a_booby_trapped_dcp_index_is_refused_in_one_line_and_never_runs(
    run_dir, tmp_path, command
) -> None:
    marker = tmp_path / "ran"
    dcp = run_dir / SHARDED
    trap_metadata(dcp, marker)
    if command == "sample":
        done = cockpit("sample", str(dcp), "--tokens", "4", "--prompt", "a")
    elif command == "export":
        done = cockpit("export", str(dcp), "--format", "safetensors", "--out", str(tmp_path / "m.st"))
    else:
        done = cockpit("train", "--headless", "--no-telemetry", "--resume", str(run_dir),
                       "--set", "train.max_steps=4")  # fmt: skip
    assert not marker.exists(), "the checkpoint's pickle code ran"
    line = one_line(done)
    assert done.returncode != 0
    assert f"{dcp / '.metadata'}" in line and "will not run its code" in line, line
    assert "pathlib.Path.touch" in line, line


def test_a_booby_trapped_value_in_a_shard_is_refused_and_never_runs(run_dir, tmp_path) -> None:
    marker = tmp_path / "ran"
    trap_a_value(run_dir / SHARDED, marker)
    done = cockpit("train", "--headless", "--no-telemetry", "--resume", str(run_dir),
                   "--set", "train.max_steps=4")  # fmt: skip
    assert not marker.exists(), "the shard's pickle code ran"
    line = one_line(done)
    assert "optim.param_groups.0.lr" in line and "will not run its code" in line, line


@pytest.mark.parametrize("command", ["sample", "resume"])
def test_a_truncated_shard_is_refused_in_one_line_naming_it(run_dir, command) -> None:
    shard = run_dir / SHARDED / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    if command == "sample":
        done = cockpit("sample", str(run_dir / SHARDED), "--tokens", "4", "--prompt", "a")
    else:
        done = cockpit("train", "--headless", "--no-telemetry", "--resume", str(run_dir),
                       "--set", "train.max_steps=4")  # fmt: skip
    line = one_line(done)
    assert done.returncode != 0
    assert str(shard) in line and "truncated" in line and "another checkpoint" in line, line


def test_a_garbled_tensor_in_a_shard_is_one_line(run_dir) -> None:
    dcp = run_dir / SHARDED
    metadata = metadata_of(dcp)
    weights_at = min(s.offset for i, s in metadata.storage_data.items() if i.fqn.startswith("model."))
    shard = dcp / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[weights_at:] = bytes(b ^ 0xFF for b in data[weights_at:])  # same length, other bytes
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="cannot read this sharded checkpoint") as refused:
        dcp_model_state(dcp)
    assert str(dcp) in str(refused.value) and "\n" not in str(refused.value)
    assert "another checkpoint" in str(refused.value)


def test_an_index_that_sets_attributes_on_a_class_is_refused_and_undone(run_dir) -> None:
    from torch.distributed.checkpoint.metadata import Metadata

    dcp = run_dir / SHARDED
    index = pickle.dumps(metadata_of(dcp), protocol=2)  # no frames: a prefix can go first
    # GLOBAL Metadata, then BUILD with slot state {"evil": 1}: setattr on the class itself
    patch = b"ctorch.distributed.checkpoint.metadata\nMetadata\nN}X\x04\x00\x00\x00evilK\x01s\x86b0"
    (dcp / ".metadata").write_bytes(index[:2] + patch + index[2:])
    with pytest.raises(CheckpointError, match="attributes set on .*Metadata") as refused:
        dcp_model_state(dcp)
    assert "will not run its code" in str(refused.value)
    assert not hasattr(Metadata, "evil")


def test_an_index_that_reaches_outside_its_directory_is_refused(run_dir, tmp_path) -> None:
    dcp = run_dir / SHARDED
    metadata = metadata_of(dcp)
    outside = tmp_path / "elsewhere.distcp"
    shutil.copy(dcp / "__0_0.distcp", outside)
    for stored in metadata.storage_data.values():
        stored.relative_path = f"../../{outside.name}"
    write_metadata(dcp, metadata)
    with pytest.raises(CheckpointError, match="outside the checkpoint") as refused:
        dcp_model_state(dcp)
    assert "\n" not in str(refused.value)


def test_a_missing_or_garbled_index_is_one_line(run_dir) -> None:
    dcp = run_dir / SHARDED
    (dcp / ".metadata").write_bytes(b"\x80\x04not a pickle")
    with pytest.raises(CheckpointError, match="cannot read") as garbled:
        dcp_model_state(dcp)
    (dcp / ".metadata").unlink()
    with pytest.raises(CheckpointError, match="no .metadata") as missing:
        dcp_model_state(dcp)
    assert "\n" not in str(garbled.value) + str(missing.value)
