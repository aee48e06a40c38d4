"""Reading a source's files without running their code: a torch file with `weights_only`
(memory-mapped where it can be), a safetensors file from its header (its shapes before its
tensors, and a cut copy refused before the run starts). Each problem is one refusal line.
"""

from __future__ import annotations

import json
import pickle
import struct
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.checkpoint.checkpoint_error import DAMAGED_FILE_ERRORS
from engine.checkpoint.init_source import WHAT_IT_MAY_BE, refusal

if TYPE_CHECKING:
    import torch


def load_torch_file(given: str, file: Path) -> Any:
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected pickle protocol")
        try:
            return torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except pickle.UnpicklingError:
            raise refusal(
                given,
                f"{file.name} holds objects a checkpoint never holds and cockpit will not run "
                f"its code; give {WHAT_IT_MAY_BE}",
            ) from None
        except DAMAGED_FILE_ERRORS as e:  # not a file of torch's, or one it cannot map
            try:  # a file torch cannot map (an old serialisation format): read it whole
                return torch.load(file, map_location="cpu", weights_only=True)
            except DAMAGED_FILE_ERRORS:
                raise refusal(
                    given,
                    f"{file.name} is not a checkpoint torch can read ({type(e).__name__}); give "
                    f"{WHAT_IT_MAY_BE}",
                ) from None


def safetensors_header(given: str, file: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """A .safetensors file's tensors {name: {"dtype", "shape"}} and metadata, from its header."""
    try:
        with file.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > 100_000_000:
                raise ValueError("header too large")
            header = json.loads(f.read(size))
        if not isinstance(header, dict):
            raise ValueError("header is not a table")
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        raise refusal(given, f"{file.name} is not a safetensors file (its header does not read)") from None
    metadata = header.pop("__metadata__", None) or {}
    try:
        needed = 8 + size + max((int(entry["data_offsets"][1]) for entry in header.values()), default=0)
    except (KeyError, TypeError, ValueError, IndexError):
        raise refusal(given, f"{file.name}: its header's tensor offsets do not read") from None
    if file.stat().st_size < needed:  # checked here, so a cut copy is refused before the run starts
        raise refusal(
            given,
            f"{file.name} is cut short ({file.stat().st_size:,} of the {needed:,} bytes its header "
            "describes): a copy or download that did not finish; copy it again",
        )
    return header, metadata if isinstance(metadata, dict) else {}


def load_safetensors(given: str, file: Path, lazy: bool = False) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors; lazy: shapes only, as tensors on the meta device."""
    if lazy:
        import torch

        header, _ = safetensors_header(given, file)
        try:
            return {
                name: torch.empty([int(n) for n in entry["shape"]], device="meta")
                for name, entry in header.items()
            }
        except (KeyError, TypeError, ValueError):
            raise refusal(given, f"{file.name}: its header's tensor shapes do not read") from None
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise refusal(given, f"{file.name} does not read as safetensors ({type(e).__name__})") from None


def sniffs_safetensors(file: Path) -> bool:
    """A file that starts as safetensors does (an 8-byte header size, then its JSON table),
    whatever its name: `cockpit export --out NAME` writes one under any name."""
    try:
        with file.open("rb") as f:
            start = f.read(9)
    except OSError:
        return False
    return len(start) == 9 and start[8:9] == b"{" and struct.unpack("<Q", start[:8])[0] < 100_000_000
