"""Where prepared corpora live: the cache folder, the directory each corpus prepares into, and
the one-line error when that folder cannot be written.

A corpus's directory is `{source slug}-{tokenizer slug}-{12 hex digits of its cache key}`.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from engine.config.run_config import DataConfig
from engine.data.errors import DataError
from engine.data.prepared import FORMAT_VERSION
from engine.files import future_parents_problem, refusal_line, trusted_dir_problem

_REPO_ROOT = Path(__file__).resolve().parents[2]


def default_cache_dir() -> Path:
    """$COCKPIT_CACHE_DIR, else <repo>/data/cache in a source checkout, else the user cache."""
    env = os.environ.get("COCKPIT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    if (_REPO_ROOT / "pyproject.toml").is_file() and (_REPO_ROOT / "data").is_dir():
        return _REPO_ROOT / "data" / "cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "cockpit"


def check_cache_dir(cache_dir: Path) -> None:
    """The cache folder (made or still to be made) is one no other user can plant a corpus in
    (a corpus there is trained on as it is) or swap for a link (where cockpit writes token
    files): it and every folder above it belong to us or root and are not writable by others
    (engine.files, the rule for a run directory's parents). DataError (one line) naming
    the fix otherwise, before anything there is read or written."""
    if os.path.lexists(cache_dir):
        problem = trusted_dir_problem(cache_dir)
    else:
        problem = future_parents_problem(cache_dir)
    if problem is not None:
        fix = "set COCKPIT_CACHE_DIR to a folder of your own"
        risk = "another user could plant a corpus there"
        raise DataError(refusal_line(problem, "the data cache", cache_dir, fix, risk))


def keep_tiktoken_cache_private() -> None:
    """tiktoken keeps its encoding files in $TMPDIR/data-gym-cache unless told otherwise: a
    folder any local user can make first and fill (a FIFO at an encoding's name hung a run,
    deaf to SIGTERM; a link to /dev/zero reads until memory runs out)."""
    keep_tool_cache_private(
        ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"),
        Path(tempfile.gettempdir()) / "data-gym-cache",
        "tiktoken",
    )


def keep_compile_cache_private() -> None:
    """torch.compile (inductor) keeps the code it generates, and imports it back, in
    $TMPDIR/torchinductor_USER unless TORCHINDUCTOR_CACHE_DIR says otherwise: another user who
    made that folder first could replace the modules in it and run code as us."""
    try:  # torch's default (torch._inductor.runtime.cache_dir_utils), without importing it
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    shared = Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") == os.path.abspath(shared):
        del os.environ["TORCHINDUCTOR_CACHE_DIR"]  # put there by torch's import: not the user's
    keep_tool_cache_private(("TORCHINDUCTOR_CACHE_DIR",), shared, "torchinductor")


def keep_tool_cache_private(names: tuple[str, ...], shared: Path, folder: str) -> None:
    """Point the environment variable names[0] at DATA_CACHE/`folder` (the data cache, checked
    as check_cache_dir does) for a library whose cache would otherwise be `shared`, a folder
    in /tmp: unless the user set one of `names`, or `shared` is already a folder only we or
    root can write in (made by us earlier: what it holds is ours)."""
    if any(name in os.environ for name in names):
        return
    if os.path.lexists(shared) and trusted_dir_problem(shared) is None:
        return
    cache_dir = default_cache_dir()
    check_cache_dir(cache_dir)
    os.environ[names[0]] = str(cache_dir / folder)


def prepared_dir(identity: str, slug: str, cfg: DataConfig, cache_dir: Path) -> Path:
    """The corpus's directory: one per source, tokenizer and way of reading documents (the
    split is not part of it: every split is cut from the same token file)."""
    key = {"source": identity, "tokenizer": cfg.tokenizer, "format": FORMAT_VERSION}
    key["text_field"] = cfg.text_field
    if cfg.tokenizer == "char":
        key["separator"] = cfg.separator
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:12]
    return cache_dir / f"{slug}-{slug_of(cfg.tokenizer)}-{digest}"


def slug_of(name: str) -> str:
    """A name made fit for a directory's name: lower case, [a-z0-9_.-], at most 40 characters."""
    return re.sub(r"[^a-z0-9_.]+", "-", name.lower()).strip("-.")[:40] or "data"


def write_error(where: Path, e: OSError) -> DataError:
    """The DataError for a write into the cache that failed (a full disk, no permission)."""
    return DataError(
        f"cannot write prepared data to {where} ({e.strerror or e}); free some disk space or "
        f"set COCKPIT_CACHE_DIR to a writable folder"
    )
