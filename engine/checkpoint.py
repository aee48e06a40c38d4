"""Atomic checkpoints: write to a temporary file, fsync, rename; keep the last N and the best.

A checkpoint is one `torch.save` file `ckpt-STEP.pt` in the run directory. `best.pt` is a hard
link to the checkpoint with the lowest val loss (a copy where links are not supported), so it
costs no extra disk. Killing the process at any moment leaves every complete checkpoint intact:
a partial write only ever exists under a temporary name.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.files import atomic_write, fsync_dir

CKPT_RE = re.compile(r"^ckpt-(\d{8})\.pt$")
BEST_NAME = "best.pt"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or does not fit the run; the message is for the user."""


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / f"ckpt-{step:08d}.pt"


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint, oldest first."""
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if (m := CKPT_RE.match(p.name))]
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def save_checkpoint(run_dir: Path, step: int, state: dict[str, Any], keep_last: int) -> Path:
    """Save `state` as the checkpoint of `step` and prune all but the newest `keep_last`."""
    path = checkpoint_path(run_dir, step)
    atomic_write(path, lambda f: torch.save(state, f))
    for _, old in list_checkpoints(run_dir)[:-keep_last]:
        old.unlink(missing_ok=True)  # best.pt is its own link (or copy): it survives this
    return path


def mark_best(run_dir: Path, path: Path) -> Path:
    """Point best.pt at `path` atomically (hard link, or a copy where links fail)."""
    best = run_dir / BEST_NAME
    tmp = run_dir / f".{BEST_NAME}.tmp"
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)
    except OSError:
        shutil.copy2(path, tmp)
    os.replace(tmp, best)
    fsync_dir(run_dir)
    return best


def remove_partial_saves(run_dir: Path) -> int:
    """Delete temporary files left by a save that was killed mid-write; returns how many."""
    stale = list(run_dir.glob(".ckpt-*.tmp")) + list(run_dir.glob(f".{BEST_NAME}.tmp"))
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)


def set_aside_newer(run_dir: Path, step: int) -> tuple[Path | None, list[str]]:
    """Resuming from an older checkpoint starts a new branch: move the checkpoints after `step`
    (and best.pt when it is one of them) into `RUN_DIR/abandoned-TIME/`, kept and named, so
    pruning and the next `--resume RUN_DIR` follow the new branch. Returns the folder and the
    names moved (None, [] when there were none)."""
    newer = [p for s, p in list_checkpoints(run_dir) if s > step]
    if not newer:
        return None, []
    best = run_dir / BEST_NAME
    if best.exists() and _best_step(best, newer) > step:
        newer.append(best)
    aside = run_dir / time.strftime("abandoned-%Y%m%d-%H%M%S")
    suffix = 1
    while aside.exists():
        suffix += 1
        aside = aside.with_name(f"{aside.name.split('.')[0]}.{suffix}")
    aside.mkdir()
    for path in newer:
        os.replace(path, aside / path.name)
    fsync_dir(aside)
    fsync_dir(run_dir)
    return aside, [p.name for p in newer]


def _best_step(best: Path, candidates: list[Path]) -> int:
    """The step best.pt is at: a hard link is one of `candidates`; a copy is read (mmap)."""
    for path in candidates:
        try:
            if best.samefile(path):
                return int(CKPT_RE.match(path.name).group(1))
        except OSError:
            continue
    try:
        return int(load_checkpoint(best, mmap=True).get("step", -1))
    except CheckpointError:
        return -1


def load_checkpoint(path: Path, mmap: bool = False) -> dict[str, Any]:
    """Load a checkpoint on the CPU; any damage becomes a one-line CheckpointError.

    mmap=True maps the tensors instead of reading them: cheap for a look at the config."""
    if path.is_dir():
        found = latest_checkpoint(path)
        if found is None:
            raise CheckpointError(f"{path}: no checkpoint (ckpt-*.pt) in this run directory")
        path = found
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
        except Exception:
            if not mmap:
                raise
            # a file torch cannot map (an old serialisation format): read it whole
            state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # torch raises many types for truncated or foreign files
        raise CheckpointError(
            f"{path}: cannot read this checkpoint ({type(e).__name__}); it is truncated or not a "
            "cockpit checkpoint: resume from an older ckpt-*.pt in the same directory"
        ) from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise CheckpointError(f"{path}: not a cockpit checkpoint (no model/config inside)")
    state["_path"] = str(path)
    return state


def global_rng_state(device_type: str) -> dict[str, Any]:
    """The process-wide random states (Python, NumPy, torch, CUDA) for a checkpoint."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if device_type == "cuda" else None,
    }


def restore_global_rng(rng: dict[str, Any], device_type: str) -> None:
    """Put back what `global_rng_state` recorded (CUDA's only on a CUDA run)."""
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and device_type == "cuda":
        torch.cuda.set_rng_state_all(rng["cuda"])


def load_model_state(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """Load a checkpoint's weights; a mismatch (another configuration) is a CheckpointError."""
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        first = str(e).strip().splitlines()[-1].strip()
        raise CheckpointError(
            f"{state['_path']}: the checkpoint's model does not match this configuration ({first})"
        ) from None


def state_fingerprint(state: Any) -> str:
    """A sha256 of a checkpoint state (nested dicts, lists, tensors, arrays, plain values),
    independent of dict order: two states with the same fingerprint would save the same."""
    digest = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                digest.update(repr(key).encode())
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            digest.update(b"[")
            for item in value:
                feed(item)
            digest.update(b"]")
        elif isinstance(value, torch.Tensor):
            digest.update(value.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy())
        elif isinstance(value, np.ndarray):
            digest.update(np.ascontiguousarray(value).tobytes())
        else:
            digest.update(repr(value).encode())

    feed(state)
    return digest.hexdigest()
