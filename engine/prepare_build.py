"""Building a prepared corpus: its documents read in pieces, tokenized in batches (one batch
encoding across the cores while the next is read) and appended to the token file, then
meta.json. Memory does not grow with the corpus. A char-level build first reads the corpus once
for its vocabulary (char_vocabulary); a BPE build hashes the text in its one pass."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from engine.config import DataConfig
from engine.corpus_reader import ReadCounts, corpus_format
from engine.corpus_sources import Source, single_text, source_pieces
from engine.data_errors import DataError
from engine.prepare_progress import Reporter, StopPoll
from engine.prepared_files import FORMAT_VERSION, TokenWriter, split_meta, token_dtype, write_meta
from engine.tokenizers import (
    MAX_CODEPOINT,
    CharTokenizer,
    TiktokenTokenizer,
    Tokenizer,
    codepoints,
    encode_threads,
)

# Streaming: BPE pieces of about PIECE_CHARS characters go to the encoder in batches of about
# BATCH_CHARS, one batch encoding (across the cores) while the next is read: the memory in
# flight is a few batches, whatever the corpus's size.
PIECE_CHARS = 1 << 18
BATCH_CHARS = 2 << 20  # at least; more with more cores (4 pieces a core)
CHAR_PIECE_CHARS = 1 << 20


def _check_documents(counts: ReadCounts, source: Source) -> None:
    """A one-line DataError when the corpus gave no text to train on."""
    if counts.documents == 0 and counts.skipped and corpus_format(source.files) != "text":
        raise DataError(f"no usable document in {source.description}: {counts.first_skip}")
    if not counts.saw_text:
        what = "is empty (0 bytes)" if counts.documents == 0 else "holds only whitespace"
        raise DataError(
            f"the corpus {source.description} {what}; put some text in it or set data.source "
            f"to another file, a folder, 'pydoc' or 'tinyshakespeare'"
        )


def char_vocabulary(
    source: Source, cfg: DataConfig, report: Reporter | None, stop: StopPoll
) -> tuple[CharTokenizer, str, ReadCounts]:
    """The first pass of a char-level preparation: the corpus's characters (the separator's
    too when there are several documents), its sha256 and its figures."""
    counts, hasher = ReadCounts(), hashlib.sha256()
    seen = np.zeros(MAX_CODEPOINT + 1, dtype=bool)
    for piece, _ in source_pieces(source, cfg, counts, hasher, CHAR_PIECE_CHARS):
        seen[codepoints(piece)] = True
        stop.check()
        if report is not None:
            report.emit(counts, 0)
    _check_documents(counts, source)
    if counts.documents > 1:
        seen[codepoints(cfg.separator)] = True
    chars = "".join(map(chr, np.flatnonzero(seen).tolist()))
    return CharTokenizer(chars), hasher.hexdigest(), counts


def _tokenize(tokenizer: Tokenizer, pieces: Sequence[str]) -> list[Sequence[int] | np.ndarray]:
    """The one expensive step of prepare(): a batch of pieces to token arrays (a seam for
    tests that count how often it runs)."""
    return tokenizer.encode_pieces(pieces)


@dataclass
class _Batch:
    """Pieces to encode together, and what goes around each one's tokens."""

    pieces: list[str] = field(default_factory=list)
    separator_before: list[bool] = field(default_factory=list)  # char: between documents
    end_after: list[bool] = field(default_factory=list)  # BPE: end-of-text after a document
    chars: int = 0


def _encode_batch(tokenizer: Tokenizer, batch: _Batch, separator: str) -> np.ndarray:
    if tokenizer.end_of_text is None:  # char-level: separators are text, one encode per batch
        text = "".join(
            separator + piece if before else piece
            for piece, before in zip(batch.pieces, batch.separator_before, strict=True)
        )
        return np.asarray(_tokenize(tokenizer, [text])[0], dtype=np.uint32)
    # BPE: the pieces' arrays and an end-of-text after each document, joined once per batch
    end_of_text = np.array([tokenizer.end_of_text], dtype=np.uint32)
    parts: list[np.ndarray] = []
    for ids, after in zip(_tokenize(tokenizer, batch.pieces), batch.end_after, strict=True):
        parts.append(np.asarray(ids, dtype=np.uint32))
        if after:
            parts.append(end_of_text)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)


def build_token_file(
    out: Path,
    source: Source,
    signature: list[list[Any]] | None,
    cfg: DataConfig,
    report: Reporter,
    stop: StopPoll,
) -> dict[str, Any]:
    """Read, tokenize and write the corpus; meta.json last. Called under the directory's lock."""
    (out / "meta.json").unlink(missing_ok=True)  # a rebuild cut short must never look ready
    if cfg.tokenizer == "char":
        tokenizer, digest, counts = char_vocabulary(source, cfg, report, stop)
        hasher, chunk_chars = None, CHAR_PIECE_CHARS
    else:
        tokenizer, digest, counts = TiktokenTokenizer(cfg.tokenizer), "", ReadCounts()
        hasher, chunk_chars = hashlib.sha256(), PIECE_CHARS
    dtype = token_dtype(tokenizer.vocab_size)
    batch_chars = max(BATCH_CHARS, 4 * chunk_chars * encode_threads())
    writer = TokenWriter(out, dtype)
    pass_counts, chars = ReadCounts(), 0
    committed = False
    try:
        # One batch encodes (on all cores) while the next is read; a stop does not wait for it.
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cockpit-tokenize")
        try:
            pending: Future[np.ndarray] | None = None
            batch, starts = _Batch(), True
            bpe = tokenizer.end_of_text is not None
            ends_marked = bpe and not single_text(source)
            for piece, ends in source_pieces(source, cfg, pass_counts, hasher, chunk_chars):
                batch.pieces.append(piece)
                batch.separator_before.append(starts and not bpe and pass_counts.documents > 1)
                batch.end_after.append(ends and ends_marked)
                batch.chars += len(piece)
                chars += len(piece)
                starts = ends
                if batch.chars >= batch_chars:
                    if pending is not None:
                        writer.append(pending.result())
                    pending = pool.submit(_encode_batch, tokenizer, batch, cfg.separator)
                    batch = _Batch()
                stop.check()
                report.emit(pass_counts, writer.count)
            if pending is not None:
                writer.append(pending.result())
            if batch.pieces:
                writer.append(_encode_batch(tokenizer, batch, cfg.separator))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        if hasher is not None:
            _check_documents(pass_counts, source)
            digest, counts = hasher.hexdigest(), pass_counts
        stop.check()
        writer.commit()
        committed = True
    finally:
        if not committed:
            writer.discard()
    meta = {
        "format_version": FORMAT_VERSION,
        "source": source.description,
        "source_identity": source.identity,
        "source_sha256": digest,
        "source_signature": signature,
        "text_chars": chars,
        "tokenizer": tokenizer.to_meta(),
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.name,
        "total_tokens": writer.count,
        "documents": counts.documents,
        "skipped": counts.skipped,
        "source_bytes": report.total or counts.bytes_read,
        "format": corpus_format(source.files),
        "text_field": cfg.text_field,
        "separator": cfg.separator if cfg.tokenizer == "char" else None,
        "prepared_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": round(report.elapsed(), 3),
    }
    # Today's split keys too, for whoever reads meta.json: the split of the run that prepared it.
    meta = split_meta(meta, cfg)
    write_meta(out, meta)
    report.finish(meta, reused=False)
    return meta
