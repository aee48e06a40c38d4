"""Preparing a run's corpus: prepare() finds the source, reuses its token file or builds it once
(under the directory's lock, written atomically, in a cache folder keyed by source and
tokenizer), and loads the run's train/val split, memory-mapped. Every problem a user can cause
is a one-line DataError naming the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.config.run_config import DataConfig
from engine.data.build import build_token_file
from engine.data.cache_dirs import check_cache_dir, default_cache_dir, prepared_dir, write_error
from engine.data.errors import DataError
from engine.data.locator import path_source, resolve_source
from engine.data.prepared import (
    check_split,
    exclusive,
    has_leftovers,
    read_meta,
    split_meta,
    token_splits,
    write_meta,
)
from engine.data.progress import Reporter, StopPoll
from engine.data.reader import ReadCounts
from engine.data.record import source_record
from engine.data.sources import Source, source_bytes, source_sha256, source_signature
from engine.data.text_bytes import split_bytes
from engine.data.tinyshakespeare import TINYSHAKESPEARE_HINT, find_tinyshakespeare
from engine.data.tokenizers import Tokenizer, check_tokenizer_name, tokenizer_from_meta
from engine.events import DataProgress

__all__ = [
    "STAND_IN_NOTE",
    "DataError",  # imported from here in many places
    "PreparedData",
    "check_length",
    "data_available",
    "is_stand_in_corpus",
    "prepare",
]


@dataclass
class PreparedData:
    """What prepare() returns: a run's split of the token file, its tokenizer and meta.json."""

    train: np.ndarray  # np.memmap of token ids (an empty array when the split is empty)
    val: np.ndarray
    tokenizer: Tokenizer
    meta: dict[str, Any]  # the contents of meta.json
    source: str  # human-readable description of the corpus
    record: dict[str, Any] = field(default_factory=dict)  # source_record(): what a resume checks
    directory: Path | None = None  # the prepared directory (None: arrays made by hand)
    _split_bytes: tuple[int, int] | None = field(default=None, init=False, repr=False)
    _bytes_counted: bool = field(default=False, init=False, repr=False)

    def split_bytes(self) -> tuple[int, int] | None:
        """(train, val) UTF-8 bytes of the text each split's tokens stand for, counted on the
        first call (from the directory's byte index, or the tokens); None where they cannot
        be counted: a run never fails for want of them (its bits per byte are then unknown)."""
        if not self._bytes_counted:
            self._bytes_counted = True
            try:
                lengths = self.tokenizer.byte_lengths()
                self._split_bytes = split_bytes(self.train, self.val, lengths, self.directory)
            except (OSError, ValueError, IndexError, NotImplementedError, DataError):
                self._split_bytes = None
        return self._split_bytes


def prepare(
    cfg: DataConfig,
    data_path: str | None = None,
    cache_dir: Path | None = None,
    download: bool = True,
    progress: Callable[[DataProgress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> PreparedData:
    """Tokenize the corpus into a memory-mapped token file, or reuse it if still current.

    `progress` is called (from this thread) at most every PROGRESS_INTERVAL_S while preparing
    and always once with done=True; `should_stop` is polled between pieces and, when it says
    so, the preparation stops, removes its partial files and raises PreparationStopped.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    check_tokenizer_name(cfg.tokenizer)
    check_cache_dir(cache_dir)  # before a download or a corpus there is read
    source = resolve_source(cfg, data_path, cache_dir, download)
    out = prepared_dir(source.identity, source.slug, cfg, cache_dir)
    report = Reporter(progress, source.description, source_bytes(source), cfg.tokenizer)
    signature = source_signature(source)
    meta = read_meta(out)
    # Unchanged size and mtime of every file: trust the earlier hash instead of re-reading.
    if meta is not None and signature is not None and meta.get("source_signature") == signature:
        return _reused(out, meta, source, cfg, report)
    stop = StopPoll(should_stop)

    def on_wait() -> None:
        report.note = "another process is preparing this corpus: waiting for it to finish"
        report.emit(ReadCounts(), 0, force=True)

    try:
        with exclusive(out, on_wait, should_stop):
            check_cache_dir(cache_dir)  # made by now: a link planted at its name is refused
            meta = read_meta(out)  # the process waited for may have prepared it
            if meta is not None and meta.get("source_signature") == signature:
                return _reused(out, meta, source, cfg, report)
            if meta is not None and meta.get("source_sha256") == source_sha256(source):
                meta["source_signature"] = signature  # touched or moved, but identical
                write_meta(out, meta)
                return _reused(out, meta, source, cfg, report)
            if has_leftovers(out):
                report.note = "an interrupted preparation was found and started over"
            meta = build_token_file(out, source, signature, cfg, report, stop)
    except OSError as e:
        raise write_error(out, e) from None
    return _load(out, meta, source, cfg)


def _reused(
    out: Path, meta: dict[str, Any], source: Source, cfg: DataConfig, report: Reporter
) -> PreparedData:
    loaded = _load(out, meta, source, cfg)
    report.finish(meta, reused=True)
    return loaded


def _load(out: Path, meta: dict[str, Any], source: Source, cfg: DataConfig) -> PreparedData:
    check_split(meta["total_tokens"], cfg, source.description)
    meta = split_meta(meta, cfg)
    train, val = token_splits(out, meta)
    return PreparedData(
        train=train,
        val=val,
        tokenizer=tokenizer_from_meta(meta["tokenizer"]),
        meta=meta,
        source=source.description,
        record=source_record(source, meta),
        directory=out,
    )


def check_length(data: PreparedData, block_size: int) -> None:
    """Both splits need more than block_size + 1 tokens to cut (input, target) windows from."""
    for split, tokens in (("train", data.train), ("val", data.val)):
        n = len(tokens)
        if n == 0 and split == "val":
            raise DataError(
                f"the val split of {data.source} is empty (data.val_fraction = "
                f"{data.meta.get('val_fraction')}); set data.val_fraction to e.g. 0.1"
            )
        held_out = data.meta.get("val_tokens_setting") or 0
        if n <= block_size + 1 and split == "train" and held_out:
            raise DataError(
                f"the train split of {data.source} has only {n} tokens after data.val_tokens = "
                f"{held_out} are held out, too few for model.block_size = {block_size}; set "
                f"data.val_tokens <= {max(0, n + held_out - block_size - 2)}"
            )
        if n <= block_size + 1:
            smaller = f"model.block_size <= {n - 2} or " if n > 2 else ""
            raise DataError(
                f"the {split} split of {data.source} has only {n} tokens, too few for "
                f"model.block_size = {block_size}; use {smaller}more text"
            )


STAND_IN_NOTE = "stand-in corpus (pydoc): pass --data"


def is_stand_in_corpus(cfg: DataConfig, data_path: str | None = None) -> bool:
    """Whether the corpus only stands in for the user's own: the offline Python docs under a
    BPE tokenizer. At about 110K BPE tokens pydoc is far too small for the presets that pair it
    with one (gpt2-small, local-300m: their TOML says it is an offline placeholder for --data);
    `default` and `tiny` train on pydoc char by char on purpose."""
    return cfg.source == "pydoc" and data_path is None and cfg.tokenizer != "char"


def data_available(
    cfg: DataConfig, data_path: str | None = None, cache_dir: Path | None = None
) -> tuple[bool, str]:
    """Whether prepare() can work without the network, cheaply: no tokenizing, no download.

    The note says why not, or where the data comes from; for a stand-in corpus
    (`is_stand_in_corpus`) it is STAND_IN_NOTE: usable, but not what the preset is meant for.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    try:
        check_tokenizer_name(cfg.tokenizer)
        if cfg.source == "tinyshakespeare":
            path = find_tinyshakespeare(data_path, cache_dir)
            if path is None:
                return False, (
                    f"Tiny Shakespeare is not downloaded yet (1.1 MB; starting will try to "
                    f"download it); offline, {TINYSHAKESPEARE_HINT}"
                )
            identity, slug, found = "tinyshakespeare", "tinyshakespeare", "local file"
        elif is_stand_in_corpus(cfg, data_path):
            return True, STAND_IN_NOTE
        elif cfg.source == "pydoc" and data_path is None:
            identity, slug, found = "pydoc", "pydoc", "built in, offline"
        else:
            where = "--data" if data_path is not None else "data.source"
            source = path_source(
                data_path if data_path is not None else cfg.source, where, cache_dir
            )
            if len(source.files) == 1 and source.files[0].stat().st_size == 0:
                return False, f"{source.files[0]} is empty (0 bytes); put some text in it"
            identity, slug, found = source.identity, source.slug, source.description
    except (DataError, OSError) as e:
        return False, str(e)
    out = prepared_dir(identity, slug, cfg, cache_dir)
    return True, ("prepared" if (out / "meta.json").is_file() else found)
