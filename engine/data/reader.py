"""Documents out of corpus files, in pieces: text files, JSON lines (plain, .gz, .zst) and
Parquet, read block by block so that memory does not grow with the corpus. The bytes read are
hashed and counted in the same pass."""

from __future__ import annotations

import gzip
import json
import os
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from engine.data.errors import DataError, short_error

READ_BYTES = 1 << 20
TEXT_SUFFIXES = (".txt", ".md", ".py", ".rst", ".json", ".csv", ".html", ".tex")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
PARQUET_SUFFIXES = (".parquet",)
CORPUS_SUFFIXES = TEXT_SUFFIXES + JSONL_SUFFIXES + PARQUET_SUFFIXES
PARQUET_BATCH_ROWS = 1024

# A piece of a document's text, and whether the document ends with it.
Piece = tuple[str, bool]
Splitter = Callable[[str, int], Iterable[str]]


class Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...


@dataclass
class ReadCounts:
    """What reading has gone through so far; prepare() reports it as DataProgress."""

    bytes_read: int = 0
    documents: int = 0
    skipped: int = 0
    first_skip: str = ""  # why the first skipped document was left out, for the user
    saw_text: bool = False  # any character that is not whitespace

    def skip(self, why: str) -> None:
        self.skipped += 1
        self.first_skip = self.first_skip or why


def file_format(path: Path) -> str:
    """'jsonl', 'parquet' or 'text' (any other file named on its own is read as text)."""
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return "text"


def corpus_format(files: Iterable[Path]) -> str:
    """The format of a corpus: that of all its files, or 'mixed'."""
    formats = {file_format(path) for path in files}
    return formats.pop() if len(formats) == 1 else ("mixed" if formats else "text")


def read_pieces(
    files: Iterable[Path],
    text_field: str,
    counts: ReadCounts,
    hasher: Hasher | None,
    split: Splitter,
    chunk_chars: int,
) -> Iterator[Piece]:
    """The documents of the files, in order, cut by `split` into pieces of about chunk_chars.
    The hash covers the files' raw bytes joined by b"\\n\\n" (prepare()'s source sha256)."""
    for i, path in enumerate(files):
        if hasher is not None and i:
            hasher.update(b"\n\n")
        kind = file_format(path)
        if kind == "parquet":
            yield from _parquet_pieces(path, text_field, counts, hasher, split, chunk_chars)
            continue
        with _raw_reader(path, counts, hasher) as raw:
            if kind == "jsonl":
                yield from _jsonl_pieces(path, raw, text_field, counts, split, chunk_chars)
            else:
                yield from _text_pieces(path, raw, counts, split, chunk_chars)


def text_pieces(text: str, counts: ReadCounts, split: Splitter, chunk_chars: int) -> Iterator[Piece]:
    """A built-in corpus (already in memory) as one document."""
    counts.bytes_read += len(text.encode("utf-8"))
    yield from _document(text, counts, split, chunk_chars, "the text is empty")


def _document(
    text: str, counts: ReadCounts, split: Splitter, chunk_chars: int, empty_why: str
) -> Iterator[Piece]:
    if not text:
        counts.skip(empty_why)
        return
    counts.documents += 1
    if not counts.saw_text:
        counts.saw_text = not text.isspace()
    if len(text) <= chunk_chars:  # most documents: one piece
        yield text, True
        return
    pieces = iter(split(text, chunk_chars))
    previous = next(pieces)
    for piece in pieces:
        yield previous, False
        previous = piece
    yield previous, True


# ---------------------------------------------------------------------------------------------
# Raw bytes: read, counted and hashed in one pass


class _CountingReader:
    """A binary file whose reads are counted and hashed, for the decompressors to read from."""

    def __init__(self, f: BinaryIO, counts: ReadCounts, hasher: Hasher | None):
        self._f, self._counts, self._hasher = f, counts, hasher

    def read(self, size: int = -1) -> bytes:
        block = self._f.read(size)
        self._counts.bytes_read += len(block)
        if self._hasher is not None:
            self._hasher.update(block)
        return block

    def readable(self) -> bool:
        return True

    def drain(self) -> None:
        """Read what is left, so the hash covers the whole file."""
        while self.read(READ_BYTES):
            pass


def open_regular(path: Path) -> BinaryIO:
    """The file opened for reading, or a one-line DataError if it cannot be or is not a regular
    file: a FIFO or a device would block open() or read() forever (a corpus folder's listing
    leaves them out; this catches one named on its own or swapped in since)."""
    try:
        # O_NONBLOCK: opening a FIFO that has no writer returns at once instead of waiting for one
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise DataError(
            f"cannot read {path} ({e.strerror or e}); check that it exists and is readable"
        ) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise DataError(
            f"{path} is not a regular file (a {_file_kind(mode)}); point the corpus at text "
            f"files, or copy the data into a file first"
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _file_kind(mode: int) -> str:
    kinds = {stat.S_ISFIFO: "FIFO", stat.S_ISSOCK: "socket", stat.S_ISCHR: "character device"}
    kinds.update({stat.S_ISBLK: "block device", stat.S_ISDIR: "folder"})
    return next((name for test, name in kinds.items() if test(mode)), "special file")


@contextmanager
def _raw_reader(path: Path, counts: ReadCounts, hasher: Hasher | None) -> Iterator[Any]:
    """A readable stream of the file's (decompressed) bytes."""
    f = open_regular(path)
    with f:
        counting = _CountingReader(f, counts, hasher)
        name = path.name.lower()
        try:
            if name.endswith(".gz"):
                with gzip.GzipFile(fileobj=counting, mode="rb") as stream:  # type: ignore[arg-type]
                    yield stream
            elif name.endswith(".zst"):
                with _zstd_reader(path, counting) as stream:
                    yield stream
            else:
                yield counting
            counting.drain()
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(
                f"cannot read {path} ({short_error(e)}); check that it is a complete, "
                f"uncorrupted file"
            ) from None


@contextmanager
def _zstd_reader(path: Path, raw: _CountingReader) -> Iterator[Any]:
    try:
        import zstandard
    except ImportError:
        raise DataError(
            f"{path.name} is zstandard-compressed and the zstandard package is missing; "
            f"pip install 'cockpit[zstd]'"
        ) from None
    try:
        with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as stream:
            yield stream
    except zstandard.ZstdError as e:
        raise DataError(
            f"cannot read {path} ({short_error(e)}); check that it is a complete .zst file"
        ) from None


# ---------------------------------------------------------------------------------------------
# Text files: each one document


def _text_pieces(
    path: Path, raw: Any, counts: ReadCounts, split: Splitter, chunk_chars: int
) -> Iterator[Piece]:
    carry = ""  # decoded text not yet given out (what follows the last safe cut)
    pending = b""  # an incomplete UTF-8 sequence at the end of the last block
    offset = 0  # the file offset of pending's first byte
    started = False  # whether any piece of this document was given out
    while block := raw.read(READ_BYTES):
        nul = block.find(b"\x00")
        if nul != -1:
            raise DataError(
                f"{path} looks binary or UTF-16 (NUL byte at offset {offset + len(pending) + nul}); "
                f"convert it to UTF-8 text or move it out of the corpus"
            )
        data = pending + block
        complete = _complete_utf8_prefix(data)
        text = _decode(data[:complete], path, offset)
        if offset == 0:
            text = text.removeprefix("\ufeff")  # a byte-order mark is not part of the text
        pending, offset = data[complete:], offset + complete
        carry += text
        if len(carry) > chunk_chars:
            pieces = list(split(carry, chunk_chars))
            carry = pieces.pop()
            for piece in pieces:
                if not started:
                    counts.documents += 1
                    started = True
                if not counts.saw_text:
                    counts.saw_text = not piece.isspace()
                yield piece, False
    if pending:
        _decode(pending, path, offset)  # raises: the file ends inside a character
    if started:
        if not counts.saw_text:
            counts.saw_text = bool(carry) and not carry.isspace()
        yield carry, True
    else:
        yield from _document(carry, counts, split, chunk_chars, f"{path.name} is empty")


def _complete_utf8_prefix(data: bytes) -> int:
    """The length of data without a UTF-8 sequence cut off at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII)
            needed = 2 if byte >= 0xC0 else 1
            needed = 3 if byte >= 0xE0 else needed
            needed = 4 if byte >= 0xF0 else needed
            return len(data) - back if needed > back else len(data)
    return len(data)


def _decode(raw: bytes, path: Path, offset: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{path} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {offset + e.start}); "
            f"convert it to UTF-8, e.g. iconv -f latin1 -t utf-8 IN > OUT"
        ) from None


# ---------------------------------------------------------------------------------------------
# JSON lines and Parquet: each record one document


def _jsonl_pieces(
    path: Path, raw: Any, field: str, counts: ReadCounts, split: Splitter, chunk_chars: int
) -> Iterator[Piece]:
    pending = b""
    number = 0
    while block := raw.read(READ_BYTES):
        lines = (pending + block).split(b"\n")
        pending = lines.pop()
        for line in lines:
            number += 1
            yield from _json_record(line, number, path, field, counts, split, chunk_chars)
    if pending:
        yield from _json_record(pending, number + 1, path, field, counts, split, chunk_chars)


def _json_record(
    line: bytes,
    number: int,
    path: Path,
    field: str,
    counts: ReadCounts,
    split: Splitter,
    chunk_chars: int,
) -> Iterator[Piece]:
    if not line.strip():
        return  # a blank line is no record
    try:
        record = json.loads(line)
    except ValueError as e:  # UnicodeDecodeError too
        counts.skip(
            f"line {number} of {path.name} is not a JSON object ({short_error(e)}); each line "
            f"of a .jsonl file must be one"
        )
        return
    yield from _record_text(record, f"{path.name}", field, counts, split, chunk_chars, "field")


def _record_text(
    record: Any,
    where: str,
    field: str,
    counts: ReadCounts,
    split: Splitter,
    chunk_chars: int,
    what: str,
) -> Iterator[Piece]:
    if not isinstance(record, dict) or field not in record:
        has = ", ".join(map(str, record)) if isinstance(record, dict) else type(record).__name__
        counts.skip(
            f"no {field!r} {what} in {where} (its first record has: {has or 'nothing'}); "
            f"set data.text_field"
        )
        return
    value = record[field]
    if not isinstance(value, str):
        counts.skip(
            f"the {field!r} {what} in {where} is not text (a {type(value).__name__}); set "
            f"data.text_field to a text {what}"
        )
        return
    yield from _document(
        value, counts, split, chunk_chars,
        f"the {field!r} {what} in {where} is empty; put text in it or set data.text_field",
    )


def _parquet_pieces(
    path: Path,
    field: str,
    counts: ReadCounts,
    hasher: Hasher | None,
    split: Splitter,
    chunk_chars: int,
) -> Iterator[Piece]:
    parquet = _import_parquet(path)
    size = path.stat().st_size
    if hasher is not None:  # Parquet is read by row groups, not in order: hash it on its own
        with _raw_reader(path, ReadCounts(), hasher) as raw:
            while raw.read(READ_BYTES):
                pass
    try:
        reader = parquet.ParquetFile(path)
        columns = reader.schema_arrow.names
        rows = reader.metadata.num_rows
        if field not in columns:
            counts.skip(
                f"no {field!r} column in {path.name} (its columns: {', '.join(columns)}); "
                f"set data.text_field"
            )
            counts.skipped += max(0, rows - 1)
            counts.bytes_read += size
            return
        done = 0
        start = counts.bytes_read
        for batch in reader.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[field]):
            for value in batch.column(0).to_pylist():
                record = {field: value} if value is not None else {}
                yield from _record_text(
                    record, path.name, field, counts, split, chunk_chars, "column"
                )
            done += batch.num_rows
            counts.bytes_read = start + (size * done // rows if rows else size)
        counts.bytes_read = start + size
    except (OSError, ValueError) as e:  # pyarrow's errors are subclasses of these
        raise DataError(
            f"cannot read {path} as Parquet ({short_error(e)}); check that it is a complete "
            f"Parquet file"
        ) from None


def _import_parquet(path: Path) -> Any:
    try:
        import pyarrow.parquet
    except ImportError:
        raise DataError(
            f"{path.name} is a Parquet file and pyarrow is missing; pip install 'cockpit[parquet]'"
        ) from None
    return pyarrow.parquet
