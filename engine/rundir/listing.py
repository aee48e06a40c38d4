"""Every run under a directory, live or not: what `cockpit runs` and the runs screen list.

Each run comes from its summary.json, brought up to the end of its metrics.jsonl: a run listed
before costs a small file's read, whatever its length. The state is the run's final state record;
without one, live while an engine holds the run's lock (its step and state then come from its
control socket), else crashed. Torch-free and numpy-free: listing runs costs an interpreter start.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_DEPTH = 4  # runs/, runs/project/, runs/project/sweep/...
LIVE, CRASHED, UNREADABLE = "live", "crashed", "unreadable"
FORKED = "forked"  # a branch `cockpit fork --no-start` made, not trained yet


def list_runs(root: Path) -> list[ListedRun]:
    """Every run under `root`, newest first; one that cannot be read is a row saying why."""
    found = [list_run(d, root) for d in find_run_dirs(root)]
    return sorted(found, key=lambda r: r.sort_time, reverse=True)


def find_run_dirs(root: Path, depth: int = MAX_DEPTH) -> Iterator[Path]:
    """Directories holding a metrics.jsonl, `root` itself included; never below a run's own
    directory (its sharded checkpoints are directories too). A folder below `root` that may not
    be read is given too: it may be a run (list_run says it cannot be read)."""
    from engine.rundir.summary import METRICS_NAME

    try:
        os.stat(root / METRICS_NAME)
        is_run = (root / METRICS_NAME).is_file()
    except FileNotFoundError:
        is_run = False
    except OSError:  # not ours to read: say so, do not pass over it in silence
        yield root
        return
    if is_run:
        yield root
        return
    if depth == 0:
        return
    try:
        children = sorted(e.path for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    except OSError:
        if depth < MAX_DEPTH:
            yield root  # a folder below DIR we may not list: perhaps a run (its row says why)
        return
    for child in children:
        yield from find_run_dirs(Path(child), depth - 1)


@dataclass(frozen=True)
class ListedRun:
    """One row: the run's summary and what only the directory can tell."""

    run_dir: Path
    name: str  # the path below DIR
    summary: dict[str, Any]  # RunSummary.to_json()
    state: str  # live, finished, stopped, failed, crashed
    size_bytes: int
    modified: float  # metrics.jsonl's mtime
    problem: str | None = None  # why the run cannot be read (its row says it; state UNREADABLE)
    weights_from: str | None = None  # the weights it started from (model.init_from), if any

    @property
    def sort_time(self) -> float:
        return self.summary["started"] or self.modified

    def checkpoint_path(self) -> str | None:
        """The newest checkpoint, absolute: in the run's directory, whatever the directory the
        run was started from (its record may hold a path relative to that) or where it moved."""
        saved = self.summary["last_checkpoint"]
        if not saved or not saved["path"]:
            return None
        return os.path.join(os.path.abspath(self.run_dir), os.path.basename(str(saved["path"])))

    def as_json(self) -> dict[str, Any]:
        s = self.summary
        best, last, saved = s["best_val"], s["last_val"], s["last_checkpoint"]
        best_bpb, last_bpb = s.get("best_val_bpb"), s.get("last_val_bpb")
        return {
            "run_dir": os.path.abspath(self.run_dir),
            "name": self.name,
            "preset": s["preset"],
            "state": self.state,
            "last_state": s["last_state"],  # the newest state record: running, paused, ...
            "step": s["step"],
            "max_steps": s["max_steps"],
            "best_val_loss": best["value"] if best else None,
            "best_val_step": best["step"] if best else None,
            "last_val_loss": last["value"] if last else None,
            "last_val_step": last["step"] if last else None,
            # bits per byte: null for a run recorded before them
            "best_val_bpb": best_bpb["value"] if best_bpb else None,
            "best_val_bpb_step": best_bpb["step"] if best_bpb else None,
            "last_val_bpb": last_bpb["value"] if last_bpb else None,
            "tokens": s["tokens"],
            "train_time_s": round(s["train_time_s"], 3),
            "started": s["started"],
            "updated": s["updated"],
            "size_bytes": self.size_bytes,
            "last_checkpoint": self.checkpoint_path(),
            "last_checkpoint_step": saved["step"] if saved else None,
            "parent": s["parent"],
            "init_from": self.weights_from,
            "world_size": s["world_size"],
            "problem": self.problem,
        }


def list_run(run_dir: Path, root: Path) -> ListedRun:
    """The run in `run_dir`; one whose files cannot be read, or hold what no run writes, is
    listed as UNREADABLE with the reason (`problem`), never an error that hides the other runs
    (nothing is printed: the app lists runs too)."""
    from engine.events import RunState
    from engine.rundir.summary import METRICS_NAME, read_summary, size_on_disk
    from engine.rundir.summary_facts import RunSummary, facts_problem

    name = run_dir.resolve().name if run_dir == root else os.path.relpath(run_dir, root)
    try:
        live = engine_holds(run_dir)
        summary = read_summary(run_dir, write_back=not live)
        problem = facts_problem(summary.facts)
        facts = summary.to_json()
        modified = (run_dir / METRICS_NAME).stat().st_mtime
        if live and problem is None:
            facts = with_greeting(run_dir, facts)
            problem = facts_problem(facts)
    except OSError as e:
        problem = f"cannot read it ({e.strerror or e})"
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as e:
        problem = f"its files hold what no run writes ({type(e).__name__}: {e})"
    if problem is not None:
        empty = RunSummary().to_json()
        return ListedRun(run_dir, name, empty, UNREADABLE, size_on_disk(run_dir), 0.0, problem)
    final = facts["last_state"] if facts["last_state"] in RunState.ENDED else None
    parent = facts["parent"]  # a branch's records up to its fork are its parent's, all older
    untrained = bool(parent and parent["time"]) and (facts["updated"] or 0) <= parent["time"]
    state = LIVE if live else FORKED if untrained else final or CRASHED
    return ListedRun(run_dir, name, facts, state, size_on_disk(run_dir), modified,
                     weights_from=weights_from(run_dir))  # fmt: skip


def weights_from(run_dir: Path) -> str | None:
    """The source a run started from (its config.json's model.init_from); None for a run from
    scratch, or a config.json that does not say."""
    import json

    from engine.config.user_files import read_small_text  # a FIFO or a device: no source

    try:
        config = json.loads(read_small_text(run_dir / "config.json", "a run's config"))
        source = config["model"].get("init_from")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None  # RecursionError: nested past json's depth
    return source if isinstance(source, str) and source else None


def with_greeting(run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """A live run's step and state as its control socket says them now: its metrics file may
    hold a second of steps back, its summary a few seconds."""
    from engine.control import probe

    greeting = probe(run_dir)
    if greeting is None:
        return summary  # still starting, or stopped (ctrl+z): the files' word stands
    return {**summary, "step": max(summary["step"], greeting.step), "last_state": greeting.state}


def engine_holds(run_dir: Path) -> bool:
    """A live engine holds the run's lock (the kernel drops it when the process goes)."""
    from engine.config.run_config import ConfigError
    from engine.rundir.lock import check_not_in_use

    try:
        check_not_in_use(run_dir)
    except ConfigError:
        return True
    return False
