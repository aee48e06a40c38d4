"""The run directory: its default name, its creation and the checks that keep it private, and the
error log a crash leaves in it. A run directory is made new with mkdir (0700), never through a
name already taken; one given by name must be ours and hold no other run. Every refusal is a
one-line ConfigError made before anything is written.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
import traceback
from pathlib import Path

from engine.checkpoint.names import BEST_NAME, BEST_SHARDED, list_checkpoints
from engine.config.run_config import ConfigError, RunConfig
from engine.files import (
    DIR_MODE,
    Unsafe,
    atomic_file,
    atomic_write_text,
    foreign_entry_problem,
    future_parents_problem,
    make_dirs_above,
    make_private_dir,
    own_dir_problem,
    parents_problem,
    refusal_line,
    remove_made,
)
from engine.rundir.lock import check_not_in_use

# what a run leaves in its directory (a run's lock, engine.log and error.log say nothing alone)
RUN_FILES = (
    "metrics.jsonl",
    "config.toml",
    "config.json",
    "summary.json",
    "fork.json",
    BEST_NAME,
    BEST_SHARDED,
)
_NEW_RUN_FIX = "pass --run-dir DIR of your own"
_RESUMED_FIX = "copy the run into a directory of your own and resume the copy"
_MAX_SUFFIX = 100  # taken default names in a row before giving up (someone is planting them)


def default_run_dir(cfg: RunConfig, root: str | Path = "runs") -> Path:
    """A new run's directory under `root` (the app's runs root: `cockpit ablate --runs DIR`'s
    DIR), named by the run's config and the time. A name only: create_default_run_dir makes it."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{cfg.name}-{stamp}"


def create_default_run_dir(cfg: RunConfig, root: str | Path = "runs") -> Path:
    """Make a new run's directory under `root` and return it: default_run_dir's name, or when
    that is taken (two runs in the same second, or a link planted there) NAME.2, NAME.3...;
    never through what is at a taken name. ConfigError (one line) when `root` is not a safe
    place for runs."""
    return create_free_run_dir(default_run_dir(cfg, root))


def create_free_run_dir(first: Path) -> Path:
    """Make a new run directory at the generated name `first` (a default run's, a fork's
    branch) or, when that is taken, at the next free one of FIRST.2, FIRST.3...; returns it.
    ConfigError (one line) when the directories above it are not a safe place for runs."""
    _refuse(future_parents_problem(first), first, _NEW_RUN_FIX)
    made = _make_dirs_above(first)
    for suffix in range(1, _MAX_SUFFIX + 1):
        run_dir = first if suffix == 1 else first.with_name(f"{first.name}.{suffix}")
        try:
            make_private_dir(run_dir)
        except FileExistsError:
            continue
        except OSError as e:
            remove_made(made)
            raise _not_writable(run_dir, e) from None
        _checked_after_making(run_dir, [*made, run_dir])
        return run_dir
    remove_made(made)
    raise ConfigError(
        f"{first} and the next {_MAX_SUFFIX - 1} names after it are taken; pass --run-dir DIR"
    )


def create_run_dir(run_dir: Path) -> None:
    """A new run's directory, named by the user: made (0700) when absent; an existing one must
    be ours, writable by no one else and hold no run (an empty directory, or the one `cockpit
    start` made for the run it spawns). ConfigError (one line, naming the fix) otherwise."""
    try:
        make_private_dir(run_dir)
    except FileExistsError:
        check_new_run_dir(run_dir)
        _probe_writable(run_dir)
        return
    except FileNotFoundError:  # the directories above it are made first, once found safe
        _refuse(future_parents_problem(run_dir), run_dir, _NEW_RUN_FIX)
        made = _make_dirs_above(run_dir)
        try:
            make_private_dir(run_dir)
        except OSError as e:
            remove_made(made)
            raise _not_writable(run_dir, e) from None
        _checked_after_making(run_dir, [*made, run_dir])
        return
    except OSError as e:
        raise _not_writable(run_dir, e) from None
    _checked_after_making(run_dir, [run_dir])


def open_run_dir(
    run_dir: Path | None, cfg: RunConfig, resuming: bool, runs_root: str | Path = "runs"
) -> Path:
    """The directory a run writes in, made or checked as above (and proved writable): the one
    resumed, the one named (made when absent), or a new one under `runs_root`."""
    if resuming and run_dir is not None:
        check_run_dir(run_dir)
        _probe_writable(run_dir)
        return run_dir
    if run_dir is None:
        return create_default_run_dir(cfg, runs_root)
    create_run_dir(run_dir)
    return run_dir


def check_new_run_dir(run_dir: Path) -> None:
    """Before a new run starts in `run_dir` (nothing is written): when it exists, it is ours,
    private, below safe directories and holds no run; when it does not, the directories it
    would be made in are safe. ConfigError (one line) otherwise."""
    if not os.path.lexists(run_dir):
        _refuse(future_parents_problem(run_dir), run_dir, _NEW_RUN_FIX)
        return
    check_run_dir(run_dir, fix=_NEW_RUN_FIX)
    check_not_in_use(run_dir)  # a live engine's directory: say whose, not just "holds a run"
    held = run_files(run_dir)
    if held:
        raise ConfigError(
            f"{run_dir} already holds a run ({', '.join(held)}): resume it with --resume "
            f"{run_dir}, fork it with cockpit fork {run_dir}, or pass another --run-dir"
        )


def check_run_dir(run_dir: Path, fix: str = _RESUMED_FIX) -> None:
    """`run_dir` (a run to resume, or one given for a new run) is a private place: a directory
    of ours that no one else can write in, below directories no one else can swap, holding
    nothing another user put there. ConfigError (one line, ending with `fix` when the problem
    is the owner) otherwise."""
    _refuse(own_dir_problem(run_dir) or parents_problem(run_dir), run_dir, fix)
    planted = foreign_entry_problem(run_dir)
    if planted is not None:
        raise ConfigError(
            f"run directory {run_dir} holds {planted.path.relative_to(run_dir)}, which "
            f"{planted.reason} while they could write in the directory; remove it, and look "
            "over the run's other files before using it"
        )


def run_files(run_dir: Path) -> list[str]:
    """What in `run_dir` says it holds a run (its metrics log, config, checkpoints), as
    names; [] for an empty directory or one with only a log (`cockpit start`'s engine.log)."""
    held = [name for name in RUN_FILES if _is_plain(run_dir / name)]  # a link is no run
    checkpoints = list_checkpoints(run_dir)
    if checkpoints:
        held.append(f"{len(checkpoints)} checkpoint{'s' if len(checkpoints) > 1 else ''}")
    return held


def _is_plain(path: Path) -> bool:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def check_private_place(directory: Path, what: str, fix: str) -> None:
    """`directory` (made or still to be made) is as private as a run directory: one that holds
    runs or what cockpit writes by name (an ablation series' folder). ConfigError, "{what}
    DIRECTORY belongs to uid 65534, ...; {fix}", otherwise."""
    if os.path.lexists(directory):
        problem = own_dir_problem(directory) or parents_problem(directory)
    else:
        problem = future_parents_problem(directory)
    _refuse(problem, directory, fix, what)


def make_private_place(directory: Path, what: str, fix: str, mode: int = DIR_MODE) -> None:
    """Make `directory` (and the directories above it) with mkdir when absent, then check it
    as check_private_place does; on a refusal what was made is removed. OSError (for the
    caller to word) when it cannot be made."""
    check_private_place(directory, what, fix)
    made = make_dirs_above(directory)
    try:
        make_private_dir(directory, mode)
        made.append(directory)
    except FileExistsError:
        pass  # ours already (checked above), or made meanwhile: checked again below
    except OSError:
        remove_made(made)
        raise
    try:
        check_private_place(directory, what, fix)
    except ConfigError:
        remove_made(made)
        raise


def _refuse(problem: Unsafe | None, run_dir: Path, fix: str, what: str = "run directory") -> None:
    if problem is not None:
        risk = "another user could swap what the run writes"
        raise ConfigError(refusal_line(problem, what, run_dir, fix, risk))


def _make_dirs_above(run_dir: Path) -> list[Path]:
    try:
        return make_dirs_above(run_dir)
    except OSError as e:
        raise _not_writable(run_dir, e) from None


def _checked_after_making(run_dir: Path, made: list[Path]) -> None:
    """The directory just made is ours and private below safe parents (a default ACL could
    widen its mode), and writable: else it is removed with the directories made for it, and
    the ConfigError says why."""
    try:
        check_run_dir(run_dir, fix=_NEW_RUN_FIX)
        _probe_writable(run_dir)
    except ConfigError:
        remove_made(made)
        raise


def _probe_writable(run_dir: Path) -> None:
    try:  # a fresh temporary name: a `.write-test` someone left is not written
        with atomic_file(run_dir / ".write-test") as probe:
            probe.write(b"ok")
        (run_dir / ".write-test").unlink()
    except OSError as e:
        raise _not_writable(run_dir, e) from None


def _not_writable(run_dir: Path, error: OSError) -> ConfigError:
    return ConfigError(
        f"run directory {run_dir} is not writable ({error.strerror or error}); pass --run-dir DIR"
    )


def write_error_log(run_dir: Path | None) -> Path | None:
    """Write the exception being handled to run_dir/error.log; None when there is nowhere to."""
    if run_dir is None or not run_dir.is_dir():
        return None
    path = run_dir / "error.log"
    with contextlib.suppress(OSError):
        atomic_write_text(path, traceback.format_exc())  # a link there is replaced, not followed
        return path
    return None
