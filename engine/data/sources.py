"""A corpus source (files on disk or a built-in text) as prepare() reads it: its identity,
its files' signature and sha256, its size, and its documents in pieces."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.run_config import DataConfig
from engine.data.errors import DataError
from engine.data.reader import (
    Piece,
    ReadCounts,
    corpus_format,
    open_regular,
    read_pieces,
    text_pieces,
)
from engine.data.tokenizers import split_at_safe_points


@dataclass(frozen=True)
class Source:
    """Where a corpus comes from, resolved to files on disk or a built-in text."""

    identity: str  # what the cache key covers: a built-in name or a resolved absolute path
    slug: str  # readable part of the prepared directory's name
    description: str  # shown to the user
    files: tuple[Path, ...] = ()
    text: str | None = None  # built-in corpora carry their text instead of files


def source_signature(source: Source) -> list[list[Any]] | None:
    """Path, size and mtime of each source file; None for built-in text or unreadable files."""
    if source.text is not None:
        return None
    try:
        stats = [(path, path.stat()) for path in source.files]
    except OSError:
        return None  # reading the text will explain what is wrong
    return [[str(path), st.st_size, st.st_mtime_ns] for path, st in stats]


def source_sha256(source: Source) -> str:
    """The sha256 prepare() records for a source: the raw bytes of its files joined by a blank
    line (b"\\n\\n"), or a built-in text's UTF-8; read in pieces, never whole."""
    if source.text is not None:
        return hashlib.sha256(source.text.encode("utf-8")).hexdigest()
    hasher = hashlib.sha256()
    for i, path in enumerate(source.files):
        hasher.update(b"\n\n" if i else b"")
        try:
            with open_regular(path) as f:
                while chunk := f.read(1 << 20):
                    hasher.update(chunk)
        except OSError as e:
            raise DataError(
                f"cannot read {path} ({e.strerror or e}); check that it exists and is readable"
            ) from None
    return hasher.hexdigest()


def source_bytes(source: Source) -> int:
    if source.text is not None:
        return len(source.text.encode("utf-8"))
    try:
        return sum(path.stat().st_size for path in source.files)
    except OSError:
        return 0


def source_pieces(
    source: Source,
    cfg: DataConfig,
    counts: ReadCounts,
    hasher: Any,
    chunk_chars: int,
) -> Iterator[Piece]:
    # Char-level pieces may be cut anywhere; BPE pieces only where tokenization is unchanged.
    split = split_at_safe_points if cfg.tokenizer != "char" else _cut_anywhere
    if source.text is not None:
        if hasher is not None:
            hasher.update(source.text.encode("utf-8"))
        return text_pieces(source.text, counts, split, chunk_chars)
    return read_pieces(source.files, cfg.text_field, counts, hasher, split, chunk_chars)


def single_text(source: Source) -> bool:
    """One text file or a built-in text: one document, with no end-of-text token to mark its
    end (a Tiny Shakespeare prepared as nanoGPT does: 338,025 GPT-2 tokens)."""
    return source.text is not None or (
        len(source.files) == 1 and corpus_format(source.files) == "text"
    )


def _cut_anywhere(text: str, chunk_chars: int) -> Iterator[str]:
    for start in range(0, max(len(text), 1), chunk_chars):
        yield text[start : start + chunk_chars]
