"""Where a run's corpus is: resolve_source() turns data.source (or --data) into a Source: the
offline Python docs, Tiny Shakespeare, or the user's file or folder of corpus files (text,
JSON lines, Parquet), listed in a stable order."""

from __future__ import annotations

import os
import stat
import sys
import sysconfig
from pathlib import Path

from engine.config.run_config import DataConfig
from engine.data.cache_dirs import default_cache_dir, slug_of
from engine.data.errors import DataError
from engine.data.reader import CORPUS_SUFFIXES
from engine.data.sources import Source
from engine.data.tinyshakespeare import (
    fetch_tinyshakespeare,
    find_tinyshakespeare,
    tinyshakespeare_source,
)

STDLIB_CAP_BYTES = 2_000_000


def resolve_source(
    cfg: DataConfig,
    data_path: str | None = None,
    cache_dir: Path | None = None,
    download: bool = True,
) -> Source:
    """Find the corpus: download Tiny Shakespeare if needed, list a folder's text files."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if cfg.source == "tinyshakespeare":
        path = find_tinyshakespeare(data_path, cache_dir)
        if path is None:
            path = fetch_tinyshakespeare(cache_dir, download)
        return tinyshakespeare_source(path)
    if cfg.source == "pydoc" and data_path is None:
        text, description = _pydoc_text()
        return Source("pydoc", "pydoc", description, text=text)
    if data_path is not None:
        return path_source(data_path, "--data", cache_dir)
    return path_source(cfg.source, "data.source", cache_dir)


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


def path_source(raw: str, where: str, cache_dir: Path) -> Source:
    """The user's corpus file or folder (`where` names the setting it came from)."""
    path = Path(raw).expanduser().resolve()
    if not path.exists():
        raise DataError(
            f"{where} {raw}: no such file or folder ({path}); fix the path, or use "
            f"data.source = 'pydoc' or 'tinyshakespeare'"
        )
    if not path.is_dir():
        return Source(str(path), slug_of(path.stem), f"file {path}", (path,))
    files, special = _text_files(path, exclude=cache_dir)
    if not files:
        patterns = ", ".join("*" + suffix for suffix in CORPUS_SUFFIXES)
        raise DataError(
            f"{where} {raw}: no text files ({patterns}) in folder {path}"
            f"{'; ' + _skipped_note(special, path) if special else ''}; add some or point "
            f"{where} at a text file"
        )
    what = f"{len(files)} file{'s' if len(files) != 1 else ''}"
    what += f"; {_skipped_note(special, path)}" if special else ""
    return Source(str(path), slug_of(path.name), f"folder {path} ({what})", tuple(files))


def _skipped_note(special: list[Path], root: Path) -> str:
    """'skipped 1 file that is not a regular file (pipe.txt)', naming the first few."""
    names = ", ".join(p.relative_to(root).as_posix() for p in special[:3])
    more = f" and {len(special) - 3} more" if len(special) > 3 else ""
    if len(special) == 1:
        return f"skipped 1 file that is not a regular file ({names})"
    return f"skipped {len(special)} files that are not regular files ({names}{more})"


def _text_files(root: Path, exclude: Path) -> tuple[list[Path], list[Path]]:
    """Corpus files (text, JSON lines, Parquet) under root, sorted by relative path, skipping
    hidden entries and the cache; and, apart, those named like corpus files that are not
    regular files (FIFOs, sockets, devices: reading one would block), which are left out."""
    # The cache must stay out: its meta.json would otherwise join the corpus it describes.
    exclude = exclude.resolve()
    found: list[Path] = []
    special: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [
            d for d in dirnames if not d.startswith(".") and (here / d).resolve() != exclude
        ]
        for name in filenames:
            if name.lower().endswith(CORPUS_SUFFIXES) and not name.startswith("."):
                (found if _regular_or_unreadable(here / name) else special).append(here / name)
    def relative(path: Path) -> str:
        return path.relative_to(root).as_posix()

    return sorted(found, key=relative), sorted(special, key=relative)


def _regular_or_unreadable(path: Path) -> bool:
    # A dangling link or an unreadable entry stays in: reading it says what is wrong with it.
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return True
