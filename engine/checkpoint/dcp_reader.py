"""Reading a sharded checkpoint (a DCP directory) someone else could have written, without
running its pickle code: torch's reader unpickles the index with plain `pickle.load`; here an
Unpickler builds only DCP's index classes, every value loads weights-only, and the index is
checked against the directory first, so a damaged or foreign checkpoint is one CheckpointError.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import warnings
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner,
    _EmptyStateDictLoadPlanner,
)
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, StorageMeta

from engine.checkpoint.checkpoint_error import DAMAGED_FILE_ERRORS, CheckpointError

INDEX_NAME = ".metadata"  # DCP's name for the index of a checkpoint directory
_USE_ANOTHER = "use another checkpoint of this run (an older ckpt-*.dcp)"
_TRUSTED_ONLY = "use only checkpoints cockpit wrote (the ckpt-*.dcp of a run directory you trust)"

# Everything DCP's index pickles (torch 2.x): its metadata dataclasses, the storage entries of
# FileSystemWriter, torch.Size, layouts (by name) and the checkpoint id (a path). Building
# these runs no code of the file's choosing: constructors that store their arguments.
_INDEX_GLOBALS = {
    *(
        ("torch.distributed.checkpoint.metadata", name)
        for name in (
            "Metadata",
            "StorageMeta",
            "MetadataIndex",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "TensorProperties",
            "_MEM_FORMAT_ENCODING",
        )
    ),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict"),
}


class _ForeignGlobal(pickle.UnpicklingError):
    """The index names something outside _INDEX_GLOBALS (its `module.name` is the message)."""


class _IndexUnpickler(pickle.Unpickler):
    def __init__(self, file: Any) -> None:
        super().__init__(file)
        # each class handed out, with its attributes then: pickle's BUILD can set attributes on
        # a class object itself, which would outlive this load
        self._classes: dict[type, dict[str, Any]] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _INDEX_GLOBALS:
            found = super().find_class(module, name)
            if isinstance(found, type) and found not in self._classes:
                self._classes[found] = dict(vars(found))
            return found
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise _ForeignGlobal(f"{module}.{name}")

    def load_index(self) -> Any:
        """load(), then any class whose attributes it changed is put back and the index refused."""
        try:
            return self.load()
        finally:
            self._put_classes_back()

    def _put_classes_back(self) -> None:
        changed = []
        for cls, before in self._classes.items():
            now = dict(vars(cls))
            if now.keys() == before.keys() and all(now[k] is before[k] for k in now):
                continue
            changed.append(f"{cls.__module__}.{cls.__qualname__}")
            for key in now.keys() - before.keys():
                delattr(cls, key)
            for key, value in before.items():
                if key not in now or now[key] is not value:
                    setattr(cls, key, value)
        if changed:
            raise _ForeignGlobal(f"attributes set on {', '.join(changed)}")


def read_index(dcp: Path) -> Metadata:
    """The index of the DCP directory `dcp`, read without running code and checked against
    the directory: every file it names is inside it and long enough, and every non-tensor
    value it holds loads weights-only. Anything else is a one-line CheckpointError."""
    index_path = dcp / INDEX_NAME
    try:
        with index_path.open("rb") as f:
            metadata = _IndexUnpickler(f).load_index()
    except FileNotFoundError:
        raise CheckpointError(
            f"{dcp}: no {INDEX_NAME} (an incomplete sharded checkpoint); {_USE_ANOTHER}"
        ) from None
    except _ForeignGlobal as e:
        raise CheckpointError(
            f"{index_path}: this index holds objects a sharded checkpoint's index never holds "
            f"({e}) and cockpit will not run its code; {_TRUSTED_ONLY}"
        ) from None
    except DAMAGED_FILE_ERRORS as e:  # truncated, or not a pickle
        raise _damaged_index(index_path, e) from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.storage_data, dict):
        raise _damaged_index(index_path, TypeError(type(metadata).__name__))
    _check_storage(dcp, metadata)
    _check_values(dcp, metadata)
    return metadata


def _damaged_index(index_path: Path, error: BaseException) -> CheckpointError:
    return CheckpointError(
        f"{index_path}: cannot read this sharded checkpoint's index ({type(error).__name__}); "
        f"it is damaged or not a DCP checkpoint: {_USE_ANOTHER}"
    )


def _check_storage(dcp: Path, metadata: Metadata) -> None:
    """Every file the index names is a file of `dcp` itself, long enough for what it holds."""
    needed: dict[str, int] = {}
    for stored in metadata.storage_data.values():
        if not isinstance(stored, _StorageInfo) or not all(
            type(n) is int and n >= 0 for n in (stored.offset, stored.length)
        ):
            raise _damaged_index(dcp / INDEX_NAME, TypeError("a storage entry"))
        name = stored.relative_path
        parts = PurePosixPath(name).parts if isinstance(name, str) else ()
        if len(parts) != 1 or parts[0] in (".", "..") or "\\" in parts[0]:
            raise CheckpointError(
                f"{dcp / INDEX_NAME}: names a file outside the checkpoint directory ({name!r}); "
                f"cockpit reads only the directory's own files: {_TRUSTED_ONLY}"
            )
        needed[name] = max(needed.get(name, 0), stored.offset + stored.length)
    for name, need in sorted(needed.items()):
        shard = dcp / name
        try:
            size = shard.stat().st_size
        except OSError:
            raise CheckpointError(
                f"{shard}: missing (the checkpoint's index names it); {_USE_ANOTHER}"
            ) from None
        if size < need:
            raise CheckpointError(
                f"{shard}: truncated ({size:,} bytes; the checkpoint's index needs {need:,}); "
                f"{_USE_ANOTHER}"
            )


def _check_values(dcp: Path, metadata: Metadata) -> None:
    """The non-tensor values (DCP's byte items: an optimizer's param_groups, a few bytes each)
    load weights-only: read here, before a resume starts, rather than refused half-way."""
    for index, stored in metadata.storage_data.items():
        if isinstance(metadata.state_dict_metadata.get(index.fqn), BytesStorageMetadata):
            shard = dcp / stored.relative_path
            with shard.open("rb") as f:
                f.seek(stored.offset)
                weights_only_value(f.read(stored.length), index.fqn, shard)


def weights_only_value(data: bytes, fqn: str, shard: Path) -> Any:
    """One of a checkpoint's non-tensor values (`torch.save` bytes) loaded weights-only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected pickle protocol")
        try:
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            foreign = _unsafe_globals(data)
        except DAMAGED_FILE_ERRORS as e:  # truncated or garbled bytes
            raise CheckpointError(
                f"{shard}: cannot read the value {fqn} ({type(e).__name__}); it is damaged: "
                f"{_USE_ANOTHER}"
            ) from None
    raise CheckpointError(
        f"{shard}: the value {fqn} holds objects a checkpoint never holds ({foreign}) and "
        f"cockpit will not run its code; {_TRUSTED_ONLY}"
    )


def _unsafe_globals(data: bytes) -> str:
    """What torch's weights-only unpickler refused, listed from the pickle's opcodes (not run)."""
    try:
        named = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
    except DAMAGED_FILE_ERRORS:
        named = []
    return ", ".join(sorted(named)) or "objects torch does not load weights-only"


class _CheckedReader(FileSystemReader):
    """torch's FileSystemReader, but the index is the one read_index read and checked (never
    its pickle.load)."""

    def __init__(self, dcp: Path, metadata: Metadata) -> None:
        super().__init__(dcp)
        self._metadata = metadata

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = self._metadata
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id  # what FileSystemReader does after loading
        return metadata


class _WeightsOnlyValues:
    """A load planner whose non-tensor values load weights-only (DCP's own: weights_only=False)."""

    dcp: Path

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        from torch.distributed.checkpoint._traverse import set_element

        fqn = read_item.dest_index.fqn
        loaded = weights_only_value(value.getvalue(), fqn, self.dcp)
        if self.flatten_state_dict:  # type: ignore[attr-defined]
            set_element(self.original_state_dict, self.mappings[fqn], loaded)  # type: ignore[attr-defined]
        else:
            self.state_dict[fqn] = loaded  # type: ignore[attr-defined]


class _InPlacePlanner(_WeightsOnlyValues, DefaultLoadPlanner):
    def __init__(self, dcp: Path) -> None:
        super().__init__()
        self.dcp = dcp


class _WholePlanner(_WeightsOnlyValues, _EmptyStateDictLoadPlanner):
    def __init__(self, dcp: Path, keys: set[str]) -> None:
        super().__init__(keys=keys)
        self.dcp = dcp


def load_in_place(dcp: Path, state: dict[str, Any]) -> None:
    """dcp.load into `state` (this run's state dicts, sharded or not), resharding as it goes,
    through the checked index and weights-only values."""
    import torch.distributed.checkpoint as dcp_api

    reader = _CheckedReader(dcp, read_index(dcp))
    with _one_line(dcp):
        dcp_api.load(state, storage_reader=reader, planner=_InPlacePlanner(dcp))


def load_whole(dcp: Path, key: str) -> Any:
    """The whole of one top-level entry (e.g. "model") of a DCP checkpoint, read into this one
    process without a model to load into (what torch's dcp_to_torch_save does, minus the file)."""
    # dcp.load fills only the keys it is given: the empty dict goes to its inner loader, as
    # dcp_to_torch_save does
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    reader = _CheckedReader(dcp, read_index(dcp))
    whole: dict[str, Any] = {}
    with _one_line(dcp):
        _load_state_dict(whole, reader, planner=_WholePlanner(dcp, {key}), no_dist=True)
    if key not in whole:
        raise CheckpointError(f"{dcp}: no {key} in this sharded checkpoint; {_USE_ANOTHER}")
    return whole[key]


@contextlib.contextmanager
def _one_line(dcp: Path) -> Iterator[None]:
    """DCP's failures as one CheckpointError: its CheckpointException (a BaseException that
    carries each rank's traceback) by the first rank's error; ours raised inside come out as
    they were."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        try:
            yield
        except CheckpointError:
            raise
        except CheckpointException as e:
            cause = next(iter(e.failures.values()))[0] if e.failures else e
            if isinstance(cause, CheckpointError):
                raise cause from None
            raise _unloadable(dcp, cause) from None
        except DAMAGED_FILE_ERRORS as e:
            raise _unloadable(dcp, e) from None


def _unloadable(dcp: Path, cause: BaseException) -> CheckpointError:
    # torch's first line when it is short (a size that does not fit); its unpickler's are
    # paragraphs about weights_only that say nothing here
    first = str(cause).strip().split("\n", 1)[0].strip()
    detail = type(cause).__name__
    if first and len(first) <= 120 and not isinstance(cause, pickle.UnpicklingError):
        detail += f": {first}"
    return CheckpointError(
        f"{dcp}: cannot read this sharded checkpoint ({detail}); it is damaged or does not fit "
        f"this run: {_USE_ANOTHER}"
    )
