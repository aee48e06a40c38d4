"""Where an export is written: a place cockpit makes itself, checks, and fills whole or not at all.

The output is never a link, and is replaced only when it is a plain file or directory of ours;
the files are written into a new private directory first, then renamed into place. A failed
write (a full disk) removes what this export made and is one line (ExportError).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from engine.export import EXPORT_FOLDER, ExportError
from engine.files import (
    DIR_MODE,
    Unsafe,
    fsync_dir,
    future_parents_problem,
    make_dirs_above,
    make_private_dir,
    own_dir_problem,
    parents_problem,
    remove_made,
)

# errno values that mean "no room" (a full disk, or the user's quota)
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


def check_out(out: Path) -> None:
    """ExportError (one line) unless `out` may be written: not a link, ours when it exists (a
    directory: one no other user can write in), below directories no other user can swap."""
    if out.is_symlink():
        raise ExportError(
            f"{out} is a symbolic link: an export never writes through one (even with --force); "
            "remove it or give another --out"
        )
    if os.path.lexists(out):
        problem = own_dir_problem(out) if out.is_dir() else _file_problem(out)
        _refuse(problem, out)
        _refuse(parents_problem(out), out)
    else:
        _refuse(future_parents_problem(out), out)


def check_export_folder(run_dir: Path) -> None:
    """ExportError (one line) when RUN_DIR/export is there and is a link or not a folder of ours."""
    folder = run_dir / EXPORT_FOLDER
    if folder.is_symlink():
        raise ExportError(
            f"{folder} is a symbolic link: an export never writes through one (even with "
            f"--force); remove it, or give --out a path outside the run"
        )
    if os.path.lexists(folder):
        _refuse(own_dir_problem(folder), folder)


def _file_problem(out: Path) -> Unsafe | None:
    """`out` is not a plain file of ours (what --force may replace)."""
    info = os.lstat(out)
    if not stat.S_ISREG(info.st_mode):
        return Unsafe(out, "is not a plain file")
    if info.st_uid != os.geteuid():
        return Unsafe(out, f"belongs to uid {info.st_uid}, not to you (uid {os.geteuid()})")
    return None


def _refuse(problem: Unsafe | None, out: Path) -> None:
    if problem is None:
        return
    fix = "give --out a place of your own"
    if problem.chmod:
        fix = f"{problem.chmod}, or {fix}"
    if Path(os.path.abspath(problem.path)) == Path(os.path.abspath(out)):
        raise ExportError(f"cannot export to {out}: it {problem.reason}; {fix}")
    raise ExportError(
        f"cannot export to {out}: {problem.path} {problem.reason}, so another user could swap "
        f"what the export writes; {fix}"
    )


@contextlib.contextmanager
def staged_dir(out: Path, stale: Iterable[str] = ()) -> Iterator[Path]:
    """A new private directory to write a directory export's files in, by name; when the block
    ends without an error they are renamed into `out` (made now, 0755, when absent), and the
    names in `stale` (an earlier export's files this one has no new version of) are removed
    from it. When the block raises, the staged files and the directories made for `out` are
    removed and a failed write becomes an ExportError (see `write_failure`)."""
    check_out(out)
    if os.path.lexists(out) and not out.is_dir():
        raise ExportError(
            f"--out {out} is a file and this format writes a folder; give a folder path (new, "
            "or an earlier export of this format)"
        )
    made = [] if os.path.lexists(out) else _make_dirs_above(out)
    home = out if os.path.lexists(out) else out.parent  # the stage: on out's own disk
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=home))
    except OSError as e:
        remove_made(made)
        raise write_failure(out, e) or e from None
    try:
        yield stage
        if not os.path.lexists(out):
            make_private_dir(out, DIR_MODE)  # FileExistsError when anything appeared there
            made.append(out)
        for name in stale:
            _remove_entry(out / name)
        for entry in sorted(os.listdir(stage)):
            _fsync_file(stage / entry)  # on disk before its name is: a crash leaves no empty file
            os.replace(stage / entry, out / entry)  # a link at the name is replaced, not followed
        fsync_dir(out)
    except BaseException as e:
        shutil.rmtree(stage, ignore_errors=True)
        remove_made(made)
        failure = write_failure(out, e) if isinstance(e, Exception) else None
        if failure is not None:
            raise failure from None
        raise
    shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def file_place(out: Path) -> Iterator[None]:
    """The directories above the file `out` made (never through a link) for the block to write
    `out` in, with a safe writer of engine.files; when it raises they are removed again and a
    failed write becomes an ExportError (see `write_failure`)."""
    check_out(out)
    if out.is_dir():
        raise ExportError(
            f"--out {out}: a directory is there and this format writes one file; "
            f"give a file path such as {out / 'model.safetensors'}"
        )
    made = _make_dirs_above(out)
    try:
        yield
    except BaseException as e:  # removed again whatever stopped the write, then raised on
        remove_made(made)
        failure = write_failure(out, e) if isinstance(e, Exception) else None
        if failure is not None:
            raise failure from None
        raise


def _make_dirs_above(out: Path) -> list[Path]:
    try:
        return make_dirs_above(out)
    except OSError as e:
        raise ExportError(
            f"cannot make the folders for {out} ({e.strerror or e}); give another --out"
        ) from None


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_entry(path: Path) -> None:
    """Remove a file (or a link: never followed) an earlier export left; a directory stays."""
    with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            path.unlink()


def no_room_errno(error: BaseException) -> int | None:
    """The errno that says `error` came from a full disk or quota, found in it, its context
    (torch.save raises a RuntimeError over the OSError) or safetensors' message ("os error 28")."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _NO_ROOM:
            return current.errno
        found = re.search(r"os error (\d+)", str(current))
        if found and int(found.group(1)) in _NO_ROOM:
            return int(found.group(1))
        current = current.__cause__ or current.__context__
    return None


def write_failure(out: Path, error: BaseException) -> ExportError | None:
    """The one line for a write that failed: a full disk (or quota) says so and how to fix it;
    another OSError says what it was. None for anything else (a bug: left to raise)."""
    code = no_room_errno(error)
    if code is not None:
        return ExportError(
            f"cannot write {out}: the disk is full ({os.strerror(code)}); nothing was left "
            "half-made: free some space there, or give --out a place on another disk"
        )
    if isinstance(error, OSError):
        return ExportError(
            f"cannot write {out} ({error.strerror or error}); nothing was left half-made: "
            "give another --out"
        )
    return None
