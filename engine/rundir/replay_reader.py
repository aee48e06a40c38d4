"""A finished run's replay read back from its files: `read_replay(run_dir)` gives the events
that draw every panel of a run that is over (what RecordedRun hands the app), read in one pass
over metrics.jsonl's bytes as read_history reads a run (or, for a run whose steps are in order
with none retrained, by its fast way: only the kept step lines parsed; the same events). Steps
are thinned evenly to REPLAY_STEPS, as the control socket's replay of a live run is. Torch-free
and textual-free.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.run_config import ConfigError
from engine.config.user_files import read_small_text
from engine.events import Event, RunState, StateChanged, Step
from engine.rundir.lock import check_not_in_use
from engine.rundir.metrics_log import REPLAY_STEPS
from engine.rundir.metrics_scan import (
    REPLAY_READINGS,
    RunHistoryError,
    Scan,
    kept_others,
    kept_steps,
    newest_run_started,
    read_metrics,
    scan_metrics,
    scan_replay_fast,
    thinned,
)
from engine.rundir.records import parse_record

_HISTORY = ("eval", "lr_changed", "settings_changed", "sample", "checkpoint", "alert")
_HISTORY_KEYS: dict[str, Callable[[dict[str, Any]], Any] | None] = {
    "eval": lambda r: r["step"],
    "lr_changed": lambda r: r["step"],
    "sample": lambda r: (r["step"], str(r.get("prompt", ""))),
    "checkpoint": lambda r: (r["step"], str(r.get("path", ""))),
    "settings_changed": None,  # each its own: together they are the settings in force
    "alert": None,  # several a step, each its own: none replaces another
}


@dataclass(frozen=True)
class Replay:
    """What the app needs to draw every panel of a run that is over, oldest first: the newest
    RunStarted, then its history (steps thinned, evals, LR changes, samples, checkpoints,
    alerts), the newest memory breakdown, recent readings and the final StateChanged."""

    events: list[Event]
    final_state: str  # finished, stopped or failed (a run whose process vanished: failed)
    reason: str
    newest_time: float  # the newest record's time


def read_replay(run_dir: Path, max_steps: int = REPLAY_STEPS, fast: bool = True) -> Replay:
    """The events to draw the run in `run_dir` with, read as read_history reads a run. A run
    with no final state (its process vanished) ends failed, with the reason why; a run that an
    engine still holds is refused (attach to it instead). `fast`: try the fast way first (the
    same result; False: the general way only, for tests). RunHistoryError: one line."""
    data = read_metrics(run_dir)
    found = scan_replay_fast(data, max_steps) if fast else None
    if found is None:  # a resume that retrains steps, a rollback, an odd line: every step read
        scan = scan_metrics(run_dir, replay=True, data=data)
        steps, last_step = _replay_steps(scan, max_steps)
    else:
        scan, steps, last_step = found.scan, found.steps, found.last_step
    _, started = newest_run_started(scan, run_dir)
    history = steps + [
        item for kind in _HISTORY for item in kept_others(scan, (kind,), _HISTORY_KEYS[kind])
    ]
    history.sort(key=lambda item: (item[1]["step"], item[1].get("time", 0.0), item[0]))
    present = _newest(scan, ("memory",), 1) + _newest(scan, ("telemetry",), REPLAY_READINGS)
    present += _newest(scan, ("ranks",), REPLAY_READINGS)
    final = _final_state(scan, run_dir, last_step)
    events = [_event(record) for _, record in [*history, *present]]
    events = [e for e in events if e is not None] + [final]
    newest = max([scan.newest_time, *(e.time for e in events)])
    first = Event.from_record({"config": _config(run_dir), **started})
    # The app draws what is older than the RunStarted as history (never announced): all of it.
    events.insert(0, dataclasses.replace(first, time=newest + 0.001))
    return Replay(events, final.state, final.reason, newest)


def _replay_steps(scan: Scan, max_steps: int) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """The step records kept, thinned evenly to `max_steps` (the last one always kept), parsed;
    and the newest step recorded (0: none)."""
    rows = kept_steps(scan)
    parsed = []
    for row in rows[thinned(len(rows), max_steps)].tolist():
        try:
            parsed.append((row, parse_record(scan.step_lines[row])))
        except ValueError:
            continue
    return parsed, int(scan.step[rows[-1]]) if len(rows) else 0


def _newest(scan: Scan, kinds: tuple[str, ...], count: int) -> list[tuple[int, dict[str, Any]]]:
    found = [(row, r) for row, r in scan.others if r.get("kind") in kinds]
    return found[-count:]


def _final_state(scan: Scan, run_dir: Path, step: int) -> StateChanged:
    """The run's last state record when it is one a run ends in; else the run crashed at
    `step`, the newest step recorded (or is live: then RunHistoryError)."""
    states = [r for _, r in scan.others if r.get("kind") == "state"]
    if states and states[-1].get("state") in RunState.ENDED:
        event = _event(states[-1])
        if isinstance(event, StateChanged):
            return event
    try:
        check_not_in_use(run_dir)
    except ConfigError:
        raise RunHistoryError(f"{run_dir} is live: attach to it (cockpit attach {run_dir})") from None
    return StateChanged(
        state=RunState.FAILED,
        step=step,
        reason=(
            f"crashed: the run's process vanished without a final state at step {step} "
            "(killed, or out of memory?)"
        ),
        time=scan.newest_time,
    )


def _event(record: dict[str, Any]) -> Event | None:
    if record.get("kind") == "step":  # thousands of them: the direct way (null: NaN)
        try:
            return Step(**{k: math.nan if v is None else v for k, v in record.items() if k != "kind"})
        except TypeError:
            pass  # another layout: the general way says what it can
    try:
        return Event.from_record(record)
    except ValueError:
        return None  # a record from an older format


def _config(run_dir: Path) -> dict[str, Any]:
    """The run's resolved config (the metrics file leaves it to config.json); {} without one."""
    try:
        config = json.loads(read_small_text(run_dir / "config.json", "a run's config"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested past json's depth
        return {}
    return config if isinstance(config, dict) else {}
