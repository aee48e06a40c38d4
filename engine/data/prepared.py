"""A prepared corpus on disk: one token file (train and val are a split point in it), its
meta.json written last, and a lock so that two processes never prepare the same corpus at once.

Tokens are appended to `tokens.bin.tmp` and renamed to `tokens.bin` only when complete; meta.json
comes after it, so an interrupted preparation (a signal, a full disk) never looks complete.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from engine.config.run_config import DataConfig
from engine.data.errors import DataError, PreparationStopped
from engine.files import atomic_write, create_new, fsync_dir, open_kept_file

FORMAT_VERSION = 2  # 2: one token file, the split chosen when it is loaded
TOKENS_FILE = "tokens.bin"
META_FILE = "meta.json"
LOCK_FILE = ".lock"
PARTIAL_TOKENS_FILE = TOKENS_FILE + ".tmp"
LOCK_POLL_S = 0.1


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def read_meta(out: Path) -> dict[str, Any] | None:
    """meta.json if the directory holds a complete preparation of this format, else None. A
    meta.json of any other shape than write_meta's (damaged, or written by someone else) is no
    preparation either: the corpus is prepared again rather than loaded as it says."""
    try:
        meta = json.loads((out / META_FILE).read_text(encoding="utf-8"))
        if not _well_formed(meta):
            return None
        expected_bytes = meta["total_tokens"] * np.dtype(meta["dtype"]).itemsize
        complete = (out / TOKENS_FILE).stat().st_size == expected_bytes
    except (OSError, ValueError):
        return None
    return meta if complete else None


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _chars_of(tokenizer: dict[str, Any], vocab_size: int) -> bool:
    """A char tokenizer's characters: one per token id the file may hold."""
    chars = tokenizer.get("chars")
    return isinstance(chars, str) and len(chars) == vocab_size


def _well_formed(meta: Any) -> bool:
    """The fields a prepared corpus is loaded by, of the types build_token_file writes: its
    format, a token count, the token dtype its vocabulary needs, a tokenizer, the source hash."""
    if not isinstance(meta, dict) or not _is_count(meta.get("vocab_size")):
        return False
    tokenizer = meta.get("tokenizer")
    return (
        type(meta.get("format_version")) is int
        and meta["format_version"] == FORMAT_VERSION
        and _is_count(meta.get("total_tokens"))
        and meta.get("dtype") == token_dtype(meta["vocab_size"]).name
        and isinstance(tokenizer, dict)
        and isinstance(tokenizer.get("name"), str)
        and (tokenizer["name"] != "char" or _chars_of(tokenizer, meta["vocab_size"]))
        and isinstance(meta.get("source_sha256"), str)
    )


def has_leftovers(out: Path) -> bool:
    """Whether an interrupted preparation left files behind (read under the lock)."""
    return (out / PARTIAL_TOKENS_FILE).exists() or (
        (out / TOKENS_FILE).exists() and not (out / META_FILE).exists()
    )


def write_meta(out: Path, meta: dict[str, Any]) -> None:
    content = (json.dumps(meta, indent=2) + "\n").encode("utf-8")
    atomic_write(out / META_FILE, lambda f: f.write(content))


def split_sizes(total: int, cfg: DataConfig) -> tuple[int, int]:
    """(train, val) token counts: the last data.val_tokens when set, else, like nanoGPT, the
    last val_fraction of the tokens."""
    if cfg.val_tokens > 0:
        n_val = min(total, cfg.val_tokens)
        return total - n_val, n_val
    n_train = int(total * (1 - cfg.val_fraction))
    return n_train, total - n_train


def check_split(total: int, cfg: DataConfig, source: str) -> None:
    if cfg.val_tokens > 0 and cfg.val_tokens >= total:
        raise DataError(
            f"data.val_tokens = {cfg.val_tokens} but {source} has only {total} tokens, and the "
            f"train split needs more than a block of them; set data.val_tokens well below "
            f"{total}, or to 0 to use data.val_fraction"
        )


def split_meta(meta: dict[str, Any], cfg: DataConfig) -> dict[str, Any]:
    """meta.json's contents with this run's split in today's keys."""
    n_train, n_val = split_sizes(meta["total_tokens"], cfg)
    return {
        **meta,
        "val_fraction": cfg.val_fraction,
        "val_tokens_setting": cfg.val_tokens,
        "train_tokens": n_train,
        "val_tokens": n_val,
    }


def token_splits(out: Path, meta: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Memory maps of the train and val parts of the token file."""
    dtype = np.dtype(meta["dtype"]).newbyteorder("<")
    n_train, total = meta["train_tokens"], meta["total_tokens"]
    if total == 0:  # numpy cannot map an empty file
        return np.zeros(0, dtype=dtype), np.zeros(0, dtype=dtype)
    tokens = np.memmap(out / TOKENS_FILE, dtype=dtype, mode="r", shape=(total,))
    val = tokens[n_train:] if n_train < total else np.zeros(0, dtype=dtype)
    return tokens[:n_train], val


@contextmanager
def exclusive(
    out: Path, on_wait: Callable[[], None], should_stop: Callable[[], bool] | None
) -> Iterator[None]:
    """Hold the prepared directory's lock; another process holding it is waited for. A directory
    this call made and that holds nothing but the lock when the preparation fails (a corpus
    refused, a stop) is removed: a refusal leaves no empty corpus in the cache."""
    made = _made(out)
    try:
        import fcntl
    except ImportError:  # no flock on this platform: one process at a time is up to the user
        with _removed_if_left_empty(out, made):
            yield
        return
    while True:
        fd = open_kept_file(out / LOCK_FILE, os.O_RDWR)  # never through a planted link
        try:
            _wait_for_lock(fd, fcntl, on_wait, should_stop)
            if _still_in_place(fd, out / LOCK_FILE):
                with _removed_if_left_empty(out, made):
                    yield
                return
        finally:
            os.close(fd)  # closing releases the lock
        # the process waited for removed the directory it had made (its corpus was refused):
        # make it again and prepare here
        made = _made(out)


def _wait_for_lock(
    fd: int, fcntl: Any, on_wait: Callable[[], None], should_stop: Callable[[], bool] | None
) -> None:
    waited = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if not waited:
                on_wait()
                waited = True
            if should_stop is not None and should_stop():
                raise PreparationStopped() from None
            time.sleep(LOCK_POLL_S)


def _still_in_place(fd: int, lock: Path) -> bool:
    """Whether the lock file held is still the one at its path (not removed meanwhile)."""
    try:
        held, named = os.fstat(fd), os.stat(lock, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def _made(out: Path) -> bool:
    try:
        out.mkdir(parents=True)
        return True
    except FileExistsError:
        return False


@contextmanager
def _removed_if_left_empty(out: Path, made: bool) -> Iterator[None]:
    """On a failure inside, remove `out` if this preparation made it and it holds only the
    lock (its partial files are already gone): the lock first, so a waiter sees it removed."""
    done = False
    try:
        yield
        done = True
    finally:
        if made and not done:
            _remove_if_empty(out)


def _remove_if_empty(out: Path) -> None:
    try:
        if set(os.listdir(out)) <= {LOCK_FILE}:
            (out / LOCK_FILE).unlink(missing_ok=True)
            out.rmdir()
    except OSError:
        pass  # something else is in it now, or it is gone: leave it


class TokenWriter:
    """Appends token arrays to tokens.bin.tmp; commit() renames it to tokens.bin. `counter`
    (a ByteCounter) is given each array too: the text bytes they stand for."""

    def __init__(self, out: Path, dtype: np.dtype, counter: Any = None):
        self.out, self.dtype, self.count = out, dtype, 0
        self.counter = counter
        self._path = out / PARTIAL_TOKENS_FILE
        self._path.unlink(missing_ok=True)  # a killed preparation's (or a link left there)
        self._file = create_new(self._path)  # FILE_MODE, as atomic_write makes them

    def append(self, ids: np.ndarray) -> None:
        self._file.write(ids.astype(self.dtype, copy=False).tobytes())
        self.count += len(ids)
        if self.counter is not None:
            self.counter.add(ids)

    def commit(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._path, self.out / TOKENS_FILE)
        fsync_dir(self.out)

    def discard(self) -> None:
        """Close and remove the partial file (nothing is left that looks complete)."""
        self._file.close()
        self._path.unlink(missing_ok=True)
