"""Corpora, tokenizers and prepared token files.

`prepare()` turns a data source (the offline Python docs, Tiny Shakespeare, or the user's own text
files) into `train.bin` / `val.bin` token files plus `meta.json`, once, in a cache directory keyed
by the source, the tokenizer and the split; later runs memory-map those files. Every problem a
user can cause is a DataError whose one-line message names the problem and the fix.
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.config import DataConfig
from engine.files import atomic_write

FORMAT_VERSION = 1
TINYSHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINYSHAKESPEARE_ENV = "COCKPIT_TINYSHAKESPEARE"
TINYSHAKESPEARE_HINT = f"pass --data PATH/TO/input.txt or set {TINYSHAKESPEARE_ENV}=PATH"
DOWNLOAD_TIMEOUT_S = 10.0
TEXT_SUFFIXES = (".txt", ".md", ".py", ".rst", ".json", ".jsonl", ".csv", ".html", ".tex")
STDLIB_CAP_BYTES = 2_000_000
# tiktoken is fed pieces of about this many characters, in parallel, so that a large corpus
# never sits in memory as one huge list of Python ints.
ENCODE_CHUNK_CHARS = 1 << 20
_REPO_ROOT = Path(__file__).resolve().parents[1]


class DataError(ValueError):
    """A problem with the data or the tokenizer; the message is meant for the user as is."""


class PreparationStopped(Exception):
    """prepare() was asked to stop (`should_stop`) before the corpus was ready: nothing is
    left that a later run would take for complete."""


# ---------------------------------------------------------------------------------------------
# Tokenizers


class Tokenizer:
    """What the trainer needs from a tokenizer; CharTokenizer and TiktokenTokenizer implement it."""

    name: str
    vocab_size: int

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    def to_meta(self) -> dict[str, Any]:
        raise NotImplementedError

    def encode_corpus(self, text: str) -> np.ndarray:
        """Encode a whole corpus to an integer array; subclasses do it faster than a list."""
        return np.asarray(self.encode(text), dtype=np.int64)


class CharTokenizer(Tokenizer):
    """One token per character; the vocabulary is the sorted set of the corpus's characters."""

    def __init__(self, chars: str):
        self.name = "char"
        self.chars = chars
        self.vocab_size = len(chars)
        self._stoi = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    def encode(self, text: str) -> list[int]:
        # Prompts may hold characters the corpus never had; there is no token for them.
        return [self._stoi[c] for c in text if c in self._stoi]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def to_meta(self) -> dict[str, Any]:
        return {"name": "char", "chars": self.chars, "vocab_size": self.vocab_size}

    def encode_corpus(self, text: str) -> np.ndarray:
        # A code point -> id lookup table turns megabytes of text into ids without a Python loop.
        codepoints = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        vocab = np.array([ord(c) for c in self.chars], dtype=np.int64)
        top = int(max(codepoints.max(initial=0), vocab.max(initial=0)))
        table = np.full(top + 1, -1, dtype=np.int32)
        table[vocab] = np.arange(self.vocab_size, dtype=np.int32)
        ids = table[codepoints]
        return ids[ids >= 0]


class TiktokenTokenizer(Tokenizer):
    """A tiktoken BPE encoding such as r50k_base (GPT-2's), without special tokens."""

    def __init__(self, name: str):
        self.name = name
        self._enc = _load_encoding(name)
        self.vocab_size = self._enc.n_vocab

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self._enc.decode([int(i) for i in ids])  # tiktoken rejects numpy integers

    def to_meta(self) -> dict[str, Any]:
        return {"name": self.name, "vocab_size": self.vocab_size}

    def encode_corpus(self, text: str, chunk_chars: int = ENCODE_CHUNK_CHARS) -> np.ndarray:
        chunks = list(_split_at_safe_newlines(text, chunk_chars))
        threads = min(8, os.cpu_count() or 1)
        parts: list[np.ndarray] = []
        for start in range(0, len(chunks), 4 * threads):  # bounds the lists of ints alive at once
            batch = self._enc.encode_ordinary_batch(
                chunks[start : start + 4 * threads], num_threads=threads
            )
            parts.extend(np.asarray(ids, dtype=np.uint32) for ids in batch)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)


def _split_at_safe_newlines(text: str, chunk_chars: int) -> Iterator[str]:
    """Cut text into pieces of about chunk_chars that tokenize exactly as the whole text does.

    The cut goes just after a newline between a non-space character and a letter or digit. No
    pre-tokenizer pattern of the tiktoken encodings carries on through a newline into a letter or
    digit, and whitespace before the newline cannot merge with it ("  \\n" and "\\n\\n" would).
    """
    start = 0
    while len(text) - start > chunk_chars:
        cut = text.find("\n", start + chunk_chars)
        while cut != -1 and not _is_safe_cut(text, cut):
            cut = text.find("\n", cut + 1)
        if cut == -1:
            break
        yield text[start : cut + 1]
        start = cut + 1
    yield text[start:]


def _is_safe_cut(text: str, newline: int) -> bool:
    return (
        0 < newline < len(text) - 1
        and not text[newline - 1].isspace()
        and text[newline + 1].isalnum()
    )


def _check_tokenizer_name(name: str) -> None:
    if name == "char":
        return
    import tiktoken  # imported late: only BPE runs pay for it

    known = tiktoken.list_encoding_names()
    if name not in known:
        raise DataError(
            f"unknown tokenizer {name!r}: set data.tokenizer to 'char' or a tiktoken encoding "
            f"({', '.join(known)})"
        )


def _load_encoding(name: str) -> Any:
    _check_tokenizer_name(name)
    import tiktoken

    try:
        return tiktoken.get_encoding(name)
    except Exception as e:  # tiktoken raises requests errors, OSError or ValueError when offline
        hint = (
            " (or use r50k_base, the same encoding, whose file may already be cached)"
            if name == "gpt2"
            else ""
        )
        raise DataError(
            f"tiktoken could not load the {name} encoding ({_short(e)}): its file is downloaded on "
            f"first use, so offline copy a tiktoken cache folder here and set TIKTOKEN_CACHE_DIR "
            f"to it{hint}"
        ) from None


def tokenizer_from_meta(meta: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from its to_meta() dict (from meta.json or a checkpoint)."""
    name = meta.get("name")
    if name == "char":
        return CharTokenizer(meta["chars"])
    if not isinstance(name, str):
        raise DataError(f"tokenizer metadata without a name ({meta!r}); re-prepare the data")
    tokenizer = TiktokenTokenizer(name)
    expected = meta.get("vocab_size")
    if expected is not None and expected != tokenizer.vocab_size:
        raise DataError(
            f"the {name} tokenizer now has {tokenizer.vocab_size} tokens but the data was "
            f"prepared with {expected}; delete the prepared cache folder to re-prepare it"
        )
    return tokenizer


def _make_tokenizer(name: str, text: str) -> Tokenizer:
    return CharTokenizer.from_text(text) if name == "char" else TiktokenTokenizer(name)


def _tokenize(tokenizer: Tokenizer, text: str) -> np.ndarray:
    """The one expensive step of prepare(); a seam for tests that count how often it runs."""
    return tokenizer.encode_corpus(text)


# ---------------------------------------------------------------------------------------------
# Sources


@dataclass(frozen=True)
class Source:
    """Where a corpus comes from, resolved to files on disk or a built-in text."""

    identity: str  # what the cache key covers: a built-in name or a resolved absolute path
    slug: str  # readable part of the prepared directory's name
    description: str  # shown to the user
    files: tuple[Path, ...] = ()
    text: str | None = None  # built-in corpora carry their text instead of files


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
        patterns = ", ".join("*" + suffix for suffix in TEXT_SUFFIXES)
        raise DataError(
            f"{where} {raw}: no text files ({patterns}) in folder {path}; add some or point "
            f"{where} at a text file"
        )
    return Source(str(path), _slug(path.name), f"folder {path} ({len(files)} files)", tuple(files))


def _text_files(root: Path, exclude: Path) -> list[Path]:
    """Text files under root, sorted by relative path, skipping hidden entries and the cache."""
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
            if name.lower().endswith(TEXT_SUFFIXES) and not name.startswith(".")
        ]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_.]+", "-", name.lower()).strip("-.")[:40] or "data"


def _short(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:120] if lines else type(error).__name__


# ---------------------------------------------------------------------------------------------
# Reading text


def _read_text(source: Source) -> tuple[str, str]:
    """The corpus text and the sha256 of its bytes (a folder's files joined by a blank line)."""
    if source.text is not None:
        text, digest = source.text, hashlib.sha256(source.text.encode("utf-8")).hexdigest()
    else:
        hasher = hashlib.sha256()
        parts = []
        for i, path in enumerate(source.files):
            raw = _read_bytes(path)
            hasher.update(b"\n\n" if i else b"")
            hasher.update(raw)
            parts.append(_decode(raw, path))
        text, digest = "\n\n".join(parts), hasher.hexdigest()
    if not text.strip():
        what = "is empty (0 bytes)" if not text else "holds only whitespace"
        raise DataError(
            f"the corpus {source.description} {what}; put some text in it or set data.source "
            f"to another file, a folder, 'pydoc' or 'tinyshakespeare'"
        )
    return text, digest


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise DataError(
            f"cannot read {path} ({e.strerror or e}); check that it exists and is readable"
        ) from None


def _decode(raw: bytes, path: Path) -> str:
    nul = raw.find(b"\x00")
    if nul != -1:
        raise DataError(
            f"{path} looks binary or UTF-16 (NUL byte at offset {nul}); convert it to UTF-8 "
            f"text or move it out of the corpus"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{path} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); convert "
            f"it to UTF-8, e.g. iconv -f latin1 -t utf-8 IN > OUT"
        ) from None
    return text.removeprefix("\ufeff")  # a byte-order mark is not part of the text


# ---------------------------------------------------------------------------------------------
# Preparing and loading token files


def prepare(
    cfg: DataConfig,
    data_path: str | None = None,
    cache_dir: Path | None = None,
    download: bool = True,
) -> PreparedData:
    """Tokenize the corpus into memory-mapped train/val files, or reuse them if still current."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    _check_tokenizer_name(cfg.tokenizer)
    source = resolve_source(cfg, data_path, cache_dir, download)
    out = _prepared_dir(source.identity, source.slug, cfg.tokenizer, cfg.val_fraction, cache_dir)
    meta = _read_meta(out)
    signature = _signature(source)
    # Unchanged size and mtime of every file: trust the earlier hash instead of re-reading.
    if meta is not None and signature is not None and meta.get("source_signature") == signature:
        return _load(out, meta, source)
    text, digest = _read_text(source)
    if meta is not None and meta.get("source_sha256") == digest:
        if signature is not None and meta.get("source_signature") != signature:
            meta["source_signature"] = (
                signature  # touched or moved but identical: skip the hash next time
            )
            _write_or_explain(out, lambda: _atomic_write(out / "meta.json", _meta_bytes(meta)))
        return _load(out, meta, source)
    meta = _build(out, source, text, digest, signature, cfg)
    return _load(out, meta, source)


def _prepared_dir(
    identity: str, slug: str, tokenizer: str, val_fraction: float, cache_dir: Path
) -> Path:
    key = json.dumps(
        {
            "source": identity,
            "tokenizer": tokenizer,
            "val_fraction": val_fraction,
            "format": FORMAT_VERSION,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return cache_dir / f"{slug}-{_slug(tokenizer)}-{digest}"


def _signature(source: Source) -> list[list[Any]] | None:
    """Path, size and mtime of each source file; None for built-in text or unreadable files."""
    if source.text is not None:
        return None
    try:
        stats = [(path, path.stat()) for path in source.files]
    except OSError:
        return None  # reading the text will explain what is wrong
    return [[str(path), st.st_size, st.st_mtime_ns] for path, st in stats]


def _dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def _build(
    out: Path,
    source: Source,
    text: str,
    digest: str,
    signature: list[list[Any]] | None,
    cfg: DataConfig,
) -> dict[str, Any]:
    tokenizer = _make_tokenizer(cfg.tokenizer, text)
    ids = _tokenize(tokenizer, text)
    dtype = _dtype(tokenizer.vocab_size)
    # Like nanoGPT: the first (1 - val_fraction) of the tokens train, the tail is held out.
    n_train = int(len(ids) * (1 - cfg.val_fraction))
    meta = {
        "format_version": FORMAT_VERSION,
        "source": source.description,
        "source_identity": source.identity,
        "source_sha256": digest,
        "source_signature": signature,
        "text_chars": len(text),
        "tokenizer": tokenizer.to_meta(),
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.name,
        "val_fraction": cfg.val_fraction,
        "train_tokens": n_train,
        "val_tokens": len(ids) - n_train,
    }

    def write() -> None:
        out.mkdir(parents=True, exist_ok=True)
        # Drop the old meta.json first: a rebuild cut short must never look ready.
        (out / "meta.json").unlink(missing_ok=True)
        _atomic_write(out / "train.bin", ids[:n_train].astype(dtype))
        _atomic_write(out / "val.bin", ids[n_train:].astype(dtype))
        _atomic_write(out / "meta.json", _meta_bytes(meta))

    _write_or_explain(out, write)
    return meta


def _meta_bytes(meta: dict[str, Any]) -> bytes:
    return (json.dumps(meta, indent=2) + "\n").encode("utf-8")


def _atomic_write(path: Path, content: bytes | np.ndarray) -> None:
    """Bytes or a token array to `path` through engine/files.py, making its folder first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, content.tofile if isinstance(content, np.ndarray) else lambda f: f.write(content))


def _write_or_explain(where: Path, write: Callable[[], None]) -> None:
    try:
        write()
    except OSError as e:
        raise DataError(
            f"cannot write prepared data to {where} ({e.strerror or e}); free some disk space or "
            f"set COCKPIT_CACHE_DIR to a writable folder"
        ) from None


def _read_meta(out: Path) -> dict[str, Any] | None:
    """meta.json if the directory holds a complete preparation of this format, else None."""
    try:
        meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
        itemsize = np.dtype(meta["dtype"]).itemsize
        complete = (
            meta["format_version"] == FORMAT_VERSION
            and (out / "train.bin").stat().st_size == meta["train_tokens"] * itemsize
            and (out / "val.bin").stat().st_size == meta["val_tokens"] * itemsize
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return meta if complete else None


def _load(out: Path, meta: dict[str, Any], source: Source) -> PreparedData:
    dtype = np.dtype(meta["dtype"]).newbyteorder("<")
    return PreparedData(
        train=_memmap(out / "train.bin", dtype, meta["train_tokens"]),
        val=_memmap(out / "val.bin", dtype, meta["val_tokens"]),
        tokenizer=tokenizer_from_meta(meta["tokenizer"]),
        meta=meta,
        source=source.description,
        record=source_record(source, meta),
    )


def _memmap(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    # numpy cannot map an empty file; an empty split (val_fraction = 0) is a plain empty array.
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


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
    out = _prepared_dir(identity, slug, cfg.tokenizer, cfg.val_fraction, cache_dir)
    return True, ("prepared" if (out / "meta.json").is_file() else found)
