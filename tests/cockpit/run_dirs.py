"""Fixed run directories for the tests of the runs screen, a finished run's view and overlays.

Each is what a run leaves on disk (metrics.jsonl written as the engine writes it: one record
per event, `Event.to_record` as JSON), built from the scripted trainer's events, so the views
drawn from them are deterministic. Start times are a second after a midnight (UTC) a whole number of
days back, so "2d ago" and the times of day on screen read the same whenever the test runs.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from scripted import T0, build_script

from engine.events import Eval, RunStarted, Step

DAY = 86_400.0


def write_run(
    root: Path,
    name: str,
    *,
    days_ago: float = 1.0,
    loss_shift: float = 0.0,
    steps: int = 300,
    max_steps: int = 300,
    finish: bool = True,
    crash_at: int | None = None,
    preset: str = "default",
    checkpoint: bool = True,
    lr_change_at: int | None = 220,
) -> Path:
    """A run in `root/name` that trained `steps` steps (finished, or without a final state when
    `crash_at` cuts it there); its losses are the scripted ones plus `loss_shift`."""
    run_dir = root / name
    run_dir.mkdir(parents=True, exist_ok=True)
    # started a second after midnight (UTC), whole days ago: "1d ago" and the times of day on
    # screen read the same whenever the test runs (but in the first second of a day)
    midnight = time.time() // DAY * DAY
    shift_t = midnight - days_ago * DAY + 1.0 - T0
    events = build_script(
        preset, steps=steps, max_steps=max_steps, finish=finish, lr_change_at=lr_change_at
    )
    lines = []
    for ev in events:
        step = getattr(ev, "step", None)
        if crash_at is not None and isinstance(step, int) and step > crash_at:
            break
        if crash_at is not None and ev.kind == "state" and ev.state != "running":
            continue
        record = _moved(ev, run_dir, shift_t, loss_shift).to_record()
        lines.append(json.dumps(record, separators=(",", ":")))  # as engine/rundir/metrics_log.py does
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run_dir / "config.toml").write_text(f'name = "{preset}"\n')
    if checkpoint:
        last = min(steps, crash_at or steps)
        (run_dir / f"ckpt-{250 if last >= 250 else last:06d}.pt").write_bytes(b"not a real checkpoint")
    return run_dir


def _moved(ev: Any, run_dir: Path, shift_t: float, loss_shift: float) -> Any:
    changes: dict[str, Any] = {"time": ev.time + shift_t}
    if isinstance(ev, RunStarted):
        changes["run_dir"] = str(run_dir)
    if isinstance(ev, Step):
        changes["loss"] = ev.loss + loss_shift
    if isinstance(ev, Eval):
        changes["val_loss"] = ev.val_loss + loss_shift
        changes["train_loss"] = ev.train_loss + loss_shift
    if hasattr(ev, "path"):
        changes["path"] = str(run_dir / Path(ev.path).name)
    return dataclasses.replace(ev, **changes)


def three_runs(root: Path) -> list[Path]:
    """yesterday's baseline, a run with a lower LR two days ago (worse), and one that was better
    but crashed at step 180."""
    return [
        write_run(root, "baseline", days_ago=1),
        write_run(root, "lower-lr", days_ago=2, loss_shift=0.15),
        write_run(root, "crashed", days_ago=3, loss_shift=-0.3, finish=False, crash_at=180),
    ]
