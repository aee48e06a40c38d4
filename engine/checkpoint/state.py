"""The parts of a checkpoint's state that are not the model's or the optimizer's: the
process-wide random states, the plain data everything else is written as, and a fingerprint.

Everything here is what `torch.load(weights_only=True)` reads back: tensors and plain values.
"""

from __future__ import annotations

import hashlib
import random
from enum import Enum
from pathlib import PurePath
from typing import Any

import numpy as np
import torch


def numpy_rng_state(name: str, key: Any, pos: int, has_gauss: int, cached: float) -> dict[str, Any]:
    """NumPy's legacy RNG state (what `np.random.get_state(legacy=True)` gives) as plain values
    and a tensor."""
    # int64 holds every uint32 word of the key exactly, and torch loads it without numpy
    return {
        "bit_generator": str(name),
        "key": torch.from_numpy(np.asarray(key, dtype=np.int64).copy()),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def global_rng_state(device_type: str) -> dict[str, Any]:
    """The process-wide random states (Python, NumPy, torch, CUDA) for a checkpoint, as
    tensors and plain values only (what `torch.load(weights_only=True)` reads)."""
    version, internal, gauss_next = random.getstate()
    return {
        "python": (version, tuple(internal), gauss_next),
        "numpy": numpy_rng_state(*np.random.get_state(legacy=True)),
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if device_type == "cuda" else None,
    }


def restore_global_rng(rng: dict[str, Any], device_type: str) -> None:
    """Put back what `global_rng_state` recorded (CUDA's only on a CUDA run)."""
    version, internal, gauss_next = rng["python"]
    random.setstate((version, tuple(internal), gauss_next))
    n = rng["numpy"]
    key = n["key"].numpy().astype(np.uint32)
    np.random.set_state((n["bit_generator"], key, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and device_type == "cuda":
        torch.cuda.set_rng_state_all(rng["cuda"])


def plain_data(value: Any) -> Any:
    """`value` (config, tokenizer and corpus records) as the plain data `weights_only=True`
    loads: dicts, lists, tuples, str, int, float, bool, None; paths become strings and numpy
    scalars Python numbers. Anything else is a bug here, not something to write."""
    if isinstance(value, dict):
        return {plain_data(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain_data(v) for v in value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Enum):
        return plain_data(value.value)
    if value is None or type(value) in (str, int, float, bool):
        return value
    raise TypeError(f"{type(value).__name__} has no place in a checkpoint: {value!r}")


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
