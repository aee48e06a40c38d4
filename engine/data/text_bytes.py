"""How many bytes of text a split's tokens stand for: what bits per byte divide by. Each token id
stands for fixed bytes, and a `ByteIndex` beside the token file (the bytes before every STRIDE-th
token) makes any split cost at most STRIDE lookups; a corpus without one gets it on first need.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.data.prepared import TOKENS_FILE
from engine.files import atomic_write

BYTE_INDEX_FILE = "bytes.idx"
STRIDE = 1 << 20  # tokens between two entries of the index
_MAGIC = 0x62706231  # "bpb1": the layout below
# int64s: magic, stride, tokens, bytes, the token file's mtime (ns: a token file written since,
# by anyone, is not this index's); then the bytes before the end of each whole stride
_HEADER = 5
_CHUNK = 1 << 20  # tokens looked up at once (8 MiB of int64): the memory does not grow with a batch


@dataclass(frozen=True)
class ByteIndex:
    """The text bytes before token STRIDE * (i + 1), for each i; and the file's totals."""

    stride: int
    tokens: int
    total_bytes: int
    marks: np.ndarray  # int64


class ByteCounter:
    """Counts the bytes of token arrays given in order, marking every STRIDE-th token."""

    def __init__(self, lengths: np.ndarray, stride: int = STRIDE) -> None:
        self.lengths, self.stride = lengths, stride
        self.tokens = 0
        self.total = 0
        self._marks: list[int] = []

    def add(self, ids: np.ndarray) -> None:
        for at in range(0, len(ids), _CHUNK):
            self._add(ids[at : at + _CHUNK])

    def _add(self, ids: np.ndarray) -> None:
        lengths = self.lengths[ids]
        start, end = self.tokens, self.tokens + len(ids)
        first = start // self.stride + 1  # the first mark past `start`
        ends = np.arange(first * self.stride, end + 1, self.stride, dtype=np.int64)
        if len(ends):
            running = np.cumsum(lengths, dtype=np.int64)
            self._marks += (self.total + running[ends - start - 1]).tolist()
            self.total += int(running[-1])
        else:
            self.total += int(lengths.sum(dtype=np.int64))
        self.tokens = end

    def index(self) -> ByteIndex:
        return ByteIndex(self.stride, self.tokens, self.total, np.array(self._marks, np.int64))


def count_bytes(tokens: np.ndarray, lengths: np.ndarray) -> int:
    """Bytes of text `tokens` stand for, a chunk at a time (a memory map is never copied whole)."""
    total = 0
    for start in range(0, len(tokens), _CHUNK):
        total += int(lengths[tokens[start : start + _CHUNK]].sum(dtype=np.int64))
    return total


def _token_file_mtime(out: Path) -> int:
    return (out / TOKENS_FILE).stat().st_mtime_ns


def write_index(out: Path, index: ByteIndex) -> None:
    """Write the index of the token file in `out` (as it is now) beside it."""
    header = np.array(
        [_MAGIC, index.stride, index.tokens, index.total_bytes, _token_file_mtime(out)],
        dtype="<i8",
    )
    content = header.tobytes() + index.marks.astype("<i8").tobytes()
    atomic_write(out / BYTE_INDEX_FILE, lambda f: f.write(content))


def read_index(out: Path, total_tokens: int) -> ByteIndex | None:
    """The directory's index if it is one of this token file (as many tokens), else None."""
    try:
        raw = np.fromfile(out / BYTE_INDEX_FILE, dtype="<i8")
        mtime = _token_file_mtime(out)
    except (OSError, ValueError):
        return None
    if len(raw) < _HEADER or raw[0] != _MAGIC or raw[1] <= 0 or raw[2] != total_tokens:
        return None
    if raw[4] != mtime:
        return None
    stride, marks = int(raw[1]), raw[_HEADER:].astype(np.int64)
    if len(marks) != total_tokens // stride or raw[3] < 0:
        return None
    return ByteIndex(stride, total_tokens, int(raw[3]), marks)


def split_bytes(
    train: np.ndarray, val: np.ndarray, lengths: np.ndarray, out: Path | None
) -> tuple[int, int]:
    """(train, val) bytes of text of a split of the token file in `out` (train its first part,
    val the rest). From the directory's index; without one, counted from the tokens, and the
    index written for next time where the directory may be written (None: counted only)."""
    index = read_index(out, len(train) + len(val)) if out is not None else None
    if index is not None:
        whole = len(train) // index.stride
        before = int(index.marks[whole - 1]) if whole else 0
        train_bytes = before + count_bytes(train[whole * index.stride :], lengths)
        return train_bytes, index.total_bytes - train_bytes
    counter = ByteCounter(lengths)
    counter.add(train)
    train_bytes = counter.total
    counter.add(val)
    if out is not None:
        try:
            write_index(out, counter.index())
        except OSError:
            pass  # a cache we may read but not write: counted again next time
    return train_bytes, counter.total - train_bytes
