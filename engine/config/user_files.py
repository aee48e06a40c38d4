"""The files a person names on the command line (a preset, a series file, a checkpoint, weights),
read only when they are regular files, and the small ones only up to a size: a FIFO would block
the reader for ever and /dev/zero never ends, so each is refused in one line before a byte is
read (looked at by path, then again through the descriptor opened without blocking).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from engine.config.run_config import ConfigError

# A preset, config, series or JSON sidecar is a few KiB; this is far above any real one and far
# below what could exhaust a machine's memory.
SMALL_FILE_LIMIT = 16 * 1024 * 1024

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class UserFileError(ConfigError):
    """A named file cockpit will not read (not a regular file, or too large); one line."""


def _kind(mode: int) -> str:
    return next((name for is_kind, name in _KINDS if is_kind(mode)), "another kind of file")


def _checked(path: Path, mode: int, what: str) -> None:
    """Refuse a mode that is not a regular file's: a directory as `open` would, others in one line."""
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not stat.S_ISREG(mode):
        raise UserFileError(
            f"{path} is not a regular file ({_kind(stat.S_IFMT(mode))}); {what} must be one"
        )


def check_regular_file(path: str | os.PathLike[str], what: str) -> None:
    """Refuse `path` unless it is a regular file (links followed), without opening it: for a
    file another library then opens (torch.load). `what` names it in the refusal ('a preset')."""
    path = Path(path)
    _checked(path, os.stat(path).st_mode, what)


def open_regular_file(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """The regular file `path` open for reading (of any size: a metrics log), refused in one
    line (UserFileError) when it is not one; OSError as `open` raises it."""
    path = Path(path)
    check_regular_file(path, what)
    # O_NONBLOCK: a FIFO swapped in since the look above opens at once instead of waiting
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        _checked(path, os.fstat(fd).st_mode, what)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_small_file(
    path: str | os.PathLike[str], what: str, limit: int = SMALL_FILE_LIMIT
) -> bytes:
    """The bytes of the regular file `path`, refused in one line (UserFileError) when it is not
    one or holds more than `limit` bytes; OSError as `open` raises it (no such file, a
    directory, no permission)."""
    path = Path(path)
    with open_regular_file(path, what) as f:
        opened = os.fstat(f.fileno())
        # read one byte past the limit: a file that grows meanwhile is still read only this far
        data = f.read(limit + 1) if opened.st_size <= limit else b""
    if opened.st_size > limit or len(data) > limit:
        size = max(opened.st_size, len(data))
        raise UserFileError(f"{path} is {_size(size)}: {what} is at most {_size(limit)}")
    return data


def read_small_text(path: str | os.PathLike[str], what: str, limit: int = SMALL_FILE_LIMIT) -> str:
    """read_small_file as UTF-8 text (UnicodeDecodeError for another encoding)."""
    return read_small_file(path, what, limit).decode("utf-8")


def _size(n: int) -> str:
    mib, rest = divmod(n, 1024 * 1024)
    return f"{mib} MiB" if not rest else f"{n / (1024 * 1024):.1f} MiB"
