"""A series' record under runs/: RUNS/NAME/series.json lists its runs, their settings and their
(normal) run directories. What a run needs next is read from its own directory, never trusted
to the record, so a rerun of the same command skips what is done and continues where it stopped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.ablation.spec import BASELINE, AblationSpec, duration_text, plain_label, settled
from engine.config import ConfigError, load_preset, read_small_text
from engine.events import RunState
from engine.files import atomic_write_text
from engine.rundir import check_private_place, make_private_place

SERIES_FILE = "series.json"
# the series' directory is as private as a run's: its results are written there by name
SERIES_DIR_FIX = "pass another --name, or --runs DIR of your own"
VERSION = 1

# what a run of the series needs next
START, RESUME, RESTART, DONE, BUSY = "start", "resume", "restart", "done", "busy"

# a run that ended in one of these has its result (a failed run is one: it is not retried)
RESULT_STATES = (RunState.FINISHED, RunState.FAILED)


@dataclass
class SeriesRun:
    """One run of the series. `repeat` is 1.. for the baseline's runs, 0 for a change."""

    label: str
    settings: tuple[str, ...]
    repeat: int
    run_dir: Path
    status: str = "pending"  # as last seen: pending, finished, stopped, failed, crashed, live

    @property
    def is_baseline(self) -> bool:
        return self.repeat > 0

    @property
    def key(self) -> tuple[tuple[str, ...], int]:
        return tuple(settled(self.settings)), self.repeat


def planned_runs(spec: AblationSpec) -> list[tuple[str, tuple[str, ...], int]]:
    """(label, settings, repeat) in the order they run: the baseline's repeats spread among the
    changes (b1, c1, c2, b2, c3, c4), so that a drift of the machine's speed shows as noise."""
    seed = load_preset(spec.preset, list(spec.settings), list(spec.presets_dirs)).train.seed
    k, changes = spec.repeat_baseline, list(spec.changes)
    order = []
    for i in range(k):
        if i == 0:
            order.append((BASELINE, (), 1))
        else:  # another seed: the noise of a run, not only of the machine
            order.append((f"{BASELINE} #{i + 1}", (f"train.seed={seed + i}",), i + 1))
        # rounded up, so that a baseline is never next to another while changes are left
        # (3 baselines and 2 changes: b1, c1, b2, c2, b3)
        lo, hi = -(-i * len(changes) // k), -(-(i + 1) * len(changes) // k)
        order.extend((c.label, c.settings, 0) for c in changes[lo:hi])
    return order


def dir_name(index: int, label: str) -> str:
    """`03-optim.name=adamw`: the run's directory in the series', numbered in running order."""
    words = label.replace(" #", "-").split()  # "baseline #2": 02-baseline-2
    slug = "+".join(re.sub(r"[^A-Za-z0-9._=-]+", "_", w) for w in words).strip("_.") or "run"
    return f"{index:02d}-{slug[:80]}"


class Series:
    """A series' runs and where they are; `open` reads or starts its record."""

    def __init__(
        self, directory: Path, spec: AblationSpec, runs: list[SeriesRun], dropped: list[SeriesRun] | None = None
    ) -> None:
        self.directory = directory
        self.spec = spec
        self.runs = runs
        # runs of the record this command has not: kept in it, so that a later command adding
        # one back finds its run, and no other run is ever given its directory
        self.dropped = dropped or []

    @classmethod
    def open(cls, spec: AblationSpec, root: Path) -> Series:
        """The series of `spec` under `root`: its record read back (a rerun) or a new one (not
        written until `save`). ConfigError when the directory holds another series."""
        directory = root / spec.series_name()
        check_private_place(directory, "series directory", SERIES_DIR_FIX)  # before reading it
        known: dict[tuple[tuple[str, ...], int], SeriesRun] = {}
        record = read_record(directory)
        if record is not None:
            theirs = {k: record.get(k) for k in spec.identity()}
            if theirs != spec.identity():
                raise ConfigError(
                    f"{directory} holds another series ({describe(theirs)}); this one is "
                    f"{describe(spec.identity())}: pass another --name, or the same settings"
                )
            for entry in [*record.get("runs", []), *record.get("dropped", [])]:
                run = SeriesRun(
                    label=plain_label(str(entry["label"])), settings=tuple(entry["settings"]),
                    repeat=int(entry["repeat"]), run_dir=directory / run_dir_name(directory, entry),
                    status=str(entry.get("status", "pending")),
                )  # fmt: skip
                known[run.key] = run
        runs = []
        taken = {run.run_dir.name for run in known.values()}
        for label, settings, repeat in planned_runs(spec):
            key = (tuple(settled(settings)), repeat)
            if key in known:
                run = known[key]
                run.label = label  # a TOML's name may have changed; the settings are the same
            else:
                name, number = dir_name(len(runs), label), len(runs) + len(taken)
                while name in taken or (directory / name).exists():  # never another run's directory
                    name, number = dir_name(number, label), number + 1
                taken.add(name)
                run = SeriesRun(label, settings, repeat, directory / name)
            runs.append(run)
        dropped = [run for run in known.values() if all(run is not r for r in runs)]
        return cls(directory, spec, runs, dropped)

    @property
    def baseline_runs(self) -> list[SeriesRun]:
        return [r for r in self.runs if r.is_baseline]

    def overrides(self, run: SeriesRun) -> list[str]:
        """The --set of `run`: the series' own settings, then the run's."""
        return [*self.spec.common_settings(), *run.settings]

    def position(self, run: SeriesRun) -> str:
        """ "ablate 2/5: optim.name=adamw": the run's place in the series (the app's title)."""
        return f"ablate {self.runs.index(run) + 1}/{len(self.runs)}: {run.label}"

    def next_step(self, run: SeriesRun) -> str:
        """What `run` needs now (START, RESUME, RESTART, DONE or BUSY), from its directory;
        the status it was seen in is kept in `run.status`."""
        run.status = run_status(run.run_dir)
        if run.status == "pending":
            return START
        if run.status in RESULT_STATES:
            return DONE  # a failed run is a result too: the table says so
        if run.status == "live":
            return BUSY
        if has_checkpoint(run.run_dir):
            return RESUME
        return RESTART

    def restart_dir(self, run: SeriesRun) -> Path:
        """A fresh directory for a run that must start again (the old one is kept as it is)."""
        base = re.sub(r"-retry\d+$", "", run.run_dir.name)  # 03-x-retry2 starts again as 03-x-retry3
        n = 2
        while (self.directory / f"{base}-retry{n}").exists():
            n += 1
        run.run_dir = self.directory / f"{base}-retry{n}"
        run.status = "pending"
        return run.run_dir

    def save(self) -> None:
        """Write series.json (atomically): the spec and every run with its directory and status."""
        make_private_place(self.directory, "series directory", SERIES_DIR_FIX)
        record = {
            "version": VERSION,
            **self.spec.identity(),
            "repeat_baseline": self.spec.repeat_baseline,
            "description": self.spec.description,
            "runs": [record_entry(r) for r in self.runs],
        }
        if self.dropped:
            record["dropped"] = [record_entry(r) for r in self.dropped]
        atomic_write_text(self.directory / SERIES_FILE, json.dumps(record, indent=2) + "\n")


def record_entry(run: SeriesRun) -> dict[str, Any]:
    """A run as series.json records it."""
    return {
        "label": run.label,
        "settings": list(run.settings),
        "repeat": run.repeat,
        "run_dir": run.run_dir.name,
        "status": run.status,
    }


def read_record(directory: Path) -> dict[str, Any] | None:
    """series.json of `directory`, or None when there is none; ConfigError when unreadable."""
    path = directory / SERIES_FILE
    try:
        record = json.loads(read_small_text(path, "a series record"))
    except (FileNotFoundError, NotADirectoryError):  # no series there yet (--runs is checked on writing)
        return None
    except ConfigError as e:  # not a regular file, or far too large
        raise ConfigError(f"{e}; move it away to start the series afresh") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot be read ({e}); move it away to start the series afresh") from None
    if not isinstance(record, dict) or record.get("version") != VERSION:
        raise ConfigError(f"{path}: not a series record this cockpit reads; pass another --name")
    return record


def run_dir_name(directory: Path, entry: dict[str, Any]) -> str:
    """A run's directory as the record names it: a name inside the series' directory, never
    a path leading out of it (to another run, which the series would then resume)."""
    name = str(entry["run_dir"])
    if name in ("", ".", "..") or Path(name).name != name:
        raise ConfigError(
            f"{directory / SERIES_FILE}: run_dir {name!r} is not a folder of the series; move "
            "it away to start the series afresh"
        )
    return name


def describe(identity: dict[str, Any]) -> str:
    what = [f"preset {identity.get('preset')}"]
    if identity.get("target") is not None:
        what.append(f"to val {identity['target']:g}")
    if identity.get("budget") is not None:
        what.append(f"a training time of {duration_text(float(identity['budget']))}")
    if identity.get("steps") is not None:
        what.append(f"{identity['steps']} steps")
    if identity.get("settings"):
        what.append("--set " + " ".join(identity["settings"]))
    return ", ".join(what)


def run_status(run_dir: Path) -> str:
    """pending (no records yet), live, finished, stopped, failed or crashed: from the run's own
    directory (its final state record, or the engine holding it)."""
    from engine.rundir import METRICS_NAME, list_run

    if not (run_dir / METRICS_NAME).is_file():
        return "pending"
    state = list_run(run_dir, run_dir.parent).state
    return state if state == "live" or state in RunState.ENDED else "crashed"


def has_checkpoint(run_dir: Path) -> bool:
    from engine.checkpoint import latest_checkpoint

    return latest_checkpoint(run_dir) is not None
