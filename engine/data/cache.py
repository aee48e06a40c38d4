"""The prepared corpora in the cache folder, for `cockpit data ls|rm`: list them with their
figures, find one by name or prefix, remove one safely. A prepared corpus is a directory
`{source}-{tokenizer}-{12 hex digits}` whose meta.json is written last (a directory without one
is an interrupted preparation) and read tolerantly (a key a format lacks is None).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# as prepared_dir names them: slug, tokenizer slug, then 12 hex digits of the cache key.
PREPARED_NAME = re.compile(r"^[a-z0-9_.-]+-[0-9a-f]{12}$")
INCOMPLETE = "incomplete (interrupted preparation)"
BUSY = "being prepared now"
OLD_FORMAT = "old format (no longer used: remove it)"
LOCK_FILE = ".lock"  # held by the process preparing the directory


class CacheError(ValueError):
    """A name that matches no prepared corpus, or several, or a path outside the cache;
    the message is meant for the user as is."""


@dataclass(frozen=True)
class PreparedCorpus:
    """One directory of the cache, with what its meta.json says (None where it says nothing)."""

    name: str
    path: Path
    status: str  # "complete", INCOMPLETE, or why it is not usable as is
    disk_bytes: int
    source: str | None = None
    tokenizer: str | None = None
    vocab_size: int | None = None
    total_tokens: int | None = None
    train_tokens: int | None = None
    val_tokens: int | None = None
    documents: int | None = None
    skipped: int | None = None
    source_bytes: int | None = None
    prepared_at: str | None = None  # ISO 8601

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "complete": self.complete,
            "status": self.status,
            "source": self.source,
            "tokenizer": self.tokenizer,
            "vocab_size": self.vocab_size,
            "total_tokens": self.total_tokens,
            "train_tokens": self.train_tokens,
            "val_tokens": self.val_tokens,
            "documents": self.documents,
            "skipped": self.skipped,
            "source_bytes": self.source_bytes,
            "disk_bytes": self.disk_bytes,
            "prepared_at": self.prepared_at,
        }


def looks_prepared(path: Path) -> bool:
    """A real directory (not a link) named like a prepared corpus, or holding a meta.json."""
    if path.is_symlink() or not path.is_dir():
        return False
    return bool(PREPARED_NAME.match(path.name)) or (path / "meta.json").is_file()


def disk_size(path: Path) -> int:
    """Bytes of the regular files under path (links are not followed)."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue  # removed while we walked
            total += st.st_size
    return total


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def lock_held(path: Path) -> bool:
    """Whether another process holds the directory's preparation lock right now."""
    try:
        import fcntl
    except ImportError:  # no flock on this platform: nothing to ask
        return False
    try:
        fd = os.open(path / LOCK_FILE, os.O_RDWR)
    except OSError:
        return False  # no lock file: nobody has prepared here with a lock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock we took
    return False


def _current_format() -> int | None:
    from engine.data import prepared as prepared_files
    return getattr(prepared_files, "FORMAT_VERSION", None)


def _files_match(path: Path, meta: dict[str, Any]) -> bool:
    """Token files as long as meta.json says (one tokens.bin, or v1's train.bin + val.bin)."""
    itemsize = {"uint16": 2, "uint32": 4}.get(str(meta.get("dtype")))
    expected = {
        "tokens.bin": _int_or_none(meta.get("total_tokens")),
        "train.bin": _int_or_none(meta.get("train_tokens")),
        "val.bin": _int_or_none(meta.get("val_tokens")),
    }
    for name, count in expected.items():
        file = path / name
        # Only the layouts a preparation writes are checked; a file that is absent is trusted.
        if itemsize and count is not None and file.exists():
            if file.stat().st_size != count * itemsize:
                return False
    return True


def _status(path: Path, meta: dict[str, Any] | None) -> str:
    """complete; busy while a process prepares it; incomplete when meta.json is missing or its
    token files are short; old format when today's engine would prepare it afresh."""
    if lock_held(path):
        return BUSY
    if meta is None or not _files_match(path, meta):
        return INCOMPLETE
    version, current = meta.get("format_version"), _current_format()
    if isinstance(version, int) and isinstance(current, int) and version < current:
        return OLD_FORMAT
    return "complete"


def _prepared_at(path: Path, meta: dict[str, Any]) -> str | None:
    """meta.json's prepared_at, else when meta.json was written (it is written last)."""
    when = meta.get("prepared_at")
    if isinstance(when, str) and when:
        return when
    try:
        mtime = (path / "meta.json").stat().st_mtime
    except OSError:
        return None
    return dt.datetime.fromtimestamp(mtime).astimezone().isoformat(timespec="seconds")


def read_prepared(path: Path) -> PreparedCorpus:
    """One cache directory's figures, from its meta.json (missing keys are None)."""
    meta = _read_meta(path)
    status = _status(path, meta)
    if meta is None:
        return PreparedCorpus(path.name, path, status, disk_size(path))
    tokenizer = meta.get("tokenizer")
    tokenizer_name = tokenizer.get("name") if isinstance(tokenizer, dict) else tokenizer
    train, val = _int_or_none(meta.get("train_tokens")), _int_or_none(meta.get("val_tokens"))
    total = _int_or_none(meta.get("total_tokens"))
    if total is None and train is not None and val is not None:
        total = train + val
    return PreparedCorpus(
        name=path.name,
        path=path,
        status=status,
        disk_bytes=disk_size(path),
        source=meta.get("source") if isinstance(meta.get("source"), str) else None,
        tokenizer=tokenizer_name if isinstance(tokenizer_name, str) else None,
        vocab_size=_int_or_none(meta.get("vocab_size")),
        total_tokens=total,
        train_tokens=train,
        val_tokens=val,
        documents=_int_or_none(meta.get("documents")),
        skipped=_int_or_none(meta.get("skipped")),
        source_bytes=_int_or_none(meta.get("source_bytes")),
        prepared_at=_prepared_at(path, meta),
    )


def list_prepared(cache_dir: Path) -> list[PreparedCorpus]:
    """Every prepared (or half-prepared) corpus in the cache, by name; [] if there is no cache."""
    try:
        entries = sorted(Path(cache_dir).iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [read_prepared(path) for path in entries if looks_prepared(path)]


def _inside(cache_dir: Path, raw: str) -> str:
    """The directory name a NAME or path refers to; a path must lie directly in the cache."""
    if os.sep not in raw and "/" not in raw and raw not in ("", ".", ".."):
        return raw
    path = Path(raw).expanduser().resolve()
    if path.parent != Path(cache_dir).expanduser().resolve():
        raise CacheError(
            f"{raw} is not in the cache folder {cache_dir}: only prepared corpora there can be "
            f"removed; give a name from `cockpit data ls`"
        )
    return path.name


def find_prepared(cache_dir: Path, name: str) -> PreparedCorpus:
    """The prepared corpus called `name`, or the one whose name starts with it."""
    wanted = _inside(cache_dir, name)
    corpora = list_prepared(cache_dir)
    exact = [c for c in corpora if c.name == wanted]
    matches = exact or [c for c in corpora if c.name.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise CacheError(
            f"{name!r} matches {len(matches)} prepared corpora ({', '.join(c.name for c in matches)}); "
            f"give more of the name"
        )
    known = ", ".join(c.name for c in corpora) if corpora else "none"
    raise CacheError(
        f"no prepared corpus {name!r} in {cache_dir} (prepared: {known}); see `cockpit data ls`"
    )


def remove_prepared(cache_dir: Path, corpus: PreparedCorpus) -> None:
    """Delete one prepared corpus's directory, after checking that it is one, in this cache."""
    cache = Path(cache_dir).expanduser().resolve()
    path = Path(corpus.path)
    if path.is_symlink() or path.resolve().parent != cache:
        raise CacheError(f"{path} is not in the cache folder {cache}; nothing removed")
    if not looks_prepared(path):
        raise CacheError(f"{path} does not look like a prepared corpus; nothing removed")
    if lock_held(path):
        raise CacheError(
            f"{corpus.name} is being prepared by another process right now; stop that one first "
            f"(ctrl+c), then remove it"
        )
    shutil.rmtree(path)
