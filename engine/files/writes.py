"""Safe file writes for run directories, exports and prepared data (torch-free).

A file is written under a temporary name beside it (`.NAME.XXXX.tmp`, created O_EXCL and
O_NOFOLLOW), fsynced, then renamed over it: a crash leaves the old file or the new, and nothing
is written through a planted link. A file kept and appended to is opened O_NOFOLLOW and must be
a plain file with one link. Modes are set per file, never through the process-wide umask.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

from engine.config.run_config import ConfigError

FILE_MODE = 0o644  # a run's and an export's files: others may read them, only we write
PRIVATE_MODE = 0o600  # the run lock (it names the command line)
DIR_MODE = 0o755  # a folder inside a run directory (the run directory itself is 0700)
T = TypeVar("T")
# A new file: never an existing one, never through a link, not inherited by child processes.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new link in `directory` durable (where the platform allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # not supported on this platform
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(path: Path) -> Path:
    """A temporary name beside `path`, `.NAME.XXXXXXXX.tmp`: random, so no one can plant
    something at it in advance (remove_partial_saves clears a run's leftovers by the pattern)."""
    return path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"


def make_temp(path: Path, create: Callable[[Path], T]) -> tuple[Path, T]:
    """`create(name)` at a fresh temporary name beside `path` (it must raise FileExistsError
    when something is there, as O_EXCL, mkdir and link do): a name taken is never used, the
    next one is drawn. Returns the name and what `create` returned."""
    for _ in range(100):
        tmp = temp_path(path)
        try:
            return tmp, create(tmp)
        except FileExistsError:
            continue  # a name taken (another writer's, or planted): draw another
    raise FileExistsError(f"no free temporary name beside {path}")


def make_temp_dir(path: Path, mode: int = DIR_MODE) -> Path:
    """A new directory at a fresh temporary name beside `path` (a sharded checkpoint being
    written), created with `mode` narrowed by the umask."""
    return make_temp(path, lambda tmp: os.mkdir(tmp, mode))[0]


def _new_temp(path: Path, mode: int) -> tuple[int, Path]:
    """A new file `.NAME.XXXX.tmp` beside `path`, open for writing, created with `mode`."""
    tmp, fd = make_temp(path, lambda name: os.open(name, _NEW_FILE, mode))
    return fd, tmp


@contextlib.contextmanager
def atomic_file(path: Path, mode: int = FILE_MODE) -> Iterator[BinaryIO]:
    """A binary file to write `path` through: renamed over it (atomically, durably) when the
    block ends without an error, removed when it raises. The directory must exist (a run
    directory removed under a running run is an error, not remade)."""
    fd, tmp = _new_temp(path, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # a link at `path` is replaced, never followed
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write(
    path: Path, write: Callable[[BinaryIO], object], mode: int = FILE_MODE
) -> None:
    """Create or replace `path` with what `write(file)` writes, atomically and durably."""
    with atomic_file(path, mode) as f:
        write(f)


def atomic_write_text(path: Path, text: str, mode: int = FILE_MODE) -> None:
    """atomic_write for text (UTF-8)."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")), mode)


def atomic_write_by_name(
    path: Path, write: Callable[[Path], object], mode: int = FILE_MODE
) -> None:
    """atomic_write for a writer that takes only a file name (safetensors' save_file, which
    makes its own file 0600 whatever is there): it writes inside a private directory beside
    `path` (0700: no one else can swap its file for a link), the file gets `mode` (narrowed by
    the umask, as a file created with it would be), then it is renamed over `path`."""
    private = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        tmp = private / path.name
        write(tmp)
        # The mode a new file gets from `mode` and the umask, read off one: never os.umask()
        os.close(os.open(private / ".mode", _NEW_FILE, mode))
        os.chmod(tmp, stat.S_IMODE(os.stat(private / ".mode").st_mode))
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    fsync_dir(path.parent)


def open_kept_file(path: Path, flags: int, mode: int = FILE_MODE) -> int:
    """Open (creating it with `mode` if new) a file that is kept and written in place: the run
    lock, the metrics log, a detached run's log. A ConfigError (one line) when `path` is a
    symbolic link, not a plain file (a FIFO would block the open) or has other hard links:
    writing there would write someone else's file."""
    flags |= os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, mode)
    except OSError as e:
        if path.is_symlink():  # ELOOP from O_NOFOLLOW
            raise ConfigError(refusal(path, "is a symbolic link")) from None
        if e.errno == errno.ENXIO:  # a FIFO nobody reads (O_NONBLOCK, O_WRONLY)
            raise ConfigError(refusal(path, "is not a plain file")) from None
        raise
    info = os.fstat(fd)
    problem = (
        "is not a plain file"
        if not stat.S_ISREG(info.st_mode)
        else "has other hard links" if info.st_nlink > 1 else None
    )
    if problem:
        os.close(fd)
        raise ConfigError(refusal(path, problem))
    os.set_blocking(fd, True)
    return fd


def refusal(path: Path, problem: str) -> str:
    return f"{path} {problem}: cockpit writes only its own plain files; remove it and start again"


def create_new(path: Path, mode: int = FILE_MODE) -> BinaryIO:
    """A new file at `path` open for writing, created with `mode`; FileExistsError when
    anything is at the name already (a link included: it is never followed)."""
    return os.fdopen(os.open(path, _NEW_FILE, mode), "wb")


def open_for_append(path: Path, mode: int = FILE_MODE) -> BinaryIO:
    """`path` opened to append to (created with `mode` if new), refused as open_kept_file
    refuses: the metrics log, a detached run's log."""
    return os.fdopen(open_kept_file(path, os.O_WRONLY | os.O_APPEND, mode), "ab")
