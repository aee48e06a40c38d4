"""Private directories: a run directory is one that no other user can write in or swap (torch-free).

A directory the run writes in is made with `mkdir` (never through a name already taken), ours and
writable by no one else, and every directory above it passes OpenSSH's rule for `~/.ssh` (ours or
root's, not group- or world-writable, except a sticky one directly above an entry of ours), for
the path as given and as its links lead. A check returns what is wrong as an `Unsafe`, or None.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

PRIVATE_DIR_MODE = 0o700  # a new run directory: ours alone (chmod 755 shares it read-only)
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


@dataclass(frozen=True)
class Unsafe:
    """A directory another user could change: `path`, `reason` (it "belongs to uid 65534", it
    "can be written by other users (mode 0777)") and the command that fixes it, where one does."""

    path: Path
    reason: str
    chmod: str | None = None


def make_private_dir(path: Path, mode: int = PRIVATE_DIR_MODE) -> None:
    """Create the directory `path` (its parent must exist) with `mode`, narrowed by the umask.
    FileExistsError when anything is at the name: a directory, a file, a link (never followed)."""
    os.mkdir(path, mode)


def make_dirs_above(path: Path, mode: int = 0o755) -> list[Path]:
    """Create the missing directories above `path` (each with `mode`, narrowed by the umask),
    the highest first; returns those made, for `remove_made` to take back on a refusal."""
    missing = [p for p in reversed(Path(os.path.abspath(path)).parents) if not os.path.lexists(p)]
    made = []
    for directory in missing:
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            continue  # made meanwhile (by us or another): the check after says whose it is
        made.append(directory)
    return made


def remove_made(made: list[Path]) -> None:
    """Remove the (empty) directories `made`, the deepest first: nothing half-made is left."""
    for directory in reversed(made):
        try:
            os.rmdir(directory)
        except OSError:
            return  # something was written there after all: leave it and what is above it


def own_dir_problem(path: Path) -> Unsafe | None:
    """`path` (followed, if a link) is not a directory of ours that only we can write in."""
    return _dir_problem(path, (os.geteuid(),))


def trusted_dir_problem(path: Path) -> Unsafe | None:
    """`path` (followed, if a link) is not a directory that only we or root can write in (sticky
    or not), below directories others cannot swap: a folder cockpit reads and writes entries of
    by name that root may share with everyone (the data cache: a corpus there is used as is)."""
    return _dir_problem(path, (os.geteuid(), 0)) or parents_problem(path)


def _dir_problem(path: Path, owners: tuple[int, ...]) -> Unsafe | None:
    real = Path(os.path.realpath(path))
    try:
        info = os.stat(real)
    except FileNotFoundError:
        return Unsafe(path, "does not exist")
    if not stat.S_ISDIR(info.st_mode):
        return Unsafe(path, "is not a directory")
    if info.st_uid not in owners:
        me = os.geteuid()
        yours = f", not to you (uid {me})" if owners == (me,) else ""
        return Unsafe(path, f"belongs to uid {info.st_uid}{yours}")
    if info.st_mode & _OTHERS_WRITE:
        return Unsafe(path, _writable(info), f"chmod go-w {real}")
    return None


def refusal_line(problem: Unsafe, what: str, path: Path, fix: str, risk: str) -> str:
    """The one line that refuses `path` for `problem`: "{what} PATH REASON; CHMOD, or FIX", or,
    when the problem is a directory above it, "{what} PATH is below DIR, which REASON: {risk};
    CHMOD, or FIX"."""
    fixes = f"{problem.chmod}, or {fix}" if problem.chmod else fix
    if Path(os.path.abspath(problem.path)) == Path(os.path.abspath(path)):
        return f"{what} {path} {problem.reason}; {fixes}"
    return f"{what} {path} is below {problem.path}, which {problem.reason}: {risk}; {fixes}"


def foreign_entry_problem(path: Path) -> Unsafe | None:
    """An entry anywhere under the directory `path` (links not followed) that belongs to
    another user, not us or root: planted while others could write there (before a `chmod
    go-w`), and read or trusted as the run's own (a checkpoint of theirs resumed)."""
    me = os.geteuid()
    for folder, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            entry = Path(folder) / name
            try:
                owner = os.lstat(entry).st_uid
            except FileNotFoundError:
                continue  # removed meanwhile (a save's temporary renamed)
            if owner not in (me, 0):
                return Unsafe(entry, f"belongs to uid {owner}: another user put it there")
    return None


def parents_problem(path: Path) -> Unsafe | None:
    """A directory above the existing `path` that another user could use to swap it or what it
    leads to: one not owned by us or root, or writable by group or others (unless sticky and
    right above an entry of ours). Checked along `path` as given and along its real path."""
    given = Path(os.path.abspath(path))
    for chain in (given, Path(os.path.realpath(given))):
        for entry in (chain, *chain.parents):
            if entry.parent == entry:
                break
            problem = _parent_problem(entry.parent, entry)
            if problem is not None:
                return problem
    return None


def future_parents_problem(path: Path) -> Unsafe | None:
    """parents_problem for a `path` not made yet: its deepest existing ancestor, as the
    directory that will hold what we make (ours: a sticky one is fine) and with its own parents."""
    existing = Path(os.path.abspath(path)).parent
    while not os.path.lexists(existing):
        existing = existing.parent
    return _parent_problem(existing, None) or parents_problem(existing)


def _parent_problem(directory: Path, entry: Path | None) -> Unsafe | None:
    """`directory` lets others change its `entry` (None: one we are about to make, so ours)."""
    info = os.stat(directory)
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        return Unsafe(directory, f"belongs to uid {info.st_uid}")
    if not info.st_mode & _OTHERS_WRITE:
        return None
    if info.st_mode & stat.S_ISVTX and (entry is None or _owner(entry) == me):
        return None  # sticky: no one else can remove or rename an entry of ours
    return Unsafe(directory, _writable(info), f"chmod go-w {directory}")


def _owner(entry: Path) -> int | None:
    try:
        return os.lstat(entry).st_uid  # a link's own owner: whoever planted it
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise


def _writable(info: os.stat_result) -> str:
    return f"can be written by other users (mode {stat.S_IMODE(info.st_mode):04o})"
