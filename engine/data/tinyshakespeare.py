"""Tiny Shakespeare, the corpus of the `tinyshakespeare` source: a local copy (--data, the
environment, an earlier download) or, where there is none, one download checked by sha256 and
kept in the cache folder. Every copy is one Source identity, so a moved copy finds its tokens."""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.request
from collections.abc import Callable
from pathlib import Path

from engine.data.cache_dirs import write_error
from engine.data.errors import DataError
from engine.data.errors import short_error as _short
from engine.data.sources import Source
from engine.files import atomic_write

TINYSHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINYSHAKESPEARE_ENV = "COCKPIT_TINYSHAKESPEARE"
TINYSHAKESPEARE_HINT = f"pass --data PATH/TO/input.txt or set {TINYSHAKESPEARE_ENV}=PATH"
DOWNLOAD_TIMEOUT_S = 10.0


def tinyshakespeare_source(path: Path) -> Source:
    # One identity for every copy, so a copy moved elsewhere still finds its prepared tokens.
    return Source("tinyshakespeare", "tinyshakespeare", f"Tiny Shakespeare ({path})", (path,))


def find_tinyshakespeare(data_path: str | None, cache_dir: Path) -> Path | None:
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


def fetch_tinyshakespeare(cache_dir: Path, download: bool) -> Path:
    """Download Tiny Shakespeare into the cache folder, checked by sha256; or say why not."""
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


def _atomic_write(path: Path, content: bytes) -> None:
    """Bytes to `path`, atomically, making its folder first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: f.write(content))


def _write_or_explain(where: Path, write: Callable[[], None]) -> None:
    try:
        write()
    except OSError as e:
        raise write_error(where, e) from None
