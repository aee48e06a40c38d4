"""Atomic checkpoints (`ckpt-STEP.pt`, written aside then renamed; the last N kept, `best.pt` a
hard link to the best), loaded with `weights_only=True` so a file's pickle code never runs.
Format 1 (numpy's RNG state as an ndarray) loads with numpy's array globals and is converted.
"""

from __future__ import annotations

import math
import os
import pickle
import pickletools
import re
import shutil
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

# The error, the checkpoint names (torch-free: a viewer lists them) and the state's plain parts,
# as the engine reads them: through the store.
from engine.checkpoint.checkpoint_error import DAMAGED_FILE_ERRORS
from engine.checkpoint.checkpoint_error import CheckpointError as CheckpointError
from engine.checkpoint.names import BEST_NAME as BEST_NAME
from engine.checkpoint.names import BEST_SHARDED as BEST_SHARDED
from engine.checkpoint.names import META_NAME
from engine.checkpoint.names import SHARDED as SHARDED
from engine.checkpoint.names import checkpoint_path as checkpoint_path
from engine.checkpoint.names import latest_checkpoint as latest_checkpoint
from engine.checkpoint.names import list_checkpoints as list_checkpoints
from engine.checkpoint.state import global_rng_state as global_rng_state
from engine.checkpoint.state import numpy_rng_state
from engine.checkpoint.state import plain_data as plain_data
from engine.checkpoint.state import restore_global_rng as restore_global_rng
from engine.checkpoint.state import state_fingerprint as state_fingerprint
from engine.config.loading import recorded_config
from engine.config.timeline import timed_change
from engine.config.user_files import UserFileError, check_regular_file
from engine.files import atomic_write, create_new, fsync_dir, make_temp, make_temp_dir

# 2: everything loads with torch.load(weights_only=True); 1: numpy's RNG state was an ndarray
FORMAT_VERSION = 2

# What torch needs to rebuild the one numpy array in a format-1 checkpoint (numpy's RNG key,
# uint32): numpy's array-reconstruction globals, under numpy 2's and numpy 1's module names.
_RECONSTRUCT = (np._core if hasattr(np, "_core") else np.core).multiarray._reconstruct
NUMPY_ARRAY_GLOBALS: list[Any] = [
    (_RECONSTRUCT, "numpy.core.multiarray._reconstruct"),
    (_RECONSTRUCT, "numpy._core.multiarray._reconstruct"),
    np.ndarray,
    np.dtype,
    np.dtypes.UInt32DType,
]
NUMPY_ARRAY_NAMES = {
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.ndarray",
    "numpy.dtype",
    "numpy.dtypes.UInt32DType",
}


def is_sharded(path: Path) -> bool:
    """A sharded checkpoint: a directory ckpt-STEP.dcp (or best.dcp)."""
    return path.suffix == SHARDED and path.is_dir()


def remove_checkpoint(path: Path) -> None:
    if is_sharded(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def prune_checkpoints(run_dir: Path, keep_last: int) -> None:
    """All but the newest `keep_last` go (best.pt / best.dcp are their own links: they stay)."""
    for _, old in list_checkpoints(run_dir)[:-keep_last]:
        remove_checkpoint(old)


def save_checkpoint(run_dir: Path, step: int, state: dict[str, Any], keep_last: int) -> Path:
    """Save `state` as the checkpoint of `step` and prune all but the newest `keep_last`."""
    path = checkpoint_path(run_dir, step)
    atomic_write(path, lambda f: torch.save(state, f))
    prune_checkpoints(run_dir, keep_last)
    return path


def mark_best(run_dir: Path, path: Path) -> Path:
    """Point best.pt at `path` atomically (hard link, or a copy where links fail); a sharded
    checkpoint's best.dcp is a directory of links to its files. Each is made at a fresh random
    temporary name (none can be planted in advance), then renamed over the old one."""
    if is_sharded(path):
        best = run_dir / BEST_SHARDED
        tmp = make_temp_dir(best)
        try:
            shutil.copytree(path, tmp, copy_function=_link_or_copy, dirs_exist_ok=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(best, ignore_errors=True)
        os.replace(tmp, best)
        fsync_dir(run_dir)
        return best
    best = run_dir / BEST_NAME
    tmp, _ = make_temp(best, lambda name: _link_or_copy(path, name))
    os.replace(tmp, best)
    # a rename onto another link to the same file does nothing: the temporary name stays
    tmp.unlink(missing_ok=True)
    fsync_dir(run_dir)
    return best


def _link_or_copy(source: Any, target: Any) -> None:
    try:
        os.link(source, target)
    except FileExistsError:
        raise  # something appeared at the name (maybe a link): never copied through
    except OSError:  # no hard links here: a copy, made as a new file (never through a link)
        with open(source, "rb") as src, create_new(Path(target)) as dst:
            shutil.copyfileobj(src, dst)


def remove_partial_saves(run_dir: Path) -> int:
    """Delete temporary files left by a save that was killed mid-write (`.ckpt-*.tmp`,
    `.best.*.tmp`, files or sharded directories); returns how many. A link is removed itself."""
    stale = [*run_dir.glob(".ckpt-*.tmp"), *run_dir.glob(".best.*.tmp")]
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return len(stale)


def set_aside_newer(run_dir: Path, step: int) -> tuple[Path | None, list[str]]:
    """Resuming from an older checkpoint starts a new branch: move the checkpoints after `step`
    (and best.pt when it is one of them) into `RUN_DIR/abandoned-TIME/`, kept and named, so
    pruning and the next `--resume RUN_DIR` follow the new branch. Returns the folder and the
    names moved (None, [] when there were none)."""
    after = [(s, p) for s, p in list_checkpoints(run_dir) if s > step]
    if not after:
        return None, []
    newer = [p for _, p in after]
    best = run_dir / BEST_NAME
    if best.exists() and _best_step(best, after) > step:
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


def _best_step(best: Path, candidates: list[tuple[int, Path]]) -> int:
    """The step best.pt is at: a hard link is one of `candidates` (step, path); a copy is read
    (mmap)."""
    for saved, path in candidates:
        try:
            if best.samefile(path):
                return saved
        except OSError:
            continue
    try:
        return int(load_checkpoint(best, mmap=True).get("step", -1))
    except CheckpointError:
        return -1


def load_checkpoint(path: Path, mmap: bool = False) -> dict[str, Any]:
    """Load a checkpoint on the CPU with `weights_only=True`: tensors and plain data only, so a
    file's pickle code never runs. A format-1 checkpoint (numpy's RNG key as an ndarray) is read
    with numpy's array globals allowed and converted; its note is in `state["_notes"]`. Any
    damage, or a file holding other objects, becomes a one-line CheckpointError.

    mmap=True maps the tensors instead of reading them: cheap for a look at the config."""
    if is_sharded(path):
        return _load_sharded_meta(path)
    if path.is_dir():
        found = latest_checkpoint(path)
        if found is None:
            raise CheckpointError(f"{path}: no checkpoint (ckpt-*.pt) in this run directory")
        path = found
        if is_sharded(path):
            return _load_sharded_meta(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:  # a FIFO would block the read for ever (past the first SIGTERM), a device never ends
        check_regular_file(path, "a checkpoint")
    except UserFileError as e:
        raise CheckpointError(str(e)) from None
    try:
        state = _torch_load(path, mmap)
    except pickle.UnpicklingError as e:  # torch's weights-only unpickler refused something
        state = _load_refused(path, mmap, str(e))
    except DAMAGED_FILE_ERRORS as e:  # truncated or foreign bytes
        raise _unreadable(path, e) from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise CheckpointError(f"{path}: not a cockpit checkpoint (no model/config inside)")
    check_fields(path, state)
    version = state.get("version", 1)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format {version!r} is newer than this cockpit reads "
            f"({FORMAT_VERSION}); upgrade cockpit to resume it"
        )
    if version < FORMAT_VERSION:
        state = _upgrade_from_v1(state)
    # a setting newer than the checkpoint reads as the run had it (no padding, ...), not today's
    state["config"] = recorded_config(state["config"])
    state["_path"] = str(path)
    return state


def _load_sharded_meta(path: Path) -> dict[str, Any]:
    """A sharded checkpoint's meta.pt: all but the weights and optimizer state, which stay in
    its shards (which the sharded loader reads; `state["_sharded"]` says so)."""
    try:
        state = torch.load(path / META_NAME, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no {META_NAME} (an incomplete sharded checkpoint)") from None
    except DAMAGED_FILE_ERRORS as e:
        raise _unreadable(path / META_NAME, e) from None
    if not isinstance(state, dict) or "config" not in state:
        raise CheckpointError(f"{path}: not a cockpit checkpoint (no config inside)")
    check_fields(path / META_NAME, state)
    from engine.checkpoint.dcp_reader import read_index

    read_index(path)  # its index and shards, checked now: a resume refuses before it starts
    state["config"] = recorded_config(state["config"])
    state["_path"] = str(path)
    state["_sharded"] = True
    return state


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _finite(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _config_of_tables(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(value[name], dict) for name in CONFIG_SECTIONS if name in value
    )


def _timeline_records(value: Any) -> bool:
    """The records of a settings timeline: a list of {step, by, settings}."""
    if not isinstance(value, list):
        return False
    try:
        for record in value:
            timed_change(record)
    except (KeyError, TypeError, ValueError):
        return False
    return True


CONFIG_SECTIONS = ("data", "model", "optim", "schedule", "train", "eval", "sample", "checkpoint", "log")
# The plain fields that readers (resume, sample, export, fork, the app) index directly, with
# the types cockpit writes; a field a checkpoint lacks is its readers' to miss.
_FIELD_CHECKS: dict[str, Any] = {
    "config": _config_of_tables,
    "step": _count,
    "tokens": _count,
    "world_size": lambda v: _count(v) and v >= 1,
    "lr_scale": _finite,
    "train_time_s": _finite,
    "best_val": lambda v: v is None or (type(v) in (int, float) and not math.isnan(v)),
    "model": lambda v: isinstance(v, dict),
    "optimizer": lambda v: isinstance(v, dict),
    "scaler": lambda v: isinstance(v, dict),
    "rng": lambda v: isinstance(v, dict),
    "tokenizer": lambda v: isinstance(v, dict),
    "start_config": _config_of_tables,
    "settings_changes": _timeline_records,  # the changes made up to the checkpoint's step
    "settings_planned": _timeline_records,  # a replayed run's changes still to make
}


def check_fields(path: Path, state: dict[str, Any]) -> None:
    """A checkpoint loads weights-only, but its plain data can still be any dict or string:
    a field not of the type cockpit writes is one line here, not a traceback in whichever
    reader meets it first."""
    for field, sound in _FIELD_CHECKS.items():
        if field in state and not sound(state[field]):
            shown = repr(state[field])
            shown = shown if len(shown) <= 24 else shown[:21] + "..."
            raise CheckpointError(
                f"{path}: not a checkpoint as cockpit writes them ({field} is {shown}); use "
                "another checkpoint of the same run"
            )


def _torch_load(path: Path, mmap: bool) -> Any:
    with warnings.catch_warnings():
        # torch warns about a plain pickle's protocol before refusing it: one line, not two
        warnings.filterwarnings("ignore", message="Detected pickle protocol")
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except RuntimeError:
            if not mmap:
                raise
            # a file torch cannot map (an old serialisation format): read it whole
            return torch.load(path, map_location="cpu", weights_only=True)


def _load_refused(path: Path, mmap: bool, message: str) -> Any:
    """A file the weights-only unpickler refused: a format-1 checkpoint (numpy's array globals
    only) loads with those allowed; anything else is refused, its code never run."""
    foreign = _refused_globals(path, message)
    if not foreign:
        raise _unreadable(path, pickle.UnpicklingError(message))
    if not foreign <= NUMPY_ARRAY_NAMES:
        raise CheckpointError(
            f"{path}: this file holds objects a checkpoint never holds "
            f"({', '.join(sorted(foreign))}) and cockpit will not run its code; resume only "
            "from checkpoints cockpit wrote (the ckpt-*.pt of a run directory you trust)"
        )
    try:
        with torch.serialization.safe_globals(NUMPY_ARRAY_GLOBALS):
            return _torch_load(path, mmap)
    except DAMAGED_FILE_ERRORS as e:
        raise _unreadable(path, e) from None


def _unreadable(path: Path, error: BaseException) -> CheckpointError:
    return CheckpointError(
        f"{path}: cannot read this checkpoint ({type(error).__name__}); it is truncated or not a "
        "cockpit checkpoint: use an older ckpt-*.pt of the same run"
    )


def _refused_globals(path: Path, message: str) -> set[str]:
    """The globals (module.name) a file's pickle names that torch's weights-only unpickler
    refuses, found by reading its opcodes, never by running them; empty when the file is not a
    readable pickle at all (damage, not foreign objects)."""
    try:
        if zipfile.is_zipfile(path):  # torch.save's format: torch lists them itself
            return set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except DAMAGED_FILE_ERRORS:
        return set()
    named = set(re.findall(r"Unsupported global: GLOBAL (\S+)", message))
    return named or _pickle_globals(path)


def _pickle_globals(path: Path) -> set[str]:
    """The globals outside torch that a plain pickle file names (GLOBAL, or STACK_GLOBAL after
    its two strings); empty when the bytes are not a complete pickle."""
    found: set[str] = set()
    strings: list[str] = []
    try:
        with path.open("rb") as f:
            for opcode, arg, _ in pickletools.genops(f):
                if opcode.name == "GLOBAL":
                    found.add(str(arg).replace(" ", "."))
                elif opcode.name == "STACK_GLOBAL":
                    found.add(".".join(strings[-2:]) or "an unnamed global")
                elif isinstance(arg, str):
                    strings.append(arg)
    except DAMAGED_FILE_ERRORS:
        return set()
    return {name for name in found if not name.startswith(("torch.", "collections."))}


def _upgrade_from_v1(state: dict[str, Any]) -> dict[str, Any]:
    """A format-1 state in format 2's layout (numpy's RNG state as a tensor and plain values),
    with the note a resume shows."""
    rng = state.get("rng")
    if isinstance(rng, dict) and isinstance(rng.get("numpy"), tuple):
        rng["numpy"] = numpy_rng_state(*rng["numpy"])
    state["version"] = FORMAT_VERSION
    state["_notes"] = [
        "checkpoint format 1 converted on load; the next checkpoint is written in format "
        f"{FORMAT_VERSION}"
    ]
    return state


def load_model_state(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """Load a checkpoint's weights; a mismatch (another configuration) is a CheckpointError."""
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        first = str(e).strip().splitlines()[-1].strip()
        raise CheckpointError(
            f"{state['_path']}: the checkpoint's model does not match this configuration ({first})"
        ) from None


def check_model_state(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """CheckpointError when a checkpoint's weights do not fit `model` (names or shapes), found
    before anything is loaded: load_state_dict copies what fits before it raises, and a refused
    rollback must leave the live weights as they were. A sharded checkpoint's are DCP's to check."""
    if state.get("_sharded"):
        return
    saved, live = state["model"], model.state_dict()
    wrong = sorted(set(saved) ^ set(live)) or [
        name for name, tensor in live.items() if tuple(saved[name].shape) != tuple(tensor.shape)
    ]
    if wrong:
        raise CheckpointError(
            f"{state['_path']}: the checkpoint's model does not match this configuration "
            f"({len(wrong)} tensors differ, the first {wrong[0]})"
        )
