"""Corpora and prepared token files.

`prepare()` turns a data source (the offline Python docs, Tiny Shakespeare, or the user's own
text, JSON lines or Parquet files) into one token file plus `meta.json`, once, in a cache
directory keyed by the source and the tokenizer; later runs memory-map it and cut their own
train/val split. The corpus is read in pieces, tokenized in parallel and appended to the token
file as it goes, so memory does not grow with the corpus. Every problem a user can cause is a
DataError whose one-line message names the problem and the fix.

The parts: engine/tokenizers.py (tokenizers, safe cuts), engine/corpus_reader.py (documents out
of files), engine/prepared_files.py (the token file, meta.json, the lock); this module finds the
sources and runs the preparation. It re-exports what other modules import from it.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import sys
import sysconfig
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from engine.config import DataConfig
from engine.corpus_reader import (
    CORPUS_SUFFIXES,
    TEXT_SUFFIXES,
    ReadCounts,
    corpus_format,
)
from engine.corpus_sources import (
    Source,
    single_text,
    source_bytes,
    source_pieces,
    source_sha256,
    source_signature,
)
from engine.data_errors import DataError, PreparationStopped
from engine.data_errors import short_error as _short
from engine.events import DataProgress
from engine.files import atomic_write
from engine.prepare_progress import Reporter, StopPoll
from engine.prepared_files import (
    FORMAT_VERSION,
    TokenWriter,
    check_split,
    exclusive,
    has_leftovers,
    split_meta,
    token_dtype,
    token_splits,
    write_meta,
)
from engine.prepared_files import read_meta as _read_meta
from engine.tokenizers import (
    ENCODE_CHUNK_CHARS,
    MAX_CODEPOINT,
    CharTokenizer,
    TiktokenTokenizer,
    Tokenizer,
    _is_safe_cut,
    _split_at_safe_newlines,
    codepoints,
    encode_threads,
    split_at_safe_points,
    tokenizer_from_meta,
)
from engine.tokenizers import check_tokenizer_name as _check_tokenizer_name

__all__ = [
    "CORPUS_SUFFIXES",
    "ENCODE_CHUNK_CHARS",
    "FORMAT_VERSION",
    "TEXT_SUFFIXES",
    "CharTokenizer",
    "DataError",
    "PreparationStopped",
    "PreparedData",
    "Source",
    "TiktokenTokenizer",
    "Tokenizer",
    "_is_safe_cut",
    "_split_at_safe_newlines",
    "check_length",
    "data_available",
    "default_cache_dir",
    "is_stand_in_corpus",
    "prepare",
    "resolve_source",
    "source_record",
    "source_sha256",
    "split_at_safe_points",
    "tokenizer_from_meta",
    "vocab_fingerprint",
]

TINYSHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINYSHAKESPEARE_ENV = "COCKPIT_TINYSHAKESPEARE"
TINYSHAKESPEARE_HINT = f"pass --data PATH/TO/input.txt or set {TINYSHAKESPEARE_ENV}=PATH"
DOWNLOAD_TIMEOUT_S = 10.0
STDLIB_CAP_BYTES = 2_000_000
# Streaming: BPE pieces of about PIECE_CHARS characters go to the encoder in batches of about
# BATCH_CHARS, one batch encoding (across the cores) while the next is read: the memory in
# flight is a few batches, whatever the corpus's size.
PIECE_CHARS = 1 << 18
BATCH_CHARS = 2 << 20  # at least; more with more cores (4 pieces a core)
CHAR_PIECE_CHARS = 1 << 20
_REPO_ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# Sources


@dataclass
class PreparedData:
    train: np.ndarray  # np.memmap of token ids (an empty array when the split is empty)
    val: np.ndarray
    tokenizer: Tokenizer
    meta: dict[str, Any]  # the contents of meta.json
    source: str  # human-readable description of the corpus
    record: dict[str, Any] = field(default_factory=dict)  # source_record(): what a resume checks


def default_cache_dir() -> Path:
    """$COCKPIT_CACHE_DIR, else <repo>/data/cache in a source checkout, else the user cache."""
    env = os.environ.get("COCKPIT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    if (_REPO_ROOT / "pyproject.toml").is_file() and (_REPO_ROOT / "data").is_dir():
        return _REPO_ROOT / "data" / "cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "cockpit"


def resolve_source(
    cfg: DataConfig,
    data_path: str | None = None,
    cache_dir: Path | None = None,
    download: bool = True,
) -> Source:
    """Find the corpus: download Tiny Shakespeare if needed, list a folder's text files."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if cfg.source == "tinyshakespeare":
        path = _find_tinyshakespeare(data_path, cache_dir)
        if path is None:
            path = _fetch_tinyshakespeare(cache_dir, download)
        return _tinyshakespeare_source(path)
    if cfg.source == "pydoc" and data_path is None:
        text, description = _pydoc_text()
        return Source("pydoc", "pydoc", description, text=text)
    if data_path is not None:
        return _path_source(data_path, "--data", cache_dir)
    return _path_source(cfg.source, "data.source", cache_dir)


def _pydoc_text() -> tuple[str, str]:
    """The offline corpus: pydoc's help topics (about 465 KB), else standard library sources."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return _stdlib_text()
    version = ".".join(map(str, sys.version_info[:2]))
    text = "\n\n".join(topics[key] for key in sorted(topics))
    return text, f"Python {version} documentation topics (pydoc_data)"


def _stdlib_text() -> tuple[str, str]:
    # Top-level modules only: a recursive walk would reach site-packages, which differs per machine.
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    size = 0
    for path in sorted(stdlib.glob("*.py")):
        if size >= STDLIB_CAP_BYTES:
            break
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text.encode("utf-8"))
    if not parts:
        raise DataError(
            "no offline corpus: pydoc_data and the standard library sources are both missing; "
            "set data.source to 'tinyshakespeare' or a path to text files"
        )
    return "\n\n".join(parts), f"Python standard library sources ({stdlib})"


def _tinyshakespeare_source(path: Path) -> Source:
    # One identity for every copy, so a copy moved elsewhere still finds its prepared tokens.
    return Source("tinyshakespeare", "tinyshakespeare", f"Tiny Shakespeare ({path})", (path,))


def _find_tinyshakespeare(data_path: str | None, cache_dir: Path) -> Path | None:
    """A local copy, in priority order: --data, the environment, an earlier download."""
    if data_path is not None:
        return _existing_file(data_path, "--data")
    env = os.environ.get(TINYSHAKESPEARE_ENV)
    if env:
        return _existing_file(env, TINYSHAKESPEARE_ENV)
    cached = _download_path(cache_dir)
    return cached if cached.is_file() else None


def _existing_file(raw: str, where: str) -> Path:
    path = Path(raw).expanduser().resolve()
    if path.is_dir() and (path / "input.txt").is_file():
        path = path / "input.txt"
    if not path.is_file():
        raise DataError(
            f"{where} {raw}: no such file ({path}); point it at Tiny Shakespeare's input.txt"
        )
    return path


def _download_path(cache_dir: Path) -> Path:
    return cache_dir / "downloads" / "tinyshakespeare.txt"


def _download(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def _fetch_tinyshakespeare(cache_dir: Path, download: bool) -> Path:
    if not download:
        raise DataError(
            f"Tiny Shakespeare is not downloaded and downloading is off; {TINYSHAKESPEARE_HINT}"
        )
    try:
        raw = _download(TINYSHAKESPEARE_URL, DOWNLOAD_TIMEOUT_S)
    except (
        OSError,
        http.client.HTTPException,
        ValueError,
    ) as e:  # URLError and timeouts are OSErrors
        raise DataError(
            f"Tiny Shakespeare is not available offline (download failed: {_short(e)}); "
            f"{TINYSHAKESPEARE_HINT}"
        ) from None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != TINYSHAKESPEARE_SHA256:
        raise DataError(
            f"the Tiny Shakespeare download is corrupt (sha256 {digest[:12]}..., expected "
            f"{TINYSHAKESPEARE_SHA256[:12]}...); try again, or {TINYSHAKESPEARE_HINT}"
        )
    target = _download_path(cache_dir)
    _write_or_explain(target.parent, lambda: _atomic_write(target, raw))
    return target


def _path_source(raw: str, where: str, cache_dir: Path) -> Source:
    path = Path(raw).expanduser().resolve()
    if not path.exists():
        raise DataError(
            f"{where} {raw}: no such file or folder ({path}); fix the path, or use "
            f"data.source = 'pydoc' or 'tinyshakespeare'"
        )
    if not path.is_dir():
        return Source(str(path), _slug(path.stem), f"file {path}", (path,))
    files = _text_files(path, exclude=cache_dir)
    if not files:
        patterns = ", ".join("*" + suffix for suffix in CORPUS_SUFFIXES)
        raise DataError(
            f"{where} {raw}: no text files ({patterns}) in folder {path}; add some or point "
            f"{where} at a text file"
        )
    return Source(str(path), _slug(path.name), f"folder {path} ({len(files)} files)", tuple(files))


def _text_files(root: Path, exclude: Path) -> list[Path]:
    """Corpus files (text, JSON lines, Parquet) under root, sorted by relative path, skipping hidden entries and the cache."""
    # The cache must stay out: its meta.json would otherwise join the corpus it describes.
    exclude = exclude.resolve()
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [
            d for d in dirnames if not d.startswith(".") and (here / d).resolve() != exclude
        ]
        found += [
            here / name
            for name in filenames
            if name.lower().endswith(CORPUS_SUFFIXES) and not name.startswith(".")
        ]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_.]+", "-", name.lower()).strip("-.")[:40] or "data"


# ---------------------------------------------------------------------------------------------
# Preparing and loading the token file


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
    _check_tokenizer_name(cfg.tokenizer)
    source = resolve_source(cfg, data_path, cache_dir, download)
    out = _prepared_dir(source.identity, source.slug, cfg, cache_dir)
    report = Reporter(progress, source.description, source_bytes(source), cfg.tokenizer)
    signature = source_signature(source)
    meta = _read_meta(out)
    # Unchanged size and mtime of every file: trust the earlier hash instead of re-reading.
    if meta is not None and signature is not None and meta.get("source_signature") == signature:
        return _reused(out, meta, source, cfg, report)
    stop = StopPoll(should_stop)

    def on_wait() -> None:
        report.note = "another process is preparing this corpus: waiting for it to finish"
        report.emit(ReadCounts(), 0, force=True)

    try:
        with exclusive(out, on_wait, should_stop):
            meta = _read_meta(out)  # the process waited for may have prepared it
            if meta is not None and meta.get("source_signature") == signature:
                return _reused(out, meta, source, cfg, report)
            if meta is not None and meta.get("source_sha256") == source_sha256(source):
                meta["source_signature"] = signature  # touched or moved, but identical
                write_meta(out, meta)
                return _reused(out, meta, source, cfg, report)
            if has_leftovers(out):
                report.note = "an interrupted preparation was found and started over"
            meta = _build(out, source, signature, cfg, report, stop)
    except OSError as e:
        raise _write_error(out, e) from None
    return _load(out, meta, source, cfg)


def _reused(
    out: Path, meta: dict[str, Any], source: Source, cfg: DataConfig, report: Reporter
) -> PreparedData:
    loaded = _load(out, meta, source, cfg)
    report.finish(meta, reused=True)
    return loaded


def _prepared_dir(identity: str, slug: str, cfg: DataConfig, cache_dir: Path) -> Path:
    """The corpus's directory: one per source, tokenizer and way of reading documents (the
    split is not part of it: every split is cut from the same token file)."""
    key = {"source": identity, "tokenizer": cfg.tokenizer, "format": FORMAT_VERSION}
    key["text_field"] = cfg.text_field
    if cfg.tokenizer == "char":
        key["separator"] = cfg.separator
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:12]
    return cache_dir / f"{slug}-{_slug(cfg.tokenizer)}-{digest}"


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


def _char_vocabulary(
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


def _build(
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
        tokenizer, digest, counts = _char_vocabulary(source, cfg, report, stop)
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


def _write_error(where: Path, e: OSError) -> DataError:
    return DataError(
        f"cannot write prepared data to {where} ({e.strerror or e}); free some disk space or "
        f"set COCKPIT_CACHE_DIR to a writable folder"
    )


def _atomic_write(path: Path, content: bytes) -> None:
    """Bytes to `path` through engine/files.py, making its folder first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: f.write(content))


def _write_or_explain(where: Path, write: Callable[[], None]) -> None:
    try:
        write()
    except OSError as e:
        raise _write_error(where, e) from None


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
    )


# ---------------------------------------------------------------------------------------------
# The corpus a run trained on: recorded at the start, checked when it resumes

def _kind_and_path(identity: str, files: Sequence[Any]) -> tuple[str, str | None]:
    if identity == "pydoc":
        return "pydoc", None
    if identity == "tinyshakespeare":
        return "tinyshakespeare", str(files[0]) if files else None
    return "path", identity  # a path source's identity is its resolved absolute path


def vocab_fingerprint(tokenizer_meta: dict[str, Any]) -> str:
    """A short hash of a tokenizer's to_meta(): equal fingerprints, same token ids."""
    text = json.dumps(tokenizer_meta, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def source_record(source: Source, meta: dict[str, Any]) -> dict[str, Any]:
    """Where a run's corpus came from, for its checkpoints and run_started record:
    source (pydoc, tinyshakespeare or path), absolute path, sha256 of the text, tokenizer."""
    kind, path = _kind_and_path(source.identity, source.files)
    return {
        "source": kind,
        "path": path,
        "description": source.description,
        "sha256": meta["source_sha256"],
        "tokenizer": meta["tokenizer"]["name"],
        "vocab_size": meta["vocab_size"],
        "vocab_fingerprint": vocab_fingerprint(meta["tokenizer"]),
    }


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
        _check_tokenizer_name(cfg.tokenizer)
        if cfg.source == "tinyshakespeare":
            path = _find_tinyshakespeare(data_path, cache_dir)
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
            source = _path_source(
                data_path if data_path is not None else cfg.source, where, cache_dir
            )
            if len(source.files) == 1 and source.files[0].stat().st_size == 0:
                return False, f"{source.files[0]} is empty (0 bytes); put some text in it"
            identity, slug, found = source.identity, source.slug, source.description
    except (DataError, OSError) as e:
        return False, str(e)
    out = _prepared_dir(identity, slug, cfg, cache_dir)
    return True, ("prepared" if (out / "meta.json").is_file() else found)


_signature = source_signature  # the name engine/resume_corpus.py and older callers use
