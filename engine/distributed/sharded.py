"""Sharded training (FSDP2) and its checkpoints (DCP): `ckpt-STEP.dcp/` holds every rank's shards
and rank 0's `meta.pt`, and appears under its name only when complete. DCP reshards on load, so
a run saved on N ranks resumes on M; every load goes through the checkpoint package's DCP reader.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from engine.checkpoint.names import META_NAME
from engine.distributed.world import World, from_main
from engine.files import make_temp_dir
from engine.train.disk_full import checkpoint_exception_type, short_write_failure, write_failure


def shard_model(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """FSDP2 on each transformer block and on the root (the embeddings and the head)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for block in model.blocks:  # type: ignore[attr-defined]
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)


def save_sharded(
    path: Path,
    meta: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    world: World,
    group: Any,
) -> str | None:
    """Write the checkpoint directory `path` (every rank calls this at the same step); returns
    the same failure text on every rank (a full disk...), or None once it is complete."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    tmp, failure = None, None
    if world.is_main:
        try:  # a fresh random name: none planted in advance (remove_partial_saves clears it)
            tmp = make_temp_dir(path)
        except OSError as e:
            failure = e.strerror or str(e)
    # the others write into it once it exists
    tmp, failure = from_main((tmp, failure), world, group)
    if failure is not None:
        return failure
    assert tmp is not None
    model_state, optim_state = get_state_dict(model, optimizer)
    # DCP raises its CheckpointException (every rank's failures) on every rank: a
    # BaseException, caught by name so that a KeyboardInterrupt still goes through
    dcp_error = checkpoint_exception_type() or Exception
    try:
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(tmp))
    except (Exception, dcp_error) as e:  # noqa: BLE001 - every rank must reach the agreement below
        # a full disk in the OS's words, found in the rank's failure
        failure = write_failure(e) or short_write_failure(e, tmp) or last_line(e)
    failure = from_main(failure, world, group)  # every rank's shards are written, or none
    if failure is None and world.is_main:
        try:
            torch.save(meta, tmp / META_NAME)
            shutil.rmtree(path, ignore_errors=True)
            os.replace(tmp, path)
        except (OSError, RuntimeError) as e:  # torch.save's RuntimeError over a disk's OSError
            failure = write_failure(e)
            if failure is None:
                raise
    failure = from_main(failure, world, group)
    if failure is not None and world.is_main:
        # every rank is done with it: the shards written so far give their space back (the
        # previous checkpoint is intact, and a retry writes this one whole)
        shutil.rmtree(tmp, ignore_errors=True)
    return failure


def last_line(error: BaseException) -> str:
    """An error's message in one line (its last: DCP's lists each rank's traceback first)."""
    text = str(error).strip()
    return text.splitlines()[-1] if text else type(error).__name__


def load_sharded(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """Load a DCP checkpoint into this run's model (sharded or not) and optimizer (None: a
    fresh optimizer, as when the optimizer changed), resharding to this world as it goes; a
    damaged or foreign checkpoint is a one-line CheckpointError, its code never run."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    from engine.checkpoint.dcp_reader import load_in_place

    if optimizer is None:
        model_state = get_model_state_dict(model)
        load_in_place(path, {"model": model_state})
        set_model_state_dict(model, model_state)
        return
    model_state, optim_state = get_state_dict(model, optimizer)
    load_in_place(path, {"model": model_state, "optim": optim_state})
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state)


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether `model` has been through shard_model (its parameters are DTensors)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def load_whole_into_sharded(
    state: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer | None
) -> None:
    """A whole checkpoint (a .pt, saved by one process) into this sharded run: each rank takes
    its shards of the full tensors (torch's set_*_state_dict with full_state_dict), the
    optimizer's state (None: a fresh optimizer) keyed by parameter name as that API wants it.
    A checkpoint that does not fit is a one-line CheckpointError."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    from engine.checkpoint.checkpoint_error import CheckpointError

    options = StateDictOptions(full_state_dict=True)
    try:
        set_model_state_dict(model, state["model"], options=options)
        if optimizer is not None:
            named = _optimizer_state_by_name(state["optimizer"], optimizer, model)
            set_optimizer_state_dict(model, optimizer, named, options=options)
    except (RuntimeError, KeyError, ValueError) as e:
        first = str(e).strip().splitlines()[-1].strip() if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"{state['_path']}: the checkpoint's model does not match this configuration ({first})"
        ) from None


def _optimizer_state_by_name(
    saved: dict[str, Any], optimizer: torch.optim.Optimizer, model: torch.nn.Module
) -> dict[str, Any]:
    # torch.optim numbers parameters in param_groups order; this run's optimizer is built the
    # same way, so its k-th parameter is the saved k-th one.
    names = {id(param): name for name, param in model.named_parameters()}
    ordered = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    return {
        "state": {ordered[int(k)]: v for k, v in saved["state"].items()},
        "param_groups": [
            {**group, "params": [ordered[int(k)] for k in group["params"]]}
            for group in saved["param_groups"]
        ],
    }


def read_meta(path: Path) -> dict[str, Any]:
    """meta.pt of a sharded checkpoint (weights_only: plain data and tensors)."""
    return torch.load(path / META_NAME, map_location="cpu", weights_only=True)


def dcp_model_state(path: Path) -> dict[str, torch.Tensor]:
    """The whole model of a sharded checkpoint, read in this one process (its optimizer state
    is not read)."""
    from engine.checkpoint.dcp_reader import load_whole

    return load_whole(path, "model")
