"""What the user reads while a quit or a preset switch waits for the run to stop.

A stop with a checkpoint happens at the next step boundary, which can be minutes away (a GPU
preset on a CPU): these notes say what it waits for, for how long it has waited and how to cut
it short. Pure functions of the run's state, its last step and the clock, so they are tested
without an app.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from textual.markup import escape

from cockpit.figures.durations import fmt_duration
from engine.events import RunState

LONG_STEP_S = 10.0  # steps at least this long: the quit dialog warns that the save can be far off

NOTE_REFRESH_S = 1.0  # while a quit or switch waits for a step boundary, its countdown ticks this often


WORK_NAMES = {"evaluate": "evaluation", "sample": "sample", "checkpoint": "checkpoint"}


class BoundaryWork:
    """The periodic work (an evaluation, samples, a checkpoint at
    their intervals) at the step boundaries around the run's newest step, and how long each
    kind took the last time: a stop waits for it as for the step (the engine does the work due
    at a step before it looks at its commands). Fed the run's events; no Textual."""

    def __init__(self) -> None:
        self.intervals: dict[str, int] = {}
        self.max_steps = 0
        self.took: dict[str, float] = {}  # kind -> seconds, the last time it was done
        self._step: tuple[float, int] | None = None  # the newest step: (event time, step)
        self._done: set[str] = set()  # kinds reported at that step
        self._begun: dict[str, float] = {}  # kind -> when the work before it ended
        self._mark = 0.0  # when the step or the last work at it ended

    def configure(self, config: Mapping[str, Any], max_steps: int) -> None:
        """The intervals from the run's resolved config (RunStarted.config)."""

        def interval(section: str) -> int:
            value = (config.get(section) or {}).get("interval", 0)
            return value if isinstance(value, int) and value > 0 else 0

        self.intervals = {"evaluate": interval("eval"), "sample": interval("sample"),
                          "checkpoint": interval("checkpoint")}  # fmt: skip
        self.max_steps = max_steps

    def step(self, t: float, step: int) -> None:
        self._step, self._mark = (t, step), t
        self._done, self._begun = set(), {}

    def done(self, kind: str, step: int, t: float) -> None:
        """`kind` was reported at `step` at time `t` (an Eval, a Sample, an interval save)."""
        if self._step is None or step != self._step[1]:
            return
        begun = self._begun.setdefault(kind, self._mark)  # several samples: from the first
        self.took[kind] = max(0.0, t - begun)
        self._done.add(kind)
        self._mark = t

    def due_at(self, step: int) -> list[str]:
        return [kind for kind, every in self.intervals.items()
                if every and step % every == 0 and step < self.max_steps]  # fmt: skip

    def in_progress(self) -> list[str]:
        """The work due at the newest step not reported yet (being done now)."""
        if self._step is None:
            return []
        return [kind for kind in self.due_at(self._step[1]) if kind not in self._done]

    def after_next_step(self) -> list[str]:
        """The work due once the step being trained ends."""
        return self.due_at(self._step[1] + 1) if self._step is not None else []

    def describe(self, kinds: Sequence[str]) -> str:
        """'the sample (~15s last time)', 'the evaluation and checkpoint'."""
        names = " and ".join(WORK_NAMES.get(k, k) for k in kinds)
        known = [self.took[k] for k in kinds if k in self.took]
        return f"the {names}" + (f" (~{fmt_step(sum(known))} last time)" if known else "")


def fmt_step(seconds: float) -> str:
    """A duration that may be under a second: '0.03s', '0.4s', '42s', '1:05'."""
    return f"{seconds:.2g}s" if 0 < seconds < 0.95 else fmt_duration(seconds)


def stop_wait(
    state: str,
    last_step: tuple[float, float] | None,
    started: float | None,
    now: float,
    preparing: bool = False,
    work: BoundaryWork | None = None,
) -> str:
    """Where a stop with a checkpoint stands: the time to the next step boundary (from
    `last_step`, the newest step's (event time, step time)), with the `work` due there, and
    the time waited since `started` (both on the clock events are stamped with). While the
    corpus is `preparing` there is nothing to save: the preparation stops at its next piece."""
    waited = fmt_duration(max(0.0, now - (started or now)))
    busy = work.in_progress() if work is not None and state == RunState.RUNNING else []
    after = work.after_next_step() if work is not None else []
    if preparing and state not in RunState.ENDED:
        what = "stopping the corpus preparation (nothing trained yet: nothing to save)"
    elif state == RunState.SAVING:
        what = "writing the final checkpoint"
    elif state in RunState.ENDED:
        what = f"the run has {state}"
    elif state == RunState.PAUSED:
        what = "saving a checkpoint and stopping"
    elif busy and work is not None:  # the step ended: its work is being done, then the save
        what = f"saving after {work.describe(busy)} due at this step"
    elif last_step is None or last_step[1] <= 0:
        what = "saving when the first step ends (none has finished yet: no estimate)"
    else:
        t, step_s = last_step
        left = t + step_s - now
        took = fmt_step(step_s)
        then = f", then {work.describe(after)} due there" if after and work is not None else ""
        if left >= 0.5:
            what = (
                f"saving at the next step boundary, in ~{fmt_duration(left)} "
                f"(a step takes {took}{then})"
            )
        else:
            what = f"saving at the next step boundary, any moment now (a step takes {took}{then})"
    return f"{what} · waited {waited}"


def quit_note(wait: str, attached: bool = False) -> str:
    """What quitting waits for, how long it has waited, and how to stop waiting (a viewer of a
    run in another process can leave at once: the run still saves and stops on its own)."""
    if attached:
        return f"stopping the run: {wait} · ctrl+c again: leave now (it still saves and stops)"
    return f"quitting: {wait} · ctrl+c again: quit now without saving"


def leave_question(preset: str, run_dir: str, read_only: bool, preparing: bool = False) -> str:
    """The question an attached viewer is asked on q (markup): detach, stop the run, cancel."""
    where = f" ({escape(run_dir)})" if run_dir else ""
    command = escape(f"cockpit attach {shlex.quote(run_dir) if run_dir else 'RUN_DIR'}")
    msg = (
        f"Detach from [b]{escape(preset)}[/b]{where}? The run goes on; "
        f"[b]{command}[/b] comes back to it."
    )
    if read_only:
        return msg + "\n\nThis viewer is read-only: it cannot stop the run."
    if preparing:
        return msg + "\n\nOr stop it: it is still preparing its corpus, nothing to save yet."
    return msg + "\n\nOr stop the run: a checkpoint at the next step boundary, then it ends."


def quit_question(
    preset: str, running: bool, state: str, step_s: float, preparing: bool = False
) -> str:
    """The quit dialog's question (markup); a long step warns that the save may be far off."""
    if not running:
        return "Quit cockpit? No run is in progress."
    if preparing:
        return (
            f"Stop preparing the corpus of [b]{preset}[/b] and quit? "
            "Nothing is trained yet: there is nothing to save."
        )
    msg = f"Save a checkpoint of [b]{preset}[/b] at the next step, stop it and quit?"
    if step_s >= LONG_STEP_S and state not in RunState.ENDED:
        msg += (
            f"\n\nA step takes {fmt_duration(step_s)} here: the checkpoint may be that far "
            "away. While it waits, ctrl+c again quits without saving."
        )
    return msg
