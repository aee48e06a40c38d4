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

from engine.config.run_config import DataConfig
from engine.data.errors import DataError
from engine.data.prepared import FORMAT_VERSION, TokenWriter, split_meta, token_dtype, write_meta
from engine.data.progress import Reporter, StopPoll
from engine.data.reader import ReadCounts, corpus_format
from engine.data.sources import Source, single_text, source_pieces
from engine.data.text_bytes import BYTE_INDEX_FILE, ByteCounter, write_index
from engine.data.tokenizers import (
    MAX_CODEPOINT,
    CharTokenizer,
    CutPiece,
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


def _encode_batch(tokenizer: Tokenizer, batch: _Batch, separator: str) -> tuple[np.ndarray, int]:
    """The batch's tokens, and how many cuts inside a word in it could not be checked."""
    if tokenizer.end_of_text is None:  # char-level: separators are text, one encode per batch
        text = "".join(
            separator + piece if before else piece
            for piece, before in zip(batch.pieces, batch.separator_before, strict=True)
        )
        return np.asarray(_tokenize(tokenizer, [text])[0], dtype=np.uint32), 0
    # BPE: the pieces' arrays (joined where a piece was cut inside a word) and an end-of-text
    # after each document, concatenated once per batch
    assert isinstance(tokenizer, TiktokenTokenizer)
    end_of_text = np.array([tokenizer.end_of_text], dtype=np.uint32)
    encoded = [np.asarray(ids, dtype=np.uint32) for ids in _tokenize(tokenizer, batch.pieces)]
    encoded, unchecked = tokenizer.join_pieces(batch.pieces, encoded)
    parts: list[np.ndarray] = []
    for ids, after in zip(encoded, batch.end_after, strict=True):
        parts.append(ids)
        if after:
            parts.append(end_of_text)
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)), unchecked


class _JoiningWriter:
    """Appends batches' tokens to the token file; a batch that ends inside a word (its last
    piece a CutPiece) is held until the next one's tokens come, to join the two at the cut."""

    def __init__(self, writer: TokenWriter, tokenizer: Tokenizer):
        self._writer, self._tokenizer = writer, tokenizer
        self._held: np.ndarray | None = None
        self.cuts = 0  # cuts inside a word (CutPiece ends) read so far
        self.unchecked = 0  # of those, the ones whose joining could not be checked

    @property
    def count(self) -> int:
        return self._writer.count + (len(self._held) if self._held is not None else 0)

    def append(self, encoded: tuple[np.ndarray, int], ends_in_cut: bool) -> None:
        tokens, unchecked = encoded
        self.unchecked += unchecked
        if self._held is not None:
            assert isinstance(self._tokenizer, TiktokenTokenizer)
            held, tokens, checked = self._tokenizer.join_at_cut(self._held, tokens)
            self.unchecked += not checked
            self._writer.append(held)
            self._held = None
        if ends_in_cut:
            self._held = tokens
        else:
            self._writer.append(tokens)

    def flush(self) -> None:
        if self._held is not None:  # never: a text's last piece is no CutPiece
            self._writer.append(self._held)
            self._held = None


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
    (out / BYTE_INDEX_FILE).unlink(missing_ok=True)  # the old token file's
    if cfg.tokenizer == "char":
        tokenizer, digest, counts = char_vocabulary(source, cfg, report, stop)
        hasher, chunk_chars = None, CHAR_PIECE_CHARS
    else:
        tokenizer, digest, counts = TiktokenTokenizer(cfg.tokenizer), "", ReadCounts()
        hasher, chunk_chars = hashlib.sha256(), PIECE_CHARS
    dtype = token_dtype(tokenizer.vocab_size)
    batch_chars = max(BATCH_CHARS, 4 * chunk_chars * encode_threads())
    counter = ByteCounter(tokenizer.byte_lengths())
    writer = TokenWriter(out, dtype, counter)
    joined = _JoiningWriter(writer, tokenizer)
    pass_counts, chars = ReadCounts(), 0
    committed = False
    try:
        # One batch encodes (on all cores) while the next is read; a stop does not wait for it.
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cockpit-tokenize")
        try:
            pending: Future[tuple[np.ndarray, int]] | None = None
            pending_cut = False  # whether the pending batch ends inside a word
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
                joined.cuts += isinstance(piece, CutPiece)
                if batch.chars >= batch_chars:
                    if pending is not None:
                        joined.append(pending.result(), pending_cut)
                    pending = pool.submit(_encode_batch, tokenizer, batch, cfg.separator)
                    pending_cut = isinstance(piece, CutPiece)
                    batch = _Batch()
                stop.check()
                report.note = _cut_note(joined) or report.note
                report.emit(pass_counts, joined.count)
            if pending is not None:
                joined.append(pending.result(), pending_cut)
            if batch.pieces:
                joined.append(_encode_batch(tokenizer, batch, cfg.separator), False)
            joined.flush()
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
    write_index(out, counter.index())  # before meta.json: a preparation is whole with it
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
        "text_bytes": counter.total,  # UTF-8 bytes of the text the tokens stand for
        "documents": counts.documents,
        "skipped": counts.skipped,
        "source_bytes": report.total or counts.bytes_read,
        "format": corpus_format(source.files),
        "text_field": cfg.text_field,
        "separator": cfg.separator if cfg.tokenizer == "char" else None,
        # pieces cut inside a word (no safe point near), and those whose tokens at the cut could
        # not be checked to be the whole text's (0 unless a word is very long and odd)
        "cuts_inside_words": joined.cuts,
        "unchecked_cuts": joined.unchecked,
        "prepared_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": round(report.elapsed(), 3),
    }
    # Today's split keys too, for whoever reads meta.json: the split of the run that prepared it.
    meta = split_meta(meta, cfg)
    write_meta(out, meta)
    report.note = _cut_note(joined) or report.note
    report.finish(meta, reused=False)
    return meta


def _cut_note(joined: _JoiningWriter) -> str:
    """What the user must know about cuts inside words: only those that could not be checked
    (a checked cut gives the whole text's tokens)."""
    if not joined.unchecked:
        return ""
    return (
        f"{joined.unchecked} of {joined.cuts} cuts inside very long words could not be checked: "
        f"the tokens at those may differ from encoding the text whole"
    )
